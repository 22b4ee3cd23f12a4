#include "attn/verify/invariance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include <xtensor/xview.hpp>

#include "attn/core/random.hpp"
#include "attn/io/npy.hpp"
#include "attn/verify/metrics.hpp"

namespace attn::invariance {

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::bitwise: return "bitwise";
    case Verdict::within: return "within bounds";
    case Verdict::beyond: return "BEYOND";
  }
  return "?";
}

std::optional<Outcome> check_into(Json& cell, const Invariance& inv, const Subject& s, std::uint64_t seed,
                                  const std::string& beyond_dir) {
  Outcome o;
  try {
    o = inv.check(s, seed);
  } catch (const Unsupported& e) {
    cell["verdict"] = "not applicable";
    cell["reason"] = e.what();
    return std::nullopt;
  }
  cell["verdict"] = verdict_name(o.verdict);
  cell["compared"] = o.compared;
  cell["differing"] = o.differing;
  cell["max_diff"] = o.max_diff;
  cell["tolerance"] = o.tolerance;
  cell["max_abs"] = o.max_abs;
  // bounds at or above the values compared: "within" could not have failed
  if (o.verdict == Verdict::within) cell["informative"] = o.tolerance < o.max_abs;
  if (!o.first.empty()) cell["first"] = o.first;
  if (!o.note.empty()) cell["note"] = o.note;
  if (o.verdict == Verdict::beyond) {
    std::filesystem::create_directories(beyond_dir);
    const std::filesystem::path dir(beyond_dir);
    save_npy_atomic((dir / "q.npy").string(), o.problem.q);
    save_npy_atomic((dir / "k.npy").string(), o.problem.k);
    save_npy_atomic((dir / "v.npy").string(), o.problem.v);
    write_file_atomic((dir / "case.json").string(), dump(cell) + "\n");
    cell["counterexample"] = beyond_dir;
  }
  return o;
}

