#include "attn/registry/plugin.hpp"

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "attn/registry/backend_row.hpp"
#include "attn/plugin.h"

namespace attn {
namespace {

template <class S>
constexpr attn_dtype dtype_of() {
  if constexpr (std::is_same_v<S, double>) return ATTN_F64;
  if constexpr (std::is_same_v<S, float>) return ATTN_F32;
  if constexpr (std::is_same_v<S, bf16>) return ATTN_BF16;
  if constexpr (std::is_same_v<S, fp16>) return ATTN_F16;
}
static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "the ABI passes bf16 and fp16 as 16-bit patterns");

struct Flag {
  unsigned long long bit;
  const char* word;
};
constexpr std::array kFlags = {
    Flag{ATTN_CAP_F64, "fp64"},          Flag{ATTN_CAP_F32, "fp32"},
    Flag{ATTN_CAP_BF16, "bf16"},         Flag{ATTN_CAP_F16, "fp16"},
    Flag{ATTN_CAP_ACC_FP64, "acc:fp64"}, Flag{ATTN_CAP_ACC_FP32, "acc:fp32"},
    Flag{ATTN_CAP_ACC_STORAGE, "acc:storage"}, Flag{ATTN_CAP_CAUSAL, "causal"},
    Flag{ATTN_CAP_WINDOW, "window"},     Flag{ATTN_CAP_KEY_PADDING, "keypad"},
    Flag{ATTN_CAP_BOOLEAN, "bool"},      Flag{ATTN_CAP_BIAS, "bias"},
    Flag{ATTN_CAP_GQA, "gqa"},           Flag{ATTN_CAP_SOFTCAP, "softcap"},
    Flag{ATTN_CAP_SINKS, "sinks"},       Flag{ATTN_CAP_ALIBI, "alibi"},
    Flag{ATTN_CAP_SEGMENTS, "segments"}, Flag{ATTN_CAP_LSE, "lse"},
    Flag{ATTN_CAP_THREADS, "threads"},   Flag{ATTN_CAP_BACKWARD, "backward"},
};

unsigned long long storage_flag(std::string_view precision) {
  if (precision == "fp64") return ATTN_CAP_F64;
  if (precision == "fp32") return ATTN_CAP_F32;
  if (precision == "bf16") return ATTN_CAP_BF16;
  if (precision == "fp16") return ATTN_CAP_F16;
  return 0;
}

unsigned long long accumulate_flag(Accumulate a) {
  switch (a) {
    case Accumulate::fp64: return ATTN_CAP_ACC_FP64;
    case Accumulate::fp32: return ATTN_CAP_ACC_FP32;
    case Accumulate::storage: return ATTN_CAP_ACC_STORAGE;
  }
  return 0;
}

// What a combination needs of the kernel, flag by flag, with its name.
std::string missing_capability(const attn_plugin& k, const PrecisionInfo& p, Accumulate a, const Shape& s,
                               const Options& opt) {
  const auto caps = static_cast<unsigned long long>(k.capabilities);
  std::vector<std::string> missing;
  const auto need = [&](unsigned long long bit, const std::string& what) {
    if (!(caps & bit)) missing.push_back(what);
  };
  need(storage_flag(p.name), std::string(p.name) + " storage");
  const std::uint8_t* by_dtype = k.accumulate_by_dtype;
  if (by_dtype[0] | by_dtype[1] | by_dtype[2] | by_dtype[3]) {
    const int d = p.name == "fp64" ? ATTN_F64 : p.name == "fp32" ? ATTN_F32 : p.name == "bf16" ? ATTN_BF16 : ATTN_F16;
    const int bit = a == Accumulate::fp64 ? ATTN_ACC_FP64 : a == Accumulate::fp32 ? ATTN_ACC_FP32 : ATTN_ACC_STORAGE;
    if (!(by_dtype[d] & ATTN_ACC_BIT(bit)))
      missing.push_back(std::string(accumulate_name(a)) + " accumulation of " + std::string(p.name) + " storage");
  } else {
    need(accumulate_flag(a), std::string(accumulate_name(a)) + " accumulation");
  }
  std::visit(
      [&](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, mask::Causal>) need(ATTN_CAP_CAUSAL, "the causal mask");
        if constexpr (std::is_same_v<M, mask::SlidingWindow>) need(ATTN_CAP_WINDOW, "the sliding-window mask");
        if constexpr (std::is_same_v<M, mask::KeyPadding>) need(ATTN_CAP_KEY_PADDING, "the key-padding mask");
        if constexpr (std::is_same_v<M, mask::Boolean>) need(ATTN_CAP_BOOLEAN, "a boolean mask");
        if constexpr (std::is_same_v<M, mask::AdditiveBias>) need(ATTN_CAP_BIAS, "an additive bias");
      },
      opt.mask);
  if (s.kv_head_count() != s.heads) need(ATTN_CAP_GQA, "grouped K/V heads");
  if (opt.softcap) need(ATTN_CAP_SOFTCAP, "soft-capping");
  if (opt.sinks) need(ATTN_CAP_SINKS, "sinks");
  if (opt.alibi_slopes) need(ATTN_CAP_ALIBI, "ALiBi");
  if (opt.segments) need(ATTN_CAP_SEGMENTS, "documents");
  if (opt.need_lse) need(ATTN_CAP_LSE, "the logsumexp");
  if (opt.need_weights) missing.push_back("the weights (a plugin returns the output and the logsumexp)");
  if (opt.need_dbias) missing.push_back("the bias's gradient");
  if (missing.empty()) return "";
  std::string why = "backend '" + std::string(k.name) + "' does not support ";
  for (std::size_t i = 0; i < missing.size(); ++i)
    why += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  return why + " (it claims: " + plugin_capability_names(k) + ")";
}

