// Claim "reference-rank": ranking two implementations by their error against
// a bf16 reference can invert their ranking against the exact reference.
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict reference_precision_ranking(const Config& cfg) {
  Verdict v;
  const std::size_t problems = cfg.smoke() ? 4 : 20;
  const BackendHandle &a = backend_by_name("streaming"), &b = backend_by_name("naive"),
                      &reference = backend_by_name("reference");
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
