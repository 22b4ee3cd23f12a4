#include "attn/backends/streaming.hpp"

#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include <xsimd/xsimd.hpp>

#include "attn/backends/kernels.hpp"
#include "attn/backends/microkernel.hpp"
#include "attn/core/parallel.hpp"
#include "attn/backends/instantiate.hpp"

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
  // o += p v over keys [first, first + used) of the `cols` keys load_v left
  // (p [rows, used]), o [rows, d_v]; `first` a whole number of panels (the
  // narrowed visits of both passes). The micro-kernel's panels of v hold
  // `cols` rows each, so a part of them is taken one panel at a time, as
  // tile_gemm_packed takes its panels (the same chain for each element).
  // All keys in one call: one call a panel measured 2.5% slower there (fp32,
  // d = 128, whole tiles; docs/performance.md, section 51).
  static void pv(const A* p, const A* v, A* o, std::size_t rows, std::size_t first, std::size_t used,
                 std::size_t cols, std::size_t d_v) {
    if constexpr (micro) {
      if (first == 0 && used == cols) return detail::tile_gemm_packed(p, cols, v, o, d_v, rows, d_v, cols, 1.0f, true);
      const std::size_t panel = attn::simd().panel;
      for (std::size_t c0 = 0; c0 < d_v; c0 += panel) {
        const std::size_t wide = std::min(panel, d_v - c0);
        detail::tile_gemm_packed(p, used, v + c0 * cols + first * wide, o + c0, d_v, rows, wide, used, 1.0f, true);
      }
    } else {
      detail::pv_tile<A>(p, v + first * d_v, o, rows, used, d_v, true);
    }
  }
  // The same with bf16 dot products (dot_bf16): P~'s pairs p [rows,
  // ceil(used / 2)], v as pack_values_bf16 left it (a panel's row: a pair of keys).
  static void pv_pairs(const std::uint32_t* p, const std::uint32_t* v, float* o, std::size_t rows, std::size_t first,
                       std::size_t used, std::size_t cols, std::size_t d_v) {
    const SimdKernels& k = attn::simd();
    const std::size_t up = (used + 1) / 2, kp = (cols + 1) / 2;
    if (first == 0 && used == cols) return k.gemm_bf16(p, up, v, o, d_v, rows, d_v, up, 1.0f, true);
    for (std::size_t c0 = 0; c0 < d_v; c0 += k.panel) {
      const std::size_t wide = std::min(k.panel, d_v - c0);
      k.gemm_bf16(p, up, v + c0 * kp + first / 2 * wide, o + c0, d_v, rows, wide, up, 1.0f, true);
    }
  }
  // o += p^T v: p [rows, cols] as it is, v as load_v left it (rows rows), o
  // [cols, d_v]. The micro-kernel reads p^T in place; the other tiles
  // multiply a transposed copy in buf (rows x cols).
  static void pv_t(const A* p, const A* v, A* o, std::size_t rows, std::size_t cols, std::size_t d_v, A* buf) {
    if constexpr (micro) {
      detail::tile_gemm_packed_at(p, cols, v, o, d_v, cols, d_v, rows, 1.0f, true);
    } else {
      detail::transpose(p, rows, cols, buf);
      detail::pv_tile<A>(buf, v, o, cols, rows, d_v, true);
    }
  }

  // bf16 storage with fp32 accumulation where the avx512bf16 variant is in
  // use (AVX512_BF16, chosen where its dot product pays: simd.hpp): the forward's Q K^T and P~ V as bf16 dot products
  // (simd.hpp's gemm_bf16) on Q, K and V as stored, P~ rounded to bf16 first
  // (as PyTorch's and FlashAttention's bf16 kernels do): no widening, twice
  // the products per instruction. Its arithmetic (Result::rounding) is in the
  // bounds (verify/metrics.hpp).
  static bool dot_bf16() {
    if constexpr (micro && std::is_same_v<S, bf16>) return attn::simd().gemm_bf16 != nullptr;
    else return false;
  }
  static constexpr KernelRounding dot_bf16_rounding{.u_weights = precision_traits<bf16>::unit_roundoff,
                                                    .flushes_subnormals = true};

  // A block of one query position (a decode step: its stacked heads' rows)
  // with fp32 accumulation of fp32, bf16 or fp16 storage reads K and V in
  // place (simd.hpp's decode kernels): no packing, each key read once; with
  // the bf16 dot products (dot_bf16), Q and P~ as pairs and K and V's rows
  // as stored (decode_scores_pairs, decode_pv_pairs): the same arithmetic.
  static constexpr bool decode_capable =
      micro && (std::is_same_v<S, float> || std::is_same_v<S, bf16> || std::is_same_v<S, fp16>);
  static void decode_scores(const A* q, std::size_t rows, const S* k, std::size_t cols, std::size_t d_k, A scale, A* s,
                            const S* v, std::size_t d_v) {
    if constexpr (std::is_same_v<S, float>) attn::simd().decode_scores_f32(q, rows, k, cols, d_k, scale, s, v, d_v);
    else if constexpr (std::is_same_v<S, bf16>) attn::simd().decode_scores_bf16(q, rows, k, cols, d_k, scale, s, v, d_v);
    else if constexpr (std::is_same_v<S, fp16>) attn::simd().decode_scores_fp16(q, rows, k, cols, d_k, scale, s, v, d_v);
  }
  // The same step in one pass (simd.hpp's decode_fused; null: the two passes above).
  static auto decode_fused() {
    if constexpr (std::is_same_v<S, float>) return attn::simd().decode_fused_f32;
    else if constexpr (std::is_same_v<S, bf16>) return attn::simd().decode_fused_bf16;
    else return attn::simd().decode_fused_fp16;
  }
  static void decode_pv(const A* p, std::size_t rows, const S* v, std::size_t cols, std::size_t d_v, A* o) {
    if constexpr (std::is_same_v<S, float>) attn::simd().decode_pv_f32(p, rows, v, cols, d_v, o);
    else if constexpr (std::is_same_v<S, bf16>) attn::simd().decode_pv_bf16(p, rows, v, cols, d_v, o);
    else if constexpr (std::is_same_v<S, fp16>) attn::simd().decode_pv_fp16(p, rows, v, cols, d_v, o);
  }
};

// How the forward's work is laid out.
//   Grouped heads: with fp32 accumulation (the micro-kernel) a query block
//   holds `positions` query positions of all g query heads of one K/V head
//   as R = g positions rows, row r = query i0 + r / g of head h0 + r % g (one
//   position's g rows adjacent, so the rows a mask leaves seeing a tile stay
//   contiguous): each K/V tile is loaded (and packed) once for its g heads,
//   and a decode step (n_q = 1) multiplies g rows at a time, not one. The
//   micro-kernel computes each row alone (one FMA chain per element), so
//   stacking changes no bit. Other accumulation types (OpenBLAS GEMMs, whose
//   order may depend on the row count, or loops) keep one head per block.
//   Split-KV (flash-decoding): the key tiles of a block in `splits` chunks,
//   each its own work item with its own partial (m, l, O / l); a second pass
//   merges a block's partials in split order (skipping empty ones).
//   Options::kv_splits, or (0) chosen from one sequence's own rows (its
//   heads' query rows in blocks of B_q rows, whether or not g heads share a
//   block): at least 16 such blocks' worth of work items per sequence while
//   each chunk keeps at least 4 key tiles. The key tiles any row of the sequence
//   may see (its own mask) are divided into chunks(), the same for each of
//   its blocks (a block does the part of a chunk its rows see): never from
//   the batch around it or the thread count, so a sequence's result is
//   bitwise the same alone or in any batch, on any number of threads
//   (attn-lab invariance; before, the count came from the whole batch's
//   blocks and from the threads beyond 16: a decode step's bits depended on
//   the batch size), and a row's chunks do not follow its block. The price:
//   a batch of many short decode steps splits as one sequence would, a few
//   more partials to merge (docs/performance.md, section 22). Counted in
//   rows, not stacked blocks, grouped heads and the same heads repeated
//   split alike (before, a grouped decode step split 2 or g times more than
//   the repeated heads' step: docs/performance.md, section 40).
struct Plan {
  std::size_t stack = 1, positions = 1, rows = 1;  // heads per block (g or 1); rows = stack positions
  std::size_t q_blocks = 1, splits = 1, blocks = 1, items = 1, workers = 1;  // splits: items per block
  bool explicit_splits = false;
  // The chunks of a sequence whose visible keys span `tiles` key tiles (the
  // items of split >= chunks() do nothing; a block's item whose chunk its
  // rows see none of does nothing either): an explicit count at most one
  // tile a chunk; the automatic one at least 4 tiles a chunk.
  std::size_t chunks(std::size_t tiles) const {
    return std::clamp<std::size_t>(std::min(splits, explicit_splits ? tiles : tiles / 4), 1, splits);
  }
};

