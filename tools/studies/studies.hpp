// The sweeps behind the reports: accuracy of every backend x precision x
// accumulation against the ground truth, and the E7 entropy study. Each
// writes JSON that python/attention_lab/reports reads; progress goes to a callback.
#pragma once

#include <functional>
#include <string>
#include <optional>
#include <utility>
#include <vector>

#include "attn/registry/registry.hpp"
#include "attn/io/json.hpp"

namespace attn {

using Progress = std::function<void(const std::string&)>;

struct AccuracyProblem {
  std::size_t n = 64, d = 64;  // n_q = n_kv = n, d_k = d (and d_v = d unless d_v says otherwise)
  bool causal = false;
  double logit_scale = 1;
  bool backward = false;  // also the gradients (accuracy_sweep's gradient_points)
  std::size_t index = 0;  // its place in its profile's list: its seeds (1000 + index, 2000 + index) and its name
  std::size_t batch = 1, heads = 1, d_v = 0;  // B, H and d_v (0: d)
  // Head h's V multiplied by 10^h: heads of different scales, each judged by its own rows' tolerances.
  bool mixed_heads = false;
  Shape shape() const { return {batch, heads, n, n, d, d_v ? d_v : d}; }
};

// "quick": n = 16 ... 1024 at d = 64, none/causal, logit scales 1, 10, 100,
// 1000, plus d = 16 and 256 at n = 256; "full": n = 16 ... 4096, d = 32,
// 64, 128. Both (and smoke) add B = 2, H = 4, d_k = 64, d_v = 32 at n = 256,
// none/causal, logit scales 1 and 100, heads of V scales 1 to 1e3 (fp16 holds 65504). Every
// point asks for the logsumexp and the weights, which the verdicts judge. The gradients too: quick at n <= 256 and at n = 1024 with unit
// logits and no mask, full everywhere. Throws Error for another name.
// Each problem's index is its place in the list, so a subset (a shard of a
// plan) computes exactly the points the whole sweep would.
std::vector<AccuracyProblem> accuracy_problems(const std::string& profile);

// Every registered backend except the reference, every precision and
// policy, on each problem (seeded 1000 + its index), against the ground truth of
// the inputs rounded to that precision; plus emulated FP8 (e4m3, e5m2):
// inputs and output quantised with a power-of-two scale per tensor, the
// backend computing in fp32. The backward pass of every backend that has
// one, where the problem asks: one point per gradient (dq, dk, dv) against
// gradient_truth() with verify_backward()'s verdicts.
// {"kind": "accuracy", "points": [...], "gradient_points": [...]}.
Json accuracy_sweep(const std::vector<AccuracyProblem>& problems, const Progress& progress);

struct EntropyRow {
  std::size_t d = 0;
  double raw_mean = 0, raw_se = 0, scaled_mean = 0, scaled_se = 0;  // mean softmax entropy (nats), standard error
  double var_qk = 0, var_qk_scaled = 0;                               // sample variance of q.k and q.k / sqrt(d)
};

// EXAMPLES.md E7: `draws` independent (query, `keys` keys) with iid N(0, 1)
// entries per d, through backend `b` in `precision`: the mean entropy of
// softmax(q.k) and of softmax(q.k / sqrt(d)), and the variances of the scores.
std::vector<EntropyRow> entropy_study(const BackendInfo& b, const PrecisionInfo& precision,
                                      const std::vector<std::size_t>& dims, std::size_t draws, std::size_t keys,
                                      std::uint64_t seed);
Json entropy_json(const std::vector<EntropyRow>& rows, std::string_view backend, std::string_view precision,
                  std::size_t draws, std::size_t keys, std::uint64_t seed);

// The median of `xs` (the mean of the middle two for an even count; NaN
// when empty): warm-call timings of the CLI and the claims' timing criteria.
double median(std::vector<double> xs);

// The distribution-free 95% interval of the median of `xs` from order
// statistics: the k-th smallest and k-th largest with the largest k whose
// coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least `level`; nullopt below
// six samples (where even (min, max) covers less than 95%). The same rule as
// python/attention_lab/stats.py's median_ci, which the reports use: here it is attn-bench's
// stopping rule for adaptive sampling, so the C++ side needs its own copy.
std::optional<std::pair<double, double>> median_interval(std::vector<double> xs, double level = 0.95);

// The ratio of the medians of two samples (numerator / denominator) with its
// percentile-bootstrap interval: each sample resampled independently
// `bootstrap_resamples` times from a fixed seed (the same timings give the
// same interval), quantiles as NumPy's. The one bootstrap of the suite: the
// same level, resamples and quantile rule as python/attention_lab/stats.py's ratio_ci,
// which the reports use (test_compare.py reads these constants and checks they agree); the
// claims' timing criteria need it in C++.
constexpr double interval_level = 0.95;
constexpr int bootstrap_resamples = 10000;
constexpr unsigned bootstrap_seed = 20261201;
struct RatioInterval {
  double median = 0, low = 0, high = 0;
};
RatioInterval median_ratio(const std::vector<double>& numerator, const std::vector<double>& denominator);

}  // namespace attn
