// Error metrics against the reference, and the one place that owns the
// tolerances of the suite: bounds derived from unit roundoff and the problem.
#pragma once

#include <cstddef>
#include <vector>

#include "attn/registry/backend.hpp"

namespace attn {

struct ErrorStats {
  double max_abs = 0;   // max |x - ref|
  double max_rel = 0;   // max |x - ref| / |ref| over ref != 0
  double max_ulps = 0;  // max |x - ref| in units of the last place of ref at unit roundoff u
  std::size_t worst = 0;  // flat index of the largest |x - ref|
  bool all_finite_where_ref_finite = true;
};

// Compares elementwise; equal infinities (a -inf logsumexp) count as exact.
template <std::size_t N>
ErrorStats compare(const xt::xtensor<double, N>& got, const xt::xtensor<double, N>& ref, double u);

// max over rows of |sum_j w_ij - 1|, skipping rows that are entirely zero
// (fully masked rows, checked separately); weights: [B, H, n_q, n_kv].
// With `expected` (the truth's weights, for sinks, whose rows sum to
// 1 - the sink's weight): |sum_j w_ij - sum_j expected_ij|.
double max_row_sum_error(const xt::xtensor<double, 4>& weights, const xt::xtensor<double, 4>* expected = nullptr);

// gamma_k = k u / (1 - k u) (Higham, Accuracy and Stability, sec. 3.1);
// +inf when k u >= 1, where no worst-case bound exists.
double gamma(double k, double u);

// A worst-case, first-order forward error bound of attention evaluated in
// unit roundoff u_acc and rounded to storage of unit roundoff u_store, for
// these inputs (already rounded to storage) and options. Derivation:
//   scores:  |ds_ij| <= ds := gamma_{d_k+4}(u_acc) max_ij (|scale| sum_l |q_il k_jl| + |b_ij|)
//   weights: the row max cancels, so p_ij changes by a factor within
//            exp(+-2 ds), plus the rounding of exp, sum and division:
//            |dp_ij| <= weights := expm1(2 ds) + gamma_{2 n_kv + 8}(u_acc)
//   output:  o = sum_j p_j v_j:
//            |do| <= out := max|v| (expm1(2 ds) + gamma_{4 n_kv + 10}(u_acc) + u_store)
//   lse:     |dlse| <= lse := 3 ds + gamma_{2 n_kv + 4}(u_acc) + u_acc (log n_kv + max|lse|)
//   row sums: the normalisation makes sum_j p_ij = 1 up to the rounding of
//            the sum and the divisions: row_sum := gamma_{n_kv+4}(u_acc) + gamma_{n_kv}(2^-53)
//            (the second term: summing the double weights); rebuilt from the
//            logsumexp: row_sum_from_lse := row_sum + expm1(2 u_acc (max|lse| + log n_kv))
//   weights rebuilt from the logsumexp as exp(S_ij - lse_i) (streaming):
//            |dp_ij| <= weights_from_lse := expm1(ds + lse) + 2 u_acc
// Variants (problem.hpp): soft-capping and ALiBi round each score a few
// more times, each within u_acc of the score's magnitude (tanh' <= 1, so the
// raw score's error is not amplified): ds gains (3 + softcap_tanh_ulps) u_acc
// and 2 u_acc times the magnitude; ALiBi's |term| joins |b_ij|. A sink is one
// more term of each row's softmax (n_kv -> n_kv + 1 above) whose logit,
// rounded to A, errs by at most u_acc |sink| (|sink| joins the magnitude).
// Grouped K/V heads change nothing per row.
// Weights and logsumexp are returned in double: + 2^-53 for that rounding.
// Each is capped where a trivial bound is smaller (weights in [0, 1],
// outputs in the convex hull of V). The bound is worst case: typical errors
// are far smaller (they grow like sqrt(n), not n).
struct ErrorBound {
  double score = 0;  // ds: the bound on any scaled, masked score's error
  double score_magnitude = 0;  // max over visible pairs of |scale| |q|.|k| + |bias|
  // max over rows of sum_j p_ij (|scale| |q_i|.|k_j| + |bias_ij|) (soft-capped: f |scale| |q|.|k| +
  // |capped score|, f the cap's derivative): what one rounding of each score moves a row's
  // weights by, per unit roundoff (far keys' large ALiBi terms weigh nothing)
  double score_weighted = 0;
  double out = 0, weights = 0, lse = 0, weights_from_lse = 0, row_sum = 0, row_sum_from_lse = 0;
};
// A kernel's arithmetic beyond the model (KernelRounding, backend.hpp): P~
// rounded to u_weights before P V moves each term p_j v_j by at most
// u_weights p_j |v_j|, so out gains u_weights sum_j p_j |v_j| (first order);
// flushed subnormals move each score by at most |scale| d_k FLT_MIN (max|Q| +
// max|K| + 1), added to ds (their effect on the sums is eta_acc = FLT_MIN).
ErrorBound error_bound(const Inputs<double>& in, const Options& opt, double u_acc, double u_store,
                       const KernelRounding& kernel = {});

// The probabilistic companion (Higham and Mary, "A new approach to
// probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019,
// Theorem 3.1): if the rounding errors of a k-term sum or inner product are
// independent, mean-zero and of magnitude <= u, its error is within
//   gamma~_k(lambda) = exp(lambda sqrt(k) u + k u^2 / (1 - u)) - 1
// times the sum of magnitudes, except with probability at most
// 2 k exp(-lambda^2 (1 - u)^2 / 2). Growth like sqrt(k), not k.
double gamma_tilde(double k, double u, double lambda);
// lambda for which `inner_products` bounds of sums of at most `length`
// terms all hold except with probability <= failure_probability (a union bound).
double lambda_for(double failure_probability, double inner_products, double length, double u);

// Both bounds of one problem from one pass over its magnitudes: `worst` is
// error_bound(); `probable` is the same derivation with each gamma_k(u_acc)
// replaced by min(gamma_k, gamma~_k(lambda)), lambda chosen so every bound
// of the check (one per output element and weight) holds except with
// probability <= failure_probability under the model above. The model does
// not hold where sums stagnate (storage accumulation in bf16/fp16): there
// the baseline rule of verify.hpp decides.
// Per query row (b, h, i), from the exact problem's weights P in fp64: what
// the row's bounds and the tight rule's floor (verify.hpp) are made of, so a
// row is judged by its own magnitudes, never by the largest of the tensor.
struct RowMagnitude {
  double score_mag = 0;  // max over visible keys (and the sink) of |scale| |q_i|.|k_j| + |bias_ij|
  double weighted = 0;   // sum_j p_ij sigma_ij, sigma_ij the score's rounding magnitude (as score_weighted)
  double lse = 0;        // |row max| + log(terms): the bound's estimate of |lse_i|
  double terms = 0;      // max_c sum_j p_ij |v_jc|: the magnitude of the output's terms
  // max_c sqrt(sum_j p_ij^2 (v_jc^2 + (1 + sigma_ij)^2 (v_jc - o_ic)^2)) (the sink's term
  // included): the root-sum-square of what one rounding of each term p_ij v_jc, each
  // weight and each score moves o_ic by (a weight's relative change e moves it by
  // e p_ij (v_jc - o_ic); a score's error u sigma_ij, sigma_ij its rounding magnitude,
  // likewise). The scale of one run's rounding noise in the row under the independence
  // model of the probabilistic bound; 0 for the scores' part where the softmax is one-hot.
  double noise = 0;
  // max_c sqrt(sum_j p_ij^2 v_jc^2): the part of `noise` from one relative rounding of each
  // weight as P V multiplies it (KernelRounding::u_weights), the row sum untouched
  double term_noise = 0;
  double out = 0;        // max_c |o_ic|
  double v_max = 0;      // max |V| of the row's K/V head (the convex hull's cap)
  bool masked = false;   // no visible key and no sink: output 0
};

// The per-row bounds use the row's magnitudes in place of the global
// maxima: out_i = min(2 v_max, terms_i (expm1(2 ds_i) + g(4 n_kv + 10)) +
// u_store out_i) (|sum_j p^_j v_j - sum_j p_j v_j| <= sum_j p_j |v_j| times
// the weights' relative error), ds_i from the row's score magnitude, lse and
// weights likewise. The global bound is the same formula over the maxima
// (terms and out both max|V|), so it bounds every row's.
struct ErrorBounds {
  ErrorBound worst, probable;
  std::vector<RowMagnitude> rows;                  // [B, H, n_q] flattened
  std::vector<ErrorBound> rows_worst, rows_probable;  // the bounds per row
  double lambda = 0, failure_probability = 0;
};
ErrorBounds error_bounds(const Inputs<double>& in, const Options& opt, double u_acc, double u_store,
                         const KernelRounding& kernel = {}, double failure_probability = 1e-9);

// --- The backward pass ------------------------------------------------------------
//
// A first-order, worst-case bound on the gradients (backend.hpp's formulas)
// computed in u_acc with inputs, dO and gradients in storage of u_store,
// from the forward's bound above (ds, the weights' and the output's) and
// these magnitudes of the exact problem: P1 = max_i ||dO_i||_1 max|V|
// (bounds |dP_ij|, |D_i| and sum_l |dO_il| |v_jl|), C = the largest column
// sum sum_i P_ij of the weights, H = max_ij sum over batch and heads of P_ij,
// and the largest exact gradients. Derivation (g(k) = gamma_k(u_acc)):
//   each recomputed weight, relative: |dp| <= e_p p, e_p = max(expm1(2 ds) +
//     g(2 n_kv + 8) (the softmax), expm1(ds + lse) + 2 u_acc (from the
//     saved logsumexp))
//   dP_ij = dO_i . v_j:  e_dP = g(d_v) P1 (+ d_v FLT_MIN (max|dO| + max|V|
//     + 1) where the kernel flushes subnormals, KernelRounding, as for S)
//   D_i from the saved output (|dO| <= out): a1 (out + g(d_v) max|V|), or
//     as sum_j P_ij dP_ij: (e_p + g(n_kv)) P1 + e_dP; e_D = the larger
//   dS_ij = P_ij (dP_ij - D_i), |dP - D| <= 2 P1:
//     |d dS_ij| <= P_ij eps_S, eps_S = (e_p + g(2)) 2 P1 + e_dP + e_D
//   dQ_i = scale sum_j dS_ij k_j, sum_j P_ij = 1:
//     dq := |scale| max|K| (eps_S + g(n_kv + 1) 2 P1) + u_store max|dQ|
//   dK_j = scale sum_i dS_ij q_i, sum_i P_ij <= C:
//     dk := |scale| max|Q| C (eps_S + g(n_q + 1) 2 P1) + u_store max|dK|
//   dV_j = sum_i P_ij dO_i:  dv := max|dO| C (e_p + g(n_q)) + u_store max|dV|
//   a backward that rounds P and dS' to u_b before these three products
//     (`backward`, Gradients::rounding; `kernel` is the forward's): in dQ and
//     dK eps_S becomes eps_S (1 + u_b) + u_b 2 P1, in dV e_p becomes
//     e_p (1 + u_b) + u_b; its flushed subnormals as the forward's (dP's term)
//   (with grouped K/V heads, dK_j and dV_j sum over the g query heads: n_q
//   becomes g n_q and C the column sum over them)
//   soft-capping: dS' = dS o f, f = 1 - (s_cap / c)^2; |df| <= 2 ds / c +
//     (2 softcap_tanh_ulps + 13) u_acc (conservative), so eps_S += 2 P1 |df|
//   d(sink_h) = -sum_{b, i} p_i D_i, p_i = exp(sink_h - lse_i):
//     dsinks := M ((e_p + g(B n_q + 1)) P1 + e_D) + gamma_B(2^-53) max|d(sinks)|,
//     M the largest sum over batch and rows of p_i
//   d(bias)_ij = sum over batch and heads of dS: dbias := H eps_S +
//     gamma_{BH}(2^-53) max|d(bias)| (summed in double)
// Like the forward's, it is worst case; the probabilistic companion
// replaces each g(k) by min(g(k), gamma~_k(lambda)).
// What one rounding of dP_ij, of D_i and of the output D is formed from
// moves each gradient by, per unit roundoff, with the exact problem's own
// magnitudes: with c_ij = P_ij (|dP_ij| + |D_i| + |dO_i|.|O_i|), the largest
// element of |scale| c |K| (dQ), |scale| c^T |Q| (dK) and of c summed over
// batch and heads (d(bias)). The cancellation in dP - D that any correct
// order of operations carries (verify.hpp's floor of the tight rule); first
// order, not a bound.
struct GradientScales {
  double dq = 0, dk = 0, dbias = 0;
  // The largest sum of the magnitudes of the terms of one gradient element:
  // |scale| |dS| |K|, |scale| |dS|^T |Q|, P^T |dO|, and |dS| summed over batch
  // and heads (what a relative change of every term, e.g. of the weights,
  // moves it by; max|gradient| can be far smaller where the terms cancel).
  double terms_dq = 0, terms_dk = 0, terms_dv = 0, terms_dbias = 0;
  // The terms weighted by each score's rounding magnitude sigma_ij (as
  // `score`), root-sum-square: |scale| sqrt((|dS| o sigma)^2 (K o K)),
  // |scale| sqrt(((|dS| o sigma)^2)^T (Q o Q)), sqrt(((P o sigma)^2)^T (dO o dO)),
  // the largest element: the scale of what one rounding of each score moves
  // each gradient element by, per unit roundoff, the roundings independent
  // as in the probabilistic bound's model (a score's error moves its weight
  // relatively, so each term; the result can cancel far below). lse_*: the same weighted by |lse_i| (a run that rebuilds P as
  // exp(S - lse) rounds the logsumexp into every score of the row); for dQ,
  // whose row i takes one such factor as a whole, max_i |lse_i| |dQ_i|.
  double score_dq = 0, score_dk = 0, score_dv = 0, lse_dq = 0, lse_dk = 0, lse_dv = 0;
  double terms_dsinks = 0;  // max_h sum over batch and rows of exp(sink_h - lse_i) |D_i|
  // max_h sum over batch and rows of exp(sink_h - lse_i) sum_j P_ij (|dP_ij| + |dO_i|.|v_j|):
  // one rounding of each term of D_i, formed as sum_j P_ij dP_ij or as dO_i . O_i
  // (whose O_i errs by u P|V|); D_i can cancel far below them
  double dsinks = 0;
  // max_i sum_j P_ij (|scale| |q_i|.|k_j| + |b_ij|): the score magnitude the
  // weights see (a score's rounding error is u times its magnitude, and
  // moves the gradients in proportion to its weight)
  double score = 0;
  // the same plus |lse_i| in row i: weights rebuilt as exp(S_ij - lse_i) carry its rounding too
  double score_lse = 0;
  // max over the weights of sigma_ij + sum_k P_ik sigma_ik: u_acc times it is the largest relative
  // error of a weight from the scores' roundings, to first order (the model holds while it is small)
  double score_max = 0;
  // The same quantities row by row (each the largest over one gradient row's
  // elements): dQ's query rows, flat [B, H, n_q]; dK's and dV's key rows,
  // flat [B, H_kv, n_kv]. The tight verdict judges each row in its own units
  // (verify.hpp): a head or key whose gradient is 1e4 times another's does
  // not lend it its tolerance. (dV has no cancellation in dP - D: its
  // `cancel` stays 0.)
  // noise: the root-sum-square of one element's terms, sqrt(sum of their squares)
  // (|scale| sqrt(dS^2 (K o K)), |scale| sqrt((dS^2)^T (Q o Q)), sqrt((P^2)^T (dO o dO))):
  // what one independent relative rounding of each term moves it by, per unit
  // (a backward that rounds P and dS' before the products: Gradients::rounding).
  struct Rows {
    std::vector<double> cancel, terms, score, lse, noise;
  };
  Rows rows_dq, rows_dk, rows_dv;
};
struct GradientBound {
  double dq = 0, dk = 0, dv = 0, dbias = 0, dsinks = 0;
  // the part of each that covers underflow (included in dq, dk, dv above):
  // what the tight rule's per-row floors add too
  double underflow_dq = 0, underflow_dk = 0, underflow_dv = 0;
  double eps_s = 0;  // dS's error per unit weight
  ErrorBound forward;  // the forward's bound it builds on
  GradientScales scales;
};
struct GradientBounds {
  GradientBound worst, probable;
  double lambda = 0, failure_probability = 0;
};
// `truth`: the exact gradients (their magnitudes enter the storage rounding).
// eta_acc, eta_store: half the subnormal spacing of the accumulation and
// storage types (RunReport): each of the k roundings of a k-term sum, and the
// final rounding to storage, may err by that much absolutely where values
// underflow (fp16's subnormals start at 6e-5), which the relative model
// above does not cover: + (n_q + n_kv + d_k + d_v + 8) eta_acc + eta_store;
// and a weight that underflows errs by eta_weight absolutely whatever its
// size (RunReport::eta_weight: a vector exp flushes below the smallest
// normal number), an error the gradients multiply (GradientBound::underflow:
// dS_ij = P_ij (dP_ij - D_i) errs by eta_weight (|dP_ij - D_i| + n_kv
// max|dP|) + eta_acc, D_i taking n_kv such weights, so dQ by |scale| n_kv
// max|K| times that, dK by |scale| n_q g max|Q| times it, dV by n_q g
// max|dO| eta_weight: math's fp32 dK of a key whose weights all lay below
// FLT_MIN erred by 2.6e-38 against a per-row tolerance of 6e-40 without it).
GradientBounds gradient_bounds(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out,
                               const Gradients<double>& truth, const Options& opt, double u_acc, double u_store,
                               double eta_acc, double eta_store, double eta_weight,
                               const KernelRounding& kernel = {}, const KernelRounding& backward = {},
                               double failure_probability = 1e-9);

}  // namespace attn
