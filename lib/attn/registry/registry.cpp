#include "attn/registry/registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <array>
#include <chrono>
#include <deque>
#include <mutex>

#include "attn/registry/backend_row.hpp"

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
}

namespace attn {

std::vector<BackendInfo> builtin_backends();  // backends/builtin.cpp

void set_blas_threads(int n) { openblas_set_num_threads(n); }
int blas_threads() { return openblas_get_num_threads(); }

namespace {
// OpenBLAS starts with a thread per core, and between calls its idle threads
// spin on sched_yield: a process that never asked for threads (a truth's or a
// bound's fp64 GEMM, `attn-lab invariance`) burnt half again its CPU time so
// (invariance --profile smoke: 52 CPU-s, 34 with one thread), taken from
// whatever shares the cores. One thread until a caller asks for more
// (Options::threads through ScopedBlasThreads, the CLI's --threads), unless
// the user's OPENBLAS_NUM_THREADS / OMP_NUM_THREADS say otherwise.
const bool kOneBlasThreadByDefault = [] {
  if (!std::getenv("OPENBLAS_NUM_THREADS") && !std::getenv("OMP_NUM_THREADS")) set_blas_threads(1);
  return true;
}();
}  // namespace

ScopedBlasThreads::ScopedBlasThreads(bool active, std::size_t threads) {
  if (!active) return;
  const int want = int(std::clamp<std::size_t>(threads, 1, 1024));
  const int now = blas_threads();
  if (want == now) return;
  before_ = now;
  set_blas_threads(want);
}

ScopedBlasThreads::~ScopedBlasThreads() {
  if (before_ > 0) set_blas_threads(before_);
}

std::string blas_info() {
  return std::string(openblas_get_config()) + "; core " + openblas_get_corename() + "; " +
         std::to_string(openblas_get_num_threads()) + " threads";
}

namespace {

template <class S>
constexpr PrecisionInfo info_of() {
  return {precision_traits<S>::name, precision_traits<S>::unit_roundoff, precision_traits<S>::max_finite,
          default_accumulate<S>, sizeof(S), precision_traits<S>::min_subnormal};
}
constexpr std::array<PrecisionInfo, 4> kPrecisions = {info_of<double>(), info_of<float>(), info_of<bf16>(),
                                                      info_of<fp16>()};
constexpr std::array<Accumulate, 3> kPolicies = {Accumulate::fp64, Accumulate::fp32, Accumulate::storage};

template <class Rows>
std::string joined_names(const Rows& rows) {
  std::string s;
  for (const auto& r : rows) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

// The backend table: built-in rows on first use, runtime rows appended
// (a deque: references to rows stay valid as rows are added).
struct Table {
  std::mutex mutex;
  std::deque<BackendInfo> rows;
  Table() {
    for (BackendInfo& b : builtin_backends()) rows.push_back(std::move(b));
  }
};
Table& table() {
  static Table t;
  return t;
}

const BackendInfo& with_trait(bool BackendTraits::*trait, const char* what) {
  for (const BackendInfo& b : all_backends())
    if (b.traits.*trait) return b;
  throw Error(std::string("no registered backend is ") + what);
}

}  // namespace

std::span<const PrecisionInfo> precisions() { return kPrecisions; }

const PrecisionInfo& precision_info(std::string_view name) {
  for (const PrecisionInfo& p : kPrecisions)
    if (p.name == name) return p;
  throw Error("unknown precision '" + std::string(name) + "' (known: " + joined_names(kPrecisions) + ")");
}

double accumulation_unit_roundoff(const PrecisionInfo& p, Accumulate a) {
  switch (a) {
    case Accumulate::fp64: return precision_traits<double>::unit_roundoff;
    case Accumulate::fp32: return precision_traits<float>::unit_roundoff;  // accumulate_t<S, fp32> is float
    case Accumulate::storage: return p.unit_roundoff;
  }
  return p.unit_roundoff;
}

double accumulation_max_finite(const PrecisionInfo& p, Accumulate a) {
  switch (a) {
    case Accumulate::fp64: return precision_traits<double>::max_finite;
    case Accumulate::fp32: return precision_traits<float>::max_finite;
    case Accumulate::storage: return p.max_finite;
  }
  return p.max_finite;
}

namespace {
// Half the spacing of a format's subnormals, the absolute error of rounding
// into them; fp64's, 2^-1075, is not a double (it would round to 0, and an
// error of one subnormal would fail a tolerance of 0): its upper neighbour.
double half_spacing(double min_subnormal) {
  return std::max(min_subnormal / 2, std::numeric_limits<double>::denorm_min());
}
}  // namespace

double accumulation_min_subnormal(const PrecisionInfo& p, Accumulate a) {
  switch (a) {
    case Accumulate::fp64: return precision_traits<double>::min_subnormal;
    case Accumulate::fp32: return precision_traits<float>::min_subnormal;
    case Accumulate::storage: return p.min_subnormal;
  }
  return p.min_subnormal;
}

namespace {
// A kernel that flushes subnormals (the bf16 dot product) errs by up to the
// smallest normal float, not half a subnormal spacing, wherever a product or
// partial sum underflows.
void take_flushes(RunReport& r) {
  r.eta_acc = std::max(r.eta_acc, double(std::numeric_limits<float>::min()));
  r.eta_weight = std::max(r.eta_weight, r.eta_acc);
}

// What a run's verdicts need to know of its arithmetic: unit roundoffs,
// underflow allowances, the precision, the policy and the backend's traits.
// A weight that underflows errs by eta_weight: the backends' vector exp
// (simd.hpp: xsimd's; AVX-512's float exp underflows gradually instead) may
// return 0 below the smallest normal number of the type it computes in
// (float, or double for fp64 accumulation): exp(-88) is
// 0 there, 6.05e-39 in std::exp (a half subnormal spacing would undercount
// it 1e7-fold: math's fp32 dK of a key whose weights were all below
// FLT_MIN erred by 2.6e-38).
void describe_rounding(RunReport& r, const PrecisionInfo& p, Accumulate acc, const BackendTraits& traits,
                       double u_acc, const KernelRounding& kernel) {
  r.u_acc = u_acc;
  r.u_store = p.unit_roundoff;
  const double sub = accumulation_min_subnormal(p, acc);
  r.eta_acc = traits.exact ? 0.0 : half_spacing(sub);
  r.eta_store = half_spacing(p.min_subnormal);
  const double flush = sub == precision_traits<double>::min_subnormal ? std::numeric_limits<double>::min()
                                                                      : std::numeric_limits<float>::min();
  r.eta_weight = traits.exact ? 0.0 : std::max(r.eta_acc, flush);
  r.kernel = kernel;
  if (kernel.flushes_subnormals) take_flushes(r);
  r.precision = p.name;
  r.accumulate = acc;
  r.traits = traits;
}
}  // namespace

std::span<const Accumulate> accumulate_policies() { return kPolicies; }

Accumulate parse_accumulate(std::string_view name) {
  for (Accumulate a : kPolicies)
    if (accumulate_name(a) == name) return a;
  throw Error("unknown accumulation '" + std::string(name) + "' (known: fp64, fp32, storage)");
}

Inputs<double> rounded_to(const PrecisionInfo& p, const Inputs<double>& in) {
  Inputs<double> out;
  with_storage(p, [&](auto st) { out = convert_inputs<double>(convert_inputs<typename decltype(st)::type>(in)); });
  return out;
}

xt::xtensor<double, 4> rounded_to(const PrecisionInfo& p, const xt::xtensor<double, 4>& x) {
  xt::xtensor<double, 4> out = x;
  with_storage(p, [&](auto st) {
    using S = typename decltype(st)::type;
    for (double& v : out) v = convert<double>(convert<S>(v));
  });
  return out;
}

Options BackendInfo::without_unreturnable_outputs(const PrecisionInfo& p, Accumulate a, const Shape& s,
                                                  Options opt) const {
  for (bool Options::*need : {&Options::need_weights, &Options::need_lse}) {
    Options without = opt;
    without.*need = false;
    if (opt.*need && unsupported_reason(p, a, s, opt) != unsupported_reason(p, a, s, without)) opt.*need = false;
  }
  return opt;
}

namespace {
// The exact backend's arithmetic: 50 digits.
double unit_roundoff_of(const BackendTraits& traits, const PrecisionInfo& p, Accumulate a) {
  return traits.exact ? 0x1p-166 : accumulation_unit_roundoff(p, a);
}
}  // namespace

double BackendInfo::unit_roundoff(const PrecisionInfo& p, Accumulate a) const { return unit_roundoff_of(traits, p, a); }

RunReport BackendInfo::run(std::string_view precision, Accumulate acc, const Inputs<double>& in, const Options& opt,
                           const CallObserver& obs, std::size_t warm_repeats) const {
  const PrecisionInfo& p = precision_info(precision);
  RunReport report;
  report.rounded_inputs = rounded_to(p, in);
  const std::unique_ptr<PreparedCall> call = prepare(p, acc, report.rounded_inputs, opt);
  if (obs.before) obs.before();
  const auto t0 = std::chrono::steady_clock::now();
  call->call();  // cold: the workspace's allocation and first touch are part of it
  const auto t1 = std::chrono::steady_clock::now();
  if (obs.after) obs.after();
  report.seconds = std::chrono::duration<double>(t1 - t0).count();
  report.out = call->out();
  report.weights = call->weights();
  report.lse = call->lse();
  report.workspace_bytes = call->workspace_bytes();
  for (std::size_t rep = 0; rep < warm_repeats; ++rep) {
    const auto w0 = std::chrono::steady_clock::now();
    call->call();
    report.warm_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  describe_rounding(report, p, acc, traits, unit_roundoff(p, acc), call->rounding());
  return report;
}

RunReport judged_as(RunReport r, Accumulate acc) {
  const PrecisionInfo& p = precision_info(r.precision);
  const BackendTraits traits = r.traits;
  describe_rounding(r, p, acc, traits, unit_roundoff_of(traits, p, acc), r.kernel);
  return r;
}

BackwardReport BackendInfo::run_backward(std::string_view precision, Accumulate acc, const Inputs<double>& in,
                                         const xt::xtensor<double, 4>& d_out, const Options& opt,
                                         const CallObserver& obs, std::size_t warm_repeats) const {
  if (!has_backward) throw Error("backend '" + name + "' has no backward pass");
  const PrecisionInfo& p = precision_info(precision);
  BackwardReport report;
  RunReport& fwd = report.forward;
  fwd.rounded_inputs = rounded_to(p, in);
  const std::unique_ptr<PreparedCall> call = prepare(p, acc, fwd.rounded_inputs, opt);
  call->prepare_backward(d_out);
  fwd.out = call->out();
  fwd.lse = call->lse();
  fwd.workspace_bytes = call->workspace_bytes();
  describe_rounding(fwd, p, acc, traits, unit_roundoff(p, acc), call->rounding());
  report.rounded_d_out = call->rounded_d_out();
  if (obs.before) obs.before();
  const auto t0 = std::chrono::steady_clock::now();
  call->call_backward();
  const auto t1 = std::chrono::steady_clock::now();
  if (obs.after) obs.after();
  report.seconds = std::chrono::duration<double>(t1 - t0).count();
  report.grads = call->gradients();
  report.workspace_bytes = report.grads.workspace_bytes;
  if (report.grads.rounding.flushes_subnormals) take_flushes(fwd);  // the gradients' bounds read fwd's
  for (std::size_t rep = 0; rep < warm_repeats; ++rep) {
    const auto w0 = std::chrono::steady_clock::now();
    call->call_backward();
    report.warm_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  return report;
}

const std::deque<BackendInfo>& all_backends() { return table().rows; }

const BackendInfo& backend_info(std::string_view name) {
  for (const BackendInfo& b : all_backends())
    if (b.name == name) return b;
  throw Error("unknown backend '" + std::string(name) + "' (registered: " + joined_names(all_backends()) + ")");
}

const BackendInfo& exact_backend() { return with_trait(&BackendTraits::exact, "exact (the ground truth)"); }
const BackendInfo& baseline_backend() { return with_trait(&BackendTraits::baseline, "the baseline"); }
const BackendInfo& fused_backend() {
  for (const BackendInfo& b : all_backends())
    if (b.traits.own_threads && b.traits.memory_independent_of_n && b.traits.weights_from_lse) return b;
  throw Error("no registered backend is fused (own threads, memory independent of n, weights from the logsumexp)");
}

const BackendInfo& gemm_backend() {
  for (const BackendInfo& b : all_backends())
    if (b.traits.uses_blas && !b.traits.tiled && !b.traits.exact && !b.traits.baseline) return b;
  throw Error("no registered backend is the standard GEMM attention (BLAS, not tiled)");
}

void add_backend(BackendInfo row) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  for (const BackendInfo& b : t.rows)
    if (b.name == row.name) throw Error("a backend named '" + row.name + "' is registered already");
  if (!row.prepare || !row.workspace_bytes) throw Error("backend '" + row.name + "': prepare and workspace_bytes are required");
  t.rows.push_back(std::move(row));
}

}  // namespace attn
