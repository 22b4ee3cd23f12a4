#include "studies/studies.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <cmath>
#include <sstream>

#include "attn/core/fp8.hpp"
#include "attn/core/random.hpp"
#include "attn/verify/verdict_json.hpp"

namespace attn {


std::vector<AccuracyProblem> accuracy_problems(const std::string& profile) {
  std::vector<std::size_t> ns, ds;
  if (profile == "smoke") ns = {16, 64}, ds = {64};
  else if (profile == "quick") ns = {16, 64, 256, 1024}, ds = {64};
  else if (profile == "full") ns = {16, 64, 256, 1024, 4096}, ds = {32, 64, 128};
  else throw Error("unknown accuracy profile '" + profile + "' (smoke, quick, full)");
  std::vector<AccuracyProblem> problems;
  for (std::size_t d : ds)
    for (std::size_t n : ns)
      for (bool causal : {false, true})
        for (double scale : {1.0, 10.0, 100.0, 1000.0})
          // The backward pass's gradients too where they cost seconds (n <= 256, or
          // unit logits without a mask): quick's n = 1024 problems take ~30 s each.
          problems.push_back({n, d, causal, scale, profile == "full" || n <= 256 || (scale == 1.0 && !causal)});
  if (profile == "quick")
    for (std::size_t d : {16, 256}) problems.push_back({256, d, false, 1.0});
  // Several batches and heads, d_k != d_v, heads of different scales (appended: the indices, hence the seeds,
  // of the problems above are unchanged); n = 64, 128, 256 in smoke, quick, full (quick's four took 60 s at
  // n = 256 with their gradients).
  const std::size_t mixed_n = profile == "smoke" ? 64 : profile == "quick" ? 128 : 256;
  for (bool causal : {false, true})
    for (double scale : {1.0, 100.0}) {
      AccuracyProblem p{mixed_n, 64, causal, scale, true};
      p.batch = 2, p.heads = 4, p.d_v = 32, p.mixed_heads = true;
      problems.push_back(p);
    }
  for (std::size_t i = 0; i < problems.size(); ++i) problems[i].index = i;
  return problems;
}

namespace {

// What every accuracy point starts with: who computed what on which problem.
Json problem_fields(std::string_view backend, std::string_view precision, std::string_view accumulate,
                    const AccuracyProblem& pr) {
  return {{"problem", pr.index}, {"backend", backend}, {"precision", precision}, {"accumulate", accumulate},
          {"n", pr.n},          {"d", pr.d},                {"mask", pr.causal ? "causal" : "none"},
          {"logit_scale", pr.logit_scale}, {"batch", pr.batch}, {"heads", pr.heads}, {"d_v", pr.shape().d_v},
          {"mixed_heads", pr.mixed_heads}};
}

// One JSON point: `check` (of one backend's output against the truth) with
// the error's RMS and size in units of the storage's rounding.
Json point(std::string_view backend, std::string_view precision, std::string_view accumulate,
           const AccuracyProblem& pr, const xt::xtensor<double, 4>& out, const Check& check,
           const xt::xtensor<double, 4>& truth, double u_store, double u_acc) {
  double max_ref = 0, sum2 = 0;
  for (double x : truth) max_ref = std::max(max_ref, std::fabs(x));
  for (std::size_t i = 0; i < out.size(); ++i) sum2 += (out.data()[i] - truth.data()[i]) * (out.data()[i] - truth.data()[i]);
  Json j = problem_fields(backend, precision, accumulate, pr);
  j["reference"] = truth_name(check.truth);
  j.update(to_json(check));
  j.update(Json{{"rms", std::sqrt(sum2 / double(out.size()))},
                {"max_abs_over_u", check.out.max_abs / (u_store * std::max(max_ref, 1e-300))},
                {"u_store", u_store},
                {"u_acc", u_acc}});
  return j;
}

// A combination a backend does not support (a plugin's capabilities): listed
// as such in json["not_supported"], never as a point that passed or failed.
void not_supported(Json& json, std::string_view backend, std::string_view precision, std::string_view accumulate,
                   const AccuracyProblem& pr, std::string_view reason) {
  Json j = problem_fields(backend, precision, accumulate, pr);
  j["reason"] = reason;
  json["not_supported"].push_back(std::move(j));
}

// One JSON point per gradient (dq, dk, dv) of one backend's backward pass:
// its error against the truth, the worst-case bound, the tight tolerance and
// the baseline's error, as verify_backward() decided them.
void gradient_points(Json& out, std::string_view backend, std::string_view precision, std::string_view accumulate,
                     const AccuracyProblem& pr, const GradientCheck& check, const GradientTruth& truth, double u_store,
                     double u_acc) {
  const xt::xtensor<double, 4>* truths[3] = {&truth.grads.dq, &truth.grads.dk, &truth.grads.dv};
  for (std::size_t k = 0; k < check.parts.size() && k < 3; ++k) {
    const GradientCheck::Part& part = check.parts[k];
    double max_ref = 0;
    for (double x : *truths[k]) max_ref = std::max(max_ref, std::fabs(x));
    Json j = problem_fields(backend, precision, accumulate, pr);
    j.update(Json{{"gradient", part.name},
                   {"reference", truth_name(check.truth)},
                   {"max_truth", max_ref},
                   {"relative", part.error.max_abs / std::max(max_ref, 1e-300)},
                   {"u_store", u_store},
                   {"u_acc", u_acc}});
    j.update(to_json(part));  // this gradient's verdicts (the check's own are over all three)
    out.push_back(std::move(j));
  }
}

}  // namespace

Json accuracy_sweep(const std::vector<AccuracyProblem>& problems, const Progress& progress) {
  const auto start = std::chrono::steady_clock::now();
  Json json = {{"kind", "accuracy"}, {"precisions", Json::array()}, {"points", Json::array()},
               {"gradient_points", Json::array()}, {"not_supported", Json::array()}, {"problem_seconds", Json::array()}};
  // The registry's precisions in its order, each with its default accumulation (the reports' panels).
  for (const PrecisionInfo& p : precisions())
    json["precisions"].push_back({{"name", p.name}, {"default_accumulate", accumulate_name(p.default_accumulate)},
                                  {"unit_roundoff", p.unit_roundoff}});
  auto problem_start = start;
  for (std::size_t p = 0; p < problems.size(); ++p) {
    if (p > 0) {  // the previous problem's wall time: what python/attention_lab/sweep.py calibrate fits its cost model to
      const auto now = std::chrono::steady_clock::now();
      json["problem_seconds"].push_back({{"problem", problems[p - 1].index},
                                         {"seconds", std::chrono::duration<double>(now - problem_start).count()}});
      problem_start = now;
    }
    const AccuracyProblem& pr = problems[p];
    const Shape shape = pr.shape();
    Options opt;
    if (pr.causal) opt.mask = mask::Causal{};
    opt.need_weights = opt.need_lse = true;  // judged with the output (a backend that cannot return them: its run says)
    Inputs<double> in = random_inputs(shape, 1000 + pr.index, pr.logit_scale);
    if (pr.mixed_heads)
      for (std::size_t b = 0; b < shape.batch; ++b)
        for (std::size_t h = 0; h < shape.heads; ++h)
          for (std::size_t j = 0; j < shape.n_kv; ++j)
            for (std::size_t c = 0; c < shape.d_v; ++c) in.v(b, h, j, c) *= std::pow(10.0, double(h));
    if (progress) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::ostringstream o;
      o << "accuracy: problem " << p + 1 << " of " << problems.size() << " (index " << pr.index << ", n=" << pr.n << " d=" << pr.d
        << (pr.causal ? " causal" : "") << " logit scale " << pr.logit_scale << "), " << int(t) << " s so far";
      progress(o.str());
    }
    for (const PrecisionInfo& precision : precisions()) {
      const GroundTruth truth = ground_truth(rounded_to(precision, in), opt, precision.unit_roundoff);
      for (Accumulate acc : accumulate_policies()) {
        if (precision.default_accumulate == Accumulate::fp64 && acc == Accumulate::storage) continue;  // = fp64
        const RunReport base = baseline_backend().run(precision.name, acc, in, opt, {}, 0);
        for (const BackendInfo& b : all_backends()) {
          if (b.traits.exact) continue;  // the truth itself
          RunReport r;
          try {
            r = b.traits.baseline ? base
                                  : b.run(precision.name, acc, in, b.without_unreturnable_outputs(precision, acc, shape, opt),
                                          {}, 0);
          } catch (const Unsupported& e) {
            not_supported(json, b.name, precision.name, accumulate_name(acc), pr, e.what());
            continue;
          }
          json["points"].push_back(point(b.name, precision.name, accumulate_name(acc), pr, r.out,
                                         verify(r, opt, truth, &base), truth.result.out, r.u_store, r.u_acc));
        }
      }
      // The backward pass: every backend that has one, dO from seed 2000 + index.
      if (!pr.backward) continue;
      const xt::xtensor<double, 4> d_out = random_d_out(shape, 2000 + pr.index);
      Options bopt = opt;
      bopt.need_weights = false;  // the backward pass returns gradients
      const BackwardReport first =
          baseline_backend().run_backward(precision.name, precision.default_accumulate, in, d_out, bopt);
      const GradientTruth g_truth = gradient_truth(first.forward.rounded_inputs, first.rounded_d_out, bopt);
      // A true gradient beyond the storage's largest finite value cannot be returned by any backend (fp16
      // at logit scale 100: dK reaches 1.1e5): listed as not representable, never as a failure or a pass.
      double largest = 0;
      for (const auto* g : {&g_truth.grads.dq, &g_truth.grads.dk, &g_truth.grads.dv})
        for (double x : *g) largest = std::max(largest, std::fabs(x));
      if (largest > precision.max_finite / 2) {
        for (Accumulate acc : accumulate_policies())
          not_supported(json, "every backend", precision.name, accumulate_name(acc), pr,
                        "backward: a true gradient (" + std::to_string(largest) + ") exceeds half of " +
                            std::string(precision.name) + "'s largest finite value");
        continue;
      }
      for (Accumulate acc : accumulate_policies()) {
        if (precision.default_accumulate == Accumulate::fp64 && acc == Accumulate::storage) continue;  // = fp64
        const BackwardReport base = baseline_backend().run_backward(precision.name, acc, in, d_out, bopt);
        for (const BackendInfo& b : all_backends()) {
          if (b.traits.exact || !b.has_backward) continue;
          BackwardReport r;
          try {
            r = b.traits.baseline ? base : b.run_backward(precision.name, acc, in, d_out, bopt);
          } catch (const Unsupported& e) {  // a plugin's backward outside what it claims
            not_supported(json, b.name, precision.name, accumulate_name(acc), pr, std::string("backward: ") + e.what());
            continue;
          }
          gradient_points(json["gradient_points"], b.name, precision.name, accumulate_name(acc), pr,
                          verify_backward(r, bopt, g_truth, &base), g_truth, r.forward.u_store, r.forward.u_acc);
        }
      }
    }
    // FP8 (emulated): inputs quantised to e4m3 / e5m2 with a power-of-two scale per
    // tensor, every backend computing in fp32, the output quantised the same way.
    for (const Fp8Format& f : {e4m3, e5m2}) {
      const Inputs<double> seen{quantise_fp8(in.q, f), quantise_fp8(in.k, f), quantise_fp8(in.v, f)};
      const GroundTruth truth = ground_truth(seen, opt, f.unit_roundoff());
      auto quantised_run = [&](const BackendInfo& b) {
        RunReport r = b.run("fp32", Accumulate::fp32, seen,
                            b.without_unreturnable_outputs(precision_info("fp32"), Accumulate::fp32, shape, opt), {}, 0);
        r.out = quantise_fp8(r.out, f);
        r.u_store = f.unit_roundoff();
        r.store_output = [f](const xt::xtensor<double, 4>& x) { return quantise_fp8(x, f); };
        return r;
      };
      const RunReport base = quantised_run(baseline_backend());
      for (const BackendInfo& b : all_backends()) {
        if (b.traits.exact) continue;
        RunReport r;
        try {
          r = b.traits.baseline ? base : quantised_run(b);
        } catch (const Unsupported& e) {
          not_supported(json, b.name, f.name, "fp32", pr, e.what());
          continue;
        }
        json["points"].push_back(point(b.name, f.name, "fp32", pr, r.out, verify(r, opt, truth, &base),
                                       truth.result.out, f.unit_roundoff(), r.u_acc));
      }
    }
  }
  if (!problems.empty())
    json["problem_seconds"].push_back(
        {{"problem", problems.back().index},
         {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - problem_start).count()}});
  return json;
}

