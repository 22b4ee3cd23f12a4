// Workers: every backend that runs threads of its own (BackendTraits::own_threads)
// gives bitwise the one-thread result with 2 and 3 workers, forward (query
// blocks, split-KV chunks and their merge, GQA, ragged last blocks, causal
// and window masks, sinks) and backward (key/value heads in parallel, and a
// head's key blocks in chunks whose dQ adds keep one order: one head over 2
// and 3 workers, and 4 heads over 3); and
// the independent truth, which runs heads in parallel, gives the same output
// twice. Small problems with many tiles, so that the workers interleave.
//
// The same executable is the ThreadSanitizer stage's test (scripts/test,
// build-tsan/): there a data race between workers (two workers sharing one
// scratch area, a merge reading a chunk another worker still writes) is
// reported and fails the run even where the racing writes happen to agree.
#include <gtest/gtest.h>

#include <string>

#include "attn/verify/independent.hpp"
#include "attn/core/random.hpp"
#include "attn/registry/registry.hpp"

namespace attn {
namespace {

struct Problem {
  std::string name;
  Shape shape;
  Options opt;
};

std::vector<Problem> problems() {
  std::vector<Problem> ps;
  auto add = [&](std::string name, Shape s, auto&& tweak) {
    Options o;
    o.need_lse = true;
    o.block_q = 16;  // many query blocks and key tiles for few rows
    o.block_k = 16;
    tweak(o);
    ps.push_back({std::move(name), s, o});
  };
  add("ragged causal, B = 2, H = 3", Shape{2, 3, 77, 77, 24, 20}, [](Options& o) { o.mask = mask::Causal{}; });
  add("one head, causal", Shape{1, 1, 77, 77, 24, 20}, [](Options& o) { o.mask = mask::Causal{}; });
  add("GQA 4:2, no mask", Shape{1, 4, 50, 130, 16, 16, 2}, [](Options&) {});
  add("split-KV decode, GQA 8:2", Shape{1, 8, 1, 1000, 32, 32, 2}, [](Options& o) { o.kv_splits = 5; });
  add("split-KV prefill, window", Shape{1, 2, 40, 300, 16, 24},
      [](Options& o) { o.kv_splits = 3, o.mask = mask::SlidingWindow{20}; });
  add("sinks, soft-cap", Shape{2, 2, 33, 45, 16, 16}, [](Options& o) {
        o.sinks = xt::xtensor<double, 1>{0.5, -1.0};
        o.softcap = 5.0;
      });
  return ps;
}

template <class X>
void expect_bitwise(const X& a, const X& b, const std::string& what) {
  EXPECT_TRUE(a == b) << what << ": differs from the one-thread result";
}

TEST(Threads, WorkersGiveTheOneThreadResultBitwise) {
  std::size_t checked = 0;
  for (const BackendInfo& b : all_backends()) {
    if (!b.traits.own_threads) continue;
    for (const Problem& p : problems()) {
      const Inputs<double> in = random_inputs(p.shape, 20261202);
      const xt::xtensor<double, 4> d_out = random_d_out(p.shape, 20261203);
      for (const char* precision : {"fp32", "bf16"}) {
        Options one = p.opt;
        one.threads = 1;
        const RunReport r1 = b.run(precision, precision_info(precision).default_accumulate, in, one);
        const bool backward = b.has_backward && p.shape.n_q > 1;
        BackwardReport g1;
        if (backward) g1 = b.run_backward(precision, precision_info(precision).default_accumulate, in, d_out, one);
        for (std::size_t threads : {2, 3}) {
          Options many = one;
          many.threads = threads;
          const std::string what = std::string(b.name) + " " + precision + " " + p.name + ", " +
                                   std::to_string(threads) + " threads";
          const RunReport r = b.run(precision, precision_info(precision).default_accumulate, in, many);
          expect_bitwise(r.out, r1.out, what + ": out");
          expect_bitwise(r.lse, r1.lse, what + ": lse");
          ++checked;
          if (!backward) continue;
          const BackwardReport g = b.run_backward(precision, precision_info(precision).default_accumulate, in, d_out, many);
          expect_bitwise(g.grads.dq, g1.grads.dq, what + ": dq");
          expect_bitwise(g.grads.dk, g1.grads.dk, what + ": dk");
          expect_bitwise(g.grads.dv, g1.grads.dv, what + ": dv");
          ++checked;
        }
      }
    }
  }
  std::printf("%zu multi-threaded runs compared bitwise with one thread\n", checked);
  EXPECT_GE(checked, 44u);  // streaming at least: 6 problems x 2 precisions x 2 thread counts, + 20 backward
}

TEST(Threads, TheIndependentTruthIsTheSameTwice) {
  const Problem p = problems().front();
  const Inputs<double> in = random_inputs(p.shape, 20261202);
  const Result<double> a = independent_attention(in, p.opt, IndependentPrecision::fp64);
  const Result<double> b = independent_attention(in, p.opt, IndependentPrecision::fp64);
  expect_bitwise(a.out, b.out, "independent fp64 truth: out");
  expect_bitwise(a.lse, b.lse, "independent fp64 truth: lse");
}

}  // namespace
}  // namespace attn
