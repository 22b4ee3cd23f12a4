// Claim "reference-rank": ranking two implementations by their error against
// a bf16 reference can invert their ranking against the exact reference.
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict reference_precision_ranking(const Config& cfg);

// The claim, its source and its criterion (written before the experiment ran).
ATTN_CLAIM(.id = "reference-rank",
           .source = "this project's own hypothesis, after the practice of FlashAttention's tests "
                     "(Dao-AILab/flash-attention, tests/test_flash_attn.py), which judge a kernel against a "
                     "reference upcast to fp32 from the low-precision inputs, never a low-precision one",
           .quote = "ranking two implementations by their error against a bf16 reference can invert the ranking against an "
                    "fp64 / multiprecision reference",
           .statement = "a low-precision reference can rank implementations wrongly",
           .experiment = "streaming and naive in fp32 on 20 random problems (B = H = 1, n_q = 32, n_kv = 48, d = 32): max error "
                         "against the 50-digit reference of the bf16-rounded inputs rounded to bf16, and against 50 digits",
           .criterion = "holds (the inversion happens) if at least one problem ranks the two differently; does not hold if none",
           .run = reference_precision_ranking)


Verdict reference_precision_ranking(const Config& cfg) {
  Verdict v;
  const std::size_t problems = cfg.smoke() ? 4 : 20;
  const BackendInfo &a = fused_backend(), &b = baseline_backend(),
                      &reference = exact_backend();
  int inversions = 0;
  for (std::size_t p = 0; p < problems; ++p) {
    const Inputs<double> in = random_inputs({1, 1, 32, 48, 32, 32}, cfg.seed + p);
    Options opt;
    const RunReport ra = a.run("fp32", Accumulate::fp32, in, opt, {}, 0);
    const RunReport rb = b.run("fp32", Accumulate::fp32, in, opt, {}, 0);
    // A bf16 reference: the exact attention of the bf16-rounded inputs, its output rounded to bf16.
    const RunReport low = reference.run("bf16", Accumulate::fp64, in, opt, {}, 0);
    const Result<double> exact = backends::reference_attention(ra.rounded_inputs, opt);
    const double ea = compare(ra.out, exact.out, ra.u_store).max_abs, eb = compare(rb.out, exact.out, rb.u_store).max_abs;
    const double la = compare(ra.out, low.out, ra.u_store).max_abs, lb = compare(rb.out, low.out, rb.u_store).max_abs;
    if ((ea < eb) != (la < lb)) ++inversions;
  }
  v.figures.push_back({"problems", double(problems)});
  v.figures.push_back({"inversions", double(inversions)});
  v.outcome = inversions > 0 ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why << inversions << " of " << problems
      << " problems rank streaming vs naive (fp32) differently against a bf16 reference than against 50 digits";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
