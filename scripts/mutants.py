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


ST = "lib/attn/backends/streaming.cpp"
SLAB = "lib/attn/backends/slab_kernel.hpp"
MICRO = "lib/attn/backends/microkernel.cpp"
SIMD = "lib/attn/simd/variant.inc"
KCPP = "lib/attn/backends/kernels.cpp"
KHPP = "lib/attn/backends/kernels.hpp"
PROBLEM = "lib/attn/problem.cpp"
PROBLEM_HPP = "lib/attn/problem.hpp"
NAIVE = "lib/attn/backends/naive_kernel.hpp"

MUTANTS = [
    # streaming: the online-softmax recurrence
    Mutant("st-skip-o-rescale", ST, "for (std::size_t c = 0; c < d_v; ++c) O_i[r_ * d_v + c] *= alpha;", "",
           "O is not rescaled when the running max grows"),
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
    Mutant("st-ragged-key-tile-dropped", ST, "for (std::size_t j0 = j_begin; j0 < j_end; j0 += B_c) {",
           "for (std::size_t j0 = j_begin; j0 + B_c <= j_end; j0 += B_c) {", "the last, partial key tile is skipped"),
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
    Mutant("st-l-narrowed", ST, "const A row_sum = exp_shifted_sum(s, cols, m_new, /*simd=*/true);",
           "const A row_sum = A(float(exp_shifted_sum(s, cols, m_new, /*simd=*/true)));",
           "the tile's row sum narrowed to float (a wrong accumulator in fp64)"),
    Mutant("st-v-tile-shift", ST, "T::load_v(&in.v(blk.b, blk.hk, j0, 0), cols, d_v, v_buf)",
           "T::load_v(&in.v(blk.b, blk.hk, j0 > 0 ? j0 - 1 : 0, 0), cols, d_v, v_buf)",
           "V tiles after the first start one key early"),
    # streaming: the variants and split-KV (issue 19)
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
    Mutant("micro-ragged-rows", SIMD, "if (m == R) micro<R, V>(a, lda", "if (m == R && R > 1) micro<R, V>(a, lda",
           "a strip of one row left over by MR is skipped"),
    Mutant("micro-panel-edge", SIMD, "for (; j + W <= n; j += W) rows_of<1, MR1>", "for (; j + W < n; j += W) rows_of<1, MR1>",
           "a last full vector of columns goes to the scalar tail",
           equivalent="the scalar tail computes the same fma chain in the same order, then the same alpha and add"),
    Mutant("micro-tail-overwrites", SIMD, "accumulate ? c[i * ldc + jj] + dot * alpha : dot * alpha",
           "dot * alpha", "the scalar column tail ignores `accumulate` (P V overwrites O)"),
    Mutant("micro-accumulate-inverted", SIMD, "if (accumulate) r += fbatch::load_unaligned(ci);",
           "if (!accumulate) r += fbatch::load_unaligned(ci);", "vector blocks add C when they should overwrite it"),
    Mutant("micro-packed-edge-panel", SIMD, "if (full < n) tile_gemm(a, lda, bp + full * k, n - full,",
           "if (full + 1 < n) tile_gemm(a, lda, bp + full * k, n - full,",
           "a last panel of a single column (n = 1 mod the panel width) is never computed"),
    Mutant("micro-pack-keys-short", MICRO, "for (std::size_t l = 0; l < len; ++l) panel[(l0 + l) * w + jj] = row[l];",
           "for (std::size_t l = 0; l + 1 < len; ++l) panel[(l0 + l) * w + jj] = row[l];",
           "packing K drops each key's last component"),
    Mutant("micro-pack-values-short", MICRO, "std::copy(row + (c0 - l0), row + (c0 - l0) + w,",
           "std::copy(row + (c0 - l0), row + (c0 - l0) + w - 1,", "packing V drops the last column of every panel"),
    Mutant("micro-bf16-tail", SIMD, "for (; i < n; ++i) dst[i] = bf16_bits_to_float(h[i]);",
           "for (; i + 1 < n; ++i) dst[i] = bf16_bits_to_float(h[i]);", "widening bf16 drops the last value"),
    Mutant("micro-bf16-avx2-edge", SIMD, "for (; i + 8 <= n; i += 8) {\n    const __m128i x",
           "for (; i + 8 < n; i += 8) {\n    const __m128i x",
           "a last full group of 8 bf16 values is widened by the scalar tail",
           equivalent="the scalar tail widens bf16 exactly (a shift), as the vector loop does"),
    Mutant("micro-f16c-edge", SIMD, "for (; i + 8 <= n; i += 8)\n    _mm256_storeu_ps", "for (; i + 8 < n; i += 8)\n    _mm256_storeu_ps",
           "a last full group of 8 fp16 values is widened by the scalar tail",
           equivalent="the scalar tail converts fp16 to float exactly, as F16C does"),
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
    Mutant("row-max-min", SIMD, "acc = xsimd::select(x > acc, x, acc);", "acc = xsimd::select(x < acc, x, acc);",
           "the lane-wise row max takes minima (a wrong shift: overflow at large logits)"),
    Mutant("softmax-last-unnormalised", KHPP, "for (std::size_t j = 0; j < n; ++j) s[j] /= l;",
           "for (std::size_t j = 0; j + 1 < n; ++j) s[j] /= l;", "the last weight of a row is not divided by the sum"),
    Mutant("exp-simd-edge", SIMD, "for (; j + batch::size <= n; j += batch::size) {\n    const batch e",
           "for (; j + batch::size < n; j += batch::size) {\n    const batch e",
           "a last full vector of exps goes to the scalar tail",
           equivalent="std::exp and xsimd::exp agree within 1.5 ulp; the sum's order changes by one rounding"),
    Mutant("lse-sign", KHPP, "A(r.m + log_of<A>(r.l))", "A(r.m - log_of<A>(r.l))", "logsumexp m - log l"),
    Mutant("causal-diagonal", PROBLEM, "r = {0, static_cast<std::size_t>(last + 1)};",
           "r = {0, static_cast<std::size_t>(last)};", "a causal query does not see its own key"),
    Mutant("window-short", PROBLEM, "static_cast<std::ptrdiff_t>(w->window) + 1;", "static_cast<std::ptrdiff_t>(w->window) + 2;",
           "a sliding window one key short"),
    Mutant("naive-window-k", NAIVE, "k + keys.begin * d_k,", "k,", "naive scores use K from key 0 under a window",
           count=2),
    # the backward pass (issue 18's list): streaming (FlashAttention-2), the slab kernel (math, blocked), naive
    Mutant("bwd-st-d-omitted", ST, "for (std::size_t c = 0; c < cols; ++c) ds[c] = p[c] * (ds[c] - d_i);",
           "for (std::size_t c = 0; c < cols; ++c) ds[c] = p[c] * ds[c];", "streaming: D omitted (dS = P o dP)"),
    Mutant("bwd-slab-d-omitted", SLAB, "ds_i[c] = p_i[c] * (ds_i[c] - d_i);", "ds_i[c] = p_i[c] * ds_i[c];",
           "math/blocked: D omitted (dS = P o dP)"),
    Mutant("bwd-reference-d-double", NAIVE, "for (std::size_t j = 0; j < n_kv; ++j) d_i += p_i[j] * ds_i[j];",
           "for (std::size_t j = 0; j < n_kv; ++j) d_i = convert<A>(convert<S>(A(d_i + p_i[j] * ds_i[j])));",
           "the reference's D = sum_j P_ij dP_ij accumulated in its storage precision (double), not 50 digits"),
    Mutant("bwd-naive-d-storage", NAIVE, "if (saved_out) d_i = dot_loops<A>(d_o + i * d_v, &(*saved_out)(b, h, i, 0), d_v);",
           "if (saved_out)\n          for (std::size_t j = 0; j < n_kv; ++j) d_i = convert<A>(convert<S>(A(d_i + p_i[j] * ds_i[j])));",
           "naive: D from P o dP (n_kv terms) accumulated in the storage precision"),
    Mutant("bwd-st-d-storage", ST, "const A d_i = dot_loops<A>(&d_out(b, h, i, 0), &saved.out(b, h, i, 0), d_v);",
           "const A d_i = convert<A>(convert<S>(dot_loops<S>(&d_out(b, h, i, 0), &saved.out(b, h, i, 0), d_v)));",
           "streaming: D = dO . O (d_v terms) accumulated in the storage precision", count=2),
    Mutant("bwd-st-p-unnormalised", ST, "if (lse > minus_inf) exp_shifted_sum(p, cols, lse, /*simd=*/true);",
           "if (lse > minus_inf) exp_shifted_sum(p, cols, row_max(p, cols), /*simd=*/true);",
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
    Mutant("bwd-st-ds-untransposed", ST, "transpose(w.dS, rows, cols, w.T_ij);",
           "std::copy(w.dS, w.dS + rows * cols, w.T_ij);", "streaming: dS used untransposed for dK"),
    Mutant("bwd-st-causal-off-by-one", ST, "mask_row_if_partial(p, mask, b, h, i, j0, cols);",
           "mask_row_if_partial(p, mask, b, h, i, j0 + 1, cols);",
           "streaming: the recomputed tile masked one key off"),
    Mutant("bwd-st-dq-storage", ST, "T::pv(w.dS, K_vals, dq(x) + r0 * d_k, rows, cols, d_k);",
           "T::pv(w.dS, K_vals, dq(x) + r0 * d_k, rows, cols, d_k);\n"
           "          for (std::size_t e = r0 * d_k; e < (r0 + rows) * d_k; ++e) dq(x)[e] = convert<A>(convert<S>(dq(x)[e]));",
           "streaming: dQ accumulated in the storage precision (rounded after every key tile)"),
    Mutant("bwd-slab-dv-offset", SLAB, "gemm_tn<A>(probs, d_o, dv_acc + lo * d_v,", "gemm_tn<A>(probs, d_o, dv_acc,",
           "math/blocked: dV of a slab added from key 0, not from the slab's first key"),
]
