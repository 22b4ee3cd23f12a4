#include "attn/registry.hpp"

#include <chrono>

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
}

namespace attn {

std::string blas_info() {
  return std::string(openblas_get_config()) + "; core " + openblas_get_corename() + "; " +
         std::to_string(openblas_get_num_threads()) + " threads";
}

static_assert([] {
  bool all = true;
  for_each_backend([&](auto b) { all = all && AttentionBackend<typename decltype(b)::type>; });
  return all;
}());

namespace {
std::string joined(const std::vector<std::string_view>& names) {
  std::string s;
  for (auto n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}
}  // namespace

std::vector<std::string_view> backend_names() {
  std::vector<std::string_view> names;
  for_each_backend([&](auto b) { names.push_back(decltype(b)::type::name); });
  return names;
}

std::vector<std::string_view> storage_names() {
  std::vector<std::string_view> names;
  for_each_storage([&](auto s) { names.push_back(precision_traits<typename decltype(s)::type>::name); });
  return names;
}

Accumulate parse_accumulate(std::string_view name) {
  for (Accumulate a : accumulate_policies)
    if (accumulate_name(a) == name) return a;
  throw Error("unknown accumulation '" + std::string(name) + "' (known: fp64, fp32, storage)");
}

RunReport run_by_name(std::string_view backend, std::string_view precision, Accumulate acc,
                      const Inputs<double>& in, const Options& opt, const CallObserver& obs,
                      std::size_t warm_repeats) {
  RunReport report;
  bool backend_found = false, precision_found = false;
  for_each_backend([&](auto b) {
    using B = typename decltype(b)::type;
    if (B::name != backend) return;
    backend_found = true;
    for_each_storage([&](auto st) {
      using S = typename decltype(st)::type;
      if (precision_traits<S>::name != precision) return;
      precision_found = true;
      Inputs<S> rounded = convert_inputs<S>(in);
      validate(rounded, opt);
      for_each_accumulate([&]<Accumulate P>() {
        if (P != acc) return;
        if (obs.before) obs.before();
        const auto t0 = std::chrono::steady_clock::now();
        Workspace ws;  // a cold call: the workspace's allocation is part of it
        Result<S> r = B::template run<S, P>(rounded, opt, ws);
        const auto t1 = std::chrono::steady_clock::now();
        if (obs.after) obs.after();
        report.seconds = std::chrono::duration<double>(t1 - t0).count();
        report.out = convert_tensor<double>(r.out);
        report.weights = std::move(r.weights);
        report.lse = std::move(r.lse);
        report.workspace_bytes = r.workspace_bytes;
        for (std::size_t rep = 0; rep < warm_repeats; ++rep) {
          const auto w0 = std::chrono::steady_clock::now();
          const Result<S> again = B::template run<S, P>(rounded, opt, ws);
          report.warm_seconds.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
        }
        report.u_acc = accumulation_unit_roundoff<B, S, P>();
        report.u_store = precision_traits<S>::unit_roundoff;
      });
      report.rounded_inputs = convert_inputs<double>(rounded);
    });
  });
  if (!backend_found)
    throw Error("unknown backend '" + std::string(backend) + "' (registered: " + joined(backend_names()) + ")");
  if (!precision_found)
    throw Error("unknown precision '" + std::string(precision) + "' (known: " + joined(storage_names()) + ")");
  return report;
}

}  // namespace attn