std::vector<EntropyRow> entropy_study(const BackendInfo& b, const PrecisionInfo& precision,
                                      const std::vector<std::size_t>& dims, std::size_t draws, std::size_t keys,
                                      std::uint64_t seed) {
  std::vector<EntropyRow> rows;
  for (std::size_t d : dims) {
    EntropyRow row;
    row.d = d;
    // `draws` batches of one query over `keys` keys: independent draws.
    const Inputs<double> in = random_inputs({draws, 1, 1, keys, d, 1}, seed + d);
    for (const bool scaled : {false, true}) {
      Options opt;
      opt.need_weights = true;
      if (!scaled) opt.scale = 1.0;
      const RunReport r = b.run(precision.name, precision.default_accumulate, in, opt, {}, 0);
      double sum = 0, sum2 = 0;
      for (std::size_t i = 0; i < draws; ++i) {
        double h = 0;
        for (std::size_t j = 0; j < keys; ++j) {
          const double p = (*r.weights)(i, 0, 0, j);
          if (p > 0) h -= p * std::log(p);
        }
        sum += h;
        sum2 += h * h;
      }
      const double mean = sum / double(draws);
      const double se = std::sqrt(std::max(0.0, sum2 / double(draws) - mean * mean) / double(draws - 1));
      (scaled ? row.scaled_mean : row.raw_mean) = mean;
      (scaled ? row.scaled_se : row.raw_se) = se;
    }
    // Variance of q.k over all draws and keys, from the (exact) inputs.
    double sum = 0, sum2 = 0;
    const std::size_t count = draws * keys;
    for (std::size_t i = 0; i < draws; ++i)
      for (std::size_t j = 0; j < keys; ++j) {
        double s = 0;
        for (std::size_t l = 0; l < d; ++l) s += in.q(i, 0, 0, l) * in.k(i, 0, j, l);
        sum += s;
        sum2 += s * s;
      }
    const double mean = sum / double(count);
    row.var_qk = (sum2 - double(count) * mean * mean) / double(count - 1);
    row.var_qk_scaled = row.var_qk / double(d);
    rows.push_back(row);
  }
  return rows;
}