template <class S, class A>
Plan plan(const Shape& s, const Options& opt, std::size_t block_q, std::size_t block_k) {
  Plan p;
  p.stack = Tiles<S, A>::micro ? s.group() : 1;
  p.positions = std::min(s.n_q, std::max<std::size_t>(1, block_q / p.stack));
  p.rows = p.stack * p.positions;
  p.q_blocks = (s.n_q + p.positions - 1) / p.positions;
  p.blocks = s.batch * (s.heads / p.stack) * p.q_blocks;
  const std::size_t b_c = std::min(block_k, s.n_kv), tiles = (s.n_kv + b_c - 1) / b_c;
  p.explicit_splits = opt.kv_splits > 0;
  if (opt.kv_splits) {
    p.splits = opt.kv_splits;
  } else {
    // the sequence's query rows in blocks of B_q rows, however its heads are
    // stacked: grouped heads and the same heads repeated split alike
    const std::size_t per_sequence = (s.heads * s.n_q + block_q - 1) / std::max<std::size_t>(1, block_q);
    p.splits = per_sequence >= 16 ? 1 : std::min((16 + per_sequence - 1) / per_sequence, std::max<std::size_t>(1, tiles / 4));
  }
  p.splits = std::clamp<std::size_t>(p.splits, 1, tiles);  // (a block's own chunks() are at most as many)
  p.items = p.blocks * p.splits;
  p.workers = std::max<std::size_t>(1, std::min(opt.threads, p.items));
  return p;
}

// The forward's own tiles (Streaming::block_q): a decode step's on the decode
// kernels where the variant has them; past a decode step the variant's dot
// tiles for bf16 on gemm_bf16, its micro tiles for fp32 accumulation on the
// micro-kernel; null where the variant's plain tiles hold.
template <class S, class A>
const SimdKernels::Tiling* own_tiles(const Shape& s) {
  if (s.n_q <= 1)
    return Tiles<S, A>::decode_capable && attn::simd().decode_tiles.block_k ? &attn::simd().decode_tiles : nullptr;
  if (Tiles<S, A>::dot_bf16()) return &attn::simd().dot_tiles;
  if (Tiles<S, A>::micro) return &attn::simd().micro_tiles;
  return nullptr;
}

// The rows of a strip: a block's rows are taken a strip at a time against
// each key tile, the strip's scores, softmax and P V in turn
// (docs/performance.md, sections 45 and 49), as many rows as keep a strip's
// scores (fp32; on the dot products with its P~ pairs) with the tile's
// packed K and V within the tiles' strip_bytes, a multiple of 32 (the AMX
// blocks' rows), at least 32. Without strip_bytes the block's rows: one strip.
template <class S, class A>
std::size_t strip_rows(const Shape& s, std::size_t rows, std::size_t b_c) {
  const SimdKernels::Tiling* own = own_tiles<S, A>(s);
  const std::size_t budget = own ? own->strip_bytes : 0;
  if (budget == 0 || b_c == 0) return rows;  // (no keys: nothing to divide by)
  const bool dot = Tiles<S, A>::dot_bf16();
  const std::size_t operand = dot ? sizeof(bf16) : sizeof(A);  // a packed element of K and V
  const std::size_t packed = b_c * (s.d_k + s.d_v) * operand, per_row = b_c * (sizeof(A) + (dot ? sizeof(bf16) : 0));
  const std::size_t fit = budget > packed ? (budget - packed) / per_row / 32 * 32 : 0;
  return std::min(rows, std::max<std::size_t>(32, fit));
}

// One worker's scratch (R rows of a block; the scores and P~ of a strip).
template <class S, class A>
std::size_t worker_bytes(const Shape& s, std::size_t rows, std::size_t b_c) {
  const std::size_t strip = strip_rows<S, A>(s, rows, b_c);
  return piece_bytes<A>(strip * b_c) + piece_bytes<A>(rows * s.d_v) + (is_native_float<A> ? 2 : 3) * piece_bytes<A>(rows) +
         piece_bytes<A>(rows > 1 && Tiles<S, A>::micro && s.group() > 1 ? rows * s.d_k : widen_count<A, S>(rows * s.d_k)) +
         piece_bytes<A>(Tiles<S, A>::k_count(b_c, s.d_k)) + piece_bytes<A>(Tiles<S, A>::v_count(b_c, s.d_v)) +
         (Tiles<S, A>::dot_bf16() ? piece_bytes<A>(strip * ((b_c + 1) / 2)) : 0);  // P~ as bf16 pairs
}

// The partials of split-KV: per item, its rows' O / l and (m, l).
template <class A>
std::size_t partial_bytes(const Shape& s, const Plan& p) {
  return p.splits > 1 ? piece_bytes<A>(p.items * p.rows * s.d_v) + 2 * piece_bytes<A>(p.items * p.rows) : 0;
}

template <class S, class A>
std::size_t streaming_bytes(const Shape& s, const Options& opt, std::size_t block_q, std::size_t block_k) {
  const Plan p = plan<S, A>(s, opt, block_q, block_k);
  return p.workers * worker_bytes<S, A>(s, p.rows, std::min(block_k, s.n_kv)) + partial_bytes<A>(s, p);
}

template <class A>
struct Scratch {
  A *S_ij, *O_i, *m_i, *l_i, *c_i, *q_buf, *k_buf, *v_buf;
  std::uint32_t* p_pairs;  // P~ rounded to bf16 pairs (Tiles::dot_bf16), else null
};

