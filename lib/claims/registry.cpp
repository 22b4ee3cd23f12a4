#include <cmath>
#include <sstream>

#include "claims/claim.hpp"

namespace attn::claims {

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::holds: return "holds";
    case Outcome::does_not_hold: return "does not hold";
    case Outcome::inconclusive: return "inconclusive";
  }
  return "?";
}

// One line per claim; the criterion is written here, before any measurement.
const std::vector<Claim>& all_claims() {
  static const std::vector<Claim> claims = {
      {"variance", "Vaswani et al. 2017, 'Attention is all you need', sec. 3.2.1, footnote 4",
       "assume that the components of q and k are independent random variables with mean 0 and variance 1. "
       "Then their dot product has mean 0 and variance d_k",
       "Var(q.k) = d_k sigma^4 for iid zero-mean entries of variance sigma^2; Var(q.k / sqrt(d_k)) = sigma^4 "
       "(1 for N(0, 1), 1/9 for uniform[-1, 1])",
       "N(0, 1) and uniform[-1, 1] entries, d_k = 1, 4, 16, 64, 256, 1024; 20,000 samples per point (200,000 "
       "with --profile full), in double",
       "holds if every measured variance lies within 5 standard deviations of the sample variance "
       "(sqrt((E[X^4] - Var^2) / N), from the exact fourth moment) of the prediction; does not hold otherwise",
       variance_of_scores},
      {"entropy", "EXAMPLES.md E7 (course notes)",
       "the entropy of softmax(q.k) falls steadily as d_k grows through 8, 32, 128, 512, while the entropy of "
       "softmax(q.k / sqrt(d_k)) stays nearly flat",
       "without the 1/sqrt(d_k) scale the softmax sharpens with d_k; with it, it does not",
       "mean entropy of softmax over 10 keys, 2,000 independent draws per d_k (20,000 full), iid N(0, 1), naive "
       "backend in fp64",
       "holds if the unscaled mean entropy falls at every step by more than 5 standard errors of the difference "
       "and the scaled means span less than 5% of the unscaled fall; does not hold otherwise",
       entropy_collapse},
      {"score-memory", "EXAMPLES.md E6 (course notes)",
       "At 2 bytes a score (fp16) an explicit matrix grows from 2 MiB to 8 MiB",
       "the explicit n x n score matrix of one head grows 4x when n doubles: 2 MiB at n = 1024, 8 MiB at 2048",
       "peak heap of one call of the naive backend, fp16 storage and fp16 accumulation (scores held in fp16), "
       "B = H = 1, d = 64, n = 1024 and 2048, measured by the counting allocator",
       "holds if the peak at n = 1024 lies in [2, 2.5] MiB (the matrix plus the output and a row) and the ratio "
       "of the two peaks lies in [3.8, 4.2]; does not hold otherwise",
       score_matrix_memory},
      {"flash-2x", "FlashAttention README (Dao-AILab/flash-attention), numerics note",
       "FlashAttention's numerical error is at most twice that of a baseline implementation at the same precision",
       "the online-softmax (streaming) backend's error is at most 2x the naive backend's, same precision",
       "max |O - truth| of streaming and naive in bf16 and fp16 (fp32 accumulation), n = 64, 256, 1024 (and 4096 "
       "full), d = 64, logit scale 1, 10, 100, no mask and causal; truth: 50 digits or the compensated reference",
       "holds if max over configurations of err(streaming) / err(naive) <= 2; inconclusive if naive's error is "
       "0 somewhere; does not hold otherwise",
       flash_error_at_most_twice},
      {"fp16-pv", "attention-lab issue 7, claim 12 (CPU kernels that accumulate P V in fp16)",
       "fp16 accumulation of P V against fp32 accumulation, over n: the measured error growth with n for each",
       "accumulating P V in fp16 loses accuracy that grows with n; fp32 accumulation does not",
       "exact weights P (double, from the reference) rounded to fp16, V in fp16 (iid N(0, 1)), O = P V summed in "
       "fp16 (every add rounded) and in fp32; n = 64 ... 4096 keys, d = 64, 32 query rows; error vs the exact "
       "P V of the rounded operands",
       "holds if the fp16-accumulation error exceeds the fp32 one at every n by at least 10x and its fitted "
       "exponent in n exceeds the fp32 one by at least 0.25; does not hold otherwise",
       fp16_pv_accumulation},
      {"saturation", "EXAMPLES.md E3 (course notes); generalised as in attention-lab issue 7, claim 3",
       "logits [8, 0]: softmax first entry ~0.9997, local slope p(1-p) ~0.0003. With d_k = 64 the scale is 1/8: "
       "logits [1, 0], p ~0.731, slope ~0.197",
       "unscaled logits saturate the softmax; the 1/sqrt(d_k) scale keeps its gradient alive as d_k grows",
       "E3's two rows through the naive backend (fp64); mean Frobenius norm of the softmax Jacobian "
       "diag(p) - p p^T over 2,000 draws (20,000 full) of one N(0, 1) query against 10 keys, d_k = 8 and 512",
       "holds if the slopes match the printed 0.0003 and 0.197 within half a unit of their last digit, the "
       "unscaled mean Jacobian norm at d_k = 512 is below a quarter of its value at d_k = 8, and the scaled one "
       "changes by less than 10%; does not hold otherwise",
       softmax_saturation},
      {"overflow", "Blanchard, Higham & Higham 2021, IMA J. Numer. Anal. 41(4), 'Accurately computing the "
       "log-sum-exp and softmax functions'",
       "the shifted softmax is as accurate as the unshifted one where the latter does not overflow; unshifted, "
       "exp overflows for scores above ln(65504) ~ 11.09 in fp16 and ~88.7 in fp32/bf16",
       "the unshifted softmax overflows at ln(max finite); the max shift costs no accuracy below that",
       "exp of scores on a grid of 0.001 in fp16, bf16, fp32 arithmetic (every operation rounded); softmax of "
       "200 rows of 64 scores in (-0.9 ln max, 0.9 ln max), shifted and unshifted, in that arithmetic, against "
       "the exact softmax (long double) of the same rounded scores; the division-free form is not judged here",
       "holds if each measured overflow threshold is within 0.5% of ln(max finite) and the shifted softmax's "
       "max absolute weight error is at most 2x the unshifted one's in every format; does not hold otherwise "
       "(first written with the relative error, changed after the first run: weights that underflow have "
       "relative error 1 in both forms; the 2x threshold was kept)",
       unshifted_overflow},
      {"reference-rank", "PyTorch and FlashAttention issue threads (as summarised in attention-lab issue 7, "
       "claim 11)",
       "ranking two implementations by their error against a bf16 reference can invert the ranking against an "
       "fp64 / multiprecision reference",
       "a low-precision reference can rank implementations wrongly",
       "streaming and naive in fp32 on 20 random problems (B = H = 1, n_q = 32, n_kv = 48, d = 32): max error "
       "against the 50-digit reference of the bf16-rounded inputs rounded to bf16, and against 50 digits",
       "holds (the inversion happens) if at least one problem ranks the two differently; does not hold if none",
       reference_precision_ranking},
      {"memory-savings", "Rabe & Staats 2021, 'Self-attention does not need O(n^2) memory'; FlashAttention "
       "README (memory footprint figure)",
       "Rabe & Staats: memory overhead reduced 59x for inference at n = 16,384 with runtime within a few percent; "
       "FlashAttention README: 10x memory savings at sequence length 2K and 20x at 4K",
       "streaming attention needs a small fraction of the naive algorithm's extra memory, at no time cost",
       "naive vs streaming, fp32, B = H = 1, d = 64, n = 2048 and 4096 (16384 with --profile full): peak heap "
       "of one call beyond the output tensor (counting allocator), and the better of two warm calls",
       "holds if the extra-memory ratio is at least 10x at 2K, 20x at 4K (59x at 16K) and streaming's time is at "
       "most 1.05x naive's at every n; does not hold otherwise",
       memory_savings},
      {"golden-bf16", "Golden et al. 2024, 'Is Flash Attention Stable?'",
       "at BF16, Flash Attention sees roughly an order of magnitude more numeric deviation as compared to Baseline "
       "Attention (isolated forward pass)",
       "with bf16 inputs, the online-softmax algorithm deviates ~10x more from a high-precision run than the "
       "baseline algorithm",
       "streaming (flash) vs naive (baseline), bf16 inputs and outputs, causal, B = 1, H = 2, d = 64, n = 256 and "
       "1024, B_q = 64, B_k = 16, 64, 256; bf16 intermediates (accumulate storage) and fp32 intermediates; "
       "deviation: max |O - O_golden|, O_golden the exact attention of the bf16 inputs",
       "holds if the median (over the sweep) deviation ratio flash / baseline with bf16 intermediates lies in "
       "[3, 30]; inconclusive if the baseline's deviation is 0; does not hold otherwise",
       golden_bf16_deviation},
      {"online-normalizer", "Milakov & Gimelshein 2018, 'Online normalizer calculation for softmax'",
       "the online normalizer ... reduces memory accesses from 4 to 3 per vector element ... up to 1.3x speedup "
       "for the softmax alone",
       "one pass fewer over long rows, and a speedup of up to 1.3x",
       "safe (3-pass) and online (2-pass) softmax of one row of 2^24 floats (64 MiB, beyond cache) in plain "
       "C++ with std::exp, best of 5 runs each",
       "holds if the online softmax is between 1.05x and 1.3x faster than the safe one (the access counts, 4 vs "
       "3 per element, hold by construction and are reported); does not hold otherwise",
       online_normalizer},
      {"fp8-incoherent", "Shah et al. 2024, 'FlashAttention-3', sec. 4.3 (numerical error of FP8)",
       "block quantization and incoherent processing ... 2.6x lower RMSE than baseline FP8 attention (inputs "
       "with outlier features)",
       "FP8 attention with per-block scales and a random Hadamard rotation of Q and K is 2.6x more accurate than "
       "per-tensor FP8",
       "emulated e4m3 (and e5m2) rounding, n = 1024, d = 64, Q, K, V iid N(0, 1) with 0.1% of entries N(0, 100); "
       "baseline: one scale per tensor; improved: one scale per 64 rows of Q H, K H, V, H a random-sign "
       "Hadamard; attention in double on the dequantised values; RMSE against the unquantised attention",
       "holds if the e4m3 RMSE ratio baseline / improved lies within a factor 2 of 2.6, [1.3, 5.2]; does not "
       "hold otherwise",
       fp8_incoherent_processing},
  };
  return claims;
}

