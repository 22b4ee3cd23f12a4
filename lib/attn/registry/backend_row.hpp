// A registry row made from a backend type: the bridge from the compile-time
// backends (AttentionBackend) to the table of values in registry.hpp. Used by
// backends/builtin.cpp for the built-in rows and by tests for their own
// (mutant) backends; nothing else needs the storage types at compile time.
#pragma once

#include <type_traits>

#include "attn/registry/registry.hpp"

namespace attn {

template <class... Ts>
struct type_list {};
using Storages = type_list<double, float, bf16, fp16>;

// f(std::type_identity<S>{}) for the storage type S named by `p`.
template <class F, class... Ts>
void with_storage_in(const PrecisionInfo& p, F&& f, type_list<Ts...>) {
  bool found = false;
  ((found = found || (precision_traits<Ts>::name == p.name ? (f(std::type_identity<Ts>{}), true) : false)), ...);
  if (!found) throw Error("precision '" + std::string(p.name) + "' has no storage type");
}
template <class F>
void with_storage(const PrecisionInfo& p, F&& f) {
  with_storage_in(p, f, Storages{});
}

// f.template operator()<P>() for the policy `a`.
template <class F>
void with_accumulate(Accumulate a, F&& f) {
  switch (a) {
    case Accumulate::fp64: return f.template operator()<Accumulate::fp64>();
    case Accumulate::fp32: return f.template operator()<Accumulate::fp32>();
    case Accumulate::storage: return f.template operator()<Accumulate::storage>();
  }
}

// A row's prepare(): `in` rounded to the storage type S of `p` and
// validated, then make(std::type_identity<S>{}, Inputs<S>&&) binds the call.
template <class Make>
std::unique_ptr<PreparedCall> prepare_rounded(const PrecisionInfo& p, const Inputs<double>& in, const Options& opt,
                                              Make&& make) {
  std::unique_ptr<PreparedCall> call;
  with_storage(p, [&](auto st) {
    using S = typename decltype(st)::type;
    Inputs<S> rounded = convert_inputs<S>(in);
    validate(rounded, opt);
    call = make(st, std::move(rounded));
  });
  return call;
}

template <AttentionBackend B, class S, Accumulate P>
class TypedCall final : public PreparedCall {
 public:
  TypedCall(Inputs<S> in, const Options& opt) : in_(std::move(in)), opt_(opt) {}
  // OpenBLAS's threads for this call: Options::threads for a backend whose
  // parallelism is OpenBLAS's (math, blocked); one inside a backend with
  // workers of its own (streaming's GEMM tiles in fp64 or storage
  // accumulation), whose workers already take the cores: OpenBLAS threading
  // inside them oversubscribed the cores and made the tiles' bits depend on
  // the thread count (attn-lab invariance, threads).
  std::size_t blas_threads() const { return B::traits.own_threads ? 1 : opt_.threads; }
  void call() override {
    const ScopedBlasThreads blas(B::traits.uses_blas, blas_threads());
    last_ = B::template run<S, P>(in_, opt_, ws_);
  }
  void release_workspace() override { ws_ = Workspace{}; }
  xt::xtensor<double, 4> out() const override { return convert_tensor<double>(last_.out); }
  std::optional<xt::xtensor<double, 4>> weights() const override { return last_.weights; }
  std::optional<xt::xtensor<double, 3>> lse() const override { return last_.lse; }
  std::size_t workspace_bytes() const override { return last_.workspace_bytes; }
  KernelRounding rounding() const override { return last_.rounding; }
  bool out_finite() const override {
    for (const S& x : last_.out)
      if (!std::isfinite(static_cast<double>(x))) return false;
    return true;
  }

