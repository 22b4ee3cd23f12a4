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

  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));
  const A zero = convert<A>(0.0), one = convert<A>(1.0), minus_inf = neg_infinity<A>();
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
    const std::size_t b = item / (sh.heads * q_blocks), h = item / q_blocks % sh.heads, hk = h / sh.group();
    const std::size_t i0 = (q_blocks - 1 - item % q_blocks) * B_r;
    const std::size_t rows = std::min(B_r, n_q - i0);
    const A* Q_i = as_accumulate(&in.q(b, h, i0, 0), rows * d_k, q_buf);
    // Keys [lo, hi) some query of the block may see; tiles outside are skipped.
    const auto [lo, hi] = block_keys(mask, b, i0, rows, n_kv);
    // The sink starts each row as a key of score sink_h and value 0: m_i = sink_h, l_i = 1
    // (without a sink, -inf and 0).
    const A sink = convert<A>(mask.sink(h));
    std::fill(m_i, m_i + rows, sink);
    std::fill(l_i, l_i + rows, sink > minus_inf ? one : zero);
    if constexpr (normalised) std::fill(c_i, c_i + rows, convert<A>(1.0));
    std::fill(O_i, O_i + rows * d_v, zero);

    // S_ij = Q_i K_j^T * scale + mask for rows [first, last) and the keys
    // j0 .. j0 + cols; row r_ of the tile at S_ij + r_ * cols.
    auto scores = [&](std::size_t j0, std::size_t cols, RowSpan rs) {
      const A* K_j = T::load_k(&in.k(b, hk, j0, 0), cols, d_k, k_buf);
      T::scores(Q_i + rs.first * d_k, K_j, S_ij + rs.first * cols, rs.size(), cols, d_k, scale);
      for (std::size_t r_ = rs.first; r_ < rs.last; ++r_)
        mask_row_if_partial(S_ij + r_ * cols, mask, b, h, i0 + r_, j0, cols);
    };

    // For each key tile some row sees: its scores in S_ij, then visit(j0, cols, rows).
    auto each_key_tile = [&](auto&& visit) {
      for (std::size_t j0 = lo; j0 < hi; j0 += B_c) {
        const std::size_t cols = std::min(B_c, hi - j0);
        const RowSpan rs = rows_seeing(mask, b, i0, rows, j0, cols);
        if (rs.size() == 0) continue;
        scores(j0, cols, rs);
        visit(j0, cols, rs);
      }
    };

    each_key_tile([&](std::size_t j0, std::size_t cols, RowSpan rs) {
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
      T::pv(S_ij + rs.first * cols, T::load_v(&in.v(b, hk, j0, 0), cols, d_v, v_buf), O_i + rs.first * d_v,
            rs.size(), cols, d_v);
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
    each_key_tile([&](std::size_t j0, std::size_t cols, RowSpan rs) {
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

// --- The backward pass (FlashAttention-2, Dao 2023, algorithm 2) -----------
//
// Per (batch, K/V head), one worker, key blocks outer, the K/V head's g query
// heads and their query blocks inner:
//   for each key block K_j, V_j (B_k keys; packed once):
//     dK_j = dV_j = 0 (tile accumulators)
//     for each query head of the K/V head, each query block i whose rows see
//     any key of j (rows [first, last)):
//       S = scale Q_i K_j^T, soft-capped (keeping its derivative f), + ALiBi + mask
//       P = exp(S - lse_i)   (lse saved by the forward, the sink's term included)
//       dP = dO_i V_j^T;  D_i = dO_i . O_i;  dS = P o (dP - D_i);  dS' = dS o f
//       dQ_i += dS' K_j;  dV_j += P^T dO_i;  dK_j += dS'^T Q_i  (P^T, dS'^T transposed tiles)
//     dK_j = scale dK_j, dV_j -> storage
//   dQ = scale dQ -> storage;  d(sink_h) = -sum_i exp(sink_h - lse_i) D_i
// All five products run on the forward's tiles (the micro-kernel for fp32
// accumulation, with every B operand packed in its column panels), and P on
// its vectorised exp. A K/V head is one work item, done by one worker in a
// fixed order, so the result is bitwise independent of the thread count and
// of scheduling: no reduction across workers at all (the price: no
// parallelism inside one K/V head; B H_kv work items). dQ accumulates in the
// output itself when the storage is the accumulation type, otherwise in one
// g n_q x d_k buffer per worker in the accumulation type (the size of the
// gradient itself). D_i is recomputed per tile (rows x d_v operations against
// the tile's rows x B_k x (2 d_k + 3 d_v)), so nothing else grows with n.

template <class S, class A>
std::size_t backward_worker_bytes(const Shape& s, std::size_t b_r, std::size_t b_c) {
  using T = Tiles<S, A>;
  return 3 * piece_bytes<A>(b_r * b_c) + piece_bytes<A>(b_c * s.d_k) + piece_bytes<A>(b_c * s.d_v) +
         piece_bytes<A>(T::k_count(b_c, s.d_k)) + piece_bytes<A>(T::k_count(b_c, s.d_v)) +
         piece_bytes<A>(T::v_count(b_c, s.d_k)) + piece_bytes<A>(T::v_count(b_r, s.d_k)) +
         piece_bytes<A>(T::v_count(b_r, s.d_v)) + piece_bytes<A>(widen_count<A, S>(b_r * s.d_k)) +
         piece_bytes<A>(widen_count<A, S>(b_r * s.d_v)) + 2 * piece_bytes<A>(b_r) +
         piece_bytes<A>(widen_count<A, S>(s.group() * s.n_q * s.d_k));
}

std::size_t backward_workers(const Shape& s, const Options& opt) {
  return std::max<std::size_t>(1, std::min(opt.threads, s.batch * s.kv_head_count()));
}

template <class S, class A>
std::size_t streaming_backward_bytes(const Shape& s, const Options& opt, std::size_t block_q, std::size_t block_k) {
  const std::size_t b_r = std::min(block_q, s.n_q), b_c = std::min(block_k, s.n_kv);
  return backward_worker_bytes<S, A>(s, b_r, b_c) * backward_workers(s, opt);
}

template <class S, class A>
Gradients<S> streaming_backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                                const Options& opt, Workspace& ws) {
  using namespace detail;
  using T = Tiles<S, A>;
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t B_r = std::min(Streaming::backward_block_q(opt), n_q);
  const std::size_t B_c = std::min(Streaming::backward_block_k(opt), n_kv);
  const std::size_t bytes = streaming_backward_bytes<S, A>(sh, opt, B_r, B_c);
  check_workspace(Streaming::name, "the backward's B_q x B_k tiles per thread", bytes);
  if (opt.need_dbias)
    check_workspace(Streaming::name, "d(bias) per head before its sum over heads (double)",
                    sh.batch * sh.heads * n_q * n_kv * sizeof(double));
  const std::size_t n_workers = backward_workers(sh, opt);
  struct Scratch {
    A *P, *dS, *T_ij, *dK_j, *dV_j, *K_keys, *V_keys, *K_vals, *Q_vals, *dO_vals, *q_buf, *do_buf, *lse, *D, *dq_acc;
  };
  Arena arena(ws, bytes);
  std::vector<Scratch> scratch(n_workers);
  for (auto& w : scratch) {
    w.P = arena.take<A>(B_r * B_c);      // P of the tile
    w.dS = arena.take<A>(B_r * B_c);     // dP, then dS
    w.T_ij = arena.take<A>(B_r * B_c);   // P^T, then dS^T
    w.dK_j = arena.take<A>(B_c * d_k);
    w.dV_j = arena.take<A>(B_c * d_v);
    w.K_keys = arena.take<A>(T::k_count(B_c, d_k));  // K_j as the B of S = Q K^T
    w.V_keys = arena.take<A>(T::k_count(B_c, d_v));  // V_j as the B of dP = dO V^T
    w.K_vals = arena.take<A>(T::v_count(B_c, d_k));  // K_j as the B of dQ += dS K
    w.Q_vals = arena.take<A>(T::v_count(B_r, d_k));  // Q_i as the B of dK += dS^T Q
    w.dO_vals = arena.take<A>(T::v_count(B_r, d_v));  // dO_i as the B of dV += P^T dO
    w.q_buf = arena.take<A>(widen_count<A, S>(B_r * d_k));
    w.do_buf = arena.take<A>(widen_count<A, S>(B_r * d_v));
    w.lse = arena.take<A>(B_r);
    w.D = arena.take<A>(B_r);
    w.dq_acc = arena.take<A>(widen_count<A, S>(sh.group() * n_q * d_k));
  }
  Gradients<S> g = allocate_gradients<S>(sh, opt, bytes);
  std::optional<xt::xtensor<double, 4>> ds_heads;  // dS of every head, summed over heads in order at the end
  if (opt.need_dbias) ds_heads = xt::xtensor<double, 4>(std::array<std::size_t, 4>{sh.batch, sh.heads, n_q, n_kv}, 0.0);
  std::optional<xt::xtensor<double, 2>> dsink_heads;  // d(sink) of each (batch, head), summed over batch in order at the end
  if (opt.sinks) dsink_heads = xt::xtensor<double, 2>(std::array<std::size_t, 2>{sh.batch, sh.heads}, 0.0);

  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh)), zero = convert<A>(0.0), one = convert<A>(1.0);
  const A minus_inf = neg_infinity<A>();

  const std::size_t g_heads = sh.group();
  auto kv_head = [&](std::size_t item, std::size_t worker) {
    const Scratch& w = scratch[worker];
    const std::size_t b = item / sh.kv_head_count(), hk = item % sh.kv_head_count();
    // dQ of query head h0 + x at dq(x)
    auto dq = [&](std::size_t x) -> A* {
      if constexpr (std::is_same_v<S, A>) return &g.dq(b, hk * g_heads + x, 0, 0);
      else return w.dq_acc + x * n_q * d_k;
    };
    for (std::size_t x = 0; x < g_heads; ++x) std::fill(dq(x), dq(x) + n_q * d_k, zero);

    for (std::size_t j0 = 0; j0 < n_kv; j0 += B_c) {
      const std::size_t cols = std::min(B_c, n_kv - j0);
      const A* K_keys = T::load_k(&in.k(b, hk, j0, 0), cols, d_k, w.K_keys);
      const A* V_keys = T::load_k(&in.v(b, hk, j0, 0), cols, d_v, w.V_keys);
      const A* K_vals = T::load_v(&in.k(b, hk, j0, 0), cols, d_k, w.K_vals);
      std::fill(w.dK_j, w.dK_j + cols * d_k, zero);
      std::fill(w.dV_j, w.dV_j + cols * d_v, zero);

      for (std::size_t x = 0; x < g_heads; ++x) {
        const std::size_t h = hk * g_heads + x;
        for (std::size_t i0 = 0; i0 < n_q; i0 += B_r) {
          // The rows of the query block that see any key of the tile.
          const RowSpan rs = rows_seeing(mask, b, i0, std::min(B_r, n_q - i0), j0, cols);
          if (rs.size() == 0) continue;
          const std::size_t r0 = i0 + rs.first, rows = rs.size();
          const A* Q_i = as_accumulate(&in.q(b, h, r0, 0), rows * d_k, w.q_buf);
          const A* dO_i = as_accumulate(&d_out(b, h, r0, 0), rows * d_v, w.do_buf);

          // S = scale Q_i K_j^T (+ soft-cap, ALiBi, mask);  P = exp(S - lse_i), 0 on a fully masked row
          T::scores(Q_i, K_keys, w.P, rows, cols, d_k, scale);
          // dP = dO_i V_j^T
          T::scores(dO_i, V_keys, w.dS, rows, cols, d_v, one);
          for (std::size_t r_ = 0; r_ < rows; ++r_) {
            const std::size_t i = r0 + r_;
            A* p = w.P + r_ * cols;
            A* ds = w.dS + r_ * cols;
            // the soft-cap's derivative, in T_ij until the transposes need it
            if (mask.softcap()) softcap_slope(p, w.T_ij + r_ * cols, cols, *mask.softcap());
            mask_row_if_partial(p, mask, b, h, i, j0, cols);
            const A lse = convert<A>(saved.lse(b, h, i));
            if (lse > minus_inf) exp_shifted_sum(p, cols, lse, /*simd=*/true);
            else std::fill(p, p + cols, zero);
            // D_i = dO_i . O_i;  dS = P o (dP - D_i)
            const A d_i = dot_loops<A>(&d_out(b, h, i, 0), &saved.out(b, h, i, 0), d_v);
            for (std::size_t c = 0; c < cols; ++c) ds[c] = p[c] * (ds[c] - d_i);
            if (ds_heads)
              for (std::size_t c = 0; c < cols; ++c) (*ds_heads)(b, h, i, j0 + c) = convert<double>(ds[c]);
            if (mask.softcap())
              for (std::size_t c = 0; c < cols; ++c) ds[c] *= w.T_ij[r_ * cols + c];
          }
          // dQ_i += dS' K_j
          T::pv(w.dS, K_vals, dq(x) + r0 * d_k, rows, cols, d_k);
          // dV_j += P^T dO_i
          transpose(w.P, rows, cols, w.T_ij);
          T::pv(w.T_ij, T::load_v(&d_out(b, h, r0, 0), rows, d_v, w.dO_vals), w.dV_j, cols, rows, d_v);
          // dK_j += dS'^T Q_i
          transpose(w.dS, rows, cols, w.T_ij);
          T::pv(w.T_ij, T::load_v(&in.q(b, h, r0, 0), rows, d_k, w.Q_vals), w.dK_j, cols, rows, d_k);
        }
      }
      S* dk = &g.dk(b, hk, j0, 0);
      S* dv = &g.dv(b, hk, j0, 0);
      for (std::size_t x = 0; x < cols * d_k; ++x) dk[x] = convert<S>(A(scale * w.dK_j[x]));
      for (std::size_t x = 0; x < cols * d_v; ++x) dv[x] = convert<S>(w.dV_j[x]);
    }
    for (std::size_t x = 0; x < g_heads; ++x) {
      const std::size_t h = hk * g_heads + x;
      S* dq_out = &g.dq(b, h, 0, 0);
      for (std::size_t e = 0; e < n_q * d_k; ++e) dq_out[e] = convert<S>(A(scale * dq(x)[e]));
      // d(sink_h) over this batch's rows: -sum_i exp(sink_h - lse_i) D_i
      const A sink = convert<A>(mask.sink(h));
      if (!dsink_heads || !(sink > minus_inf)) continue;
      A sum = zero;
      for (std::size_t i = 0; i < n_q; ++i) {
        const A lse = convert<A>(saved.lse(b, h, i));
        const A d_i = dot_loops<A>(&d_out(b, h, i, 0), &saved.out(b, h, i, 0), d_v);
        sum -= exp_of<A>(A(sink - lse)) * d_i;
      }
      (*dsink_heads)(b, h) = convert<double>(sum);
    }
  };
  parallel_for(sh.batch * sh.kv_head_count(), n_workers, kv_head);

  if (ds_heads)
    for (std::size_t b = 0; b < sh.batch; ++b)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t x = 0; x < n_q * n_kv; ++x) g.dbias->data()[x] += (*ds_heads)(b, h, x / n_kv, x % n_kv);
  if (dsink_heads)
    for (std::size_t b = 0; b < sh.batch; ++b)
      for (std::size_t h = 0; h < sh.heads; ++h) (*g.dsinks)(h) += (*dsink_heads)(b, h);
  return g;
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

template <class S, Accumulate P>
Gradients<S> Streaming::backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                                 const Options& opt, Workspace& ws) {
  return streaming_backward<S, accumulate_t<S, P>>(in, saved, d_out, opt, ws);
}

template <class S, Accumulate P>
std::size_t Streaming::backward_workspace_bytes(const Shape& s, const Options& opt) {
  return streaming_backward_bytes<S, accumulate_t<S, P>>(s, opt, backward_block_q(opt), backward_block_k(opt));
}

ATTN_INSTANTIATE_BACKEND(Streaming)
ATTN_INSTANTIATE_BACKWARD(Streaming)

}  // namespace attn::backends