namespace {

// The problems' sizes: N = 300 positions is more than one key tile of every
// backend's default blocks in both passes (streaming's forward B_k = 256 on
// AVX-512 and 96 on AVX2, whose B_q = 512 stacks 256 positions of two heads
// in a block, so that grouped and repeated heads' blocks differ; backward
// 96 x 256 and 64 x 96; the BLAS backends' 64-row blocks), with two query
// heads per K/V head (grouped) and d = 32. Not the avx512amx variant's bf16,
// fp32 and fp16 forwards, whose key tiles of 1024 take the 300 keys in one
// (their strips and several key tiles: unit_test's Tiles.StripsChangeNoBit
// and scripts/mutate's check matrix; the other variants' tiles, the same
// code, here).
constexpr std::size_t N = 300, D = 32, H = 4, H_KV = 2;
// A chunk boundary that is no multiple of any block size.
constexpr std::size_t C = 100;

// Grouped K/V heads where the backend claims them; else one K/V head per
// query head, so that a kernel without GQA (a plugin's) still gets every
// invariance but the GQA one.
Shape shape(const Subject& s, std::size_t batch, std::size_t n_q, std::size_t n_kv) {
  const Shape grouped{batch, H, n_q, n_kv, D, D, H_KV};
  const bool claims = s.backend->unsupported_reason(*s.precision, s.accumulate, grouped, Options{}).empty();
  return Shape{batch, H, n_q, n_kv, D, D, claims ? H_KV : H};
}

// A problem's inputs and upstream gradient (seed, seed + 1).
struct Problem {
  Inputs<double> in;
  xt::xtensor<double, 4> d_out;
};
Problem problem(const Shape& sh, std::uint64_t seed) { return {random_inputs(sh, seed), random_d_out(sh, seed + 1)}; }

// One computation's results and their probabilistic bounds (metrics.hpp).
struct Side {
  xt::xtensor<double, 4> out;
  std::optional<xt::xtensor<double, 3>> lse;
  // the output's and logsumexp's bounds per query row (ErrorBounds::rows_probable), [B, H, n_q] flattened
  std::vector<double> tol_out, tol_lse;
  double row_out(std::size_t b, std::size_t h, std::size_t i) const { return tol_out[(b * out.shape(1) + h) * out.shape(2) + i]; }
  double row_lse(std::size_t b, std::size_t h, std::size_t i) const { return tol_lse[(b * out.shape(1) + h) * out.shape(2) + i]; }
  Gradients<double> grads;
  double tol_dq = 0, tol_dk = 0, tol_dv = 0;
};

Side forward(const Subject& s, const Inputs<double>& in, Options opt) {
  opt.need_lse = true;  // unless the backend cannot return it (a plugin's): then the output alone is compared
  opt = s.backend->without_unreturnable_outputs(*s.precision, s.accumulate, in.shape(), opt);
  const RunReport r = s.backend->run(s.precision->name, s.accumulate, in, opt);  // Unsupported: not applicable
  const ErrorBounds b = error_bounds(r.rounded_inputs, opt, r.u_acc, r.u_store, r.kernel);
  Side x;
  x.out = r.out;
  x.lse = r.lse;
  for (const ErrorBound& row : b.rows_probable) {
    x.tol_out.push_back(row.out);
    x.tol_lse.push_back(row.lse);
  }
  return x;
}

// The run's own gradients stand in for the exact ones in the bound's storage
// rounding term (first order: they differ by the bound itself), as the
// properties' probable_bound does.
Side backward(const Subject& s, const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt) {
  if (!s.backend->has_backward) throw Unsupported("backend '" + s.backend->name + "' has no backward pass");
  const BackwardReport r = s.backend->run_backward(s.precision->name, s.accumulate, in, d_out, opt);
  const RunReport& f = r.forward;
  const GradientBound g = gradient_bounds(f.rounded_inputs, r.rounded_d_out, r.grads, opt, f.u_acc, f.u_store,
                                          f.eta_acc, f.eta_store, f.eta_weight, f.kernel, r.grads.rounding)
                              .probable;
  Side x;
  x.grads = r.grads;
  x.tol_dq = g.dq;
  x.tol_dk = g.dk;
  x.tol_dv = g.dv;
  return x;
}

Side run(const Subject& s, const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt) {
  return s.backward ? backward(s, in, d_out, opt) : forward(s, in, opt);
}

// Element-by-element comparison of pairs of computations into an Outcome.
class Compare {
 public:
  explicit Compare(Outcome& o) : o_(o) {}
  void pair(std::string name, const Inputs<double>& problem) {
    name_ = std::move(name);
    problem_ = &problem;
  }
  void element(std::string_view tensor, std::array<std::size_t, 4> at, std::size_t rank, double a, double b,
               double tol) {
    ++o_.compared;
    o_.max_abs = std::max({o_.max_abs, std::fabs(a), std::fabs(b)});
    if (std::memcmp(&a, &b, sizeof a) == 0) return;
    ++o_.differing;
    const double diff = std::fabs(a - b);
    const bool beyond = !(diff <= tol);  // NaN against a number is beyond
    if (!(diff <= o_.max_diff)) {
      o_.max_diff = diff;
      o_.tolerance = tol;
    }
    if (o_.first.empty() || (beyond && o_.verdict != Verdict::beyond)) {
      std::ostringstream s;
      s.precision(17);
      s << name_ << ", " << tensor << "[";
      for (std::size_t x = 0; x < rank; ++x) s << (x ? ", " : "") << at[x];
      s << "]: " << a << " vs " << b << " (difference " << diff << ", bounds " << tol << ")";
      o_.first = s.str();
      o_.pair = name_;
      o_.problem = *problem_;
    }
    if (beyond) o_.verdict = Verdict::beyond;
    else if (o_.verdict == Verdict::bitwise) o_.verdict = Verdict::within;
  }