// Whether a kernel has a backward pass: ABI 2 or later (a version-1 descriptor ends before the field) with
// ATTN_CAP_BACKWARD.
bool has_backward(const attn_plugin& k) {
  return k.abi_version >= 2 && (k.capabilities & ATTN_CAP_BACKWARD) && k.backward;
}

// A backward pass claimed without its function: one clear error.
void check_backward_claim(const attn_plugin& k, const std::string& which) {
  if (k.abi_version >= 2 && (k.capabilities & ATTN_CAP_BACKWARD) && !k.backward)
    throw Error(which + " ('" + k.name + "') claims a backward pass (ATTN_CAP_BACKWARD) without a backward function");
}

// A contiguous [a, b, c, d] tensor as the ABI's strided view.
template <class S>
attn_tensor abi_view(const xt::xtensor<S, 4>& t) {
  attn_tensor v{};
  v.data = const_cast<S*>(t.data());
  v.dtype = dtype_of<S>();
  for (std::size_t i = 0; i < 4; ++i) {
    v.shape[i] = std::int64_t(t.shape()[i]);
    v.strides[i] = std::int64_t(t.strides()[i]);
  }
  return v;
}

// One kernel bound to inputs and options, as registry.hpp's PreparedCall:
// the outputs are allocated here once, so call() is the kernel's call alone.
template <class S>
class PluginCall final : public PreparedCall {
 public:
  PluginCall(const attn_plugin& k, Inputs<S> in, const Options& opt)
      : k_(k), in_(std::move(in)), opt_(opt), shape_(in_.shape()) {
    out_ = xt::xtensor<S, 4>::from_shape({shape_.batch, shape_.heads, shape_.n_q, shape_.d_v});
    if (opt_.need_lse) lse_ = xt::xtensor<double, 3>::from_shape({shape_.batch, shape_.heads, shape_.n_q});
    c_.scale = opt_.resolved_scale(shape_);
    c_.accumulate = attn_accumulate(0);
    c_.threads = std::int32_t(opt_.threads);
    c_.softcap = opt_.softcap.value_or(0.0);
    c_.sinks = opt_.sinks ? opt_.sinks->data() : nullptr;
    c_.alibi_slopes = opt_.alibi_slopes ? opt_.alibi_slopes->data() : nullptr;
    if (opt_.segments) {
      c_.segments = opt_.segments->data();
      c_.segment_rows = std::int64_t(opt_.segments->shape()[0]);
    }
    std::visit(
        [&](const auto& m) {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, mask::None>) c_.mask = ATTN_MASK_NONE;
          if constexpr (std::is_same_v<M, mask::Causal>) c_.mask = ATTN_MASK_CAUSAL;
          if constexpr (std::is_same_v<M, mask::SlidingWindow>) c_.mask = ATTN_MASK_WINDOW, c_.window = std::int64_t(m.window);
          if constexpr (std::is_same_v<M, mask::KeyPadding>) {
            c_.mask = ATTN_MASK_KEY_PADDING;
            valid_length_.assign(m.valid_length.begin(), m.valid_length.end());
            c_.valid_length = valid_length_.data();
          }
          if constexpr (std::is_same_v<M, mask::Boolean>) c_.mask = ATTN_MASK_BOOLEAN, c_.allowed = m.allowed.data();
          if constexpr (std::is_same_v<M, mask::AdditiveBias>) c_.mask = ATTN_MASK_BIAS, c_.bias = m.bias.data();
        },
        opt_.mask);
  }
  void set_accumulate(Accumulate a) {
    c_.accumulate = a == Accumulate::fp64 ? ATTN_ACC_FP64 : a == Accumulate::fp32 ? ATTN_ACC_FP32 : ATTN_ACC_STORAGE;
  }

  void call() override {
    attn_tensor q = abi_view(in_.q), k = abi_view(in_.k), v = abi_view(in_.v), o = abi_view(out_);
    std::array<char, 512> error{};
    check(k_.run(&q, &k, &v, &c_, &o, lse_ ? lse_->data() : nullptr, error.data(), error.size()), error, "");
  }
  void release_workspace() override {}
  xt::xtensor<double, 4> out() const override { return convert_tensor<double>(out_); }
  std::optional<xt::xtensor<double, 4>> weights() const override { return std::nullopt; }
  std::optional<xt::xtensor<double, 3>> lse() const override { return lse_; }
  std::size_t workspace_bytes() const override { return 0; }
  bool out_finite() const override {
    for (const S& x : out_)
      if (!std::isfinite(static_cast<double>(x))) return false;
    return true;
  }
  // The backward (ABI 2, ATTN_CAP_BACKWARD): the forward with its logsumexp once here, untimed; then
  // call_backward() is the kernel's backward() alone on that forward's O and logsumexp.
  void prepare_backward(const xt::xtensor<double, 4>& d_out) override {
    if (!has_backward(k_)) no_backward("it has no backward pass");
    if (opt_.sinks) no_backward("the sinks' gradient does not cross the plugin ABI");
    d_out_ = convert_tensor<S>(d_out);
    if (!lse_ && (k_.capabilities & ATTN_CAP_LSE))
      lse_ = xt::xtensor<double, 3>::from_shape({shape_.batch, shape_.heads, shape_.n_q});
    call();
    dq_ = xt::xtensor<S, 4>::from_shape(in_.q.shape());
    dk_ = xt::xtensor<S, 4>::from_shape(in_.k.shape());
    dv_ = xt::xtensor<S, 4>::from_shape(in_.v.shape());
  }
  void call_backward() override {
    if (d_out_.size() == 0) throw Error("call_backward() before prepare_backward()");
    attn_tensor q = abi_view(in_.q), k = abi_view(in_.k), v = abi_view(in_.v), o = abi_view(out_),
                d_o = abi_view(d_out_), dq = abi_view(dq_), dk = abi_view(dk_), dv = abi_view(dv_);
    std::array<char, 512> error{};
    check(k_.backward(&q, &k, &v, &o, lse_ ? lse_->data() : nullptr, &d_o, &c_, &dq, &dk, &dv, error.data(), error.size()), error,
          "backward");
  }
  void call_forward_backward() override {
    call();
    call_backward();
  }
  void release_backward_workspace() override {}
  Gradients<double> gradients() const override {
    Gradients<double> g;
    g.dq = convert_tensor<double>(dq_);
    g.dk = convert_tensor<double>(dk_);
    g.dv = convert_tensor<double>(dv_);
    return g;
  }
  xt::xtensor<double, 4> rounded_d_out() const override { return convert_tensor<double>(d_out_); }

 private:
  [[noreturn]] void no_backward(const std::string& why) const {
    throw Unsupported("backend '" + std::string(k_.name) + "' has no backward pass here: " + why);
  }
  // A status of the kernel's as an exception: Unsupported or Error, with its message ("" for the forward).
  void check(attn_status status, std::array<char, 512>& error, const char* which) const {
    error.back() = '\0';
    if (status == ATTN_OK) return;
    const std::string what = "backend '" + std::string(k_.name) + "' " + (*which ? std::string(which) + " " : "") +
                             (status == ATTN_UNSUPPORTED ? "does not support this call: " : "failed: ") +
                             (error[0] ? error.data() : "(no message)");
    if (status == ATTN_UNSUPPORTED) throw Unsupported(what);
    throw Error(what);
  }
  xt::xtensor<S, 4> d_out_, dq_, dk_, dv_;

  const attn_plugin& k_;
  Inputs<S> in_;
  Options opt_;
  Shape shape_;
  xt::xtensor<S, 4> out_;
  std::optional<xt::xtensor<double, 3>> lse_;
  std::vector<std::int64_t> valid_length_;
  attn_options c_{};
};