template <class S, class A>
Result<S> streaming_attention(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  // q: [B, H, n_q, d_k]  k: [B, H_kv, n_kv, d_k]  v: [B, H_kv, n_kv, d_v]  ->  o: [B, H, n_q, d_v]
  using namespace detail;
  using T = Tiles<S, A>;
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t block_q = Streaming::block_q(opt, own_tiles<S, A>(sh)), block_k = Streaming::block_k(opt, own_tiles<S, A>(sh));
  const std::size_t B_c = std::min(block_k, n_kv);
  const Plan p = plan<S, A>(sh, opt, block_q, block_k);
  const std::size_t R = p.rows, g = p.stack;  // g: heads stacked in a block
  const std::size_t strip = strip_rows<S, A>(sh, R, B_c);
  const std::size_t bytes = streaming_bytes<S, A>(sh, opt, block_q, block_k);
  check_workspace(Streaming::name, "a B_q x B_k tile per thread (and the split-KV partials)", bytes);
  Arena arena(ws, bytes);
  std::vector<Scratch<A>> scratch(p.workers);
  for (auto& w : scratch) {
    w.S_ij = arena.take<A>(strip * B_c);  // scores, then P~ of the current tile (a strip's rows of it)
    w.O_i = arena.take<A>(R * d_v);   // unnormalised output of the query block
    w.m_i = arena.take<A>(R);         // running row max
    w.l_i = arena.take<A>(R);         // running sum of exp(S - m_i)
    w.c_i = is_native_float<A> ? nullptr : arena.take<A>(R);  // O_i's power-of-two divisor (see `normalised`)
    w.q_buf = arena.take<A>(R > 1 && T::micro && sh.group() > 1 ? R * d_k : widen_count<A, S>(R * d_k));  // the block's rows of Q
    w.k_buf = arena.take<A>(T::k_count(B_c, d_k));
    w.v_buf = arena.take<A>(T::v_count(B_c, d_v));
    w.p_pairs = T::dot_bf16() ? reinterpret_cast<std::uint32_t*>(arena.take<A>(strip * ((B_c + 1) / 2))) : nullptr;
  }
  // split-KV partials of item x: O / l at part_o + x R d_v, m and l at part_m, part_l + x R
  A* part_o = p.splits > 1 ? arena.take<A>(p.items * R * d_v) : nullptr;
  A* part_m = p.splits > 1 ? arena.take<A>(p.items * R) : nullptr;
  A* part_l = p.splits > 1 ? arena.take<A>(p.items * R) : nullptr;

  Result<S> r = allocate_result<S>(Streaming::name, sh, opt, bytes, /*lse_always=*/opt.need_weights);
  // The bf16 dot products: Q, K and V as pairs of bf16 (q_buf, k_buf, v_buf
  // hold them as 32-bit words; each holds at least as many words as the
  // floats it holds otherwise), d_k / 2 pairs per row of Q and K.
  const bool dot16 = T::dot_bf16();
  const std::size_t dp = (d_k + 1) / 2;
  if (dot16) r.rounding = T::dot_bf16_rounding;
  auto words = [](A* p) { return reinterpret_cast<std::uint32_t*>(p); };

  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));
  const A zero = convert<A>(0.0), one = convert<A>(1.0), minus_inf = neg_infinity<A>();
  // Narrower accumulation types (bf16/fp16 storage accumulation) hold O_i
  // divided by a power of two c_i >= l_i: the unnormalised sum of P~ V can
  // exceed their range (n_kv max|V| > 65504 in fp16) where |O_i| / c_i <=
  // max|V| cannot, and scaling by powers of two rounds nothing (normalising
  // by l_i after every tile instead rounded O_i once per tile: 11x the
  // baseline's error in fp16 storage accumulation, measured by agreement_test).
  constexpr bool normalised = !is_native_float<A>;

  // A block: batch b, query heads [h0, h0 + g) reading K/V head hk, query
  // positions [i0, i0 + positions); the last blocks first, since under a
  // causal mask they see the most keys.
  struct Block {
    std::size_t b, h0, hk, i0, positions;
  };
  const std::size_t head_groups = sh.heads / g;
  auto block_of = [&](std::size_t x) {
    const std::size_t b = x / (head_groups * p.q_blocks), h0 = x / p.q_blocks % head_groups * g;
    const std::size_t i0 = (p.q_blocks - 1 - x % p.q_blocks) * p.positions;
    return Block{b, h0, h0 / sh.group(), i0, std::min(p.positions, n_q - i0)};
  };
  // Row r of a block: query position i0 + r / g of head h0 + r % g.
  auto head_of = [&](const Block& blk, std::size_t r_) { return blk.h0 + r_ % g; };
  auto query_of = [&](const Block& blk, std::size_t r_) { return blk.i0 + r_ / g; };

  // A decode step (one query position: every block holds one) reads K and V
  // in place (Tiles::decode_capable). Not a block of one position in a
  // longer query (B_q <= g, or block_q = 1): its rows are computed as the
  // rows of the same positions in a wider block are (the GQA invariance).
  auto decoding = [&] { return T::decode_capable && n_q == 1; };
  // The bf16 dot products' scores beyond a decode step stay unscaled in S_ij
  // (gemm_bf16 with alpha 1 stores whole tiles as they are: section 43 of
  // docs/performance.md) and the softmax scales them as it reads them, to
  // the same values: max_j fl(scale s_j) = fl(scale max_j s_j), rounding
  // being monotone, for scale > 0; P~ = exp(fl(scale s) - m)
  // (exp_pairs_bf16), the weights likewise; so the same bits as scaling
  // first. Not where apply() must see scaled scores (soft-cap, ALiBi, bias,
  // boolean masks).
  const bool raw_scores = dot16 && !decoding() && !mask.elementwise() && scale > zero && std::isfinite(convert<double>(scale));
  // A score of S_ij less m, as the softmax forms it (scaled first where raw_scores)
  auto shifted = [&](A s_, A m_) -> A { return raw_scores ? A(A(s_ * scale) - m_) : A(s_ - m_); };

  // The block's rows of Q in A: the input itself when it is one head's rows in A.
  auto load_q = [&](const Block& blk, A* q_buf) -> const A* {
    if (dot16) {  // rows of d_k bf16 values as dp pairs, 0 past d_k
      if constexpr (T::micro && std::is_same_v<S, bf16>)
        for (std::size_t r_ = 0; r_ < blk.positions * g; ++r_)
          bf16_as_pairs(&in.q(blk.b, head_of(blk, r_), query_of(blk, r_), 0), 1, d_k, words(q_buf) + r_ * dp);
      return q_buf;
    }
    if (g == 1) return as_accumulate(&in.q(blk.b, blk.h0, blk.i0, 0), blk.positions * d_k, q_buf);
    for (std::size_t r_ = 0; r_ < blk.positions * g; ++r_) {
      const S* src = &in.q(blk.b, head_of(blk, r_), query_of(blk, r_), 0);
      if constexpr (std::is_same_v<S, A>) std::copy_n(src, d_k, q_buf + r_ * d_k);
      else as_accumulate(src, d_k, q_buf + r_ * d_k);
    }
    return q_buf;
  };

  // Per sequence, the keys any of its rows may see: key tiles end at its
  // bounds (a sequence's padding is not read), and split-KV's chunks divide
  // the tiles over them.
  std::vector<MaskView::Range> sequence_keys(sh.batch);
  for (std::size_t b = 0; b < sh.batch; ++b) sequence_keys[b] = block_keys(mask, b, 0, n_q, n_kv);

  // Key tiles lie on one grid, [t B_k, (t + 1) B_k) of the keys within the
  // sequence's keys, whatever the block. A row that sees a tile whole takes
  // it whole; a row that sees only part of it (a causal mask's diagonal, a
  // window's edges) takes, in one visit, the keys it may see there widened
  // to whole steps of `narrow` keys (64, whole column panels) from the
  // tile's start: on a causal diagonal, rows take 64, 128, ... keys of the
  // tile, and the rows that take the same keys (64 positions) go together.
  // Only where a quarter of B_k holds at least 64 keys: 64-key steps gained
  // (AVX-512, B_k = 256), 16-key ones lost 0.88-1.05x (the AVX2 variant's
  // B_k = 96, forced on the same Xeon; docs/performance.md, section 29). At
  // B_k = 1024 (the avx512amx variant's) 64 keys took the causal forward
  // 8-12% faster than a quarter's 256 did (section 49); one visit of them,
  // with K and V packed once a tile for all runs, took it 4-7% faster in
  // fp32 and 16-17% in bf16 than a visit per 64 keys (section 51). So the keys a
  // row's online softmax visits follow from its own mask alone, never from
  // the block around it: B_q, and g heads stacked in a block (B_q / g
  // positions) against the same heads repeated (B_q positions), change no
  // bit (before, a block narrowed a tile for all its rows when one row saw
  // part of it, and began its tiles at its first visible key: GQA under a
  // window, or at B_q > B_k, was not bitwise; section 40).
  const std::size_t panel = std::max<std::size_t>(1, attn::simd().panel);
  const std::size_t narrow = B_c / 4 >= 64 ? std::max(panel, 64 / panel * panel) : B_c;
  // The keys [begin, end) of tile [t0, t0 + width) that position r_ of the block visits (empty: none).
  auto visit_of = [&](const Block& blk, std::size_t r_, std::size_t t0, std::size_t width) {
    const auto keys = mask.keys(blk.b, blk.i0 + r_);
    if (keys.size() == 0 || keys.begin >= t0 + width || keys.end <= t0) return MaskView::Range{0, 0};
    const std::size_t lo = std::max(keys.begin, t0) - t0, hi = std::min(keys.end, t0 + width) - t0;
    return MaskView::Range{t0 + lo / narrow * narrow, t0 + std::min(width, (hi + narrow - 1) / narrow * narrow)};
  };

  // For each key tile of [j_begin, j_end) some row sees: its scores (soft-cap,
  // ALiBi, mask applied) in S_ij, then visit(j0, cols, rows [first, last),
  // packed), for each run of rows that visit keys [j0, j0 + cols) of it.
  // Past a decode step the keys `packed` of the tile (every run's) are
  // packed once, K here and V by the visit (load_v), and a run takes its
  // keys' part of them: a whole number of column panels from their start.
  auto each_key_tile = [&](const Block& blk, const Scratch<A>& w, const A* Q_i, std::size_t j_begin, std::size_t j_end,
                           auto&& visit) {
    const A* K_j = nullptr;  // the tile's K as load_k left it (bf16 dot products: its pairs in k_buf)
    // Keys [j0, j0 + cols) for the positions pos of the block.
    auto tile = [&](std::size_t j0, std::size_t cols, RowSpan pos, MaskView::Range packed) {
      const RowSpan rs{pos.first * g, pos.last * g};
      if (decoding() && dot16) {  // K read in place as pairs (simd.hpp's decode_scores_pairs)
        if constexpr (T::micro && std::is_same_v<S, bf16>)
          attn::simd().decode_scores_pairs(reinterpret_cast<const std::uint32_t*>(Q_i) + rs.first * dp, rs.size(),
                                           &in.k(blk.b, blk.hk, j0, 0), cols, d_k, scale, w.S_ij,
                                           &in.v(blk.b, blk.hk, j0, 0), d_v);
      } else if (decoding()) {
        if constexpr (T::decode_capable)
          T::decode_scores(Q_i + rs.first * d_k, rs.size(), &in.k(blk.b, blk.hk, j0, 0), cols, d_k, scale,
                           w.S_ij, &in.v(blk.b, blk.hk, j0, 0), d_v);
      } else {
        // The rows a strip at a time, each its scores, softmax and P V in
        // turn (the strip's scores stay in cache). The run's keys start
        // `skip` keys into the tile's K, a whole number of its panels: skip
        // d_k values further (packed, or as stored), skip dp pairs with bf16 dot products.
        const std::size_t skip = j0 - packed.begin;
        for (std::size_t first = rs.first; first < rs.last; first += strip) {
          const RowSpan part{first, std::min(first + strip, rs.last)};
          if (dot16) {
            if constexpr (T::micro && std::is_same_v<S, bf16>)
              attn::simd().gemm_bf16(reinterpret_cast<const std::uint32_t*>(Q_i) + first * dp, dp,
                                     words(w.k_buf) + skip * dp, w.S_ij, cols, part.size(), cols, dp,
                                     raw_scores ? 1.0f : scale, false);
          } else {
            T::scores(Q_i + first * d_k, K_j + skip * d_k, w.S_ij, part.size(), cols, d_k, scale);
          }
          for (std::size_t r_ = part.first; r_ < part.last; ++r_)
            mask_row_if_partial(w.S_ij + (r_ - first) * cols, mask, blk.b, head_of(blk, r_), query_of(blk, r_), j0, cols);
          visit(j0, cols, part, packed);
        }
        return;
      }
      for (std::size_t r_ = rs.first; r_ < rs.last; ++r_)
        mask_row_if_partial(w.S_ij + (r_ - rs.first) * cols, mask, blk.b, head_of(blk, r_), query_of(blk, r_), j0, cols);
      visit(j0, cols, rs, packed);
    };
    if (j_begin >= j_end) return;  // (an item with no keys: its first tile would start before j_begin)
    const MaskView::Range seq = sequence_keys[blk.b];
    for (std::size_t g0 = j_begin / B_c * B_c; g0 < j_end; g0 += B_c) {
      const std::size_t t0 = std::max(g0, seq.begin), width = std::min(g0 + B_c, seq.end) - t0;
      // the keys any position visits, K's packed once for all
      MaskView::Range packed{t0 + width, t0};
      for (std::size_t r_ = 0; r_ < blk.positions; ++r_) {
        const MaskView::Range keys = visit_of(blk, r_, t0, width);
        if (keys.size() > 0) packed = {std::min(packed.begin, keys.begin), std::max(packed.end, keys.end)};
      }
      if (packed.size() == 0) continue;
      if (decoding()) {  // K read in place
      } else if (dot16) {
        if constexpr (T::micro && std::is_same_v<S, bf16>)
          attn::simd().pack_keys_bf16(&in.k(blk.b, blk.hk, packed.begin, 0), packed.size(), d_k, words(w.k_buf));
      } else {
        K_j = T::load_k(&in.k(blk.b, blk.hk, packed.begin, 0), packed.size(), d_k, w.k_buf);
      }
      // runs of adjacent positions that visit the same keys of the tile
      for (std::size_t first = 0, last = 0; first < blk.positions; first = last) {
        const MaskView::Range keys = visit_of(blk, first, t0, width);
        for (last = first + 1; last < blk.positions;) {
          const MaskView::Range next = visit_of(blk, last, t0, width);
          if (next.begin != keys.begin || next.end != keys.end) break;
          ++last;
        }
        if (keys.size() > 0) tile(keys.begin, keys.size(), {first, last}, packed);
      }
    }
  };

  // Item x: split x % splits of block x / splits.
  auto run_item = [&](std::size_t x, std::size_t worker) {
    const Scratch<A>& w = scratch[worker];
    const auto [S_ij, O_i, m_i, l_i, c_i, q_buf, k_buf, v_buf, p_pairs] = w;
    const Block blk = block_of(x / p.splits);
    const std::size_t split = x % p.splits, rows = blk.positions * g;
    const A* Q_i = load_q(blk, q_buf);
    // This split's chunk of the key tiles its sequence's rows may see
    // (the same chunks for every block of the sequence, so
    // that a row's chunks do not follow its block either), within the keys
    // [lo, hi) some query of the block may see.
    const auto [lo, hi] = block_keys(mask, blk.b, blk.i0, blk.positions, n_kv);
    const auto [s_lo, s_hi] = sequence_keys[blk.b];
    const std::size_t t_lo = s_lo / B_c, tiles = s_hi > s_lo ? (s_hi + B_c - 1) / B_c - t_lo : 0;
    const std::size_t chunks = p.chunks(tiles);
    const std::size_t j_begin = split < chunks ? std::max(lo, (t_lo + tiles * split / chunks) * B_c) : hi;
    const std::size_t j_end = split < chunks ? std::min(hi, (t_lo + tiles * (split + 1) / chunks) * B_c) : hi;
    // The sink starts each row (in the first split) as a key of score sink_h
    // and value 0: m_i = sink_h, l_i = 1 (without a sink, -inf and 0).
    for (std::size_t r_ = 0; r_ < rows; ++r_) {
      const A sink = split == 0 ? convert<A>(mask.sink(head_of(blk, r_))) : minus_inf;
      m_i[r_] = sink;
      l_i[r_] = sink > minus_inf ? one : zero;
    }
    if constexpr (normalised) std::fill(c_i, c_i + rows, one);
    std::fill(O_i, O_i + rows * d_v, zero);
    bool fused_done = false;  // the keys taken by the one-pass decode kernel

    // A decode step whose rows see every key of their chunk, nothing
    // elementwise, K and V widened (not the bf16 dot products): in one pass
    // a tile and at most 4 rows at a time (simd.hpp's decode_fused: each
    // row's operations whatever the rows beside it; docs/performance.md,
    // section 58), the first group of rows fetching the tile's K and V.
    if constexpr (T::decode_capable) {
      auto fused = T::decode_fused();
      const MaskView::Range keys = mask.keys(blk.b, blk.i0);
      const bool whole = blk.positions == 1 && keys.begin <= j_begin && keys.end >= j_end;
      if (decoding() && !dot16 && fused && !mask.elementwise() && whole) {
        for (std::size_t t0 = j_begin, t1; t0 < j_end; t0 = t1) {  // the key tiles' grid, as each_key_tile's
          t1 = std::min((t0 / B_c + 1) * B_c, j_end);
          for (std::size_t r0 = 0; r0 < rows; r0 += 4)
            fused(Q_i + r0 * d_k, std::min<std::size_t>(4, rows - r0), &in.k(blk.b, blk.hk, t0, 0),
                  &in.v(blk.b, blk.hk, t0, 0), t1 - t0, d_k, d_v, scale, m_i + r0, l_i + r0, O_i + r0 * d_v, r0 == 0);
        }
        fused_done = true;
      }
    }
    // the key tile whose V is loaded (V_j; dot16: its pairs in v_buf), once a tile for all its strips
    std::pair<std::size_t, std::size_t> packed_v{SIZE_MAX, 0};
    const A* V_j = nullptr;
    if (!fused_done)
    each_key_tile(blk, w, Q_i, j_begin, j_end, [&](std::size_t j0, std::size_t cols, RowSpan rs, MaskView::Range packed) {
      for (std::size_t r_ = rs.first; r_ < rs.last; ++r_) {
        A* s = S_ij + (r_ - rs.first) * cols;
        // m_new = max(m_i, rowmax(S_ij));  P~_ij = exp(S_ij - m_new)
        const A m_new = std::max(m_i[r_], raw_scores ? A(scale * row_max(s, cols)) : row_max(s, cols));
        if (!(m_new > minus_inf)) {  // every key so far masked: nothing to add (and no NaN)
          std::fill(s, s + cols, zero);
          if (dot16) std::fill_n(p_pairs + (r_ - rs.first) * ((cols + 1) / 2), (cols + 1) / 2, 0u);
          continue;
        }
        // (bf16 dot products: P~ rounded to bf16 pairs in the same pass, for gemm_bf16)
        A row_sum;
        if constexpr (T::micro && std::is_same_v<S, bf16>)
          row_sum = dot16 ? attn::simd().exp_pairs_bf16(s, cols, m_new, raw_scores ? scale : 1.0f,
                                                        p_pairs + (r_ - rs.first) * ((cols + 1) / 2))
                        : exp_shifted_sum(s, cols, m_new, /*simd=*/true);
        else
          row_sum = exp_shifted_sum(s, cols, m_new, /*simd=*/true);
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
      if (decoding() && dot16) {  // P~ as bf16 pairs, V read in place (simd.hpp's decode_pv_pairs)
        if constexpr (T::micro && std::is_same_v<S, bf16>)
          attn::simd().decode_pv_pairs(p_pairs, rs.size(), &in.v(blk.b, blk.hk, j0, 0),
                                       cols, d_v, O_i + rs.first * d_v);
      } else if (decoding()) {
        if constexpr (T::decode_capable)
          T::decode_pv(S_ij, rs.size(), &in.v(blk.b, blk.hk, j0, 0), cols, d_v, O_i + rs.first * d_v);
      } else if (dot16) {  // P~ as bf16 pairs (exp_pairs_bf16 above), bf16 dot products with V's pairs
        if constexpr (T::micro && std::is_same_v<S, bf16>) {
          const SimdKernels& v = attn::simd();
          if (packed_v != std::pair{packed.begin, packed.size()}) {  // once a tile, for all its strips and runs
            v.pack_values_bf16(&in.v(blk.b, blk.hk, packed.begin, 0), packed.size(), d_v, words(v_buf));
            packed_v = {packed.begin, packed.size()};
          }
          T::pv_pairs(p_pairs, words(v_buf), O_i + rs.first * d_v, rs.size(), j0 - packed.begin, cols, packed.size(),
                      d_v);
        }
      } else {
        if (packed_v != std::pair{packed.begin, packed.size()}) {
          V_j = T::load_v(&in.v(blk.b, blk.hk, packed.begin, 0), packed.size(), d_v, v_buf);
          packed_v = {packed.begin, packed.size()};
        }
        T::pv(S_ij, V_j, O_i + rs.first * d_v, rs.size(), j0 - packed.begin, cols, packed.size(), d_v);
      }
    });

    // O_i / l_i: into the output with lse_i = m_i + log l_i (one split), or
    // into the item's partial with (m_i, l_i). l_i is 0 only for a row that
    // saw no key (otherwise >= 1, or NaN from a non-finite input, which must
    // reach the output, not read as masked).
    for (std::size_t r_ = 0; r_ < rows; ++r_) {
      const bool masked = l_i[r_] == zero;
      auto normalise = [&](std::size_t c) {
        return masked       ? zero
               : normalised ? A(O_i[r_ * d_v + c] / A(l_i[r_] / c_i[r_]))
                            : A(O_i[r_ * d_v + c] / l_i[r_]);
      };
      if (p.splits > 1) {
        A* o = part_o + (x * R + r_) * d_v;
        for (std::size_t c = 0; c < d_v; ++c) o[c] = normalise(c);
        part_m[x * R + r_] = m_i[r_];
        part_l[x * R + r_] = l_i[r_];
        continue;
      }
      S* o = &r.out(blk.b, head_of(blk, r_), query_of(blk, r_), 0);
      for (std::size_t c = 0; c < d_v; ++c) o[c] = convert<S>(normalise(c));
      if (r.lse) (*r.lse)(blk.b, head_of(blk, r_), query_of(blk, r_)) = row_lse(RowSoftmax<A>{m_i[r_], l_i[r_], masked});
    }
  };
  parallel_for(p.items, p.workers, run_item);

  // Split-KV: a block's partials merged in split order, O = sum_s w_s O_s / l_s,
  // w_s = l_s exp(m_s - m) / L, m = max_s m_s, L = sum_s l_s exp(m_s - m)
  // (splits that saw no key skipped); lse = m + log L.
  if (p.splits > 1) {
    parallel_for(p.blocks, p.workers, [&](std::size_t blk_x, std::size_t) {
      const Block blk = block_of(blk_x);
      for (std::size_t r_ = 0; r_ < blk.positions * g; ++r_) {
        A m = minus_inf, L = zero;
        for (std::size_t s_ = 0; s_ < p.splits; ++s_) {
          const std::size_t x = (blk_x * p.splits + s_) * R + r_;
          if (part_l[x] != zero && part_m[x] > m) m = part_m[x];
        }
        for (std::size_t s_ = 0; s_ < p.splits; ++s_) {
          const std::size_t x = (blk_x * p.splits + s_) * R + r_;
          if (part_l[x] != zero) L += part_l[x] * exp_of<A>(A(part_m[x] - m));
        }
        const bool masked = L == zero;
        // w_s once a split, in part_m's place (its m_s is not read again):
        // computed for every column, its exp and division took 11% of a
        // 2048-key decode step (docs/performance.md, section 68)
        for (std::size_t s_ = 0; s_ < p.splits && !masked; ++s_) {
          const std::size_t x = (blk_x * p.splits + s_) * R + r_;
          if (part_l[x] != zero) part_m[x] = A(part_l[x] * exp_of<A>(A(part_m[x] - m)) / L);
        }
        S* o = &r.out(blk.b, head_of(blk, r_), query_of(blk, r_), 0);
        for (std::size_t c = 0; c < d_v; ++c) {
          A sum = zero;
          for (std::size_t s_ = 0; s_ < p.splits && !masked; ++s_) {
            const std::size_t x = (blk_x * p.splits + s_) * R + r_;
            if (part_l[x] != zero) sum += part_m[x] * part_o[x * d_v + c];
          }
          o[c] = convert<S>(sum);
        }
        if (r.lse) (*r.lse)(blk.b, head_of(blk, r_), query_of(blk, r_)) = row_lse(RowSoftmax<A>{m, L, masked});
      }
    });
  }

  // Weights, on request only: a second pass, P_ij = exp(S_ij - lse_i), lse_i in A.
  if (r.weights) {
    parallel_for(p.blocks, p.workers, [&](std::size_t blk_x, std::size_t worker) {
      const Scratch<A>& w = scratch[worker];
      const Block blk = block_of(blk_x);
      const std::size_t rows = blk.positions * g;
      for (std::size_t r_ = 0; r_ < rows; ++r_) {
        double* wt = &(*r.weights)(blk.b, head_of(blk, r_), query_of(blk, r_), 0);
        std::fill(wt, wt + n_kv, 0.0);
        w.m_i[r_] = convert<A>((*r.lse)(blk.b, head_of(blk, r_), query_of(blk, r_)));  // exact: computed in A
      }
      const auto [lo, hi] = block_keys(mask, blk.b, blk.i0, blk.positions, n_kv);
      each_key_tile(blk, w, load_q(blk, w.q_buf), lo, hi, [&](std::size_t j0, std::size_t cols, RowSpan rs, MaskView::Range) {
        for (std::size_t r_ = rs.first; r_ < rs.last; ++r_) {
          const A* s = w.S_ij + (r_ - rs.first) * cols;
          if (!(w.m_i[r_] > minus_inf)) continue;
          double* wt = &(*r.weights)(blk.b, head_of(blk, r_), query_of(blk, r_), j0);
          for (std::size_t c = 0; c < cols; ++c) wt[c] = convert<double>(exp_of<A>(shifted(s[c], w.m_i[r_])));
        }
      });
    });
  }

  if (!opt.need_lse) r.lse.reset();
  return r;
}

