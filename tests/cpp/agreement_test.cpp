// Every backend against the 50-digit reference on random problems (self and
// cross attention, every mask, d_k != d_v, logits up to 1e4), and the
// blocked and streaming backends across block sizes that do and do not
// divide n, including blocks larger than n.
//
// Every check is verify(): the worst-case forward error bound of metrics.hpp
// for the backend's accumulation and storage unit roundoff and this problem
// (output, logsumexp, weights, row sums): an error above it is a bug, not bad luck. Where that bound is no better than the
// trivial one (|dO| <= 2 max|V|: long rows accumulated in bf16), the check
// could not fail, so it is counted as uninformative and not claimed; the
// test requires every configuration to meet at least one informative check.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "attn/core/random.hpp"
#include "attn/registry/registry.hpp"
#include "attn/verify/verify.hpp"
#include "test_problems.hpp"

namespace attn {
namespace {

struct Problem {
  std::string name;
  Shape shape;
  Mask mask;
  std::uint64_t seed;
  double logit_scale = 1.0;
  bool wide_formats_only = false;  // logits beyond what bf16/fp16 products can hold
};

std::vector<Problem> problems() {
  return {
      {"self, no mask", {2, 2, 37, 37, 16, 16}, mask::None{}, 101},
      {"cross n_q < n_kv, causal, d_k != d_v", {1, 2, 23, 70, 24, 9}, mask::Causal{}, 102},
      {"cross n_q > n_kv, causal (fully masked rows)", {1, 2, 70, 23, 8, 12}, mask::Causal{}, 103},
      {"sliding window 5", {1, 3, 41, 41, 32, 32}, mask::SlidingWindow{5}, 104},
      {"key padding per batch", {3, 1, 19, 45, 16, 20}, mask::KeyPadding{{45, 7, 0}}, 105},
      {"boolean mask", {1, 2, 30, 50, 8, 8}, mask::Boolean{random_allowed(30, 50, 106)}, 106},
      {"ALiBi bias, causal by -inf", {1, 2, 33, 40, 16, 8}, mask::AdditiveBias{alibi_bias(33, 40, 0.25)}, 107},
      {"short rows (bf16 accumulation bound informative)", {1, 2, 9, 12, 4, 6}, mask::None{}, 108},
      {"large logits 1e2", {1, 2, 31, 47, 64, 32}, mask::Causal{}, 109, 1e2, true},
      {"large logits 1e4", {1, 2, 31, 47, 64, 32}, mask::None{}, 110, 1e4, true},
  };
}

struct Tally {
  std::size_t informative = 0, uninformative = 0;
};

// verify() of one result, each failed part reported; returns whether the output check was informative.
bool expect_verified(const RunReport& r, const Options& opt, const GroundTruth& truth, const std::string& what) {
  const Check c = verify(r, opt, truth);
  EXPECT_TRUE(c.out.all_finite_where_ref_finite) << what << ": non-finite output";
  // Each verdict is per row; a failure names the deciding row, its error and its tolerance.
  const auto expect = [&](const RowVerdict& v, const char* part) {
    EXPECT_LE(v.error, v.tolerance) << what << ": " << part << ", row " << v.row << " (" << c.criterion
                                    << "; probabilistic bound " << c.probable.out << ", baseline error "
                                    << c.baseline_error << ")";
  };
  expect(c.out_worst, "output error above the derived bound");
  if (r.lse) expect(c.lse_worst, "logsumexp error above the derived bound");
  if (r.weights) {
    expect(c.weights_worst, r.traits.weights_from_lse ? "weights rebuilt from lse above the derived bound"
                                                      : "weights above the derived bound");
    expect(c.row_sum_worst, "row sums above the derived bound");
  }
  EXPECT_TRUE(c.within) << what;
  expect(c.out_tight, "output error above the tight tolerance");
  if (r.lse) expect(c.lse_tight, "logsumexp above the tight tolerance");
  if (r.weights) {
    expect(c.weights_tight, "weights above the tight tolerance");
    expect(c.row_sum_tight, "row sums above the tight tolerance");
  }
  EXPECT_TRUE(c.tight_within) << what;
  return c.informative;
}

TEST(Agreement, EveryBackendMatchesTheReferenceWithinItsDerivedBound) {
  std::map<std::string, Tally> tally;
  for (const Problem& p : problems()) {
    std::printf("problem '%s': %s, mask %s, seed %llu, logit scale %g\n", p.name.c_str(), to_string(p.shape).c_str(),
                mask_name(p.mask).c_str(), static_cast<unsigned long long>(p.seed), p.logit_scale);
    const Inputs<double> in = random_inputs(p.shape, p.seed, p.logit_scale);
    Options opt;
    opt.mask = p.mask;
    opt.need_weights = opt.need_lse = true;
    for (const PrecisionInfo& precision : precisions()) {
      if (p.wide_formats_only && precision.unit_roundoff > 0x1p-24) continue;  // fp64, fp32 only
      const GroundTruth truth = ground_truth(rounded_to(precision, in), opt, precision.unit_roundoff);
      ASSERT_EQ(truth.kind, TruthKind::digits50) << "these problems are meant for the 50-digit reference";
      for (const BackendInfo& b : all_backends())
        for (Accumulate acc : accumulate_policies()) {
          const std::string config =
              b.name + " " + std::string(precision.name) + " accumulate " + std::string(accumulate_name(acc));
          const RunReport r = b.run(precision.name, acc, in, opt);
          Tally& t = tally[config];
          (expect_verified(r, opt, truth, p.name + " / " + config) ? t.informative : t.uninformative)++;
        }
    }
  }
  for (const auto& [config, t] : tally) {
    std::printf("%-34s informative checks %zu, uninformative %zu\n", config.c_str(), t.informative, t.uninformative);
    EXPECT_GT(t.informative, 0u) << config << " never met an informative bound";
  }
}

// Every tiled backend for block sizes that divide n, do not, and exceed it,
// against the reference within the same derived bound.
TEST(BlockSizes, ResultsDependOnBlockSizeOnlyThroughRounding) {
  const Shape shape{2, 1, 37, 53, 12, 10};
  const std::uint64_t seed = 201;
  std::printf("shape %s, seed %llu\n", to_string(shape).c_str(), static_cast<unsigned long long>(seed));
  const Inputs<double> in = random_inputs(shape, seed);
  const std::pair<std::size_t, std::size_t> blocks[] = {{1, 1}, {3, 7}, {16, 16}, {37, 53}, {64, 64}, {100, 200}};
  std::size_t tiled = 0;
  for (const Mask& m : {Mask{mask::None{}}, Mask{mask::Causal{}}, Mask{mask::KeyPadding{{53, 20}}},
                        Mask{mask::SlidingWindow{9}}}) {
    Options opt;
    opt.mask = m;
    opt.need_weights = opt.need_lse = true;
    for (const PrecisionInfo& precision : precisions()) {
      const GroundTruth truth = ground_truth(rounded_to(precision, in), opt, precision.unit_roundoff);
      for (auto [b_q, b_k] : blocks) {
        Options o = opt;
        o.block_q = b_q;
        o.block_k = b_k;
        for (const BackendInfo& b : all_backends()) {
          if (!b.traits.tiled) continue;
          ++tiled;
          expect_verified(b.run(precision.name, Accumulate::fp32, in, o), o, truth,
                          b.name + " " + mask_name(m) + " " + std::string(precision.name) + " B_q=" +
                              std::to_string(b_q) + " B_k=" + std::to_string(b_k));
        }
      }
    }
  }
  EXPECT_GT(tiled, 0u) << "no tiled backend is registered";
}

// The compensated double-double reference against 50 digits. Its dots and
// sums carry ~106 bits; exp is double's (<= 1 ulp = 2u, u = 2^-53), so each
// e_j and the row sum l are within 2u relative, each weight e_j / l within
// 4u, the output sum_j p_j v_j within 4u max|v|, and its rounding to double
// adds u |o|: 5u max|v| in all, at any n.
TEST(Reference, CompensatedDoubleMatchesFiftyDigitsWithinFiveUnits) {
  for (const Problem& p : problems()) {
    const Inputs<double> in = random_inputs(p.shape, p.seed, p.logit_scale);
    Options opt;
    opt.mask = p.mask;
    const Result<double> exact = backends::reference_attention(in, opt);
    const Result<double> comp = backends::compensated_reference_attention(in, opt);
    double max_v = 0;
    for (double x : in.v) max_v = std::max(max_v, std::fabs(x));
    const ErrorStats e = compare(comp.out, exact.out, 0x1p-53);
    EXPECT_LE(e.max_abs, 5 * 0x1p-53 * max_v) << p.name;
    std::printf("%-50s compensated vs 50 digits: %.3g (%.2f u max|v|)\n", p.name.c_str(), e.max_abs,
                e.max_abs / (0x1p-53 * max_v));
  }
}

// The same call twice gives the same bits; a reused workspace changes
// nothing; the workspace a call takes is the backend's own model.
TEST(Determinism, RepeatedCallsAreBitwiseIdentical) {
  const Inputs<double> in = random_inputs({1, 2, 45, 61, 16, 16}, 301);
  Options opt;
  opt.mask = mask::Causal{};
  const PrecisionInfo& fp32 = precision_info("fp32");
  for (const BackendInfo& b : all_backends()) {
    const auto call = b.prepare(fp32, Accumulate::fp32, rounded_to(fp32, in), opt);
    call->call();
    const xt::xtensor<double, 4> first = call->out();
    call->call();
    EXPECT_TRUE(first == call->out()) << b.name;
    EXPECT_EQ(call->workspace_bytes(), b.workspace_bytes(fp32, Accumulate::fp32, in.shape(), opt)) << b.name;
  }
}

}  // namespace
}  // namespace attn
