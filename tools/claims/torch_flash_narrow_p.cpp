// Claim "torch-flash-narrow-p": in bf16 and fp16 storage PyTorch's CPU flash
// kernel rounds the softmax weights to the storage type before P V (PyTorch
// PR #151441), so its error exceeds what fp32 accumulation with weights kept
// in fp32 allows: each run judged by the suite's worst-case bound under both
// policies (judged_as), per query row.
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict torch_flash_narrow_p(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "torch-flash-narrow-p", .run = torch_flash_narrow_p)

Verdict torch_flash_narrow_p(const Config& cfg) {
  Verdict v;
  const BackendInfo* flash = peer_backend("torch_flash", v);
  if (!flash) return v;
  const std::size_t n = cfg.smoke() ? 256 : 1024, problems = cfg.smoke() ? 3 : 10;
  Outcome outcome = Outcome::holds;
  bool all_within_fp32 = true;
  std::ostringstream why;
  why.precision(3);
  for (std::string_view precision : {"bf16", "fp16"}) {
    std::size_t over_fp32 = 0, over_storage = 0;
    double worst_fp32 = 0, worst_storage = 0;  // max error / the global tolerance under each policy
    for (std::size_t s = 0; s < problems; ++s) {
      const Inputs<double> in = random_inputs({1, 2, n, n, 64, 64}, cfg.seed + s);
      const RunReport r = flash->run(precision, Accumulate::storage, in, Options{});
      const GroundTruth truth = ground_truth(r.rounded_inputs, Options{}, r.u_store);
      const Check storage = verify(r, Options{}, truth), fp32 = verify(judged_as(r, Accumulate::fp32), Options{}, truth);
      over_fp32 += !fp32.within;
      over_storage += !storage.within;
      worst_fp32 = std::max(worst_fp32, fp32.out.max_abs / fp32.tolerance_global);
      worst_storage = std::max(worst_storage, storage.out.max_abs / storage.tolerance_global);
      const std::string tag = std::string(precision) + " seed " + std::to_string(s);
      v.figures.push_back({tag + " max |O - truth|", storage.out.max_abs});
      v.figures.push_back({tag + " fp32-accumulation bound", fp32.tolerance_global});
      v.figures.push_back({tag + " storage-accumulation bound", storage.tolerance_global});
      if (cfg.progress) cfg.progress("torch-flash-narrow-p: " + tag);
    }
    const std::string p(precision);
    v.figures.push_back({p + " problems over the fp32-accumulation bound", double(over_fp32)});
    v.figures.push_back({p + " problems over the storage-accumulation bound", double(over_storage)});
    v.figures.push_back({p + " largest error / fp32-accumulation bound", worst_fp32});
    v.figures.push_back({p + " largest error / storage-accumulation bound", worst_storage});
    all_within_fp32 = all_within_fp32 && over_fp32 == 0;
    if (over_fp32 == 0 || over_storage > 0) outcome = Outcome::inconclusive;
    why << p << ": " << over_fp32 << " of " << problems << " problems over the fp32-accumulation bound (largest error "
        << worst_fp32 << "x its global tolerance), " << over_storage << " over the storage-accumulation bound ("
        << worst_storage << "x); ";
  }
  v.outcome = all_within_fp32 ? Outcome::does_not_hold : outcome;
  v.why = why.str() + "n = " + std::to_string(n) + ", d = 64, no mask; a bound is exceeded when a query row's error is "
          "beyond its per-row worst-case bound";
  return v;
}

}  // namespace attn::claims