// --- The backward pass (FlashAttention-2, Dao 2023, algorithm 2) -----------
//
// Per (batch, K/V head), key blocks outer, the K/V head's g query heads and
// their query blocks inner:
//   for each key block K_j, V_j (B_k keys; packed once):
//     dK_j = dV_j = 0 (tile accumulators)
//     for each query head of the K/V head, each query block i whose rows see
//     any key of j (rows [first, last)):
//       S = scale Q_i K_j^T, soft-capped (keeping its derivative f), + ALiBi + mask
//       P = exp(S - lse_i)   (lse saved by the forward, the sink's term included)
//       dP = dO_i V_j^T;  D_i = dO_i . O_i;  dS = P o (dP - D_i);  dS' = dS o f
//       dV_j += P^T dO_i;  dK_j += dS'^T Q_i  (P, dS' read as their
//       transposes in place by the micro-kernel; other types transpose)
//       dQ_i += dS' K_j, in key block order (below)
//     dK_j = scale dK_j, dV_j -> storage
//   dQ = scale dQ -> storage;  d(sink_h) = -sum_i exp(sink_h - lse_i) D_i
// All five products run on the forward's tiles (the micro-kernel for fp32
// accumulation, with every B operand packed in its column panels), and P on
// its vectorised exp.
// Work items, as FlashAttention-2 divides the backward: a K/V head's key
// blocks in C chunks, dealt out back and forth (C = 2: blocks 0, 3, 4, 7, 8,
// ... and 1, 2, 5, 6, ...: under a causal mask, where block t has work for
// the query blocks from about t on, the chunks' work is even; dealt round
// robin, chunk 0's was 72 to chunk 1's 64 at 16 key blocks), C = T /
// gcd(B H_kv, T) for T threads (so that the B H_kv C items divide evenly among
// the workers; 1 when the heads already do), at most the head's key blocks.
// A chunk owns its blocks' dK_j and dV_j outright. dQ_i is shared by the
// head's chunks, and its sum keeps one order whatever the workers: key block
// t adds dS' K_t to dQ_i only when the blocks before it that visit query
// block i have (a turn per query block: the next visitor's index, which the
// adder passes on; blocks with nothing for it are passed over), so dQ_i =
// ((dS_0 K_0 + dS_1 K_1) + dS_2 K_2) + ..., the order of one worker walking
// the key blocks alone. The result is therefore bitwise independent
// of the thread count, of C and of scheduling. A head's chunks are handed out
// one after the other and C <= T, so when one waits for a turn, the chunk
// holding it is running (the earliest head in flight always progresses).
// The adds come last in a visit, after dV_j and dK_j, so that the wait is
// short: the two chunks of a head run in step, one visit apart.
// dQ accumulates in the output itself when the storage is the accumulation
// type, otherwise in a g n_q x d_k buffer in the accumulation type (the size
// of the gradient itself), one per head in flight (at most one per worker:
// a head in flight has a chunk running). D_i = dO_i . O_i is computed again for each query block
// a key tile visits (dot_lanes: 16 partial sums, a fixed order, so the same
// bits on every visit), into B_q values per worker: keeping it for the K/V
// head's g n_q rows, as FlashAttention-2 does, made the fp32 backward's extra
// heap grow with n (4 bytes a query row: 9% from n = 1024 to 16384 at d = 64,
// docs/performance.md section 25); recomputed, it costs n_q d_v multiply-adds
// per key tile, 1 / (5 B_k) of the backward's own 5 n_q B_k d (0.08% at
// B_k = 256; its time: docs/performance.md section 27).
// Q and dO of the K/V head's g query heads are read as the products need
// them once per K/V head a worker takes, before its key blocks: in place when
// stored in the accumulation type, else widened once (g n_q (d_k + d_v)
// values per worker);
// every product reads them from there, the packed B operands of dK and dV
// included (before, those were packed from storage again per key tile:
// fp16's backward ran at 0.95x fp32's, docs/performance.md section 25).
// bf16 storage where a variant with bf16 dot products is in use
// (Tiles::dot_bf16) forms all five products as bf16 dot products (exact
// products, fp32 sums, subnormals flushed): S = Q K^T and dP = dO V^T on Q,
// K, dO and V as stored; dV and dK transposed, dV_j^T += dO_i^T P and dK_j^T
// += Q_i^T dS (so P and dS are the B operands, packed as they are made, and
// dO_i and Q_i the A operands), and dQ_i += dS K_j, with P and dS rounded to
// bf16 first (as PyTorch's bf16 backward rounds them): Gradients::rounding
// says so and the gradients' bounds take it (verify/metrics.hpp). dV, dK
// and dQ accumulate in fp32 over the tiles; dS in fp32 is what d(bias)
// sums (docs/performance.md, section 47).