  // Rows [0, rows) of every head: a's rows (ba, h, ia + r) against b's (bb, h, ib + r):
  // the output and the logsumexp (forward), or dQ (backward).
  void rows(const Subject& s, const Side& a, std::size_t ba, std::size_t ia, const Side& b, std::size_t bb,
            std::size_t ib, std::size_t rows) {
    const auto& x = s.backward ? a.grads.dq : a.out;
    const auto& y = s.backward ? b.grads.dq : b.out;
    for (std::size_t h = 0; h < x.shape(1); ++h)
      for (std::size_t r = 0; r < rows; ++r) {
        const double tol = s.backward ? a.tol_dq + b.tol_dq : a.row_out(ba, h, ia + r) + b.row_out(bb, h, ib + r);
        for (std::size_t c = 0; c < x.shape(3); ++c)
          element(s.backward ? "dq" : "out", {ba, h, ia + r, c}, 4, x(ba, h, ia + r, c), y(bb, h, ib + r, c), tol);
        if (!s.backward && a.lse && b.lse)
          element("lse", {ba, h, ia + r, 0}, 3, (*a.lse)(ba, h, ia + r), (*b.lse)(bb, h, ib + r),
                  a.row_lse(ba, h, ia + r) + b.row_lse(bb, h, ib + r));
      }
  }
  // The backward's dK and dV of keys [0, keys) of every K/V head.
  void keys(const Subject& s, const Side& a, std::size_t ba, const Side& b, std::size_t bb, std::size_t keys) {
    if (!s.backward) return;
    for (std::size_t hk = 0; hk < a.grads.dk.shape(1); ++hk)
      for (std::size_t j = 0; j < keys; ++j) {
        for (std::size_t c = 0; c < a.grads.dk.shape(3); ++c)
          element("dk", {ba, hk, j, c}, 4, a.grads.dk(ba, hk, j, c), b.grads.dk(bb, hk, j, c), a.tol_dk + b.tol_dk);
        for (std::size_t c = 0; c < a.grads.dv.shape(3); ++c)
          element("dv", {ba, hk, j, c}, 4, a.grads.dv(ba, hk, j, c), b.grads.dv(bb, hk, j, c), a.tol_dv + b.tol_dv);
      }
  }
  // Everything both computed: every row, and (backward) every key.
  void all(const Subject& s, const Side& a, const Side& b) {
    const auto& x = s.backward ? a.grads.dq : a.out;
    for (std::size_t bb = 0; bb < x.shape(0); ++bb) {
      rows(s, a, bb, 0, b, bb, 0, x.shape(2));
      if (s.backward) keys(s, a, bb, b, bb, a.grads.dk.shape(2));
    }
  }

