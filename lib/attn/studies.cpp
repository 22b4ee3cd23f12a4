#include "attn/studies.hpp"

#include <chrono>
#include <cmath>
#include <sstream>

#include "attn/fp8.hpp"
#include "attn/random.hpp"

namespace attn {

namespace {

std::string number(double x) {
  if (std::isnan(x)) return "null";
  if (std::isinf(x)) return x > 0 ? "1e999" : "-1e999";
  std::ostringstream o;
  o.precision(17);
  o << x;
  return o.str();
}

// The inputs as storage `precision` holds them, widened back to double.
Inputs<double> rounded_to(std::string_view precision, const Inputs<double>& in) {
  Inputs<double> out;
  for_each_storage([&](auto st) {
    using S = typename decltype(st)::type;
    if (precision_traits<S>::name == precision) out = convert_inputs<double>(convert_inputs<S>(in));
  });
  return out;
}

}  // namespace

std::vector<AccuracyProblem> accuracy_problems(const std::string& profile) {
  std::vector<std::size_t> ns, ds;
  if (profile == "quick") ns = {16, 64, 256, 1024}, ds = {64};
  else if (profile == "full") ns = {16, 64, 256, 1024, 4096}, ds = {32, 64, 128};
  else throw Error("unknown accuracy profile '" + profile + "' (quick, full)");
  std::vector<AccuracyProblem> problems;
  for (std::size_t d : ds)
    for (std::size_t n : ns)
      for (bool causal : {false, true})
        for (double scale : {1.0, 10.0, 100.0, 1000.0}) problems.push_back({n, d, causal, scale});
  if (profile == "quick")
    for (std::size_t d : {16, 256}) problems.push_back({256, d, false, 1.0});
  return problems;
}

// One JSON point: `out` of backend b against the truth, with the bound.
void write_point(std::ostringstream& json, bool& first, std::string_view backend, std::string_view precision,
                 std::string_view accumulate, const AccuracyProblem& pr, bool exact, const xt::xtensor<double, 4>& out,
                 const xt::xtensor<double, 4>& truth, double u_store, double u_acc, double bound) {
  double max_ref = 0, sum2 = 0;
  for (double x : truth) max_ref = std::max(max_ref, std::fabs(x));
  const ErrorStats e = compare(out, truth, u_store);
  for (std::size_t i = 0; i < out.size(); ++i) sum2 += (out.data()[i] - truth.data()[i]) * (out.data()[i] - truth.data()[i]);
  json << (first ? "" : ",\n") << "{\"backend\":\"" << backend << "\",\"precision\":\"" << precision
       << "\",\"accumulate\":\"" << accumulate << "\",\"n\":" << pr.n << ",\"d\":" << pr.d
       << ",\"mask\":\"" << (pr.causal ? "causal" : "none") << "\",\"logit_scale\":" << number(pr.logit_scale)
       << ",\"reference\":\"" << (exact ? "mp50" : "compensated") << "\",\"max_abs\":" << number(e.max_abs)
       << ",\"max_rel\":" << number(e.max_rel) << ",\"rms\":" << number(std::sqrt(sum2 / double(out.size())))
       << ",\"max_abs_over_u\":" << number(e.max_abs / (u_store * std::max(max_ref, 1e-300)))
       << ",\"u_store\":" << number(u_store) << ",\"u_acc\":" << number(u_acc) << ",\"bound\":" << number(bound)
       << ",\"finite\":" << (e.all_finite_where_ref_finite ? "true" : "false") << "}";
  first = false;
}

std::string accuracy_sweep_json(const std::vector<AccuracyProblem>& problems, const Progress& progress) {
  const auto start = std::chrono::steady_clock::now();
  std::ostringstream json;
  json << "{\"kind\":\"accuracy\",\"points\":[\n";
  bool first = true;
  for (std::size_t p = 0; p < problems.size(); ++p) {
    const AccuracyProblem& pr = problems[p];
    const Shape shape{1, 1, pr.n, pr.n, pr.d, pr.d};
    Options opt;
    if (pr.causal) opt.mask = mask::Causal{};
    const Inputs<double> in = random_inputs(shape, 1000 + p, pr.logit_scale);
    if (progress) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::ostringstream o;
      o << "accuracy: problem " << p + 1 << " of " << problems.size() << " (n=" << pr.n << " d=" << pr.d
        << (pr.causal ? " causal" : "") << " logit scale " << pr.logit_scale << "), " << int(t) << " s so far";
      progress(o.str());
    }
    for (std::string_view precision : storage_names()) {
      const Inputs<double> seen = rounded_to(precision, in);
      const backends::GroundTruth truth = backends::ground_truth(seen, opt);
      for (const BackendHandle& b : registered_backends()) {
        if (b.name == backends::Reference::name) continue;  // the truth itself
        for (Accumulate acc : accumulate_policies) {
          if (precision == "fp64" && acc == Accumulate::storage) continue;  // the same as fp64
          const RunReport r = b.run(precision, acc, in, opt, {}, 0);
          write_point(json, first, b.name, precision, accumulate_name(acc), pr, truth.exact, r.out, truth.result.out,
                      r.u_store, r.u_acc, error_bound(seen, opt, r.u_acc, r.u_store).out);
        }
      }
    }
    // FP8 (emulated): inputs quantised to e4m3 / e5m2 with a power-of-two scale per
    // tensor, every backend computing in fp32, the output quantised the same way.
    for (const Fp8Format& f : {e4m3, e5m2}) {
      const Inputs<double> seen{quantise_fp8(in.q, f), quantise_fp8(in.k, f), quantise_fp8(in.v, f)};
      const backends::GroundTruth truth = backends::ground_truth(seen, opt);
      for (const BackendHandle& b : registered_backends()) {
        if (b.name == backends::Reference::name) continue;
        const RunReport r = b.run("fp32", Accumulate::fp32, seen, opt, {}, 0);
        const double bound = error_bound(seen, opt, r.u_acc, f.unit_roundoff()).out;
        write_point(json, first, b.name, f.name, "fp32", pr, truth.exact, quantise_fp8(r.out, f), truth.result.out,
                    f.unit_roundoff(), r.u_acc, bound);
      }
    }
  }
  json << "\n]}\n";
  return json.str();
}

std::vector<EntropyRow> entropy_study(const BackendHandle& b, std::string_view precision,
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
      const RunReport r = b.run(precision, precision == "fp64" ? Accumulate::fp64 : Accumulate::fp32, in, opt, {}, 0);
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

std::string entropy_json(const std::vector<EntropyRow>& rows, std::string_view backend, std::string_view precision,
                         std::size_t draws, std::size_t keys, std::uint64_t seed) {
  std::ostringstream json;
  json << "{\"kind\":\"entropy\",\"backend\":\"" << backend << "\",\"precision\":\"" << precision
       << "\",\"draws\":" << draws << ",\"keys\":" << keys << ",\"seed\":" << seed << ",\"rows\":[\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const EntropyRow& r = rows[i];
    json << (i ? ",\n" : "") << "{\"d\":" << r.d << ",\"raw_mean\":" << number(r.raw_mean)
         << ",\"raw_se\":" << number(r.raw_se) << ",\"scaled_mean\":" << number(r.scaled_mean)
         << ",\"scaled_se\":" << number(r.scaled_se) << ",\"var_qk\":" << number(r.var_qk)
         << ",\"var_qk_scaled\":" << number(r.var_qk_scaled) << "}";
  }
  json << "\n]}\n";
  return json.str();
}

}  // namespace attn
