// Claim "fused-forward-deterministic": FlashAttention's docstring says "The
// forward pass is always deterministic"; on the CPU, the fused backend and
// PyTorch's CPU flash kernel (where PyTorch imports) are held to it with
// attn-lab invariance's run_to_run and threads comparisons (the same call
// repeated, its workspace reused or released; 1, 2 and more threads than
// cores, split-KV included), forward only, in every storage x accumulation.
#include <sstream>

#include "attn/verify/invariance.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict fused_forward_deterministic(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "fused-forward-deterministic", .run = fused_forward_deterministic)

Verdict fused_forward_deterministic(const Config& cfg) {
  Verdict v;
  std::vector<const BackendInfo*> kernels = {&fused_backend()};
  Verdict peer;  // PyTorch missing here: the claim is judged on the fused backend alone, and says so
  if (const BackendInfo* flash = peer_backend("torch_flash", peer)) kernels.push_back(flash);
  const std::size_t seeds = cfg.smoke() ? 1 : 3;
  std::size_t ran = 0, differing = 0;
  std::string first;
  std::ostringstream why;
  for (const BackendInfo* b : kernels) {
    std::size_t b_ran = 0, b_differing = 0;
    for (const PrecisionInfo& p : precisions())
      for (Accumulate acc : accumulate_policies()) {
        if (cfg.smoke() && ((p.name != "fp32" && p.name != "bf16") || acc != p.default_accumulate)) continue;
        for (const invariance::Invariance& inv : invariance::invariances()) {
          if (inv.id != "run_to_run" && inv.id != "threads") continue;
          for (std::size_t s = 0; s < seeds; ++s) {
            try {
              const invariance::Outcome o = inv.check({b, &p, acc, false}, cfg.seed + s);
              ++b_ran;
              if (o.verdict != invariance::Verdict::bitwise) {
                ++b_differing;
                if (first.empty())
                  first = b->name + " " + std::string(p.name) + " accumulate " + std::string(accumulate_name(acc)) +
                          ", " + inv.name + ": " + o.first;
              }
            } catch (const Unsupported&) {  // a combination the kernel does not run
            }
          }
          if (cfg.progress) cfg.progress("fused-forward-deterministic: " + b->name + " " + std::string(p.name) + " " + inv.id);
        }
      }
    v.figures.push_back({b->name + " comparisons", double(b_ran)});
    v.figures.push_back({b->name + " comparisons not bitwise", double(b_differing)});
    why << b->name << ": " << b_differing << " of " << b_ran << " comparisons not bitwise; ";
    ran += b_ran;
    differing += b_differing;
  }
  v.outcome = ran == 0 ? Outcome::inconclusive : differing ? Outcome::does_not_hold : Outcome::holds;
  v.why = why.str() + (first.empty() ? "" : "first: " + first + "; ") +
          (kernels.size() == 1 ? "torch-flash not compared (" + peer.why + ")" : "forward only, seeds from " + std::to_string(cfg.seed));
  return v;
}

}  // namespace attn::claims