 private:
  Outcome& o_;
  std::string name_;
  const Inputs<double>* problem_ = nullptr;
};

Options causal() {
  Options o;
  o.mask = mask::Causal{};
  return o;
}

// Query rows [q0, q1) of every head with all of the keys.
Inputs<double> query_rows(const Inputs<double>& in, std::size_t q0, std::size_t q1) {
  return {xt::xtensor<double, 4>(xt::view(in.q, xt::all(), xt::all(), xt::range(q0, q1), xt::all())), in.k, in.v};
}
xt::xtensor<double, 4> rows_of(const xt::xtensor<double, 4>& t, std::size_t q0, std::size_t q1) {
  return xt::view(t, xt::all(), xt::all(), xt::range(q0, q1), xt::all());
}

// --- The invariances ----------------------------------------------------------

// The same call again: a second call on the same prepared call (its
// workspace reused), a call after its workspace was released (fresh
// memory), and a call prepared anew.
Outcome run_to_run(const Subject& s, std::uint64_t seed) {
  const Shape sh = shape(s, 2, N, N);
  const auto [in, d_out] = problem(sh, seed);
  Options opt = causal();
  const Side ref = run(s, in, d_out, opt);  // (throws Unsupported first, where it does)
  opt.need_lse = true;
  opt = s.backend->without_unreturnable_outputs(*s.precision, s.accumulate, sh, opt);
  const auto call = s.backend->prepare(*s.precision, s.accumulate, rounded_to(*s.precision, in), opt);
  auto take = [&] {
    Side x = ref;  // the bounds
    if (s.backward) {
      x.grads = call->gradients();
    } else {
      x.out = call->out();
      x.lse = call->lse();
    }
    return x;
  };
  auto once = [&] { s.backward ? call->call_backward() : call->call(); };
  if (s.backward) call->prepare_backward(d_out);
  once();
  const Side first = take();
  once();
  const Side again = take();
  if (s.backward) call->release_backward_workspace();
  else call->release_workspace();
  once();
  const Side fresh = take();
  Outcome o;
  Compare c(o);
  c.pair("a call prepared anew vs the first call", in);
  c.all(s, ref, first);
  c.pair("the first call vs a second (workspace reused)", in);
  c.all(s, first, again);
  c.pair("the first call vs one after the workspace was released", in);
  c.all(s, first, fresh);
  return o;
}

// 1 thread against 2, and against more threads than this machine's cores.
Outcome threads(const Subject& s, std::uint64_t seed) {
  const Shape sh = shape(s, 2, N, N);
  const auto [in, d_out] = problem(sh, seed);
  Options opt = causal();
  const Side one = run(s, in, d_out, opt);
  Outcome o;
  Compare c(o);
  const std::size_t many = std::max<std::size_t>(2, std::thread::hardware_concurrency()) + 3;
  for (std::size_t t : {std::size_t(2), many}) {
    opt.threads = t;
    const Side other = run(s, in, d_out, opt);
    c.pair("1 thread vs " + std::to_string(t), in);
    c.all(s, one, other);
  }
  // and (backward) one batch entry's 2 K/V heads over 3 workers and over the
  // many, in key tiles of 32 (10 of them): streaming then splits each head's
  // key blocks among the workers, and their adds to dQ (3 or more per query
  // block) must keep the order of one worker
  if (s.backward) {
    const Problem one = problem(shape(s, 1, N, N), seed + 2);
    Options tiles = causal();
    tiles.block_k = 32;
    const Side tiles_one = run(s, one.in, one.d_out, tiles);
    for (std::size_t t : {std::size_t(3), many}) {
      tiles.threads = t;
      const Side other = run(s, one.in, one.d_out, tiles);
      c.pair("B = 1, key tiles of 32: 1 thread vs " + std::to_string(t), one.in);
      c.all(s, tiles_one, other);
    }
  }
  // and split-KV (forward): 2 positions over 4100 keys in 7 key chunks, and
  // in as many as the backend chooses
  if (!s.backward) {
    const Problem dec = problem(shape(s, 2, 2, 4100), seed + 2);
    for (std::size_t k : {7, 0}) {
      Options split;
      split.kv_splits = k;
      const Side split_one = forward(s, dec.in, split);
      for (std::size_t t : {std::size_t(2), many}) {
        split.threads = t;
        const Side other = forward(s, dec.in, split);
        c.pair((k ? "7 key chunks" : "the backend's own key split") + std::string(": 1 thread vs ") + std::to_string(t),
               dec.in);
        c.all(s, split_one, other);
      }
    }
  }
  return o;
}

// A sequence alone (n_kv = its N keys, no mask) against the same sequence
// at batch index 1 and 2 of three: of the same length (no mask), and of
// other lengths (n_kv = N + 37, key padding: lengths N + 37, N, N - 29;
// skipped, and said so, for a backend without key padding).
Outcome batch(const Subject& s, std::uint64_t seed) {
  const Problem x = problem(shape(s, 1, N, N), seed);
  const Side alone = run(s, x.in, x.d_out, Options{});
  Outcome o;
  Compare c(o);
  for (bool padded : {false, true}) {
    const Problem others = problem(shape(s, 3, N, padded ? N + 37 : N), seed + 2);
    for (std::size_t at : {1, 2}) {
      Inputs<double> in = others.in;
      xt::xtensor<double, 4> d_out = others.d_out;
      xt::view(in.q, at) = xt::view(x.in.q, 0);
      xt::view(d_out, at) = xt::view(x.d_out, 0);
      xt::view(in.k, at, xt::all(), xt::range(0, N)) = xt::view(x.in.k, 0);
      xt::view(in.v, at, xt::all(), xt::range(0, N)) = xt::view(x.in.v, 0);
      Options opt;
      if (padded)
        opt.mask = mask::KeyPadding{at == 1 ? std::vector<std::size_t>{N + 37, N, N - 29}
                                            : std::vector<std::size_t>{N + 37, N - 29, N}};
      Side in_batch;
      try {
        in_batch = run(s, in, d_out, opt);
      } catch (const Unsupported& e) {
        if (!padded) throw;
        o.note = std::string("batches of other lengths not compared: ") + e.what();
        return o;
      }
      c.pair("alone vs at batch index " + std::to_string(at) + " of 3 " +
                 (padded ? "of other lengths (N + 37, N - 29; key padding)" : "of the same length"),
             x.in);
      c.rows(s, alone, 0, 0, in_batch, at, 0, N);
      c.keys(s, alone, 0, in_batch, at, N);
    }
  }
  // A decode step over 6500 keys alone against the same step at index 5 of
  // a batch of 8 (a backend whose split-KV count followed the batch's size
  // split the one and not the other). 6500: more than 8 of the largest
  // decode key tiles (768 on AVX-512) with split-KV's chunks of at least 4
  // tiles, so that alone the step splits (2100 keys, before the decode tiles,
  // split no more: the mutant st-split-from-batch survived).
  constexpr std::size_t steps_kv = 6500;
  const Problem step = problem(shape(s, 1, 1, steps_kv), seed + 4), steps = problem(shape(s, 8, 1, steps_kv), seed + 5);
  Problem in = steps;
  xt::view(in.in.q, 5) = xt::view(step.in.q, 0);
  xt::view(in.in.k, 5) = xt::view(step.in.k, 0);
  xt::view(in.in.v, 5) = xt::view(step.in.v, 0);
  xt::view(in.d_out, 5) = xt::view(step.d_out, 0);
  const Side one = run(s, step.in, step.d_out, Options{}), eight = run(s, in.in, in.d_out, Options{});
  c.pair("a decode step over " + std::to_string(steps_kv) + " keys alone vs at index 5 of 8", step.in);
  c.rows(s, one, 0, 0, eight, 5, 0, 1);
  c.keys(s, one, 0, eight, 5, steps_kv);
  return o;
}

// Causal attention (bottom-right aligned) over N positions against: the
// last position alone (a decode step, n_q = 1 over every key), the positions
// from C on (chunked prefill: n_q = N - C over every key), and the first C
// positions as a problem of their own (n_q = n_kv = C). Backward: dQ of
// those rows (dK and dV sum over other rows in each).
Outcome query_block(const Subject& s, std::uint64_t seed) {
  const Shape sh = shape(s, 1, N, N);
  const auto [in, d_out] = problem(sh, seed);
  const Side full = run(s, in, d_out, causal());
  Outcome o;
  Compare c(o);
  const Side last = run(s, query_rows(in, N - 1, N), rows_of(d_out, N - 1, N), causal());
  c.pair("prefill vs the last position alone (decode)", in);
  c.rows(s, full, 0, N - 1, last, 0, 0, 1);
  const Side chunk = run(s, query_rows(in, C, N), rows_of(d_out, C, N), causal());
  c.pair("prefill vs positions " + std::to_string(C) + " on (chunked prefill)", in);
  c.rows(s, full, 0, C, chunk, 0, 0, N - C);
  Inputs<double> prefix{rows_of(in.q, 0, C), rows_of(in.k, 0, C), rows_of(in.v, 0, C)};
  const Side first = run(s, prefix, rows_of(d_out, 0, C), causal());
  c.pair("prefill vs the first " + std::to_string(C) + " positions alone", in);
  c.rows(s, full, 0, 0, first, 0, 0, C);
  return o;
}

// Split-KV (forward): two query positions over 4100 keys, the keys in one
// chunk against the backend's own choice (kv_splits 0) and against 3.
Outcome key_split(const Subject& s, std::uint64_t seed) {
  const Shape sh = shape(s, 1, 2, 4100);
  const Inputs<double> in = random_inputs(sh, seed);
  Options opt;
  opt.kv_splits = 1;
  const Side whole = forward(s, in, opt);
  Outcome o;
  Compare c(o);
  for (std::size_t k : {0, 3}) {
    opt.kv_splits = k;
    const Side split = forward(s, in, opt);
    c.pair(std::string("one key chunk vs ") + (k ? std::to_string(k) + " chunks" : "the backend's own split count"), in);
    c.all(s, whole, split);
  }
  return o;
}

// Grouped-query attention (2 query heads per K/V head) against multi-head
// attention on K and V with each head repeated. Backward: dQ (a grouped
// dK and dV sum the repeated heads').
Outcome gqa(const Subject& s, std::uint64_t seed) {
  const Shape sh{1, H, N, N, D, D, H_KV};
  const auto [in, d_out] = problem(sh, seed);
  Inputs<double> repeated{in.q, xt::xtensor<double, 4>::from_shape({1, H, N, D}),
                          xt::xtensor<double, 4>::from_shape({1, H, N, D})};
  for (std::size_t h = 0; h < H; ++h) {
    xt::view(repeated.k, 0, h) = xt::view(in.k, 0, h / (H / H_KV));
    xt::view(repeated.v, 0, h) = xt::view(in.v, 0, h / (H / H_KV));
  }
  const Side grouped = run(s, in, d_out, causal()), multi = run(s, repeated, d_out, causal());
  Outcome o;
  Compare c(o);
  c.pair("grouped (H_kv = 2) vs K/V repeated (H_kv = 4)", in);
  c.rows(s, grouped, 0, 0, multi, 0, 0, N);
  // Under a sliding window of W keys (where the backend has one): the first
  // key a block's rows see is no longer key 0 and follows the block's first
  // position, which a backend that stacks the g heads in one block places
  // elsewhere than the repeated heads' blocks (streaming: B_q / g positions
  // against B_q).
  constexpr std::size_t W = 100;
  Options window;
  window.mask = mask::SlidingWindow{W};
  try {
    const Side w_grouped = run(s, in, d_out, window), w_multi = run(s, repeated, d_out, window);
    c.pair("under a sliding window of " + std::to_string(W) + " keys, grouped vs K/V repeated", in);
    c.rows(s, w_grouped, 0, 0, w_multi, 0, 0, N);
  } catch (const Unsupported& e) {
    o.note = std::string("the sliding window not compared: ") + e.what();
  }
  // A decode step likewise, over 2060 keys: a last tile of 12 keys past a
  // multiple of 16, so that the decode kernels sum some of its keys with the
  // other keys of a row group of 2 and alone for a group of 1. The same step
  // under a soft-cap too: streaming takes a plain step in one pass
  // (decode_fused), whose steps of keys do not depend on the group, and an
  // elementwise one in the two passes (docs/performance.md, sections 58, 61).
  const Shape st{1, H, 1, 2060, D, D, H_KV};
  const auto [step, d_step] = problem(st, seed + 2);
  Inputs<double> step_repeated{step.q, xt::xtensor<double, 4>::from_shape({1, H, 2060, D}),
                               xt::xtensor<double, 4>::from_shape({1, H, 2060, D})};
  for (std::size_t h = 0; h < H; ++h) {
    xt::view(step_repeated.k, 0, h) = xt::view(step.k, 0, h / (H / H_KV));
    xt::view(step_repeated.v, 0, h) = xt::view(step.v, 0, h / (H / H_KV));
  }
  const Side step_grouped = run(s, step, d_step, Options{}), step_multi = run(s, step_repeated, d_step, Options{});
  c.pair("a decode step over 2060 keys, grouped vs K/V repeated", step);
  c.rows(s, step_grouped, 0, 0, step_multi, 0, 0, 1);
  Options capped;
  capped.softcap = 30.0;
  try {
    const Side cap_grouped = run(s, step, d_step, capped), cap_multi = run(s, step_repeated, d_step, capped);
    c.pair("a decode step over 2060 keys under a soft-cap of 30, grouped vs K/V repeated", step);
    c.rows(s, cap_grouped, 0, 0, cap_multi, 0, 0, 1);
  } catch (const Unsupported& e) {
    o.note += std::string(o.note.empty() ? "" : "; ") + "the soft-capped decode step not compared: " + e.what();
  }
  return o;
}

}  // namespace

