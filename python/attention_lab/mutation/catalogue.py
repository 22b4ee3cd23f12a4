"""The mutation catalogue of scripts/mutate: deliberate bugs in the real
backend sources (streaming, the slab kernel of math and blocked, the
micro-kernel, the shared tiles, masks and softmax), one entry per mutant.

Each entry replaces `find` (which must occur exactly `count` times in `file`;
`nth` picks one occurrence, 1-based) by `replace`. `equivalent` gives the
reason a mutant cannot change any result beyond rounding; such mutants are
still built and run (their survival is then expected), but do not count
against the score. Adding a mutant: one `Mutant(...)` line below;
`scripts/mutate --list` shows the catalogue, `scripts/mutate ID` runs one.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str  # relative to the repository root
    find: str
    replace: str
    what: str
    nth: int = 1           # which occurrence of `find` to replace
    count: int = 1         # how many occurrences the file must hold
    equivalent: str = ""   # why no result can change (beyond rounding), if so
    # the kernel variant whose lines it mutates, when the default choice may not run them: every stage
    # runs with ATTN_SIMD set to it, and where this CPU cannot execute it the mutant is "not run"
    simd: str = ""


# The invariances streaming documents as bitwise (docs/verification.md, the invariance matrix): scripts/mutate's
# check-invariance stage and simd_variants (under each forced variant) require them.
STREAMING_BITWISE = "run_to_run,threads,batch,gqa"

ST = "lib/attn/backends/streaming.cpp"
SLAB = "lib/attn/backends/slab_kernel.hpp"
MICRO = "lib/attn/backends/microkernel.cpp"
SIMD = "lib/attn/simd/variant.inc"
KCPP = "lib/attn/backends/kernels.cpp"
KHPP = "lib/attn/backends/kernels.hpp"
PROBLEM = "lib/attn/core/problem.cpp"
PROBLEM_HPP = "lib/attn/core/problem.hpp"
NAIVE = "lib/attn/backends/naive_kernel.hpp"

MUTANTS = [
    # streaming: the online-softmax recurrence
    Mutant("st-skip-o-rescale", ST, "for (std::size_t c = 0; c < d_v; ++c) O_i[r_ * d_v + c] *= alpha;", "",
           "O is not rescaled when the running max grows"),
    Mutant("st-narrow-step", ST, "for (std::size_t j0 = t0; j0 < t0 + width; j0 += narrow) {",
           "for (std::size_t j0 = t0; j0 < t0 + width; j0 += B_c) {",
           "rows that see a tile in part (a causal diagonal) take only its first narrow tile: its other keys are never seen"),
    Mutant("st-narrow-rows", ST, "rows_seeing(mask, blk.b, blk.i0 + first, last - first, j0, cols);",
           "rows_seeing(mask, blk.b, blk.i0 + first, last - first, j0 + cols, cols);",
           "a narrowed tile takes the rows that see the next one: rows whose last keys it holds skip them"),
    # section 40: a row's key tiles and split-KV chunks from its own mask and its sequence, not from its block
    Mutant("st-tiles-from-block", ST, "for (std::size_t g0 = j_begin / B_c * B_c; g0 < j_end; g0 += B_c) {",
           "for (std::size_t g0 = j_begin; g0 < j_end; g0 += B_c) {",
           "key tiles start at the block's first visible key, not on the grid: GQA under a window no longer bitwise"),
    Mutant("st-chunks-from-block", ST, "const auto [s_lo, s_hi] = sequence_keys[blk.b];",
           "const auto [s_lo, s_hi] = MaskView::Range{lo, hi};",
           "split-KV chunks divide the block's visible tiles, not its sequence's: a row's chunks follow its block"),
    Mutant("st-decode-by-block", ST, "auto decoding = [&] { return T::decode_capable && n_q == 1; };",
           "auto decoding = [&] { return T::decode_capable && p.positions == 1; };",
           "a block of one position in a longer query (B_q <= g) takes the decode kernels: GQA no longer bitwise"),
    Mutant("st-empty-split-visits", ST, "    if (j_begin >= j_end) return;  // (an item with no keys", "    // (",
           "a split with no keys visits the tile its empty range starts in: those keys counted twice"),
    Mutant("st-skip-l-rescale", ST, "l_i[r_] *= alpha;", "", "l is not rescaled when the running max grows"),
    Mutant("st-rescale-threshold", ST, "if (m_new > m_i[r_]) {", "if (m_new > m_i[r_] + A(0.5)) {",
           "max, O and l kept when the max grows by less than 0.5"),
    Mutant("st-max-not-updated", ST, "m_i[r_] = m_new;", "", "the running max is never stored"),
    Mutant("st-alpha-inverted", ST, "exp_of<A>(m_i[r_] - m_new)", "exp_of<A>(m_new - m_i[r_])",
           "rescale factor exp(m_new - m_old) instead of exp(m_old - m_new)"),
    Mutant("st-alpha-first-one", ST, "exp_of<A>(m_i[r_] - m_new) : zero", "exp_of<A>(m_i[r_] - m_new) : A(1)",
           "the first tile's rescale factor 1 instead of 0",
           equivalent="on the first visible tile l_i and O_i are still 0, so 1 * 0 = 0 * 0"),
    Mutant("st-l-overwritten", ST, "l_i[r_] += row_sum;", "l_i[r_] = row_sum;",
           "l holds only the last tile's sum"),
    Mutant("st-lse-wrong-row", ST, "RowSoftmax<A>{m_i[r_], l_i[r_], masked}", "RowSoftmax<A>{m_i[0], l_i[0], masked}",
           "the logsumexp of the block's first row for every row"),
    Mutant("st-ragged-key-tile-dropped", ST, "for (std::size_t g0 = j_begin / B_c * B_c; g0 < j_end; g0 += B_c) {",
           "for (std::size_t g0 = j_begin / B_c * B_c; g0 + B_c <= j_end; g0 += B_c) {",
           "the last, partial key tile is skipped"),
    Mutant("st-hull-edge", KHPP, "keys.begin < j0 + cols && keys.end > j0 &&", "keys.begin < j0 + cols && keys.end > j0 + 1 &&",
           "a row that sees only the first key of a tile is left out of the hull (streaming, forward and backward)"),
    Mutant("st-hull-last-row", KHPP, "hull.last = r + 1;", "hull.last = r;",
           "the hull ends one row early (streaming, forward and backward)"),
    Mutant("mask-partial-skip-edge", KHPP, "if (mask.elementwise() || keys.begin > j0 || keys.end < j0 + cols) mask_row",
           "if (mask.elementwise() || keys.begin > j0 || keys.end + 1 < j0 + cols) mask_row",
           "a tile or slab whose row sees all but its last key is not masked (every tiled backend, both passes)"),
    Mutant("st-hull-queries", ST, "T::scores(Q_i + rs.first * d_k,", "T::scores(Q_i,",
           "the scores of a hull that starts below row 0 use the block's first queries"),
    Mutant("st-o-not-reset", ST, "std::fill(O_i, O_i + rows * d_v, zero);", "",
           "a worker's O tile is reused across query blocks without reset"),
    Mutant("st-l-not-reset", ST, "      l_i[r_] = sink > minus_inf ? one : zero;\n", "",
           "a worker's l is reused across query blocks without reset"),
    Mutant("st-m-not-reset", ST, "      m_i[r_] = sink;\n", "",
           "a worker's running max is reused across query blocks without reset"),
    Mutant("st-scale-twice-fp32", ST, "s, cols, rows, cols, d_k, scale, false)", "s, cols, rows, cols, d_k, scale * scale, false)",
           "the scale applied twice in the fp32 (micro-kernel) path"),
    Mutant("st-scale-missing-other", ST, "detail::scores_tile<A>(q, k, s, rows, cols, d_k, scale);",
           "detail::scores_tile<A>(q, k, s, rows, cols, d_k, A(1));",
           "no scale in the fp64 / storage-accumulation path"),
    Mutant("st-l-narrowed", ST, "row_sum = exp_shifted_sum(s, cols, m_new, /*simd=*/true);",
           "row_sum = A(float(exp_shifted_sum(s, cols, m_new, /*simd=*/true)));",
           "the tile's row sum narrowed to float (a wrong accumulator in fp64)"),
    Mutant("st-v-tile-shift", ST, "T::load_v(&in.v(blk.b, blk.hk, j0, 0), cols, d_v, v_buf)",
           "T::load_v(&in.v(blk.b, blk.hk, j0 > 0 ? j0 - 1 : 0, 0), cols, d_v, v_buf)",
           "V tiles after the first start one key early"),
    # streaming: the variants and split-KV
    Mutant("st-split-merge-no-rescale", ST,
           "sum += A(part_l[x] * exp_of<A>(A(part_m[x] - m)) / L) * part_o[x * d_v + c];",
           "sum += A(part_l[x] / L) * part_o[x * d_v + c];",
           "split-KV partial outputs merged without exp(m_s - m): each weighted by its own l_s only"),
    Mutant("st-gqa-modulo", ST, "return Block{b, h0, h0 / sh.group(), i0, std::min(p.positions, n_q - i0)};",
           "return Block{b, h0, h0 % sh.kv_head_count(), i0, std::min(p.positions, n_q - i0)};",
           "query head h reads K/V head h % H_kv instead of h / g"),
    Mutant("st-sink-dropped", ST, "l_i[r_] = sink > minus_inf ? one : zero;", "l_i[r_] = zero;",
           "the sink's exp(sink - m) term left out of the softmax denominator"),
    Mutant("mask-softcap-after-mask", PROBLEM_HPP, "softcap_row(s + (lo - j0), hi - lo, *softcap_, simd)",
           "softcap_row(s, cols, *softcap_, simd)",
           "the soft-cap applied after the mask: masked keys' -inf become -c, visible (every backend)"),
    Mutant("st-weights-last-col", ST, "for (std::size_t c = 0; c < cols; ++c) wt[c] = convert<double>",
           "for (std::size_t c = 0; c + 1 < cols; ++c) wt[c] = convert<double>",
           "the rebuilt weights miss the last key of each tile"),
    Mutant("st-weights-unnormalised", ST, "w.m_i[r_] = convert<A>((*r.lse)(blk.b, head_of(blk, r_), query_of(blk, r_)));",
           "w.m_i[r_] = convert<A>((*r.lse)(blk.b, head_of(blk, r_), query_of(blk, r_))) - convert<A>(0.5);",
           "the rebuilt weights are shifted by less than the logsumexp (rows sum to e^0.5)"),
    # the slab kernel: math (one slab) and blocked (slabs of B_q rows)
    Mutant("slab-ragged-slab-dropped", SLAB, "for (std::size_t i0 = 0; i0 < n_q; i0 += b_q) {",
           "for (std::size_t i0 = 0; i0 + b_q <= n_q; i0 += b_q) {", "the last, partial slab of queries is skipped",
           count=2),
    Mutant("bwd-slab-ragged-slab-dropped", SLAB, "for (std::size_t i0 = 0; i0 < n_q; i0 += b_q) {",
           "for (std::size_t i0 = 0; i0 + b_q <= n_q; i0 += b_q) {",
           "the backward skips the last, partial slab of queries", nth=2, count=2),
    Mutant("slab-weights-offset", SLAB, "w[lo + c] =", "w[c] =", "weights written from key 0, not from the slab's first key"),
    Mutant("slab-weights-unnormalised", SLAB, "convert<double>(A(p_i[c] / row_l[r_]))", "convert<double>(A(p_i[c]))",
           "weights returned before division by the row sum"),
    Mutant("slab-l-wrong-row", SLAB, "convert<S>(A(o_slab[x] / row_l[r_]))", "convert<S>(A(o_slab[x] / row_l[0]))",
           "each output divided by the slab's first row sum"),
    Mutant("slab-k-offset", SLAB, "scores_tile<A>(q, k + lo * d_k,", "scores_tile<A>(q, k,",
           "scores use K from key 0 when the slab's keys start at lo", count=2),
    Mutant("slab-v-offset", SLAB, "pv_tile<A>(slab, v + lo * d_v,", "pv_tile<A>(slab, v,",
           "P V uses V from key 0 when the slab's keys start at lo"),
    Mutant("slab-unnormalised-always", SLAB, "constexpr bool unnormalised = is_native_float<A>;",
           "constexpr bool unnormalised = true;",
           "bf16/fp16 accumulation leaves P unnormalised (P~ V in the storage type)"),
    # the register-blocked micro-kernel (fp32 accumulation in streaming), one
    # source compiled per instruction set: the default variant here runs it
    Mutant("micro-k-short", SIMD, "for (std::size_t p = 0; p < k; ++p) {\n    fbatch bv[V];",
           "for (std::size_t p = 0; p + 1 < k; ++p) {\n    fbatch bv[V];", "the last term of each dot product is dropped"),
    Mutant("micro-ragged-rows", SIMD, "if (m == R) micro<R, V, AT>(a, lda", "if (m == R && R > 1) micro<R, V, AT>(a, lda",
           "a strip of one row left over by MR is skipped"),
    Mutant("micro-panel-edge", SIMD, "for (; j + W <= n; j += W) rows_of<1, MR1, AT>",
           "for (; j + W < n; j += W) rows_of<1, MR1, AT>",
           "a last full vector of columns goes to the scalar tail",
           equivalent="the scalar tail computes the same fma chain in the same order, then the same alpha and add"),
    Mutant("micro-tail-overwrites", SIMD, "accumulate ? c[i * ldc + jj] + dot * alpha : dot * alpha",
           "dot * alpha", "the scalar column tail ignores `accumulate` (P V overwrites O)"),
    Mutant("micro-accumulate-inverted", SIMD, "if (accumulate) r += fbatch::load_unaligned(ci);",
           "if (!accumulate) r += fbatch::load_unaligned(ci);", "vector blocks add C when they should overwrite it"),
    Mutant("micro-packed-edge-panel", SIMD, "if (full < n) gemm_rows<AT>(a, lda, bp + full * k, n - full,",
           "if (full + 1 < n) gemm_rows<AT>(a, lda, bp + full * k, n - full,",
           "a last panel of a single column (n = 1 mod the panel width) is never computed"),
    Mutant("micro-packed-last-row", SIMD, "rows_of<NV, MR, AT>(a, lda, bp + j * k, P, c + j, ldc, m, k, alpha, accumulate);",
           "rows_of<NV, MR, AT>(a, lda, bp + j * k, P, c + j, ldc, m - 1, k, alpha, accumulate);",
           "the panels-outer loop leaves each product's last row out of its full panels (a tile's last query row, "
           "a decode step's only row, keeps stale scores)"),
    Mutant("decode-hadd-w-lanes", SIMD, "_mm512_shuffle_ps(u, v, 0xDD)", "_mm512_shuffle_ps(v, u, 0xDD)",
           "the decode step's batched horizontal sums (AVX-512) add pairs of lanes of different dots: scores of "
           "other keys mixed in"),
    Mutant("decode-hadd-w-order", SIMD,
           "x(2 * k + 1), 0x44),\n                         _mm512_shuffle_f32x4(x(2 * k), x(2 * k + 1), 0xEE)",
           "x(2 * k + 1), 0x88),\n                         _mm512_shuffle_f32x4(x(2 * k), x(2 * k + 1), 0xDD)",
           "the decode step's batched horizontal sums (AVX-512) add quarters before halves: every sum is right "
           "within rounding but not hadd's bits, so a key summed in the network and the same key summed alone "
           "(a GQA group of 2 against its heads repeated, at a tile's last keys) differ"),
    Mutant("decode-hadd-w-avx2-lanes", SIMD, "_mm256_shuffle_ps(u, v, 0xDD)", "_mm256_shuffle_ps(v, u, 0xDD)",
           "the AVX2 variant's batched horizontal sums add pairs of lanes of different dots", simd="avx2"),
    Mutant("dot-lanes-fused", SIMD, "ATTN_UNFUSED(product);  // rounded before the sum, as in the scalar definition",
           "", "the vector dot_lanes (the backward's D_i) lets the compiler fuse product and sum into one FMA: right "
           "within rounding, but not the scalar definition's bits on a CPU with FMA"),
    Mutant("dot-lanes-tail-short", SIMD, "for (std::size_t k = 0; l + k < n; ++k) {\n    float product",
           "for (std::size_t k = 0; l + k + 1 < n; ++k) {\n    float product",
           "the vector dot_lanes drops the last term of a length not a multiple of 16: D_i = dO_i . O_i misses "
           "one product when d_v % 16 != 0"),
    Mutant("micro-pack-keys-short", SIMD, "for (std::size_t l = jj < jv ? lv : 0; l < d; ++l) panel[l * w + jj] = widen_one(row[l]);",
           "for (std::size_t l = jj < jv ? lv : 0; l + 1 < d; ++l) panel[l * w + jj] = widen_one(row[l]);",
           "packing K drops each key's last component outside the transposed blocks (d % W of them, or an edge key's)"),
    Mutant("micro-pack-keys-transpose", SIMD, "r[x].store_unaligned(panel + (l + x) * w + jj);",
           "r[x].store_unaligned(panel + (l + (x ^ 1)) * w + jj);",
           "the register transpose's rows of K^T stored in swapped pairs: components exchanged in blocks of W keys"),
    Mutant("micro-pack-values-short", SIMD, "for (; c < w; ++c) dst[c] = widen_one(row[c0 + c]);",
           "for (; c + 1 < w; ++c) dst[c] = widen_one(row[c0 + c]);",
           "packing V drops the last column of a panel whose width is not a multiple of W"),
    Mutant("micro-bf16-tail", SIMD, "for (; i < n; ++i) dst[i] = bf16_bits_to_float(h[i]);",
           "for (; i + 1 < n; ++i) dst[i] = bf16_bits_to_float(h[i]);", "widening bf16 drops the last value"),
    Mutant("micro-bf16-avx2-edge", SIMD, "for (; i + 8 <= n; i += 8) {\n    const __m128i x",
           "for (; i + 8 < n; i += 8) {\n    const __m128i x",
           "a last full group of 8 bf16 values is widened by the scalar tail",
           equivalent="the scalar tail widens bf16 exactly (a shift), as the vector loop does"),
    Mutant("micro-f16c-edge", SIMD, "for (; i + 8 <= n; i += 8)\n    _mm256_storeu_ps", "for (; i + 8 < n; i += 8)\n    _mm256_storeu_ps",
           "a last full group of 8 fp16 values is widened by the scalar tail",
           equivalent="the scalar tail converts fp16 to float exactly, as F16C does"),
    # the bf16 dot-product kernels (the avx512bf16 variant: streaming's bf16 forward and backward with fp32
    # accumulation where it is in use, by default only where its dot product pays, attn/simd/simd.hpp):
    # judged with ATTN_SIMD=avx512bf16, not run where the CPU lacks AVX512_BF16
    Mutant("bf16dot-first-pair", SIMD, "for (std::size_t p = 0; p < kp; ++p) {\n    __m512i bv[V];",
           "for (std::size_t p = 1; p < kp; ++p) {\n    __m512i bv[V];",
           "each bf16 dot product skips its first pair (Q K^T: two components of d; P V: two keys)", simd="avx512bf16"),
    Mutant("bf16dot-edge-mask", SIMD, "const __mmask16 mask = v + 1 < V ? __mmask16(0xFFFF) : last;",
           "const __mmask16 mask = last;", "the edge panel's column mask applied to every vector of it", simd="avx512bf16"),
    Mutant("bf16dot-odd-weight-dropped", SIMD, "(left >= 32 ? 32 : left + 1) / 2", "(left >= 32 ? 32 : left) / 2",
           "a tile's last weight is not stored when its column count is odd (its pair keeps the last tile's)", simd="avx512bf16"),
    Mutant("bf16dot-values-partner", SIMD, "2 * q + 1 < rows ? lo + d_v : nullptr", "2 * q + 2 < rows ? lo + d_v : nullptr",
           "the last key's value row is dropped from its pair when a tile's key count is even", simd="avx512bf16"),
    Mutant("bf16dot-transpose-lanes", SIMD, "t[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);",
           "t[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);", "the K transpose takes the wrong 128-bit lanes for pairs 8-11 of a block", simd="avx512bf16"),
    Mutant("bf16dot-weights-biased", SIMD,
           "_mm512_storeu_si512(out + j / 2, __m512i(_mm512_cvtne2ps_pbh(__m512(e1), __m512(e0))));",
           "_mm512_storeu_si512(out + j / 2, __m512i(_mm512_cvtne2ps_pbh(__m512(e1), "
           "_mm512_mul_ps(_mm512_set1_ps(1 - 0x1p-5f), __m512(e0)))));",
           "half the weights shrunk by 2^-5 before rounding to bf16: a bias of 8 units of bf16 rounding", simd="avx512bf16"),
    Mutant("bf16dot-exp-sum-half", SIMD, "    acc += e1;\n    _mm512_storeu_si512(out + j / 2,",
           "    _mm512_storeu_si512(out + j / 2,", "the row sum l leaves out every second 16 weights of a tile's row", simd="avx512bf16"),
    # ... and the decode step's (decode_scores_pairs, decode_pv_pairs: K and V read in place as pairs)
    Mutant("decode-pairs-odd-key", SIMD, "  if (cols % 2) pair_step(kp, true);\n", "",
           "a decode tile's last key is left out of P V when its key count is odd", simd="avx512bf16"),
    Mutant("decode-pairs-value-partner", SIMD, "_mm512_maskz_loadu_epi16(cm[x], a + d_v + 2 * W * x)",
           "_mm512_maskz_loadu_epi16(cm[x], a + 2 * W * x)",
           "each pair of keys takes its first key's value row for both", simd="avx512bf16"),
    Mutant("decode-pairs-lane-order", SIMD,
           "_mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23)",
           "_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)",
           "the interleaved accumulators put back with columns 4-7 and 8-11 of each 32 exchanged", simd="avx512bf16"),
    Mutant("decode-pairs-column-mask", SIMD, "cm[x] = left >= 2 * W ? ~__mmask32(0)", "cm[x] = left >= W ? ~__mmask32(0)",
           "a last column block of 16 to 31 columns read and written whole: past d_v into the next row", simd="avx512bf16"),
    Mutant("decode-pairs-query-rows", SIMD, "decode_scores_pairs_rows<4, W / 4>(q + r * dp, dp,",
           "decode_scores_pairs_rows<4, W / 4>(q, dp,", "every four rows of a decode step's scores take the first four's queries",
           simd="avx512bf16"),
    Mutant("decode-pairs-scores-tail", SIMD, "step(full, true);", "step(full, false);",
           "the last step over d unmasked: pairs past d_k of the next row of Q and the next key", simd="avx512bf16"),
    # the shared GEMM tiles (math, blocked, streaming outside fp32)
    Mutant("tile-pv-add-lost", KCPP, "add ? A(1) : A(0)", "A(0)", "P V tiles overwrite instead of accumulating",
           count=2),
    Mutant("bwd-tile-tn-add-lost", KCPP, "add ? A(1) : A(0)", "A(0)",
           "the transposed GEMM overwrites: dV and dK keep only the last slab's part", nth=2, count=2),
    Mutant("tile-scores-unscaled", KCPP, "false, true, alpha, A(0)", "false, true, A(1), A(0)",
           "GEMM scores without the scale"),
    # shared loops, masks and softmax (every backend, and the truth's mask semantics)
    Mutant("loops-dot-short", KHPP, "for (std::size_t l = 0; l < d; ++l) dot +=", "for (std::size_t l = 0; l + 1 < d; ++l) dot +=",
           "loop scores drop the last component (naive, reference, storage accumulation)"),
    Mutant("loops-pv-no-reset", KHPP, "if (!add) std::fill(o_r, o_r + d_v, zero);", "",
           "loop P V accumulates onto what the buffer held"),
    Mutant("mask-row-edge", PROBLEM_HPP, "hi = std::clamp(keys.end, lo, j0 + cols);",
           "hi = std::clamp(keys.end + 1, lo, j0 + cols);", "mask_row lets one key past the visible range through"),
    Mutant("block-keys-end", KHPP, "span.end = std::max(span.end, keys.end);", "span.end = std::max(span.end, keys.end - 1);",
           "the tiled backends' key range ends one key early"),
    Mutant("row-max-min", SIMD, "acc[u] = xsimd::select(x > acc[u], x, acc[u]);",
           "acc[u] = xsimd::select(x < acc[u], x, acc[u]);",
           "the lane-wise row max takes minima (a wrong shift: overflow at large logits)"),
    Mutant("row-max-chain-dropped", SIMD, "for (std::size_t u = 1; u < U; ++u) acc[0]",
           "for (std::size_t u = 1; u < 1; ++u) acc[0]",
           "the row max forgets three of its four chains (a shift below the largest score: exp overflows)"),
    Mutant("softmax-last-unnormalised", KHPP, "for (std::size_t j = 0; j < n; ++j) s[j] /= l;",
           "for (std::size_t j = 0; j + 1 < n; ++j) s[j] /= l;", "the last weight of a row is not divided by the sum"),
    Mutant("exp-simd-edge", SIMD, "for (; j + batch::size <= n; j += batch::size) {\n    const batch e",
           "for (; j + batch::size < n; j += batch::size) {\n    const batch e",
           "a last full vector of exps goes to the scalar tail"),
    # (marked equivalent until the 2026-12-03 run: std::exp and the vector exp agree within 1.5 ulp, but the
    # check-invariance stage killed it, GQA no longer bitwise equal to repeated K/V heads in fp32; the full run of
    # 2026-12-04 on the Intel Xeon found it surviving every stage, forced avx512bf16 too: unit_test's
    # VectorExp.AScoresExpDoesNotDependOnTheRowBeyondItsVector now holds the exp's path to the value's vector;
    # check-invariance stopped seeing it at b98acfa, the causal diagonal in narrow tiles: bisected on a Zen 4 EPYC)
    Mutant("lse-sign", KHPP, "A(r.m + log_of<A>(r.l))", "A(r.m - log_of<A>(r.l))", "logsumexp m - log l"),
    Mutant("causal-diagonal", PROBLEM, "r = {0, static_cast<std::size_t>(last + 1)};",
           "r = {0, static_cast<std::size_t>(last)};", "a causal query does not see its own key"),
    Mutant("window-short", PROBLEM, "static_cast<std::ptrdiff_t>(w->window) + 1;", "static_cast<std::ptrdiff_t>(w->window) + 2;",
           "a sliding window one key short"),
    Mutant("naive-window-k", NAIVE, "k + keys.begin * d_k,", "k,", "naive scores use K from key 0 under a window",
           count=2),
    # the backward pass: streaming (FlashAttention-2), the slab kernel (math, blocked), naive
    Mutant("bwd-st-d-omitted", ST, "for (std::size_t c = 0; c < used; ++c) ds[c] = p[c] * (ds[c] - d_i);",
           "for (std::size_t c = 0; c < used; ++c) ds[c] = p[c] * ds[c];", "streaming: D omitted (dS = P o dP)"),
    Mutant("bwd-slab-d-omitted", SLAB, "ds_i[c] = p_i[c] * (ds_i[c] - d_i);", "ds_i[c] = p_i[c] * ds_i[c];",
           "math/blocked: D omitted (dS = P o dP)"),
    Mutant("bwd-reference-d-double", NAIVE, "for (std::size_t j = 0; j < n_kv; ++j) d_i += p_i[j] * ds_i[j];",
           "for (std::size_t j = 0; j < n_kv; ++j) d_i = convert<A>(convert<S>(A(d_i + p_i[j] * ds_i[j])));",
           "the reference's D = sum_j P_ij dP_ij accumulated in its storage precision (double), not 50 digits"),
    Mutant("bwd-naive-d-storage", NAIVE, "if (saved_out) d_i = dot_loops<A>(d_o + i * d_v, &(*saved_out)(b, h, i, 0), d_v);",
           "if (saved_out)\n          for (std::size_t j = 0; j < n_kv; ++j) d_i = convert<A>(convert<S>(A(d_i + p_i[j] * ds_i[j])));",
           "naive: D from P o dP (n_kv terms) accumulated in the storage precision"),
    Mutant("bwd-st-d-storage", ST,
           "w.D[r_] = dot_lanes<A>(&d_out(b, h, r0 + r_, 0), &saved.out(b, h, r0 + r_, 0), d_v);",
           "w.D[r_] = convert<A>(convert<S>(dot_loops<S>(&d_out(b, h, r0 + r_, 0), &saved.out(b, h, r0 + r_, 0), d_v)));",
           "streaming: D = dO . O (d_v terms) accumulated in the storage precision"),
    Mutant("bwd-st-p-unnormalised", ST, "if (lse > minus_inf) exp_shifted_sum(p, used, lse, /*simd=*/true);",
           "if (lse > minus_inf) exp_shifted_sum(p, used, row_max(p, used), /*simd=*/true);",
           "streaming: P recomputed unnormalised, exp(S - tile max) instead of exp(S - lse)"),
    Mutant("bwd-slab-p-unnormalised", SLAB, "const RowSoftmax<A> row = softmax_row(p_i, cols, /*simd=*/true, sink);",
           "const RowSoftmax<A> row = softmax_row(p_i, cols, /*simd=*/true, sink);\n"
           "            for (std::size_t c = 0; c < cols; ++c) p_i[c] *= row.l;",
           "math/blocked: P recomputed without dividing by the row sum"),
    Mutant("bwd-st-lse-wrong-row", ST, "const A lse = convert<A>(saved.lse(b, h, i));",
           "const A lse = convert<A>(saved.lse(b, h, r0));", "streaming: every row of a tile uses its first row's lse",
           count=2),
    Mutant("bwd-st-dq-unscaled", ST, "dq_out[e] = convert<S>(A(scale * dq(x)[e]));", "dq_out[e] = convert<S>(dq(x)[e]);",
           "streaming: scale missing from dQ"),
    Mutant("bwd-st-dk-unscaled", ST, "dk[x] = convert<S>(A(scale * w.dK_j[x]));", "dk[x] = convert<S>(w.dK_j[x]);",
           "streaming: scale missing from dK"),
    Mutant("bwd-slab-dk-unscaled", SLAB, "dk[x] = convert<S>(A(scale * dk_acc[x]));", "dk[x] = convert<S>(dk_acc[x]);",
           "math/blocked: scale missing from dK"),
    Mutant("bwd-bf16dot-dp-scaled", ST, "dp_v, words(w.V_keys), w.dS, used, rows, used, dp_v, one, false);",
           "dp_v, words(w.V_keys), w.dS, used, rows, used, dp_v, scale, false);",
           "streaming's bf16 dot-product backward: dP = dO V^T scaled like the scores", simd="avx512bf16"),
    Mutant("bwd-bf16dot-head-row", ST, "const std::size_t row = x * n_q + r0;  // of the head's Q and dO",
           "const std::size_t row = r0;  // of the head's Q and dO",
           "streaming's backward: every query head of a K/V head reads the first head's Q and dO (GQA)"),
    Mutant("bf16-pairs-pad-kept", KHPP, "    out[r * dp + dp - 1] = 0;\n", "",
           "an odd-width row's pad half is not cleared: the last pair's upper half keeps what the buffer held",
           simd="avx512bf16"),  # the pairs feed the bf16 dot products only: survived where they are passed over
    # issue 39's invariances: a split count from the batch or the threads, an order from the worker, tiles over padding
    Mutant("st-split-from-batch", ST,
           "const std::size_t per_sequence = (s.heads * s.n_q + block_q - 1) / std::max<std::size_t>(1, block_q);",
           "const std::size_t per_sequence = p.blocks;",
           "streaming's automatic split-KV count from the whole batch's blocks (a decode step's bits follow the batch size)"),
    Mutant("st-split-from-threads", ST,
           "const std::size_t per_sequence = (s.heads * s.n_q + block_q - 1) / std::max<std::size_t>(1, block_q);",
           "const std::size_t per_sequence = (s.heads * s.n_q + block_q - 1) / std::max<std::size_t>(1, block_q) * opt.threads;",
           "streaming's automatic split-KV count from the thread count (the bits follow the threads)"),
    Mutant("st-exp-by-worker", ST, "          row_sum = exp_shifted_sum(s, cols, m_new, /*simd=*/true);",
           "          row_sum = exp_shifted_sum(s, cols, m_new, /*simd=*/worker % 2 == 0);",
           "odd workers take the scalar exp: a block's bits follow the worker that ran it (the thread count)"),
    Mutant("bwd-st-keys-whole-batch", ST, "const auto [lo, hi] = block_keys(mask, b, 0, n_q, n_kv);",
           "const std::size_t lo = 0, hi = n_kv;",
           "the backward's key tiles span every key, padding included (a padded sequence's tiles differ from its own)"),
    Mutant("bwd-st-vals-first-head", ST, ": Wide::load_v(Q_h + row * d_k, rows, d_k, w.Q_vals);",
           ": Wide::load_v(Q_h + r0 * d_k, rows, d_k, w.Q_vals);",
           "dK += dS^T Q packs the first query head's rows of Q for every head of a GQA group (the widened copy's "
           "row index without the head)"),
    Mutant("bwd-st-untransposed", ST, "detail::transpose(p, rows, cols, buf);", "std::copy(p, p + rows * cols, buf);",
           "streaming outside fp32 accumulation: P and dS used untransposed for dV and dK"),
    Mutant("micro-at-neighbour", SIMD, "const fbatch ai(AT ? a[p * lda + i] : a[i * lda + p]);",
           "const fbatch ai(AT ? a[p * lda + (i ^ 1)] : a[i * lda + p]);",
           "the transposed-A micro-kernel (the backward's P^T dO, dS^T Q) swaps rows in pairs: dV and dK rows mixed"),
    Mutant("bwd-st-used-short", ST, "used = std::max(used, end > j0 ? std::min(cols, end - j0) : 0);",
           "used = std::max(used, end > j0 + 1 ? std::min(cols, end - j0 - 1) : 0);",
           "streaming's backward: a visit's keys end one before its rows' last visible key (lost where that key "
           "opens a column panel)"),
    Mutant("bwd-st-dq-panel-stride", ST, "v + c0 * cols, o + c0, d_v, rows, std::min(panel, d_v - c0), used, 1.0f, true);",
           "v + c0 * used, o + c0, d_v, rows, std::min(panel, d_v - c0), used, 1.0f, true);",
           "streaming's backward: dQ's narrowed product reads K's later panels at the narrowed width's stride"),
    Mutant("bwd-st-causal-off-by-one", ST, "mask_row_if_partial(p, mask, b, h, i, j0, used);",
           "mask_row_if_partial(p, mask, b, h, i, j0 + 1, used);",
           "streaming: the recomputed tile masked one key off"),
    Mutant("bwd-st-dq-storage", ST, "T::pv_prefix(w.dS, K_vals, dq(x) + r0 * d_k, rows, used, cols, d_k);",
           "T::pv_prefix(w.dS, K_vals, dq(x) + r0 * d_k, rows, used, cols, d_k);\n"
           "          for (std::size_t e = r0 * d_k; e < (r0 + rows) * d_k; ++e) dq(x)[e] = convert<A>(convert<S>(dq(x)[e]));",
           "streaming: dQ accumulated in the storage precision (rounded after every key tile)"),
    Mutant("bwd-slab-dv-offset", SLAB, "gemm_tn<A>(probs, d_o, dv_acc + lo * d_v,", "gemm_tn<A>(probs, d_o, dv_acc,",
           "math/blocked: dV of a slab added from key 0, not from the slab's first key"),
    # Verdicts at the edges: scale from d_v, lse of fully masked and sink rows, the ragged last query block,
    # GQA head mapping in the slab kernel and the backward, workers sharing scratch, an empty split in the
    # merge, O and l kept in the storage precision per tile.
    Mutant("scale-from-dv", PROBLEM, "1.0 / std::sqrt(static_cast<double>(s.d_k))",
           "1.0 / std::sqrt(static_cast<double>(s.d_v))", "the default scale 1/sqrt(d_v) instead of 1/sqrt(d_k) (every backend)"),
    Mutant("lse-masked-zero", KHPP, "r.fully_masked ? -std::numeric_limits<double>::infinity()", "r.fully_masked ? 0.0",
           "a fully masked row's logsumexp 0 instead of -inf (every tiled backend)"),
    Mutant("slab-sink-row-masked", SLAB, "row.fully_masked = !(row.m > minus_inf);",
           "row.fully_masked = !(row_max(p_i, cols) > minus_inf);",
           "math/blocked: a row that sees no key but has a sink reads as fully masked (lse -inf, not the sink)"),
    Mutant("st-merge-lse-first-split", ST, "RowSoftmax<A>{m, L, masked}",
           "RowSoftmax<A>{part_m[blk_x * p.splits * R + r_], L, masked}",
           "split-KV: the merged logsumexp uses the first split's max instead of the largest"),
    Mutant("st-merge-empty-split", ST, "if (part_l[x] != zero) L += part_l[x]", "L += part_l[x]",
           "split-KV: splits that saw no key join the merge's sum (a row no split sees: exp(-inf + inf) = NaN)"),
    Mutant("st-ragged-query-block", ST, "p.q_blocks = (s.n_q + p.positions - 1) / p.positions;",
           "p.q_blocks = s.n_q / p.positions;", "the last, partial block of query positions is skipped"),
    Mutant("st-workers-share-scratch", ST, "const Scratch<A>& w = scratch[worker];", "const Scratch<A>& w = scratch[0];",
           "every forward worker uses worker 0's scratch (a data race with threads > 1)", count=2),
    Mutant("bwd-st-workers-share-scratch", ST, "const Scratch& w = scratch[worker];", "const Scratch& w = scratch[0];",
           "every backward worker uses worker 0's scratch (a data race with threads > 1)"),
    Mutant("st-o-storage-per-tile", ST, "    // O_i += P~_ij V_j\n",
           "      for (std::size_t k = 0; k < rows * d_v; ++k) O_i[k] = convert<A>(convert<S>(O_i[k]));\n",
           "O rounded to the storage precision before each tile is added (bf16/fp16 storage, fp32 accumulation)"),
    Mutant("st-l-storage-per-tile", ST, "        l_i[r_] += row_sum;", "        l_i[r_] = convert<A>(convert<S>(A(l_i[r_] + row_sum)));",
           "l (hence the logsumexp) rounded to the storage precision after each tile"),
    Mutant("slab-gqa-k-modulo", SLAB, "&in.k(b, h / sh.group(), 0, 0)", "&in.k(b, h % sh.kv_head_count(), 0, 0)",
           "math/blocked forward: query head h reads K of head h % H_kv instead of h / g"),
    Mutant("bwd-slab-gqa-modulo", SLAB, "const std::size_t hk = h / sh.group();", "const std::size_t hk = h % sh.kv_head_count();",
           "math/blocked backward: query head h reads K/V head h % H_kv instead of h / g"),
    Mutant("bwd-st-gqa-interleaved", ST, "const std::size_t h = hk * g_heads + x;",
           "const std::size_t h = x * sh.kv_head_count() + hk;",
           "streaming backward: the g query heads of K/V head hk taken as hk, hk + H_kv, ... (interleaved)", count=2),
]