bool heap_measurable(const Config& cfg, Verdict& v) {
  if (cfg.heap_reset && cfg.heap_peak_growth) return true;
  v.outcome = Outcome::inconclusive;
  v.why = "no heap measurement available (run from attn-lab, which links the counting allocator)";
  return false;
}

std::string to_json(const Claim& c, const Verdict& v, double seconds) {
  auto str = [](std::string_view s) {
    std::string r = "\"";
    for (char ch : s) {
      if (ch == '"' || ch == '\\') r += '\\';
      r += ch;
    }
    return r + "\"";
  };
  std::ostringstream o;
  o.precision(10);
  o << "{\"id\":" << str(c.id) << ",\"source\":" << str(c.source) << ",\"quote\":" << str(c.quote)
    << ",\"statement\":" << str(c.statement) << ",\"experiment\":" << str(c.experiment)
    << ",\"criterion\":" << str(c.criterion) << ",\"verdict\":" << str(outcome_name(v.outcome))
    << ",\"why\":" << str(v.why) << ",\"command\":" << str("attn-lab claims --only " + std::string(c.id))
    << ",\"seconds\":" << seconds << ",\"figures\":{";
  for (std::size_t i = 0; i < v.figures.size(); ++i)
  {
    o << (i ? "," : "") << str(v.figures[i].name) << ":";
    if (std::isfinite(v.figures[i].value)) o << v.figures[i].value;
    else o << "null";
  }
  o << "},\"plots\":[";
  auto numbers = [&](const std::vector<double>& xs) {
    o << "[";
    for (std::size_t i = 0; i < xs.size(); ++i) {
      o << (i ? "," : "");
      if (std::isfinite(xs[i])) o << xs[i];
      else o << "null";
    }
    o << "]";
  };
  for (std::size_t p = 0; p < v.plots.size(); ++p) {
    const Plot& pl = v.plots[p];
    o << (p ? "," : "") << "{\"title\":" << str(pl.title) << ",\"xlabel\":" << str(pl.xlabel)
      << ",\"ylabel\":" << str(pl.ylabel) << ",\"logx\":" << (pl.logx ? "true" : "false")
      << ",\"logy\":" << (pl.logy ? "true" : "false") << ",\"x\":";
    numbers(pl.x);
    o << ",\"series\":{";
    for (std::size_t k = 0; k < pl.series.size(); ++k) {
      o << (k ? "," : "") << str(pl.series[k].first) << ":";
      numbers(pl.series[k].second);
    }
    o << "}}";
  }
  o << "]}";
  return o.str();
}

}  // namespace attn::claims
