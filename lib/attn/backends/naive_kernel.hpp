// The textbook algorithm, written once for any accumulation type A: the
// naive backend instantiates it with A = double/float/storage, the
// reference backend with A = a 50-digit multiprecision float.
//
//   S = Q K^T * scale + mask     (the whole n_q x n_kv matrix of one head)
//   P = softmax(S) per row, shifted by the row max m_i; l_i = sum_j exp(S_ij - m_i)
//   O = P V,   lse_i = m_i + log l_i
// Holds O(n_q * n_kv) scores per call. A fully masked row (m_i = -inf)
// gives O_i = 0, P_i = 0 and lse_i = -inf.
#pragma once

#include <string_view>
#include <vector>

#include "attn/backend.hpp"

namespace attn::detail {

template <class A>
std::size_t naive_workspace_bytes(const Shape& s) {
  return (s.n_q * s.n_kv + s.d_v) * sizeof(A);
}

template <class S, class A>
Result<S> naive_attention(const Inputs<S>& in, const Options& opt, std::string_view backend) {
  // q: [B, H, n_q, d_k]  k: [B, H, n_kv, d_k]  v: [B, H, n_kv, d_v]  ->  o: [B, H, n_q, d_v]
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  check_workspace(backend, "the n_q x n_kv score matrix of one head", naive_workspace_bytes<A>(sh));

  Result<S> r;
  r.out = xt::xtensor<S, 4>::from_shape({sh.batch, sh.heads, n_q, d_v});
  if (opt.need_weights) r.weights = xt::xtensor<double, 4>::from_shape({sh.batch, sh.heads, n_q, n_kv});
  if (opt.need_lse) r.lse = xt::xtensor<double, 3>::from_shape({sh.batch, sh.heads, n_q});
  std::vector<A> scores(n_q * n_kv), o_row(d_v);
  r.workspace_bytes = naive_workspace_bytes<A>(sh);

  const MaskView mask(opt.mask, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));
  const A zero = convert<A>(0.0), minus_inf = neg_infinity<A>();

  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const S* q = &in.q(b, h, 0, 0);
      const S* k = &in.k(b, h, 0, 0);
      const S* v = &in.v(b, h, 0, 0);
      S* o = &r.out(b, h, 0, 0);

      // S_ij = scale * q_i . k_j + mask_ij
      for (std::size_t i = 0; i < n_q; ++i) {
        A* s_i = &scores[i * n_kv];
        const auto keys = mask.keys(b, i);
        for (std::size_t j = 0; j < n_kv; ++j) {
          if (j < keys.begin || j >= keys.end) {
            s_i[j] = minus_inf;
            continue;
          }
          A dot = zero;
          for (std::size_t l = 0; l < d_k; ++l) dot += convert<A>(q[i * d_k + l]) * convert<A>(k[j * d_k + l]);
          s_i[j] = dot * scale;
          if (mask.elementwise()) s_i[j] += convert<A>(mask.offset(i, j));
        }
      }

      for (std::size_t i = 0; i < n_q; ++i) {
        A* s_i = &scores[i * n_kv];
        // m_i = max_j S_ij;  P_ij = exp(S_ij - m_i) / l_i
        A m = minus_inf;
        for (std::size_t j = 0; j < n_kv; ++j)
          if (s_i[j] > m) m = s_i[j];
        const bool fully_masked = !(m > minus_inf);
        A l = zero;
        for (std::size_t j = 0; j < n_kv; ++j) {
          s_i[j] = fully_masked ? zero : exp_of<A>(s_i[j] - m);
          l += s_i[j];
        }
        if (!fully_masked)
          for (std::size_t j = 0; j < n_kv; ++j) s_i[j] /= l;

        // O_i = sum_j P_ij v_j
        for (std::size_t c = 0; c < d_v; ++c) o_row[c] = zero;
        for (std::size_t j = 0; j < n_kv; ++j)
          for (std::size_t c = 0; c < d_v; ++c) o_row[c] += s_i[j] * convert<A>(v[j * d_v + c]);
        for (std::size_t c = 0; c < d_v; ++c) o[i * d_v + c] = convert<S>(o_row[c]);

        if (r.weights)
          for (std::size_t j = 0; j < n_kv; ++j) (*r.weights)(b, h, i, j) = convert<double>(s_i[j]);
        if (r.lse) (*r.lse)(b, h, i) = fully_masked ? -std::numeric_limits<double>::infinity()
                                                    : convert<double>(A(m + log_of<A>(l)));
      }
    }
  }
  return r;
}

}  // namespace attn::detail