// The bf16 backward's P and dS as B operands (ceil(B_q/2) pair rows of B_k
// each) and dS as A (B_q rows of ceil(B_k/2) pairs), in words.
std::size_t backward_pair_words(std::size_t b_r, std::size_t b_c) {
  return 2 * ((b_r + 1) / 2) * b_c + b_r * ((b_c + 1) / 2);
}

template <class S, class A>
std::size_t backward_worker_bytes(const Shape& s, std::size_t b_r, std::size_t b_c) {
  using T = Tiles<S, A>;
  return 3 * piece_bytes<A>(b_r * b_c) + piece_bytes<A>(b_c * s.d_k) + piece_bytes<A>(b_c * s.d_v) +
         piece_bytes<A>(T::k_count(b_c, s.d_k)) + piece_bytes<A>(T::k_count(b_c, s.d_v)) +
         piece_bytes<A>(T::v_count(b_c, s.d_k)) + piece_bytes<A>(T::v_count(b_r, s.d_k)) +
         piece_bytes<A>(T::v_count(b_r, s.d_v)) + piece_bytes<A>(widen_count<A, S>(s.group() * s.n_q * s.d_k)) +
         piece_bytes<A>(widen_count<A, S>(s.group() * s.n_q * s.d_v)) + 2 * piece_bytes<A>(b_r) +
         piece_bytes<A>(widen_count<A, S>(s.group() * s.n_q * s.d_k)) +
         (T::dot_bf16() ? piece_bytes<A>(backward_pair_words(b_r, b_c)) : 0);
}