Json entropy_json(const std::vector<EntropyRow>& rows, std::string_view backend, std::string_view precision,
                  std::size_t draws, std::size_t keys, std::uint64_t seed) {
  Json json = {{"kind", "entropy"}, {"backend", backend}, {"precision", precision}, {"draws", draws},
               {"keys", keys},      {"seed", seed},       {"rows", Json::array()}};
  for (const EntropyRow& r : rows)
    json["rows"].push_back({{"d", r.d},
                            {"raw_mean", r.raw_mean},
                            {"raw_se", r.raw_se},
                            {"scaled_mean", r.scaled_mean},
                            {"scaled_se", r.scaled_se},
                            {"var_qk", r.var_qk},
                            {"var_qk_scaled", r.var_qk_scaled}});
  return json;
}

double median(std::vector<double> xs) {
  if (xs.empty()) return NAN;
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

std::optional<std::pair<double, double>> median_interval(std::vector<double> xs, double level) {
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  std::optional<std::pair<double, double>> best;
  double below = 0;                              // P(Binomial(n, 1/2) < k)
  double term = std::ldexp(1.0, -int(n));        // P(Binomial(n, 1/2) = k - 1), from k = 1
  for (std::size_t k = 1; k <= n / 2; ++k) {
    below += term;                               // P(B < k) = P(B <= k - 1)
    term *= double(n - (k - 1)) / double(k);
    if (1.0 - 2.0 * below < level) break;        // (x_(k), x_(n-k+1)) covers the median less often than asked
    best = std::pair{xs[k - 1], xs[n - k]};
  }
  return best;
}

RatioInterval median_ratio(const std::vector<double>& numerator, const std::vector<double>& denominator) {
  if (numerator.empty() || denominator.empty()) throw Error("median_ratio: an empty sample of timings");
  RatioInterval r;
  r.median = median(numerator) / median(denominator);
  std::mt19937_64 rng(bootstrap_seed);
  std::vector<double> ratios(bootstrap_resamples), a(numerator.size()), b(denominator.size());
  for (double& ratio : ratios) {
    std::uniform_int_distribution<std::size_t> pick_a(0, a.size() - 1), pick_b(0, b.size() - 1);
    for (double& x : a) x = numerator[pick_a(rng)];
    for (double& x : b) x = denominator[pick_b(rng)];
    ratio = median(a) / median(b);
  }
  // NumPy's default quantile (linear between order statistics), as stats.py's.
  std::sort(ratios.begin(), ratios.end());
  const auto quantile = [&](double q) {
    const double at = q * double(ratios.size() - 1);
    const std::size_t k = std::size_t(at);
    return k + 1 < ratios.size() ? ratios[k] + (at - double(k)) * (ratios[k + 1] - ratios[k]) : ratios[k];
  };
  r.low = quantile((1 - interval_level) / 2);
  r.high = quantile(1 - (1 - interval_level) / 2);
  return r;
}

}  // namespace attn
