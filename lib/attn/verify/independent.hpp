// The ground truth's own code: attention and its gradients written from the
// formulas of problem.hpp and backend.hpp alone, sharing nothing with the
// backends it judges (no MaskView, no resolved_scale, no softmax_row, no
// BLAS): a bug in the library's mask, scale or softmax helpers, or in the
// BLAS the backends call, cannot hide by appearing on both sides of a check.
// Small on purpose, to be reviewed against the formulas:
//
//   visible(b, h, i, j) = the mask allows (i, j) and, with segments, the
//       query's token t = i + n_kv - n_q has t >= 0 and the same document id
//       as key j; an additive bias of -inf or a Boolean 0 masks the key
//   s_ij = scale q_i . k_j        scale = Options::scale, else 1 / sqrt(d_k) in double
//   s_ij = c tanh(s_ij / c)       soft-cap c
//   s_ij += slope_h (j - i - (n_kv - n_q))   ALiBi
//   s_ij += bias_ij               additive bias
//   m_i = max(sink_h, max over visible j of s_ij);  l_i = exp(sink_h - m_i) + sum_j exp(s_ij - m_i)
//   P_ij = exp(s_ij - m_i) / l_i;  lse_i = m_i + log l_i (-inf where nothing is visible and no sink)
//   O_i = sum_j P_ij v_j           (0 for a row with nothing visible)
// and the backward pass: dP = dO V^T, D_i = sum_j P_ij dP_ij, dS = P o (dP - D),
// dS' = dS o (1 - tanh^2(raw / c)) under a soft-cap, dQ = scale dS' K,
// dK = scale dS'^T Q, dV = P^T dO (K/V heads summing their g query heads),
// d(bias) = dS summed over batch and heads, d(sink_h) = -sum_{b,i} exp(sink_h - lse_i) D_i.
//
// Each is evaluated in a number type T: 50 digits (MPFR: reference_exact.hpp),
// double-double (double_double.hpp: dots and sums in ~106 bits), or double.
// In double the score and output loops run over blocks of 8 keys with one
// accumulator per key, which the compiler vectorises without reordering any
// sum (hand-written loops rather than a BLAS call, on purpose: the backends
// call the BLAS); the result is then a plain fp64 evaluation whose own error
// the derived fp64 bound covers.
#pragma once

#include "attn/registry/backend.hpp"

namespace attn {

enum class IndependentPrecision { digits50, double_double, fp64 };

// Output, weights (when opt.need_weights) and logsumexp, rounded to double.
Result<double> independent_attention(const Inputs<double>& in, const Options& opt, IndependentPrecision p);

// dQ, dK, dV, d(bias) (when opt.need_dbias and the mask is an additive bias)
// and d(sinks) (when opt.sinks), rounded to double.
Gradients<double> independent_gradients(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out,
                                        const Options& opt, IndependentPrecision p);

}  // namespace attn