// C, the chunks of a K/V head's key blocks (B_k keys each): T / gcd(B H_kv, T)
// for T threads, at most the blocks.
std::size_t backward_chunks(const Shape& s, const Options& opt, std::size_t b_c) {
  const std::size_t heads = s.batch * s.kv_head_count(), threads = std::max<std::size_t>(1, opt.threads);
  const std::size_t blocks = (s.n_kv + b_c - 1) / b_c;
  return std::max<std::size_t>(1, std::min(threads / std::gcd(heads, threads), blocks));
}

std::size_t backward_workers(const Shape& s, const Options& opt, std::size_t b_c) {
  return std::max<std::size_t>(1, std::min(opt.threads, s.batch * s.kv_head_count() * backward_chunks(s, opt, b_c)));
}

template <class S, class A>
std::size_t streaming_backward_bytes(const Shape& s, const Options& opt, std::size_t block_q, std::size_t block_k) {
  const std::size_t b_r = std::min(block_q, s.n_q), b_c = std::min(block_k, s.n_kv);
  return backward_worker_bytes<S, A>(s, b_r, b_c) * backward_workers(s, opt, b_c);
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
  const std::size_t n_workers = backward_workers(sh, opt, B_c);
  const std::size_t n_chunks = backward_chunks(sh, opt, B_c);
  struct Scratch {
    A *P, *dS, *T_ij, *dK_j, *dV_j, *K_keys, *V_keys, *K_vals, *Q_vals, *dO_vals, *q_head, *do_head, *lse, *D, *dq_acc;
    std::uint32_t* pairs;  // the bf16 backward's P and dS as bf16 pairs (backward_pair_words), else null
  };
  Arena arena(ws, bytes);
  std::vector<Scratch> scratch(n_workers);
  for (auto& w : scratch) {
    w.P = arena.take<A>(B_r * B_c);      // P of the tile
    w.dS = arena.take<A>(B_r * B_c);     // dP, then dS
    w.T_ij = arena.take<A>(B_r * B_c);   // the soft-cap's slope; P^T, then dS^T (not the micro-kernel's)
    w.dK_j = arena.take<A>(B_c * d_k);
    w.dV_j = arena.take<A>(B_c * d_v);
    w.K_keys = arena.take<A>(T::k_count(B_c, d_k));  // K_j as the B of S = Q K^T
    w.V_keys = arena.take<A>(T::k_count(B_c, d_v));  // V_j as the B of dP = dO V^T
    w.K_vals = arena.take<A>(T::v_count(B_c, d_k));  // K_j as the B of dQ += dS K
    w.Q_vals = arena.take<A>(T::v_count(B_r, d_k));  // Q_i as the B of dK += dS^T Q
    w.dO_vals = arena.take<A>(T::v_count(B_r, d_v));  // dO_i as the B of dV += P^T dO
    // the K/V head's Q and dO widened (or as bf16 pairs: ceil(d / 2) words a row, no more than d floats)
    w.q_head = arena.take<A>(widen_count<A, S>(sh.group() * n_q * d_k));
    w.do_head = arena.take<A>(widen_count<A, S>(sh.group() * n_q * d_v));
    w.lse = arena.take<A>(B_r);
    w.D = arena.take<A>(B_r);  // D_i of the query block's rows
    w.dq_acc = arena.take<A>(widen_count<A, S>(sh.group() * n_q * d_k));  // a head's dQ, in slot `worker`
    w.pairs = T::dot_bf16() ? reinterpret_cast<std::uint32_t*>(arena.take<A>(backward_pair_words(B_r, B_c))) : nullptr;
  }
  Gradients<S> g = allocate_gradients<S>(sh, opt, bytes);
  if (T::dot_bf16()) g.rounding = T::dot_bf16_rounding;
  std::optional<xt::xtensor<double, 4>> ds_heads;  // dS of every head, summed over heads in order at the end
  if (opt.need_dbias) ds_heads = xt::xtensor<double, 4>(std::array<std::size_t, 4>{sh.batch, sh.heads, n_q, n_kv}, 0.0);
  std::optional<xt::xtensor<double, 2>> dsink_heads;  // d(sink) of each (batch, head), summed over batch in order at the end
  if (opt.sinks) dsink_heads = xt::xtensor<double, 2>(std::array<std::size_t, 2>{sh.batch, sh.heads}, 0.0);

  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh)), zero = convert<A>(0.0), one = convert<A>(1.0);
  const A minus_inf = neg_infinity<A>();

  const std::size_t g_heads = sh.group();
  const bool dot16 = T::dot_bf16();
  const std::size_t dp_k = (d_k + 1) / 2, dp_v = (d_v + 1) / 2;  // bf16 pairs a row
  auto words = [](A* p) { return reinterpret_cast<std::uint32_t*>(p); };
  const std::size_t panel = std::max<std::size_t>(1, attn::simd().panel);

  // The heads in flight, each in a slot: its dQ accumulator (scratch[slot].dq_acc,
  // when the storage is not the accumulation type) and its turns, one per query
  // block of its g query heads (the index of the key block whose add to that
  // block's dQ is next). A head's first chunk to begin takes a free slot, zeroes
  // dQ and sets the turns; its last to end writes dQ out and frees the slot.
  const std::size_t n_qb = (n_q + B_r - 1) / B_r;
  std::vector<std::atomic<std::uint32_t>> turns(n_workers * g_heads * n_qb);
  struct HeadState {
    std::atomic<std::uint32_t> started{0}, ready{0}, finished{0};
    std::size_t slot = 0;
  };
  std::vector<HeadState> heads(sh.batch * sh.kv_head_count());
  std::vector<std::size_t> free_slots(n_workers);
  std::iota(free_slots.begin(), free_slots.end(), std::size_t{0});
  std::mutex slots_mutex;
  std::vector<std::size_t> widened(n_workers, heads.size());  // the head whose Q and dO a worker's scratch holds
  std::atomic<bool> failed{false};
  // Waits (yielding the core) until done(); a worker that failed stops the others' waits.
  auto wait_until = [&](auto done) {
    while (!done()) {
      if (failed.load(std::memory_order_relaxed)) throw std::runtime_error("streaming backward: another worker failed");
      std::this_thread::yield();
    }
  };
  // Key block t's turn at one query block's dQ: after the blocks before it that visit the query block.
  // With one chunk a head (C = 1) its one worker adds in key block order anyway: no turns kept (kept there
  // too, the backward at B = 1, H = 8 on 2 threads was 2-4% slower in 3 of 4 alternated pairs, level
  // without them: docs/performance.md, section 54).
  const bool in_turn = n_chunks > 1;
  auto take_turn = [&](const std::atomic<std::uint32_t>& turn, std::size_t t) {
    if (!in_turn) return;
    wait_until([&] { return turn.load(std::memory_order_acquire) == t; });
  };

  // The first key block from t on (of the batch entry's visible keys [lo, hi), B_k at a time) with keys some
  // row of the query block at i0 sees (the block count, if none).
  auto next_visitor = [&](std::size_t b, MaskView::Range keys, std::size_t t, std::size_t i0) -> std::uint32_t {
    for (std::size_t j0 = keys.begin + t * B_c; j0 < keys.end; ++t, j0 += B_c)
      if (rows_seeing(mask, b, i0, std::min(B_r, n_q - i0), j0, std::min(B_c, keys.end - j0)).size() > 0) break;
    return static_cast<std::uint32_t>(t);
  };

  auto chunk_item = [&](std::size_t item, std::size_t worker) {
    const Scratch& w = scratch[worker];
    const std::size_t head = item / n_chunks, chunk = item % n_chunks;
    const std::size_t b = head / sh.kv_head_count(), hk = head % sh.kv_head_count();
    HeadState& hs = heads[head];
    // dQ of query head h0 + x at dq(x), once the head has its slot
    auto dq = [&](std::size_t x) -> A* {
      if constexpr (std::is_same_v<S, A>) return &g.dq(b, hk * g_heads + x, 0, 0);
      else return scratch[hs.slot].dq_acc + x * n_q * d_k;
    };
    // Keys [lo, hi) some query of this batch entry sees (as the forward's
    // tiles): the others' dK and dV are 0, and no tile spans them, so a
    // padded sequence's tiles are those of the same sequence alone.
    const MaskView::Range keys = block_keys(mask, b, 0, n_q, n_kv);
    const std::size_t lo = keys.begin, hi = keys.end;
    if (hs.started.fetch_add(1) == 0) {
      {
        const std::lock_guard lock(slots_mutex);
        if (free_slots.empty()) throw std::logic_error("streaming backward: more heads in flight than workers");
        hs.slot = free_slots.back();
        free_slots.pop_back();
      }
      for (std::size_t x = 0; x < g_heads; ++x) std::fill(dq(x), dq(x) + n_q * d_k, zero);
      for (std::size_t e = 0; in_turn && e < g_heads * n_qb; ++e)
        turns[hs.slot * g_heads * n_qb + e].store(next_visitor(b, keys, 0, e % n_qb * B_r), std::memory_order_relaxed);
      hs.ready.store(1, std::memory_order_release);
    } else {
      wait_until([&] { return hs.ready.load(std::memory_order_acquire) == 1; });
    }
    std::atomic<std::uint32_t>* const turn = &turns[hs.slot * g_heads * n_qb];
    // Q and dO of the g heads (adjacent in memory), row i of head h0 + x at
    // (x n_q + i) d (pairs: dp); as pairs or widened once per head a worker takes
    const S* q_src = &in.q(b, hk * g_heads, 0, 0);
    const S* do_src = &d_out(b, hk * g_heads, 0, 0);
    const A* Q_h = nullptr;
    const A* dO_h = nullptr;
    const bool fresh = widened[worker] != head;
    widened[worker] = head;
    if (dot16) {
      if constexpr (std::is_same_v<S, bf16>) {
        if (fresh) {
          bf16_as_pairs(q_src, g_heads * n_q, d_k, words(w.q_head));
          bf16_as_pairs(do_src, g_heads * n_q, d_v, words(w.do_head));
        }
      }
    } else if (fresh) {
      Q_h = as_accumulate(q_src, g_heads * n_q * d_k, w.q_head);
      dO_h = as_accumulate(do_src, g_heads * n_q * d_v, w.do_head);
    } else {  // as as_accumulate left them for this head
      if constexpr (std::is_same_v<S, A>) Q_h = q_src, dO_h = do_src;
      else Q_h = w.q_head, dO_h = w.do_head;
    }

    if (chunk == 0)
      for (std::size_t j = 0; j < n_kv; ++j)
        if (j < lo || j >= hi) {
          std::fill_n(&g.dk(b, hk, j, 0), d_k, convert<S>(0.0));
          std::fill_n(&g.dv(b, hk, j, 0), d_v, convert<S>(0.0));
        }
    // This chunk's key blocks t (keys j0 = lo + t B_k onwards): in round t / C, the (t % C)-th, counted from
    // the first chunk in even rounds and from the last in odd ones.
    auto owner = [&](std::size_t t) { return t / n_chunks % 2 == 0 ? t % n_chunks : n_chunks - 1 - t % n_chunks; };
    for (std::size_t t = 0, j0 = lo; j0 < hi; ++t, j0 += B_c) {
      if (owner(t) != chunk) continue;
      const std::size_t cols = std::min(B_c, hi - j0);
      const A* K_keys = nullptr;
      const A* V_keys = nullptr;
      if (dot16) {
        if constexpr (std::is_same_v<S, bf16>) {
          attn::simd().pack_keys_bf16(&in.k(b, hk, j0, 0), cols, d_k, words(w.K_keys));
          attn::simd().pack_keys_bf16(&in.v(b, hk, j0, 0), cols, d_v, words(w.V_keys));
        }
      } else {
        K_keys = T::load_k(&in.k(b, hk, j0, 0), cols, d_k, w.K_keys);
        V_keys = T::load_k(&in.v(b, hk, j0, 0), cols, d_v, w.V_keys);
      }
      // K_j as the B of dQ += dS K_j: packed as V is (bf16 pairs, ceil(cols/2) pair rows) or widened
      const A* K_vals = nullptr;
      if (dot16) {
        if constexpr (std::is_same_v<S, bf16>) attn::simd().pack_values_bf16(&in.k(b, hk, j0, 0), cols, d_k, words(w.K_vals));
      } else {
        K_vals = T::load_v(&in.k(b, hk, j0, 0), cols, d_k, w.K_vals);
      }
      std::fill(w.dK_j, w.dK_j + cols * d_k, zero);
      std::fill(w.dV_j, w.dV_j + cols * d_v, zero);

      for (std::size_t x = 0; x < g_heads; ++x) {
        const std::size_t h = hk * g_heads + x;
        for (std::size_t i0 = 0; i0 < n_q; i0 += B_r) {
          std::atomic<std::uint32_t>& dq_turn = turn[x * n_qb + i0 / B_r];
          // The rows of the query block that see any key of the tile.
          const RowSpan rs = rows_seeing(mask, b, i0, std::min(B_r, n_q - i0), j0, cols);
          if (rs.size() == 0) continue;  // (nothing to add: the turn passes over this block)
          const std::size_t r0 = i0 + rs.first, rows = rs.size();
          const std::size_t row = x * n_q + r0;  // of the head's Q and dO
          // The tile's keys these rows may see end before key j0 + used (whole
          // column panels): a causal diagonal's visits multiply only that part
          // (docs/performance.md, section 29); the keys past it are masked for
          // every row here (P = dS = 0: they added nothing).
          std::size_t used = 0;
          for (std::size_t r_ = r0; r_ < r0 + rows; ++r_) {
            const std::size_t end = mask.keys(b, r_).end;
            used = std::max(used, end > j0 ? std::min(cols, end - j0) : 0);
          }
          used = std::min(cols, (used + panel - 1) / panel * panel);

          // S = scale Q_i K_j^T (+ soft-cap, ALiBi, mask);  P = exp(S - lse_i), 0 on a fully masked row
          // dP = dO_i V_j^T
          if (dot16) {
            if constexpr (T::micro && std::is_same_v<S, bf16>) {
              const SimdKernels& v = attn::simd();
              v.gemm_bf16(words(w.q_head) + row * dp_k, dp_k, words(w.K_keys), w.P, used, rows, used, dp_k, scale, false);
              v.gemm_bf16(words(w.do_head) + row * dp_v, dp_v, words(w.V_keys), w.dS, used, rows, used, dp_v, one, false);
            }
          } else {
            T::scores(Q_h + row * d_k, K_keys, w.P, rows, used, d_k, scale);
            T::scores(dO_h + row * d_v, V_keys, w.dS, rows, used, d_v, one);
          }
          // D_i = dO_i . O_i of the rows (every visit the same dot, so the same bits)
          for (std::size_t r_ = 0; r_ < rows; ++r_)
            w.D[r_] = dot_lanes<A>(&d_out(b, h, r0 + r_, 0), &saved.out(b, h, r0 + r_, 0), d_v);
          for (std::size_t r_ = 0; r_ < rows; ++r_) {
            const std::size_t i = r0 + r_;
            A* p = w.P + r_ * used;
            A* ds = w.dS + r_ * used;
            // the soft-cap's derivative, in T_ij until the transposes need it
            if (mask.softcap()) softcap_slope(p, w.T_ij + r_ * used, used, *mask.softcap());
            mask_row_if_partial(p, mask, b, h, i, j0, used);
            const A lse = convert<A>(saved.lse(b, h, i));
            if (lse > minus_inf) exp_shifted_sum(p, used, lse, /*simd=*/true);
            else std::fill(p, p + used, zero);
            // dS = P o (dP - D_i)
            const A d_i = w.D[r_];
            for (std::size_t c = 0; c < used; ++c) ds[c] = p[c] * (ds[c] - d_i);
            if (ds_heads)
              for (std::size_t c = 0; c < used; ++c) (*ds_heads)(b, h, i, j0 + c) = convert<double>(ds[c]);
            if (mask.softcap())
              for (std::size_t c = 0; c < used; ++c) ds[c] *= w.T_ij[r_ * used + c];
          }
          if (dot16) {
            if constexpr (T::micro && std::is_same_v<S, bf16>) {
              // P and dS' rounded to bf16: as B (pair rows of `used` columns) and dS' as A, its rows
              // padded with zero pairs to the ceil(cols/2) pair rows of K_j's panels
              const SimdKernels& v = attn::simd();
              const std::size_t kp_r = (rows + 1) / 2, kp_c = (cols + 1) / 2, kp_u = (used + 1) / 2;
              std::uint32_t* P_b = w.pairs;
              std::uint32_t* dS_b = P_b + kp_r * used;
              std::uint32_t* dS_a = dS_b + kp_r * used;
              v.pack_values_rounded_bf16(w.P, rows, used, used, P_b);
              v.pack_values_rounded_bf16(w.dS, rows, used, used, dS_b);
              v.pairs_bf16(w.dS, rows, used, used, dS_a, kp_c);
              if (kp_u < kp_c)
                for (std::size_t r_ = 0; r_ < rows; ++r_) std::fill(dS_a + r_ * kp_c + kp_u, dS_a + (r_ + 1) * kp_c, 0u);
              // dO_i^T and Q_i^T as A, from storage
              v.pack_pairs_t_bf16(&d_out(b, h, r0, 0), rows, d_v, words(w.dO_vals));
              v.pack_pairs_t_bf16(&in.q(b, h, r0, 0), rows, d_k, words(w.Q_vals));
              // dV_j^T += dO_i^T P;  dK_j^T += Q_i^T dS';  dQ_i += dS' K_j in its turn
              v.gemm_bf16(words(w.dO_vals), kp_r, P_b, w.dV_j, cols, d_v, used, kp_r, 1.0f, true);
              v.gemm_bf16(words(w.Q_vals), kp_r, dS_b, w.dK_j, cols, d_k, used, kp_r, 1.0f, true);
              take_turn(dq_turn, t);
              v.gemm_bf16(dS_a, kp_c, words(w.K_vals), dq(x) + r0 * d_k, d_k, rows, d_k, kp_c, 1.0f, true);
              if (in_turn) dq_turn.store(next_visitor(b, keys, t + 1, i0), std::memory_order_release);
            }
            continue;
          }
          // dV_j += P^T dO_i;  dK_j += dS'^T Q_i. dO_i and Q_i as the B operand from the K/V head's copies in A
          // (narrow storage widened once per K/V head: the packing copies, converting nothing, and the
          // storage is not read again per key tile; the same values, so the same bits).
          using Wide = Tiles<A, A>;
          const A* dO_vals = Wide::load_v(dO_h + row * d_v, rows, d_v, w.dO_vals);
          const A* Q_vals = Wide::load_v(Q_h + row * d_k, rows, d_k, w.Q_vals);
          T::pv_t(w.P, dO_vals, w.dV_j, rows, used, d_v, w.T_ij);
          T::pv_t(w.dS, Q_vals, w.dK_j, rows, used, d_k, w.T_ij);
          // dQ_i += dS' K_j, in its turn
          take_turn(dq_turn, t);
          T::pv(w.dS, K_vals, dq(x) + r0 * d_k, rows, 0, used, cols, d_k);
          if (in_turn) dq_turn.store(next_visitor(b, keys, t + 1, i0), std::memory_order_release);
        }
      }
      S* dk = &g.dk(b, hk, j0, 0);
      S* dv = &g.dv(b, hk, j0, 0);
      if (dot16) {  // dK_j^T and dV_j^T [d, cols]
        for (std::size_t j = 0; j < cols; ++j) {
          for (std::size_t c = 0; c < d_k; ++c) dk[j * d_k + c] = convert<S>(A(scale * w.dK_j[c * cols + j]));
          for (std::size_t c = 0; c < d_v; ++c) dv[j * d_v + c] = convert<S>(w.dV_j[c * cols + j]);
        }
      } else {
        for (std::size_t x = 0; x < cols * d_k; ++x) dk[x] = convert<S>(A(scale * w.dK_j[x]));
        for (std::size_t x = 0; x < cols * d_v; ++x) dv[x] = convert<S>(w.dV_j[x]);
      }
    }
    // The head's last chunk to end: dQ to storage, the slot freed
    if (hs.finished.fetch_add(1, std::memory_order_acq_rel) + 1 == n_chunks) {
      for (std::size_t x = 0; x < g_heads; ++x) {
        S* dq_out = &g.dq(b, hk * g_heads + x, 0, 0);
        for (std::size_t e = 0; e < n_q * d_k; ++e) dq_out[e] = convert<S>(A(scale * dq(x)[e]));
      }
      const std::lock_guard lock(slots_mutex);
      free_slots.push_back(hs.slot);
    }
    if (chunk != 0) return;
    for (std::size_t x = 0; x < g_heads; ++x) {
      const std::size_t h = hk * g_heads + x;
      // d(sink_h) over this batch's rows: -sum_i exp(sink_h - lse_i) D_i
      const A sink = convert<A>(mask.sink(h));
      if (!dsink_heads || !(sink > minus_inf)) continue;
      A sum = zero;
      for (std::size_t i = 0; i < n_q; ++i) {
        const A lse = convert<A>(saved.lse(b, h, i));
        sum -= exp_of<A>(A(sink - lse)) * dot_lanes<A>(&d_out(b, h, i, 0), &saved.out(b, h, i, 0), d_v);
      }
      (*dsink_heads)(b, h) = convert<double>(sum);
    }
  };
  parallel_for(heads.size() * n_chunks, n_workers, [&](std::size_t item, std::size_t worker) {
    try {
      chunk_item(item, worker);
    } catch (...) {
      failed = true;
      throw;
    }
  });

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
  using A = accumulate_t<S, P>;
  return streaming_bytes<S, A>(s, opt, block_q(opt, own_tiles<S, A>(s)), block_k(opt, own_tiles<S, A>(s)));
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