  void prepare_backward(const xt::xtensor<double, 4>& d_out) override {
    if constexpr (HasBackward<B>) {
      d_out_ = convert_tensor<S>(d_out);
      Options fwd = opt_;
      fwd.need_lse = true;
      fwd.need_weights = false;
      Workspace ws;
      const ScopedBlasThreads blas(B::traits.uses_blas, blas_threads());
      forward_ = B::template run<S, P>(in_, fwd, ws);
      validate_backward(in_, forward_.out, *forward_.lse, d_out_, opt_);
      last_ = forward_;
      if (!opt_.need_lse) last_.lse.reset();
    } else {
      no_backward();
    }
  }
  void call_backward() override {
    if constexpr (HasBackward<B>) {
      if (!forward_.lse) throw Error("call_backward() before prepare_backward()");
      const ScopedBlasThreads blas(B::traits.uses_blas, blas_threads());
      grads_ = B::template backward<S, P>(in_, Saved<S>{forward_.out, *forward_.lse}, d_out_, opt_, backward_ws_);
    } else {
      no_backward();
    }
  }
  void call_forward_backward() override {
    if constexpr (HasBackward<B>) {
      if (!forward_.lse) throw Error("call_forward_backward() before prepare_backward()");
      Options fwd = opt_;
      fwd.need_lse = true;
      fwd.need_weights = false;
      const ScopedBlasThreads blas(B::traits.uses_blas, blas_threads());
      forward_ = B::template run<S, P>(in_, fwd, ws_);
      grads_ = B::template backward<S, P>(in_, Saved<S>{forward_.out, *forward_.lse}, d_out_, opt_, backward_ws_);
    } else {
      no_backward();
    }
  }
  void release_backward_workspace() override { backward_ws_ = Workspace{}; }
  Gradients<double> gradients() const override {
    return {convert_tensor<double>(grads_.dq), convert_tensor<double>(grads_.dk), convert_tensor<double>(grads_.dv),
            grads_.dbias, grads_.dsinks, grads_.workspace_bytes, grads_.rounding};
  }
  xt::xtensor<double, 4> rounded_d_out() const override { return convert_tensor<double>(d_out_); }

 private:
  [[noreturn]] static void no_backward() { throw Error("backend '" + std::string(B::name) + "' has no backward pass"); }

  Inputs<S> in_;
  Options opt_;
  Workspace ws_, backward_ws_;
  Result<S> last_, forward_;
  xt::xtensor<S, 4> d_out_;
  Gradients<S> grads_;
};

template <AttentionBackend B>
BackendInfo row_of() {
  BackendInfo row;
  row.name = std::string(B::name);
  row.description = std::string(B::description);
  row.traits = B::traits;
  row.prepare = [](const PrecisionInfo& p, Accumulate a, const Inputs<double>& in, const Options& opt) {
    return prepare_rounded(p, in, opt, [&](auto st, auto&& rounded) {
      using S = typename decltype(st)::type;
      std::unique_ptr<PreparedCall> call;
      with_accumulate(a, [&]<Accumulate P>() { call = std::make_unique<TypedCall<B, S, P>>(std::move(rounded), opt); });
      return call;
    });
  };
  row.workspace_bytes = [](const PrecisionInfo& p, Accumulate a, const Shape& s, const Options& opt) {
    std::size_t bytes = 0;
    with_storage(p, [&](auto st) {
      using S = typename decltype(st)::type;
      with_accumulate(a, [&]<Accumulate P>() { bytes = B::template workspace_bytes<S, P>(s, opt); });
    });
    return bytes;
  };
  if constexpr (HasBackward<B>) {
    row.has_backward = true;
    row.backward_workspace_bytes = [](const PrecisionInfo& p, Accumulate a, const Shape& s, const Options& opt) {
      std::size_t bytes = 0;
      with_storage(p, [&](auto st) {
        using S = typename decltype(st)::type;
        with_accumulate(a, [&]<Accumulate P>() { bytes = B::template backward_workspace_bytes<S, P>(s, opt); });
      });
      return bytes;
    };
  }
  return row;
}

}  // namespace attn
