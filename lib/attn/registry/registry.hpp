// The registry: two tables built once, from which the CLI, the tests, the
// benchmarks and the reports learn every precision and every backend.
//   precisions(): name, unit roundoff, largest finite value, default
//                 accumulation, bytes per value;
//   all_backends():   name, description, traits (values), and how to run it.
// A backend row is a value, not a C++ type: the built-in backends are rows
// made from their types (backends/builtin.cpp, the one list that names
// them), and a row added at run time (add_backend, e.g. a kernel loaded from
// a shared library) is a row like any other.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attn/registry/backend.hpp"

namespace attn {

// --- Precisions -----------------------------------------------------------------

struct PrecisionInfo {
  std::string_view name;         // fp64, fp32, bf16, fp16
  double unit_roundoff = 0;      // u = 2^-p for a p-bit significand
  double max_finite = 0;         // the largest finite value
  Accumulate default_accumulate = Accumulate::fp32;
  std::size_t bytes = 0;         // storage per value
  double min_subnormal = 0;      // the subnormals' spacing: rounding into them errs by up to half of it
};

// Every storage precision, widest first.
std::span<const PrecisionInfo> precisions();
// Throws Error naming the known precisions for an unknown name.
const PrecisionInfo& precision_info(std::string_view name);
// The unit roundoff of the arithmetic of storage `p` under policy `a`.
double accumulation_unit_roundoff(const PrecisionInfo& p, Accumulate a);
// The largest finite value that arithmetic holds.
double accumulation_max_finite(const PrecisionInfo& p, Accumulate a);
// Its subnormals' spacing.
double accumulation_min_subnormal(const PrecisionInfo& p, Accumulate a);
// Every accumulation policy; parse_accumulate throws Error for another name.
std::span<const Accumulate> accumulate_policies();
Accumulate parse_accumulate(std::string_view name);
// `in` rounded to storage `p` (round to nearest even) and widened back, exactly.
Inputs<double> rounded_to(const PrecisionInfo& p, const Inputs<double>& in);
// Each element of `x` rounded to storage `p` the same way, widened back.
xt::xtensor<double, 4> rounded_to(const PrecisionInfo& p, const xt::xtensor<double, 4>& x);

// --- Running a backend ------------------------------------------------------------

// Optional hooks around the backend call only (after input conversion and
// validation), e.g. to reset and read a heap high-water mark.
struct CallObserver {
  std::function<void()> before, after;
};

// A backend bound to one precision, policy, inputs (already rounded to the
// storage type) and options, owning its workspace: call() is exactly one
// backend call, what a benchmark times; the first call allocates the
// workspace, later ones reuse it.
class PreparedCall {
 public:
  virtual ~PreparedCall() = default;
  virtual void call() = 0;
  // Drops the workspace, so the next call allocates and touches it afresh.
  virtual void release_workspace() = 0;
  // The last call's results, widened to double exactly.
  virtual xt::xtensor<double, 4> out() const = 0;
  virtual std::optional<xt::xtensor<double, 4>> weights() const = 0;
  virtual std::optional<xt::xtensor<double, 3>> lse() const = 0;
  virtual std::size_t workspace_bytes() const = 0;  // what the last call took from its workspace
  virtual bool out_finite() const = 0;
  // The last call's arithmetic beyond the model (backend.hpp); the model itself unless a backend says.
  virtual KernelRounding rounding() const { return {}; }

  // The backward pass, for backends that have one (BackendInfo::has_backward;
  // the others throw Error). prepare_backward rounds the upstream gradient
  // dO to storage and runs the forward once with the logsumexp (outside any
  // timing), keeping its output and logsumexp; call_backward() is then
  // exactly one backward call, reusing its own workspace.
  virtual void prepare_backward(const xt::xtensor<double, 4>& d_out) = 0;
  virtual void call_backward() = 0;
  // A forward call (with the logsumexp) and then a backward call on its
  // result, as a training step runs them; requires prepare_backward().
  virtual void call_forward_backward() = 0;
  virtual void release_backward_workspace() = 0;
  virtual Gradients<double> gradients() const = 0;  // the last backward call's, widened to double exactly
  virtual xt::xtensor<double, 4> rounded_d_out() const = 0;  // dO as the backward saw it
};

struct BackendInfo;
struct BackwardReport;

struct RunReport {
  xt::xtensor<double, 4> out;
  std::optional<xt::xtensor<double, 4>> weights;
  std::optional<xt::xtensor<double, 3>> lse;
  std::size_t workspace_bytes = 0;
  double seconds = 0;  // wall time of the first (cold) backend call: allocation and first touch included
  std::vector<double> warm_seconds;  // further calls reusing the same, already touched workspace
  double u_acc = 0, u_store = 0;     // unit roundoff of accumulation and storage
  double eta_acc = 0, eta_store = 0;  // half their subnormals' spacing: the absolute error of rounding into them
  // A weight's absolute error where it underflows: the smallest normal number
  // of the type the vector exp computes in (it flushes below it), or eta_acc.
  double eta_weight = 0;
  // What the call's arithmetic did beyond that model (backend.hpp): weights rounded to u_weights before
  // P V, subnormals flushed (then eta_acc and eta_weight are FLT_MIN); the bounds take it.
  KernelRounding kernel;
  std::string_view precision;        // the storage precision's name
  Accumulate accumulate = Accumulate::fp64;
  BackendTraits traits;              // of the backend that ran
  Inputs<double> rounded_inputs;     // the inputs as the backend saw them (after rounding to storage)
  // How the output was stored, applied to another tensor (verify()'s distribution verdict rounds the
  // truth with it); empty: rounding to `precision` (a study that quantises the output itself, as the
  // emulated FP8 of the accuracy sweep, sets it).
  std::function<xt::xtensor<double, 4>(const xt::xtensor<double, 4>&)> store_output;
};

// One row of the backend table.
struct BackendInfo {
  std::string name, description;
  BackendTraits traits;
  // Rounds `in` to the storage precision, validates, and binds the call
  // (throws Error for bad input or an unsupported combination).
  std::function<std::unique_ptr<PreparedCall>(const PrecisionInfo&, Accumulate, const Inputs<double>&,
                                              const Options&)>
      prepare;
  // The scratch bytes one call takes (the backend's own model).
  std::function<std::size_t(const PrecisionInfo&, Accumulate, const Shape&, const Options&)> workspace_bytes;

