// One check of a backend's result, used by every verdict of the suite
// (`attn-lab attend --check`, the demo, the accuracy sweep, the benchmarks'
// validation, the agreement tests and properties): the ground truth chosen
// by ground_truth(), the derived bound of metrics.hpp, the comparison.
#pragma once

#include <limits>
#include <string_view>

#include "attn/backends/reference.hpp"
#include "attn/metrics.hpp"
#include "attn/registry.hpp"

namespace attn {

enum class TruthKind { digits50, fp64_gemm, double_double };
// "mp50", "fp64-gemm", "double-double": the names in JSON and reports.
std::string_view truth_name(TruthKind k);

struct GroundTruth {
  Result<double> result;  // out, weights and logsumexp
  TruthKind kind = TruthKind::digits50;
  // Bounds on the truth's own error (|truth - exact|), added to a check's tolerance.
  double out_error = 0, lse_error = 0, weights_error = 0;
};

// The truth for checking a backend whose storage has unit roundoff u_store:
//   50 digits (backends::reference_attention) while reference_cost <= budget;
//   beyond, for fp64 storage while reference_cost <= 20 budget (it is about
//     20x cheaper), double-double (compensated_reference_attention), within
//     5 u max|V| (agreement_test checks it against 50 digits);
//   otherwise fp64 by an algorithm of its own (fp64_gemm_attention below):
//     seconds at n = 4096, its error ~1e-9 of fp32's, its derived fp64 bound
//     added to the tolerance (for an fp64 backend that makes the check the
//     worst-case bound of both, weaker than against double-double).
GroundTruth ground_truth(const Inputs<double>& in, const Options& opt, double u_store,
                         double budget = backends::reference_budget);

// Attention in fp64 written apart from the backends: per head, scores by
// one DGEMM per block of query rows, the mask, a max-shifted row softmax
// in double, and one DGEMM with V. Returns weights and logsumexp too.
Result<double> fp64_gemm_attention(const Inputs<double>& in, const Options& opt);

struct Check {
  TruthKind truth = TruthKind::digits50;
  ErrorStats out, lse, weights;  // against the truth (lse and weights where the result has them)
  double row_sum_error = std::numeric_limits<double>::quiet_NaN();  // max |sum_j w_ij - 1|, NaN without weights
  ErrorBound bound;              // the backend's derived bound for its (u_acc, u_store)
  double tolerance_out = 0, tolerance_lse = 0, tolerance_weights = 0, tolerance_row_sum = 0;
  bool informative = true;  // tolerance_out below the trivial bound 2 max|V|
  bool within = true;       // out (and lse, when returned) within tolerance, finite where the truth is
};

// `r` (a RunReport: its rounded inputs, unit roundoffs and traits) against `truth`.
Check verify(const RunReport& r, const Options& opt, const GroundTruth& truth);
// The same with ground_truth(r.rounded_inputs, opt, r.u_store, budget).
Check verify(const RunReport& r, const Options& opt, double budget = backends::reference_budget);

}  // namespace attn
