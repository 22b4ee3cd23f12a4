// The compile-time lists of backends and precisions. Adding a backend is its
// file pair plus one line in `Backends`; the CLI, tests and benchmarks all
// iterate these lists and name no backend themselves.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "attn/backend.hpp"
#include "attn/metrics.hpp"
#include "attn/backends/blocked.hpp"
#include "attn/backends/math.hpp"
#include "attn/backends/naive.hpp"
#include "attn/backends/reference.hpp"
#include "attn/backends/streaming.hpp"

namespace attn {

template <class... Ts>
struct type_list {};

using Backends = type_list<backends::Naive, backends::Math, backends::Blocked, backends::Streaming,
                           backends::Reference>;
using Storages = type_list<double, float, bf16, fp16>;
inline constexpr std::array<Accumulate, 3> accumulate_policies = {Accumulate::fp64, Accumulate::fp32,
                                                                   Accumulate::storage};

// f(std::type_identity<T>{}) for each T of the list, in order.
template <class... Ts, class F>
constexpr void for_each_type(type_list<Ts...>, F&& f) {
  (f(std::type_identity<Ts>{}), ...);
}
template <class F>
constexpr void for_each_backend(F&& f) {
  for_each_type(Backends{}, f);
}
template <class F>
constexpr void for_each_storage(F&& f) {
  for_each_type(Storages{}, f);
}
// f.template operator()<P>() for each accumulation policy P.
template <class F>
constexpr void for_each_accumulate(F&& f) {
  f.template operator()<Accumulate::fp64>();
  f.template operator()<Accumulate::fp32>();
  f.template operator()<Accumulate::storage>();
}

// f.template operator()<B, S, P>() for every backend, storage and policy.
template <class F>
constexpr void for_each_configuration(F&& f) {
  for_each_backend([&](auto b) {
    for_each_storage([&](auto s) {
      for_each_accumulate([&]<Accumulate P>() {
        f.template operator()<typename decltype(b)::type, typename decltype(s)::type, P>();
      });
    });
  });
}

// The unit roundoff backend B computes in for storage S and policy P: a
// backend that declares `static constexpr bool exact = true` computes in 50
// digits (about 2^-166) whatever the policy.
template <class B, class S, Accumulate P>
constexpr double accumulation_unit_roundoff() {
  if constexpr (requires { B::exact; }) return 0x1p-166;
  else return precision_traits<accumulate_t<S, P>>::unit_roundoff;
}

// The bound on the weights backend B returns: rebuilt from the logsumexp
// when B declares `static constexpr bool weights_from_lse = true`.
template <class B>
constexpr double weights_bound(const ErrorBound& bound) {
  if constexpr (requires { B::weights_from_lse; }) return bound.weights_from_lse;
  else return bound.weights;
}

// --- Runtime selection by name (CLI, scripts) ---------------------------------

std::vector<std::string_view> backend_names();
std::vector<std::string_view> storage_names();
// Throws Error for a name that is not registered, listing the known ones.
Accumulate parse_accumulate(std::string_view name);

// Optional hooks around the backend call only (after input conversion and
// validation), e.g. to reset and read a heap high-water mark.
struct CallObserver {
  std::function<void()> before, after;
};

struct RunReport {
  xt::xtensor<double, 4> out;
  std::optional<xt::xtensor<double, 4>> weights;
  std::optional<xt::xtensor<double, 3>> lse;
  std::size_t workspace_bytes = 0;
  double seconds = 0;  // wall time of the first (cold) backend call: allocation and first touch included
  std::vector<double> warm_seconds;  // further calls reusing the same, already touched workspace
  double u_acc = 0, u_store = 0;  // unit roundoff of accumulation and storage
  Inputs<double> rounded_inputs;  // the inputs as the backend saw them (after rounding to storage)
};

// A backend behind a plain function pointer: rounds `in` to the storage
// type named `precision`, validates, runs with policy `acc`, and widens the
// results to double (exactly). The observer sees the first call only;
// `warm_repeats` more calls reuse its workspace and are timed into
// warm_seconds. Tests build handles for their own (mutant) backends too.
struct BackendHandle {
  std::string_view name;
  bool weights_from_lse = false;  // its weights are rebuilt from the logsumexp
  RunReport (*run)(std::string_view precision, Accumulate acc, const Inputs<double>& in, const Options& opt,
                   const CallObserver& obs, std::size_t warm_repeats) = nullptr;
};

template <AttentionBackend B>
RunReport run_typed(std::string_view precision, Accumulate acc, const Inputs<double>& in, const Options& opt,
                    const CallObserver& obs, std::size_t warm_repeats) {
  RunReport report;
  bool precision_found = false;
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
        report.warm_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
      }
      report.u_acc = accumulation_unit_roundoff<B, S, P>();
      report.u_store = precision_traits<S>::unit_roundoff;
    });
    report.rounded_inputs = convert_inputs<double>(rounded);
  });
  if (!precision_found) {
    std::string known;
    for (auto n : storage_names()) known += (known.empty() ? "" : ", ") + std::string(n);
    throw Error("unknown precision '" + std::string(precision) + "' (known: " + known + ")");
  }
  return report;
}

template <AttentionBackend B>
BackendHandle handle_of() {
  return {B::name, requires { B::weights_from_lse; }, &run_typed<B>};
}

// Every registered backend, in registry order.
std::vector<BackendHandle> registered_backends();
// Throws Error for a name that is not registered, listing the known ones.
const BackendHandle& backend_by_name(std::string_view name);

RunReport run_by_name(std::string_view backend, std::string_view precision, Accumulate acc,
                      const Inputs<double>& in, const Options& opt, const CallObserver& obs = {},
                      std::size_t warm_repeats = 0);

// OpenBLAS's build configuration and the kernel core it selected at run time.
std::string blas_info();

}  // namespace attn

// Explicit instantiation of a backend's run/workspace_bytes for every storage
// type and accumulation policy; one line at the end of each backend's .cpp.
#define ATTN_INSTANTIATE_BACKEND_SP(B, S, P)                                      \
  template ::attn::Result<S> B::run<S, P>(const ::attn::Inputs<S>&, const ::attn::Options&, ::attn::Workspace&); \
  template std::size_t B::workspace_bytes<S, P>(const ::attn::Shape&, const ::attn::Options&);
#define ATTN_INSTANTIATE_BACKEND_S(B, S)                          \
  ATTN_INSTANTIATE_BACKEND_SP(B, S, ::attn::Accumulate::fp64)     \
  ATTN_INSTANTIATE_BACKEND_SP(B, S, ::attn::Accumulate::fp32)     \
  ATTN_INSTANTIATE_BACKEND_SP(B, S, ::attn::Accumulate::storage)
#define ATTN_INSTANTIATE_BACKEND(B)                \
  ATTN_INSTANTIATE_BACKEND_S(B, double)            \
  ATTN_INSTANTIATE_BACKEND_S(B, float)             \
  ATTN_INSTANTIATE_BACKEND_S(B, ::attn::bf16)      \
  ATTN_INSTANTIATE_BACKEND_S(B, ::attn::fp16)