BackendInfo row_of_plugin(const attn_plugin& k, const std::string& path) {
  BackendInfo row;
  row.name = k.name;
  row.description = std::string(k.description) + " [plugin " + path + "; claims " + plugin_capability_names(k) + "]";
  row.source = path;
  row.traits.own_threads = (k.capabilities & ATTN_CAP_THREADS) != 0;
  row.traits.plugin = true;
  row.unsupported = [&k](const PrecisionInfo& p, Accumulate a, const Shape& s, const Options& opt) {
    return missing_capability(k, p, a, s, opt);
  };
  row.prepare = [&k](const PrecisionInfo& p, Accumulate a, const Inputs<double>& in, const Options& opt) {
    return prepare_rounded(p, in, opt, [&](auto st, auto&& rounded) -> std::unique_ptr<PreparedCall> {
      using S = typename decltype(st)::type;
      if (const std::string why = missing_capability(k, p, a, rounded.shape(), opt); !why.empty())
        throw Unsupported(why);
      auto c = std::make_unique<PluginCall<S>>(k, std::move(rounded), opt);
      c->set_accumulate(a);
      return c;
    });
  };
  row.workspace_bytes = [](const PrecisionInfo&, Accumulate, const Shape&, const Options&) { return std::size_t(0); };
  row.has_backward = has_backward(k);
  if (row.has_backward)
    row.backward_workspace_bytes = [](const PrecisionInfo&, Accumulate, const Shape&, const Options&) {
      return std::size_t(0);
    };
  return row;
}

