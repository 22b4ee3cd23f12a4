#include "attn/registry.hpp"


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

std::vector<BackendHandle> registered_backends() {
  std::vector<BackendHandle> handles;
  for_each_backend([&](auto b) { handles.push_back(handle_of<typename decltype(b)::type>()); });
  return handles;
}

const BackendHandle& backend_by_name(std::string_view name) {
  static const std::vector<BackendHandle> handles = registered_backends();
  for (const BackendHandle& h : handles)
    if (h.name == name) return h;
  throw Error("unknown backend '" + std::string(name) + "' (registered: " + joined(backend_names()) + ")");
}

RunReport run_by_name(std::string_view backend, std::string_view precision, Accumulate acc,
                      const Inputs<double>& in, const Options& opt, const CallObserver& obs,
                      std::size_t warm_repeats) {
  return backend_by_name(backend).run(precision, acc, in, opt, obs, warm_repeats);
}

}  // namespace attn
