#include "attn/backends/streaming.hpp"

#include <xsimd/xsimd.hpp>

#include "attn/backends/kernels.hpp"
#include "attn/backends/microkernel.hpp"
#include "attn/parallel.hpp"
#include "attn/instantiate.hpp"

namespace attn::backends {

namespace {

using detail::widen_count;

// How a worker's tiles are loaded and multiplied. fp32 accumulation (the
// default for fp32, bf16 and fp16 storage) takes the register-blocked
// micro-kernel, with each K and V block packed in its column panels (and
// widened) once per tile; every other accumulation type keeps the shared GEMM/loop tiles.
template <class S, class A>
struct Tiles {
  static constexpr bool micro = std::is_same_v<A, float>;

  static std::size_t k_count(std::size_t b_c, std::size_t d_k) { return micro ? b_c * d_k : widen_count<A, S>(b_c * d_k); }
  static std::size_t v_count(std::size_t b_c, std::size_t d_v) { return micro ? b_c * d_v : widen_count<A, S>(b_c * d_v); }

  static const A* load_k(const S* src, std::size_t cols, std::size_t d_k, A* buf) {
    if constexpr (micro) {
      detail::pack_keys(src, cols, d_k, buf);
      return buf;
    } else {
      return detail::as_accumulate(src, cols * d_k, buf);
    }
  }
  static const A* load_v(const S* src, std::size_t cols, std::size_t d_v, A* buf) {
    if constexpr (micro) {
      detail::pack_values(src, cols, d_v, buf);
      return buf;
    } else {
      return detail::as_accumulate(src, cols * d_v, buf);
    }
  }
  // s = scale * q k^T: q [rows, d_k], k as load_k left it, s [rows, cols].
  static void scores(const A* q, const A* k, A* s, std::size_t rows, std::size_t cols, std::size_t d_k, A scale) {
    if constexpr (micro) detail::tile_gemm_packed(q, d_k, k, s, cols, rows, cols, d_k, scale, false);
    else detail::scores_tile<A>(q, k, s, rows, cols, d_k, scale);
  }
  // o += p v: p [rows, cols], v as load_v left it, o [rows, d_v].
  static void pv(const A* p, const A* v, A* o, std::size_t rows, std::size_t cols, std::size_t d_v) {
    if constexpr (micro) detail::tile_gemm_packed(p, cols, v, o, d_v, rows, d_v, cols, 1.0f, true);
    else detail::pv_tile<A>(p, v, o, rows, cols, d_v, true);
  }
};

// One worker's scratch.
template <class S, class A>
std::size_t worker_bytes(const Shape& s, std::size_t b_r, std::size_t b_c) {
  return piece_bytes<A>(b_r * b_c) + piece_bytes<A>(b_r * s.d_v) + (is_native_float<A> ? 2 : 3) * piece_bytes<A>(b_r) +
         piece_bytes<A>(widen_count<A, S>(b_r * s.d_k)) + piece_bytes<A>(Tiles<S, A>::k_count(b_c, s.d_k)) +
         piece_bytes<A>(Tiles<S, A>::v_count(b_c, s.d_v));
}

std::size_t workers(const Shape& s, const Options& opt, std::size_t b_r) {
  const std::size_t items = s.batch * s.heads * ((s.n_q + b_r - 1) / b_r);
  return std::max<std::size_t>(1, std::min(opt.threads, items));
}

template <class S, class A>
std::size_t streaming_bytes(const Shape& s, const Options& opt, std::size_t block_q, std::size_t block_k) {
  const std::size_t b_r = std::min(block_q, s.n_q), b_c = std::min(block_k, s.n_kv);
  return workers(s, opt, b_r) * worker_bytes<S, A>(s, b_r, b_c);
}

template <class A>
struct Scratch {
  A *S_ij, *O_i, *m_i, *l_i, *c_i, *q_buf, *k_buf, *v_buf;
};

template <class S, class A>
Result<S> streaming_attention(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  // q: [B, H, n_q, d_k]  k: [B, H, n_kv, d_k]  v: [B, H, n_kv, d_v]  ->  o: [B, H, n_q, d_v]
  using namespace detail;
  using T = Tiles<S, A>;
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t B_r = std::min(Streaming::block_q(opt), n_q), B_c = std::min(Streaming::block_k(opt), n_kv);
  const std::size_t bytes = streaming_bytes<S, A>(sh, opt, B_r, B_c);
  check_workspace(Streaming::name, "a B_q x B_k tile per thread", bytes);
  const std::size_t n_workers = workers(sh, opt, B_r);
  Arena arena(ws, bytes);
  std::vector<Scratch<A>> scratch(n_workers);
  for (auto& w : scratch) {
    w.S_ij = arena.take<A>(B_r * B_c);  // scores, then P~ of the current tile
    w.O_i = arena.take<A>(B_r * d_v);   // unnormalised output of the query block
    w.m_i = arena.take<A>(B_r);         // running row max
    w.l_i = arena.take<A>(B_r);         // running sum of exp(S - m_i)
    w.c_i = is_native_float<A> ? nullptr : arena.take<A>(B_r);  // O_i's power-of-two divisor (see `normalised`)
    w.q_buf = arena.take<A>(widen_count<A, S>(B_r * d_k));
    w.k_buf = arena.take<A>(T::k_count(B_c, d_k));
    w.v_buf = arena.take<A>(T::v_count(B_c, d_v));
  }

  Result<S> r = allocate_result<S>(Streaming::name, sh, opt, bytes, /*lse_always=*/opt.need_weights);

  const MaskView mask(opt.mask, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));
  const A zero = convert<A>(0.0), minus_inf = neg_infinity<A>();
  const std::size_t q_blocks = (n_q + B_r - 1) / B_r;
  // Narrower accumulation types (bf16/fp16 storage accumulation) hold O_i
  // divided by a power of two c_i >= l_i: the unnormalised sum of P~ V can
  // exceed their range (n_kv max|V| > 65504 in fp16) where |O_i| / c_i <=
  // max|V| cannot, and scaling by powers of two rounds nothing (normalising
  // by l_i after every tile instead rounded O_i once per tile: 11x the
  // baseline's error in fp16 storage accumulation, measured by agreement_test).
  constexpr bool normalised = !is_native_float<A>;

