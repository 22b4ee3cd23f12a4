// What every backend promises: the AttentionBackend concept, the Result it
// returns, the workspace it accounts for, and the constexpr cost model.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "attn/core/problem.hpp"
#include "attn/core/workspace.hpp"

namespace attn {

// What a call's arithmetic does beyond its precision's and policy's model
// (storage rounding, accumulation in u_acc), reported by the backend for the
// call that ran; the bounds take it (verify/metrics.hpp). The default is the
// model itself.
struct KernelRounding {
  // The unit roundoff the weights were rounded to before P V, when narrower
  // than the accumulation (the bf16 dot-product kernels round P~ to bf16); 0:
  // kept in the accumulation type.
  double u_weights = 0;
  // Subnormal operands and results of the tile products flushed to zero (the
  // bf16 dot-product instruction does, whatever MXCSR says).
  bool flushes_subnormals = false;
  bool operator==(const KernelRounding&) const = default;
};

template <class S>
struct Result {
  xt::xtensor<S, 4> out;                          // [B, H, n_q, d_v]
  std::optional<xt::xtensor<double, 4>> weights;  // [B, H, n_q, n_kv] if need_weights
  std::optional<xt::xtensor<double, 3>> lse;      // [B, H, n_q] if need_lse; -inf on masked rows
  std::size_t workspace_bytes = 0;                // scratch the backend allocated for the call
  KernelRounding rounding;                        // of the call's arithmetic (default: the model's)
};

// The gradients of a scalar loss L through O = attention(Q, K, V), given the
// upstream gradient dO = dL/dO (backward pass, per head):
//   P = softmax(S), S = scale Q K^T + mask
//   dV = P^T dO;  dP = dO V^T;  D_i = sum_l dO_il O_il (= sum_j P_ij dP_ij)
//   dS = P o (dP - D 1^T);  dQ = scale dS' K;  dK = scale dS'^T Q;  d(bias) = dS
//   dS' = dS o (1 - (S_cap / c)^2) with soft-capping (S_cap the capped
//   score), else dS; with grouped K/V heads, dK and dV of a K/V head sum
//   over its g query heads
// Masked scores get dS = 0 exactly: a fully masked row has dQ_i = 0, a key
// no query sees has dK_j = dV_j = 0.
template <class S>
struct Gradients {
  xt::xtensor<S, 4> dq, dk, dv;  // shapes of Q, K, V
  // [n_q, n_kv] when Options::need_dbias: the gradient of the additive bias
  // mask, which is broadcast over batch and heads, so the sum of dS over them.
  std::optional<xt::xtensor<double, 2>> dbias;
  // [H] when Options::sinks: the gradient of each query head's sink logit,
  // d(sink_h) = -sum over batch and rows i of exp(sink_h - lse_i) D_i.
  std::optional<xt::xtensor<double, 1>> dsinks;
  std::size_t workspace_bytes = 0;  // scratch the backward call allocated
  // What the backward's arithmetic did beyond the model (default: nothing):
  // u_weights, the unit roundoff P and dS' were rounded to before dV = P^T dO,
  // dQ = scale dS' K and dK = scale dS'^T Q (streaming's bf16 backward rounds
  // both to bf16); flushes_subnormals, its products flushed subnormals (dP's
  // too). The gradients' bounds take it (verify/metrics.hpp).
  KernelRounding rounding;
};

// What the backward pass takes from the forward: the output (rounded to
// storage) and the logsumexp (Result::lse, which the forward returns when
// Options::need_lse). Backends that recompute their own softmax may ignore it.
template <class S>
struct Saved {
  const xt::xtensor<S, 4>& out;
  const xt::xtensor<double, 3>& lse;
};

// What a backend is, as values: the registry, CLI, tests, benchmarks and
// reports decide by these, never by a backend's name or type.
struct BackendTraits {
  bool exact = false;             // computes in 50 digits whatever the policy (the ground truth; costly)
  bool baseline = false;          // the textbook algorithm: the same-precision baseline of comparisons
  bool weights_from_lse = false;  // weights are rebuilt from the logsumexp in a second pass
  bool tiled = false;             // takes block sizes (Options::block_q, Options::block_k)
  bool own_threads = false;       // runs Options::threads workers of its own
  bool uses_blas = false;         // GEMMs through OpenBLAS, which takes the thread count
  bool memory_independent_of_n = false;  // workspace O(tiles), not O(n_q n_kv)
  bool plugin = false;            // loaded from a shared library (plugin.hpp): forward only, no weights
};

// A backend is a type with a name, a one-line description, its traits, and
//   run<S, P>(inputs, options, workspace) -> Result<S>, for every storage S and policy P
//   workspace_bytes<S, P>(shape, options) -> the scratch bytes run() takes from the workspace
// run() requires validate(inputs, options) to have passed (run_checked does both),
// and allocates nothing in its loops: its scratch comes from the workspace.
// A backend with a backward pass also has (HasBackward)
//   backward<S, P>(inputs, saved, d_out, options, workspace) -> Gradients<S>
//   backward_workspace_bytes<S, P>(shape, options)
// with the same rules; it requires validate_backward() to have passed.
template <class B>
concept AttentionBackend = requires(const Inputs<float>& in, const Options& o, const Shape& s, Workspace& ws) {
  { B::name } -> std::convertible_to<std::string_view>;
  { B::description } -> std::convertible_to<std::string_view>;
  { B::traits } -> std::convertible_to<BackendTraits>;
  { B::template run<float, Accumulate::fp32>(in, o, ws) } -> std::same_as<Result<float>>;
  { B::template workspace_bytes<float, Accumulate::fp32>(s, o) } -> std::same_as<std::size_t>;
};

template <class B>
concept HasBackward = AttentionBackend<B> && requires(const Inputs<float>& in, const Saved<float>& saved,
                                                      const xt::xtensor<float, 4>& d_out, const Options& o,
                                                      const Shape& s, Workspace& ws) {
  { B::template backward<float, Accumulate::fp32>(in, saved, d_out, o, ws) } -> std::same_as<Gradients<float>>;
  { B::template backward_workspace_bytes<float, Accumulate::fp32>(s, o) } -> std::same_as<std::size_t>;
};

// validate() and then run(): the entry point for callers outside the library.
template <AttentionBackend B, class S, Accumulate P>
Result<S> run_checked(const Inputs<S>& in, const Options& o, Workspace& ws) {
  validate(in, o);
  return B::template run<S, P>(in, o, ws);
}
template <AttentionBackend B, class S, Accumulate P>
Result<S> run_checked(const Inputs<S>& in, const Options& o) {
  Workspace ws;
  return run_checked<B, S, P>(in, o, ws);
}

// --- Workspace --------------------------------------------------------------

// The most scratch memory a backend may allocate in one call: a quarter of
// physical memory, or ATTN_MEMORY_CAP bytes when that is set.
std::size_t workspace_cap();
// Throws Error when `bytes` exceeds workspace_cap(), naming the backend and
// what the memory is for, so a huge score matrix fails cleanly.
void check_workspace(std::string_view backend, std::string_view what, std::size_t bytes);

// --- Cost model ---------------------------------------------------------------

// Scores of one head: the n_q x n_kv matrix the naive algorithm holds.
constexpr std::uint64_t scores_per_head(const Shape& s) { return std::uint64_t(s.n_q) * s.n_kv; }

// Bytes of an explicit score matrix of one head stored in T.
template <class T>
constexpr std::uint64_t score_matrix_bytes(const Shape& s) {
  return scores_per_head(s) * sizeof(T);
}

// Floating-point operations of Q K^T and P V: 2 n_q n_kv (d_k + d_v) per
// head, which is the usual 4 B H n_q n_kv d when d_k = d_v = d; halved for
// causal self-attention (the FlashAttention benchmarks' convention).
constexpr double flops(const Shape& s, bool causal = false) {
  double f = 2.0 * double(s.batch) * double(s.heads) * double(s.n_q) * double(s.n_kv) *
             double(s.d_k + s.d_v);
  return causal ? f / 2 : f;
}

// The backward pass as the FlashAttention-2 paper counts it (Dao 2023,
// sec. 4): five matrix products of 2 n_q n_kv d per head (S, dP, dV, dQ, dK;
// S and dQ, dK over d_k, dP and dV over d_v), 2.5x the forward; halved for causal.
constexpr double backward_flops(const Shape& s, bool causal = false) {
  return 2.5 * flops(s, causal);
}

// Dimensions per head of a d_model split over `heads` heads.
constexpr std::size_t head_dim(std::size_t d_model, std::size_t heads) { return d_model / heads; }

}  // namespace attn