bool valid_name(const char* name) {
  if (!name || !*name) return false;
  for (const char* c = name; *c; ++c)
    if (!std::isalnum(static_cast<unsigned char>(*c)) && *c != '-' && *c != '_') return false;
  return true;
}

std::mutex loaded_mutex;
std::map<std::string, std::vector<std::string>>& loaded() {  // canonical path -> its kernels' names
  static std::map<std::string, std::vector<std::string>> m;
  return m;
}

}  // namespace

std::string plugin_capability_names(const attn_plugin& k) {
  std::string s = plugin_capability_names(static_cast<unsigned long long>(k.capabilities));
  const char* dtypes[4] = {"fp64", "fp32", "bf16", "fp16"};
  const char* accs[3] = {"fp64", "fp32", "storage"};
  for (int d = 0; d < 4; ++d)
    if (k.accumulate_by_dtype[d]) {
      s += std::string(" ") + dtypes[d] + "@";
      for (int a = 0, n = 0; a < 3; ++a)
        if (k.accumulate_by_dtype[d] & ATTN_ACC_BIT(a)) s += (n++ ? "," : "") + std::string(accs[a]);
    }
  return s;
}

std::string plugin_capability_names(unsigned long long capabilities) {
  std::string s;
  for (const Flag& f : kFlags)
    if (capabilities & f.bit) {
      if (!s.empty()) s += ' ';
      s += f.word;
    }
  return s.empty() ? "nothing" : s;
}

// A Python kernel (`python:MODULE:FUNCTION`) through the bridge library (plugins/python): its descriptor
// is made by the bridge from the function's declaration, then checked and added like any plugin's.
const attn_plugin* python_kernel(const std::string& spec, const std::string& what) {
  const char* env = std::getenv("ATTN_PYTHON_BRIDGE");
  const std::string bridge = env && *env ? env : ATTN_PYTHON_BRIDGE;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(bridge, ec))
    throw Error(what + ": the Python bridge " + bridge + " is not built (plugins/python, needs python3-dev)");
  void* handle = dlopen(bridge.c_str(), RTLD_NOW | RTLD_GLOBAL);  // global: the interpreter's extension modules
  if (!handle) throw Error(what + ": the Python bridge cannot be loaded: " + dlerror());
  using kernel_fn = const attn_plugin* (*)(const char*, char*, std::size_t);
  auto get = reinterpret_cast<kernel_fn>(dlsym(handle, "attn_python_kernel"));
  if (!get) throw Error(what + ": " + bridge + " has no attn_python_kernel symbol");
  char error[1024] = "";
  const attn_plugin* k = get(spec.c_str(), error, sizeof error);
  if (!k) throw Error(what + ": " + error);
  return k;
}