const std::vector<Invariance>& invariances() {
  static const std::vector<Invariance> table = {
      {"run_to_run", "run to run",
       "the same call again: prepared anew, its workspace reused, after the workspace was released (B = 2, "
       "H = 4, H_kv = 2, n = 300, d = 32, causal)",
       true, true, run_to_run},
      {"threads", "thread count",
       "1 thread against 2 and against more threads than the cores (the same problem; and 2 positions over 4100 "
       "keys in 7 key chunks and in the backend's own split, forward; and B = 1 in key tiles of 32 against 3 "
       "threads and the many, backward)",
       true, true, threads},
      {"batch", "batch composition",
       "a sequence alone against the same sequence at batch index 1 and 2 of three of its length, and of three of "
       "other lengths (key padding, where the backend has it); a decode step over 6500 keys alone against it at "
       "index 5 of 8",
       true, true, batch},
      {"query_block", "query block",
       "a causal prefill's rows against the last position alone (decode), the positions from 100 on (chunked "
       "prefill) and the first 100 positions alone (backward: dQ)",
       true, true, query_block},
      {"key_split", "key split",
       "split-KV: 2 positions over 4100 keys in one chunk against the backend's own split count and against 3",
       true, false, key_split},
      {"gqa", "GQA = repeated K/V",
       "grouped K/V heads against the same heads repeated (causal, and under a sliding window of 100 keys where the "
       "backend has one), and a decode step over 2060 keys likewise (backward: dQ)",
       true, true, gqa},
  };
  return table;
}

}  // namespace attn::invariance