  // Whether it has a backward pass, and the scratch bytes of one backward call.
  bool has_backward = false;
  std::function<std::size_t(const PrecisionInfo&, Accumulate, const Shape&, const Options&)> backward_workspace_bytes;

  // Why it cannot run a combination, "" when it can: a plugin runs what its
  // capabilities claim (plugin.hpp); a built-in row (no function) runs every
  // one. prepare() and run() throw Unsupported with this reason.
  std::function<std::string(const PrecisionInfo&, Accumulate, const Shape&, const Options&)> unsupported;
  std::string unsupported_reason(const PrecisionInfo& p, Accumulate a, const Shape& s, const Options& opt) const {
    return unsupported ? unsupported(p, a, s, opt) : std::string();
  }
  // `opt` without the optional outputs (need_weights, need_lse) whose request
  // alone makes the combination unsupported: what a caller that would like
  // them, but can do without, asks for (a plugin returns no weights, and
  // the logsumexp only if it claims it).
  Options without_unreturnable_outputs(const PrecisionInfo& p, Accumulate a, const Shape& s, Options opt) const;
  // "built-in", or the path of the plugin library it was loaded from.
  std::string source = "built-in";

  // The unit roundoff this backend computes in for storage `p` and policy `a`.
  double unit_roundoff(const PrecisionInfo& p, Accumulate a) const;
  // Rounds, validates, runs once cold (observed and timed), then
  // `warm_repeats` more calls timed into warm_seconds.
  RunReport run(std::string_view precision, Accumulate acc, const Inputs<double>& in, const Options& opt,
                const CallObserver& obs = {}, std::size_t warm_repeats = 0) const;
  // The backward pass: rounds, validates, runs the forward once (untimed),
  // then one cold backward call (observed and timed) and `warm_repeats`
  // more. Throws Error when the backend has no backward pass.
  BackwardReport run_backward(std::string_view precision, Accumulate acc, const Inputs<double>& in,
                              const xt::xtensor<double, 4>& d_out, const Options& opt, const CallObserver& obs = {},
                              std::size_t warm_repeats = 0) const;
};

// The same run described as if it had computed under policy `acc` (its unit roundoffs and underflow
// allowances replaced; results untouched): which policy's bound a kernel's results meet (the claim
// torch-flash-narrow-p judges PyTorch's flash kernel under fp32 and storage accumulation).
RunReport judged_as(RunReport r, Accumulate acc);

struct BackwardReport {
  RunReport forward;              // the forward the backward used (its out, lse, rounded inputs; seconds 0)
  Gradients<double> grads;        // dq, dk, dv (and dbias) widened to double
  xt::xtensor<double, 4> rounded_d_out;  // dO rounded to storage
  std::size_t workspace_bytes = 0;
  double seconds = 0;             // the cold backward call
  std::vector<double> warm_seconds;
};

// Every backend: the built-in rows in registry order, then the rows added at run time.
const std::deque<BackendInfo>& all_backends();
// Throws Error for a name that is not registered, listing the known ones.
const BackendInfo& backend_info(std::string_view name);
// The rows with a trait: the ground truth (exact) and the same-precision
// baseline of comparisons (baseline); throws if none is registered.
const BackendInfo& exact_backend();
const BackendInfo& baseline_backend();
// The fused one (FlashAttention's algorithm): its own threads, memory
// independent of n, weights rebuilt from the logsumexp; the layers' default.
const BackendInfo& fused_backend();
// The standard GEMM attention (BLAS, the whole score matrix at once, not
// tiled): what memory-efficient attention is compared with (Rabe & Staats
// 2021, FlashAttention).
const BackendInfo& gemm_backend();
// Adds a row at run time; throws Error if the name is taken. Rows added
// here are listed, run and tested like the built-in ones.
void add_backend(BackendInfo row);

// OpenBLAS's build configuration and the kernel core it selected at run time.
std::string blas_info();
// The threads OpenBLAS may use (the BLAS backends' Options::threads); one
// from the library's start unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is
// set (registry.cpp: OpenBLAS's idle threads spin).
void set_blas_threads(int n);
int blas_threads();
// OpenBLAS's thread count set to `threads` for a scope, then restored (when
// `active`): a BLAS backend's call runs Options::threads threads, not
// OpenBLAS's default of every core, whoever calls it (the CLI, a benchmark,
// a claim, Python).
class ScopedBlasThreads {
 public:
  ScopedBlasThreads(bool active, std::size_t threads);
  ~ScopedBlasThreads();
  ScopedBlasThreads(const ScopedBlasThreads&) = delete;
  ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;

 private:
  int before_ = 0;  // 0: nothing changed
};

}  // namespace attn
