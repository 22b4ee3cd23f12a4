// The textbook algorithm, written once for any accumulation type A: the
// naive backend instantiates it with A = double/float/storage, the
// reference backend with A = a 50-digit multiprecision float.
//
//   S = Q K^T * scale + mask     (the whole n_q x n_kv matrix of one head)
//   P = softmax(S) per row, shifted by the row max m_i; l_i = sum_j exp(S_ij - m_i)
//   O = P V,   lse_i = m_i + log l_i
// Holds O(n_q * n_kv) scores per call, computed in loops that round every
// operation to A. A fully masked row (m_i = -inf) gives O_i = 0, P_i = 0
// and lse_i = -inf.
#pragma once

#include <string_view>
#include <vector>

#include "attn/backend.hpp"
#include "attn/backends/kernels.hpp"

namespace attn::detail {

template <class A>
std::size_t naive_workspace_bytes(const Shape& s) {
  return piece_bytes<A>(s.n_q * s.n_kv) + piece_bytes<A>(s.d_v);
}

// n values of A from the arena, or owned when A is not trivially copyable
// (the reference's multiprecision type).
template <class A>
class Scratch {
 public:
  Scratch(Arena& arena, std::size_t n) {
    if constexpr (std::is_trivially_copyable_v<A>) {
      data_ = arena.take<A>(n);
    } else {
      owned_.resize(n);
      data_ = owned_.data();
    }
  }
  A* data() { return data_; }

 private:
  std::vector<A> owned_;
  A* data_ = nullptr;
};

template <class S, class A>
Result<S> naive_attention(const Inputs<S>& in, const Options& opt, Workspace& ws, std::string_view backend) {
  // q: [B, H, n_q, d_k]  k: [B, H, n_kv, d_k]  v: [B, H, n_kv, d_v]  ->  o: [B, H, n_q, d_v]
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t bytes = naive_workspace_bytes<A>(sh);
  check_workspace(backend, "the n_q x n_kv score matrix of one head", bytes);
  Arena arena(ws, std::is_trivially_copyable_v<A> ? bytes : 0);
  Scratch<A> scores(arena, n_q * n_kv), o_row(arena, d_v);

  Result<S> r = allocate_result<S>(backend, sh, opt, bytes);

  const MaskView mask(opt.mask, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));

  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const S* q = &in.q(b, h, 0, 0);
      const S* k = &in.k(b, h, 0, 0);
      const S* v = &in.v(b, h, 0, 0);
      S* o = &r.out(b, h, 0, 0);

      // S_ij = scale * q_i . k_j + mask_ij, computed only for keys the mask leaves visible
      for (std::size_t i = 0; i < n_q; ++i) {
        A* s_i = scores.data() + i * n_kv;
        const auto keys = mask.keys(b, i);
        scores_loops<A, S>(q + i * d_k, k + keys.begin * d_k, s_i + keys.begin, 1, keys.size(), d_k, scale);
        mask_row(s_i, mask, b, i, 0, n_kv);
      }

      for (std::size_t i = 0; i < n_q; ++i) {
        // P_i = softmax(S_i);  O_i = P_i V
        A* p_i = scores.data() + i * n_kv;
        const RowSoftmax<A> row = softmax_row(p_i, n_kv);
        pv_loops<A, S>(p_i, v, o_row.data(), 1, n_kv, d_v, false);
        for (std::size_t c = 0; c < d_v; ++c) o[i * d_v + c] = convert<S>(o_row.data()[c]);
        if (r.weights)
          for (std::size_t j = 0; j < n_kv; ++j) (*r.weights)(b, h, i, j) = convert<double>(p_i[j]);
        if (r.lse) (*r.lse)(b, h, i) = row_lse(row);
      }
    }
  }
  return r;
}

}  // namespace attn::detail
