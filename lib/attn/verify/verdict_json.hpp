// verify()'s and verify_backward()'s verdicts as JSON: the one mapping every
// tool writes (attend --check, the accuracy sweep, attn-bench, attn-lab
// verify), beside the verdicts it maps (verify.hpp).
#pragma once

#include "attn/io/json.hpp"
#include "attn/verify/verify.hpp"

namespace attn {

// verify()'s verdicts as JSON, the one mapping every tool writes (attend
// --check, the accuracy sweep, attn-bench, attn-lab verify). Each verdict is
// per row: `tight_error` and `tight_tolerance` are the deciding row's (the
// largest error / tolerance, `tight_ratio`); `max_abs` is the whole tensor's.
inline Json to_json(const Check& c) {
  Json j = {{"truth", truth_name(c.truth)},
            {"max_abs", c.out.max_abs},
            {"max_rel", c.out.max_rel},
            {"max_ulps", c.out.max_ulps},
            {"bound", c.out_worst.tolerance},
            {"bound_ratio", c.out_worst.ratio},
            {"bound_global", c.tolerance_global},
            {"within", c.within},
            {"informative", c.informative},
            {"probable_bound", c.probable.out},
            {"failure_probability", c.failure_probability},
            {"baseline_error", number_or_null(c.baseline_error)},
            {"beta", number_or_null(c.beta)},
            {"floor", c.floor},
            {"tight_error", c.out_tight.error},
            {"tight_tolerance", c.out_tight.tolerance},
            {"tight_ratio", c.out_tight.ratio},
            {"tight_row", c.out_tight.row},
            {"criterion", c.criterion},
            {"within_tight", c.tight_within},
            {"tight_informative", c.tight_informative},
            {"uninformative_rows", c.uninformative_rows},
            {"finite", c.out.all_finite_where_ref_finite}};
  const auto part = [&](const char* name, const ErrorStats& e, const RowVerdict& worst, const RowVerdict& tight) {
    j[name] = {{"max_abs", e.max_abs}, {"bound", worst.tolerance}, {"tight_error", tight.error},
               {"tight_tolerance", tight.tolerance}, {"tight_ratio", tight.ratio}, {"within", worst.within()},
               {"within_tight", tight.within()}};
  };
  if (c.distribution.applies) {
    const DistributionVerdict& d = c.distribution;
    j["distribution"] = {{"elements", d.elements},         {"internal_ms", d.internal_ms},
                         {"internal_se", d.internal_se},   {"baseline_ms", d.baseline_ms},
                         {"baseline_se", d.baseline_se},   {"model_ms", d.model_ms},
                         {"internal_rms", d.internal_rms}, {"allowed_rms", d.allowed_rms},
                         {"ratio", d.ratio},               {"within", d.within()}};
  }
  if (c.has_lse) part("lse", c.lse, c.lse_worst, c.lse_tight);
  if (c.has_weights) {
    part("weights", c.weights, c.weights_worst, c.weights_tight);
    ErrorStats sums;
    sums.max_abs = c.row_sum_error;
    part("row_sums", sums, c.row_sum_worst, c.row_sum_tight);
  }
  return j;
}

// One gradient's verdicts (a part of verify_backward()).
inline Json to_json(const GradientCheck::Part& p) {
  return {{"max_abs", p.error.max_abs},
          {"max_rel", p.error.max_rel},
          {"bound", p.tolerance},
          {"tight_error", p.tight.error},
          {"tight_tolerance", p.tight_tolerance},
          {"tight_ratio", p.tight.ratio},
          {"tight_row", p.tight.row},
          {"uninformative_rows", p.uninformative_rows},
          {"baseline_error", number_or_null(p.baseline_error)},
          {"informative", p.informative},
          {"tight_informative", p.tight_informative},
          {"within", p.within()},
          {"within_tight", p.within_tight()},
          {"finite", p.error.all_finite_where_ref_finite}};
}

}  // namespace attn