  // One item = one query block of one (batch, head); the last blocks first,
  // since under a causal mask they see the most keys.
  auto query_block = [&](std::size_t item, std::size_t worker) {
    const auto [S_ij, O_i, m_i, l_i, c_i, q_buf, k_buf, v_buf] = scratch[worker];
    const std::size_t b = item / (sh.heads * q_blocks), h = item / q_blocks % sh.heads;
    const std::size_t i0 = (q_blocks - 1 - item % q_blocks) * B_r;
    const std::size_t rows = std::min(B_r, n_q - i0);
    const A* Q_i = as_accumulate(&in.q(b, h, i0, 0), rows * d_k, q_buf);
    // Keys [lo, hi) some query of the block may see; tiles outside are skipped.
    const auto [lo, hi] = block_keys(mask, b, i0, rows, n_kv);
    std::fill(m_i, m_i + rows, minus_inf);
    std::fill(l_i, l_i + rows, zero);
    if constexpr (normalised) std::fill(c_i, c_i + rows, convert<A>(1.0));
    std::fill(O_i, O_i + rows * d_v, zero);

    // Rows [first, last) of the block: the hull of the rows that see any key
    // of j0 .. j0 + cols (under a causal mask the diagonal tiles shrink to
    // the rows at or below the diagonal); rows outside see none of them.
    struct Rows {
      std::size_t first, last;
    };
    auto rows_seeing = [&](std::size_t j0, std::size_t cols) {
      Rows hull{rows, 0};
      for (std::size_t r_ = 0; r_ < rows; ++r_) {
        const auto keys = mask.keys(b, i0 + r_);
        if (keys.begin < j0 + cols && keys.end > j0 && keys.size() > 0) {
          hull.first = std::min(hull.first, r_);
          hull.last = r_ + 1;
        }
      }
      return hull.first < hull.last ? hull : Rows{0, 0};
    };
    // S_ij = Q_i K_j^T * scale + mask for rows [first, last) and the keys
    // j0 .. j0 + cols; row r_ of the tile at S_ij + r_ * cols.
    auto scores = [&](std::size_t j0, std::size_t cols, Rows rs) {
      const A* K_j = T::load_k(&in.k(b, h, j0, 0), cols, d_k, k_buf);
      T::scores(Q_i + rs.first * d_k, K_j, S_ij + rs.first * cols, rs.last - rs.first, cols, d_k, scale);
      for (std::size_t r_ = rs.first; r_ < rs.last; ++r_) {
        const auto keys = mask.keys(b, i0 + r_);
        if (mask.elementwise() || keys.begin > j0 || keys.end < j0 + cols) mask_row(S_ij + r_ * cols, mask, b, i0 + r_, j0, cols);
      }
    };

    // For each key tile some row sees: its scores in S_ij, then visit(j0, cols, rows).
    auto each_key_tile = [&](auto&& visit) {
      for (std::size_t j0 = lo; j0 < hi; j0 += B_c) {
        const std::size_t cols = std::min(B_c, hi - j0);
        const Rows rs = rows_seeing(j0, cols);
        if (rs.first == rs.last) continue;
        scores(j0, cols, rs);
        visit(j0, cols, rs);
      }
    };

    each_key_tile([&](std::size_t j0, std::size_t cols, Rows rs) {
      for (std::size_t r_ = rs.first; r_ < rs.last; ++r_) {
        A* s = S_ij + r_ * cols;
        // m_new = max(m_i, rowmax(S_ij));  P~_ij = exp(S_ij - m_new)
        const A m_new = std::max(m_i[r_], row_max(s, cols));
        if (!(m_new > minus_inf)) {  // every key so far masked: nothing to add (and no NaN)
          std::fill(s, s + cols, zero);
          continue;
        }
        const A row_sum = exp_shifted_sum(s, cols, m_new, /*simd=*/true);
        // l_i = exp(m_i - m_new) l_i + rowsum(P~);  O_i = diag(exp(m_i - m_new)) O_i
        if (m_new > m_i[r_]) {
          const A alpha = m_i[r_] > minus_inf ? exp_of<A>(m_i[r_] - m_new) : zero;
          l_i[r_] *= alpha;
          for (std::size_t c = 0; c < d_v; ++c) O_i[r_ * d_v + c] *= alpha;
          m_i[r_] = m_new;
        }
        l_i[r_] += row_sum;
        if constexpr (normalised) {
          // c_i doubles until it reaches l_i (O_i halves with it, exactly);
          // this tile's P~ is divided by it (exactly, barring subnormals).
          if (l_i[r_] > c_i[r_]) {
            A c = c_i[r_];
            while (c < l_i[r_]) c = c * convert<A>(2.0);
            const A shrink = c_i[r_] / c;
            for (std::size_t k = 0; k < d_v; ++k) O_i[r_ * d_v + k] *= shrink;
            c_i[r_] = c;
          }
          for (std::size_t k = 0; k < cols; ++k) s[k] /= c_i[r_];
        }
      }
      // O_i += P~_ij V_j
      T::pv(S_ij + rs.first * cols, T::load_v(&in.v(b, h, j0, 0), cols, d_v, v_buf), O_i + rs.first * d_v,
            rs.last - rs.first, cols, d_v);
    });

    // O_i = O_i / l_i;  lse_i = m_i + log l_i
    S* o = &r.out(b, h, i0, 0);
    for (std::size_t r_ = 0; r_ < rows; ++r_) {
      // l_i is 0 only for a fully masked row (otherwise >= 1, or NaN from a
      // non-finite input, which must reach the output, not read as masked).
      const bool masked = l_i[r_] == zero;
      for (std::size_t c = 0; c < d_v; ++c)
        o[r_ * d_v + c] = masked       ? convert<S>(0.0)
                          : normalised ? convert<S>(A(O_i[r_ * d_v + c] / A(l_i[r_] / c_i[r_])))
                                       : convert<S>(A(O_i[r_ * d_v + c] / l_i[r_]));
      if (r.lse) (*r.lse)(b, h, i0 + r_) = row_lse(RowSoftmax<A>{m_i[r_], l_i[r_], masked});
    }

    // Weights, on request only: a second pass, P_ij = exp(S_ij - lse_i).
    if (!r.weights) return;
    for (std::size_t r_ = 0; r_ < rows; ++r_) {
      double* w = &(*r.weights)(b, h, i0 + r_, 0);
      std::fill(w, w + n_kv, 0.0);
      // lse in A, reused as the shift of this row (m_i is no longer needed)
      m_i[r_] = l_i[r_] == zero ? minus_inf : A(m_i[r_] + log_of<A>(l_i[r_]));
    }
    each_key_tile([&](std::size_t j0, std::size_t cols, Rows rs) {
      for (std::size_t r_ = rs.first; r_ < rs.last; ++r_) {
        const A* s = S_ij + r_ * cols;
        if (!(m_i[r_] > minus_inf)) continue;
        double* w = &(*r.weights)(b, h, i0 + r_, j0);
        for (std::size_t c = 0; c < cols; ++c) w[c] = convert<double>(exp_of<A>(s[c] - m_i[r_]));
      }
    });
  };
  parallel_for(sh.batch * sh.heads * q_blocks, n_workers, query_block);

  if (!opt.need_lse) r.lse.reset();
  return r;
}

}  // namespace

template <class S, Accumulate P>
Result<S> Streaming::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  return streaming_attention<S, accumulate_t<S, P>>(in, opt, ws);
}

template <class S, Accumulate P>
std::size_t Streaming::workspace_bytes(const Shape& s, const Options& opt) {
  return streaming_bytes<S, accumulate_t<S, P>>(s, opt, block_q(opt), block_k(opt));
}

ATTN_INSTANTIATE_BACKEND(Streaming)

}  // namespace attn::backends