std::vector<std::string> load_plugin(const std::string& path) {
  const std::string what = "plugin '" + path + "'";
  if (path.rfind("python:", 0) == 0) {
    std::lock_guard lock(loaded_mutex);
    if (auto it = loaded().find(path); it != loaded().end()) return it->second;
    const attn_plugin* k = python_kernel(path.substr(7), what);
    if (!valid_name(k->name))
      throw Error(what + ": its name must be letters, digits, '-' and '_' (got '" + std::string(k->name) + "')");
    if (!(k->capabilities & (ATTN_CAP_F64 | ATTN_CAP_F32 | ATTN_CAP_BF16 | ATTN_CAP_F16)))
      throw Error(what + " ('" + k->name + "') claims no storage type: it could run nothing");
    check_backward_claim(*k, what);
    for (const BackendInfo& b : all_backends())
      if (b.name == k->name)
        throw Error(what + ": a backend named '" + b.name + "' is registered already (from " + b.source + ")");
    add_backend(row_of_plugin(*k, path));
    loaded()[path] = {k->name};
    return loaded()[path];
  }
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec)) throw Error(what + ": no such file");
  const std::string canonical = std::filesystem::canonical(path, ec).string();
  std::lock_guard lock(loaded_mutex);
  if (auto it = loaded().find(canonical); it != loaded().end()) return it->second;
  // A path without a slash would make dlopen search the library path instead.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw Error(what + " cannot be loaded: " + dlerror());
  // The handle stays open for the life of the process: the rows point into it.
  auto get = reinterpret_cast<attn_plugin_get_fn>(dlsym(handle, ATTN_PLUGIN_ENTRY));
  if (!get)
    throw Error(what + " has no " ATTN_PLUGIN_ENTRY " symbol: not an attention-lab plugin (include/attn/plugin.h)");
  std::vector<BackendInfo> rows;
  std::vector<std::string> names;
  for (std::uint32_t i = 0;; ++i) {
    const attn_plugin* k = get(i);
    if (!k) break;
    if (i >= 64) throw Error(what + " lists more than 64 kernels (does attn_plugin_get return NULL past the last?)");
    const std::string which = what + ", kernel " + std::to_string(i);
    if (k->abi_version != 1 && k->abi_version != ATTN_PLUGIN_ABI_VERSION)
      throw Error(which + " has ABI version " + std::to_string(k->abi_version) + "; this attention-lab loads versions 1 " +
                  "and " + std::to_string(ATTN_PLUGIN_ABI_VERSION) + " (rebuild it against this include/attn/plugin.h)");
    if (!valid_name(k->name))
      throw Error(which + ": its name must be letters, digits, '-' and '_' (got '" + std::string(k->name ? k->name : "") + "')");
    if (!k->run) throw Error(which + " ('" + k->name + "') has no run function");
    check_backward_claim(*k, which);
    if (!k->description) throw Error(which + " ('" + k->name + "') has no description");
    if (!(k->capabilities & (ATTN_CAP_F64 | ATTN_CAP_F32 | ATTN_CAP_BF16 | ATTN_CAP_F16)) ||
        !(k->capabilities & (ATTN_CAP_ACC_FP64 | ATTN_CAP_ACC_FP32 | ATTN_CAP_ACC_STORAGE)))
      throw Error(which + " ('" + k->name + "') claims no storage type or no accumulation: it could run nothing");
    rows.push_back(row_of_plugin(*k, path));
    names.emplace_back(k->name);
  }
  if (rows.empty()) throw Error(what + " exports no kernel (" ATTN_PLUGIN_ENTRY "(0) returned NULL)");
  for (std::size_t i = 0; i < rows.size(); ++i) {  // all or nothing: no row is added if one name is taken
    for (std::size_t j = 0; j < i; ++j)
      if (rows[j].name == rows[i].name) throw Error(what + " exports two kernels named '" + rows[i].name + "'");
    for (const BackendInfo& b : all_backends())
      if (b.name == rows[i].name)
        throw Error(what + ": a backend named '" + b.name + "' is registered already (from " + b.source + ")");
  }
  for (BackendInfo& r : rows) add_backend(std::move(r));
  loaded()[canonical] = names;
  return names;
}

std::vector<std::string> load_plugins_from_env() {
  const char* env = std::getenv("ATTN_PLUGINS");
  std::vector<std::string> names;
  if (!env) return names;
  const std::string list = env;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(':', at), list.size());
    if (end > at)
      for (auto& n : load_plugin(list.substr(at, end - at))) names.push_back(n);
    at = end + 1;
  }
  return names;
}

}  // namespace attn
