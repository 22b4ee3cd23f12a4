// Unit tests of the contract: the bf16 conversion over all 65,536 bit
// patterns, per-operation rounding of the storage types, validation errors,
// mask semantics (causal bottom-right alignment, window, key padding, fully
// masked rows), the workspace cap and the .npy reader's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <xtensor/xnpy.hpp>

#include "attn/backends/kernels.hpp"
#include "attn/io/npy.hpp"
#include "attn/core/parallel.hpp"
#include "attn/core/random.hpp"
#include "attn/registry/registry.hpp"
#include "attn/simd/simd.hpp"
#include "attn/verify/verify.hpp"

namespace attn {
namespace {

// --- bf16 --------------------------------------------------------------------

float bits_to_float(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }
bool is_nan_bits(std::uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

TEST(Bf16, EveryBitPatternRoundTripsExactly) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const float f = bits_to_float(std::uint16_t(b));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(float(bf16::from_bits(std::uint16_t(b)))), b << 16) << std::hex << b;
    if (is_nan_bits(std::uint16_t(b))) {
      EXPECT_TRUE(is_nan_bits(bf16(f).bits)) << std::hex << b;
      EXPECT_TRUE(is_nan_bits(bf16(double(f)).bits)) << std::hex << b;
    } else {
      EXPECT_EQ(bf16(f).bits, b) << std::hex << b;
      EXPECT_EQ(bf16(double(f)).bits, b) << std::hex << b;
    }
  }
}

// The rule, stated independently of the implementation: a value strictly
// between two neighbours rounds to the nearer; the midpoint to the one with
// an even last bit. Checked between every pair of neighbouring finite
// patterns (and from the largest finite value towards infinity), from float
// and from double, where double inputs just off the midpoint catch a
// double-rounding conversion.
TEST(Bf16, EveryMidpointRoundsToNearestEven) {
  std::size_t pairs = 0;
  for (std::uint32_t lo = 0; lo < 0x7f80u; ++lo) {
    for (std::uint16_t sign : {std::uint16_t(0), std::uint16_t(0x8000)}) {
      const std::uint16_t a = std::uint16_t(lo | sign), b = std::uint16_t((lo + 1) | sign);
      const double x = bits_to_float(a), y = bits_to_float(b);  // y = +-inf for the last pair
      const double mid = std::isinf(y) ? x + (x - bits_to_float(std::uint16_t(a - 1))) / 2 : (x + y) / 2;
      const std::uint16_t even = (a & 1u) ? b : a;
      EXPECT_EQ(bf16(float(mid)).bits, even) << std::hex << a;
      EXPECT_EQ(bf16(mid).bits, even) << std::hex << a;
      const double towards_a = std::nextafter(mid, x), towards_b = std::nextafter(mid, 2 * mid - x);
      EXPECT_EQ(bf16(towards_a).bits, a) << std::hex << a;
      EXPECT_EQ(bf16(towards_b).bits, b) << std::hex << a;
      EXPECT_EQ(bf16(std::nextafter(float(mid), float(x))).bits, a) << std::hex << a;
      EXPECT_EQ(bf16(std::nextafter(float(mid), float(2 * mid - x))).bits, b) << std::hex << a;
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, 2u * 0x7f80u);
}

TEST(Bf16, ArithmeticRoundsEveryOperation) {
  // 256 + 1 = 257 lies halfway between bf16 neighbours 256 and 258: ties to even.
  EXPECT_EQ(float(bf16(256.0f) + bf16(1.0f)), 256.0f);
  EXPECT_EQ(float(bf16(256.0f) + bf16(3.0f)), 260.0f);  // 259 -> 260 (even)
  EXPECT_EQ(float(bf16(1.0f) / bf16(3.0f)), float(bf16(1.0 / 3.0)));
}

TEST(Fp16, ArithmeticRoundsEveryOperation) {
  volatile float big = 2048, one = 1;  // volatile: no constant folding in wider precision
  const fp16 a = fp16(big), b = fp16(one);
  EXPECT_EQ(double((a + b) - a), 0.0);  // 2049 is a tie between 2048 and 2050: to even
  fp16 s = 0;
  for (int i = 0; i < 5000; ++i) s += b;
  EXPECT_EQ(double(s), 2048.0);  // the running sum stalls where the spacing reaches 2
}

// --- Validation ------------------------------------------------------------------

Inputs<double> small(std::size_t n_q = 3, std::size_t n_kv = 4, std::size_t d_k = 5, std::size_t d_v = 2) {
  return random_inputs({2, 2, n_q, n_kv, d_k, d_v}, /*seed=*/7);
}

void expect_error(const Inputs<double>& in, const Options& opt, const std::string& fragment) {
  try {
    validate(in, opt);
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Validate, AcceptsAWellFormedProblemWithEveryMask) {
  Inputs<double> in = small();
  Options opt;
  EXPECT_NO_THROW(validate(in, opt));
  opt.mask = mask::Causal{};
  EXPECT_NO_THROW(validate(in, opt));
  opt.mask = mask::SlidingWindow{2};
  EXPECT_NO_THROW(validate(in, opt));
  opt.mask = mask::KeyPadding{{4, 0}};
  EXPECT_NO_THROW(validate(in, opt));
  opt.mask = mask::Boolean{xt::xtensor<std::uint8_t, 2>::from_shape({3, 4})};
  EXPECT_NO_THROW(validate(in, opt));
  auto bias = xt::xtensor<double, 2>::from_shape({3, 4});
  bias.fill(-std::numeric_limits<double>::infinity());
  opt.mask = mask::AdditiveBias{bias};
  EXPECT_NO_THROW(validate(in, opt));
}

TEST(Validate, NamesTheOffendingTensorAndDimension) {
  Options opt;
  {
    Inputs<double> in = small();
    in.k = random_inputs({2, 2, 4, 6, 6, 2}, 1).k;  // d_k 6 vs 5
    expect_error(in, opt, "K d_k");
  }
  {
    Inputs<double> in = small();
    in.v = random_inputs({2, 2, 3, 5, 5, 2}, 1).v;  // n_kv 5 vs 4
    expect_error(in, opt, "V n_kv");
  }
  {
    Inputs<double> in = small();
    in.k = random_inputs({1, 2, 3, 4, 5, 2}, 1).k;  // batch 1 vs 2
    expect_error(in, opt, "K batch");
  }
  {
    Inputs<double> in = small();
    in.v = random_inputs({2, 3, 3, 4, 5, 2}, 1).v;  // heads 3 vs 2
    expect_error(in, opt, "V heads");
  }
  expect_error(small(0), opt, "Q has a zero-sized dimension n");
  expect_error(small(3, 4, 0), opt, "Q has a zero-sized dimension d");
  expect_error(small(3, 4, 5, 0), opt, "V has a zero-sized dimension d");
  {
    Inputs<double> in = small();
    in.q(1, 0, 2, 3) = std::nan("");
    expect_error(in, opt, "Q holds a non-finite value nan at [1, 0, 2, 3]");
    Options allow;
    allow.allow_nonfinite = true;
    EXPECT_NO_THROW(validate(in, allow));
  }
  {
    Inputs<double> in = small();
    in.v(0, 1, 0, 1) = std::numeric_limits<double>::infinity();
    expect_error(in, opt, "V holds a non-finite value inf at [0, 1, 0, 1]");
  }
  Options m;
  m.mask = mask::Boolean{xt::xtensor<std::uint8_t, 2>::from_shape({4, 4})};
  expect_error(small(), m, "bool mask rows");
  m.mask = mask::AdditiveBias{xt::zeros<double>({3, 5})};
  expect_error(small(), m, "bias mask columns");
  auto bias = xt::xtensor<double, 2>(xt::zeros<double>({3, 4}));
  bias(1, 2) = std::numeric_limits<double>::infinity();
  m.mask = mask::AdditiveBias{bias};
  expect_error(small(), m, "bias mask holds inf at [1, 2]");
  m.mask = mask::KeyPadding{{4}};
  expect_error(small(), m, "keypad mask length");
  m.mask = mask::KeyPadding{{4, 5}};
  expect_error(small(), m, "exceeds n_kv = 4");
  m.mask = mask::SlidingWindow{0};
  expect_error(small(), m, "window must be >= 1");
  Options s;
  s.scale = std::numeric_limits<double>::infinity();
  expect_error(small(), s, "scale is inf, must be finite and >= 0");
  s.scale = -0.5;
  expect_error(small(), s, "scale is -0.500000, must be finite and >= 0");
  Options t;
  t.threads = 0;
  expect_error(small(), t, "threads is 0, must be between 1 and 1024");
}

// --- The vectorised exp of the softmax kernels ------------------------------------

// exp_shifted_sum(simd = true) against double std::exp over the whole range
// a softmax feeds it, [-104, 0] (below, every float result is 0): every 64th
// float bit pattern, about 17 M arguments. Results at or above FLT_MIN must
// be within 2 ulp (the error bounds assume a few units of roundoff per exp);
// results below it may flush to 0 (an absolute change under 1.2e-38).
TEST(VectorExp, WithinTwoUlpOfStdExpOverTheSoftmaxRange) {
  std::vector<float> xs;
  for (std::uint32_t bits = 0x80000000u; bits <= 0xC2D00000u; bits += 64) xs.push_back(std::bit_cast<float>(bits));
  std::vector<float> e = xs;
  detail::exp_shifted_sum(e.data(), e.size(), 0.0f, /*simd=*/true);
  double worst_ulp = 0, worst_x = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(double(xs[i]));
    if (want < double(std::numeric_limits<float>::min())) {
      ASSERT_LE(std::fabs(e[i] - want), double(std::numeric_limits<float>::min())) << "x = " << xs[i];
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    const double err = std::fabs(double(e[i]) - want) / ulp;
    if (err > worst_ulp) worst_ulp = err, worst_x = xs[i];
  }
  std::printf("vectorised exp: %zu arguments in [-104, 0], worst %.3f ulp at x = %.9g\n", xs.size(), worst_ulp,
              worst_x);
  EXPECT_LE(worst_ulp, 2.0) << "at x = " << worst_x;
}

// Which exp a score gets does not depend on how far its row goes on past its
// own vector: a value in one of a row's first floor(n / W) full vectors gets
// the vector exp (std::exp only the tail's), so scores in the same vectors
// give the same bits in a row of any length. Bit for bit, in the variant in
// use: the row cut at every length 1 .. 64 W against the row whole (64 W +
// 3), fp32 and fp64, scores in [-30, 0]; the inputs must hold values whose
// two exps differ in their bits (else the check could not see a value take
// the other path). A last full vector sent to the scalar tail (the mutant
// exp-simd-edge) changes bits that every tolerance accepts; the full
// mutation run of 2026-12-04 found no other stage that saw it (the run of
// 2026-12-03 on another CPU had, through GQA's bitwise invariance).
TEST(VectorExp, AScoresExpDoesNotDependOnTheRowBeyondItsVector) {
  auto check = [](auto zero, std::size_t w) {
    using T = decltype(zero);
    std::mt19937_64 rng(20261204);
    std::uniform_real_distribution<double> u(-30.0, 0.0);
    const std::size_t whole = 64 * w + 3;
    std::vector<T> xs(whole);
    for (T& x : xs) x = T(u(rng));
    std::vector<T> all = xs;
    detail::exp_shifted_sum(all.data(), whole, T(0), /*simd=*/true);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < 64 * w; ++i) differ += all[i] != std::exp(xs[i]);
    std::printf("exp, %zu-byte values, %zu lanes: %zu of %zu vector exps differ from std::exp's bits\n", sizeof(T), w,
                differ, 64 * w);
    ASSERT_GT(differ, 0u) << "inputs whose vector and scalar exps agree cannot tell the two paths apart";
    for (std::size_t n = 1; n <= 64 * w; ++n) {
      std::vector<T> cut(xs.begin(), xs.begin() + std::ptrdiff_t(n));
      detail::exp_shifted_sum(cut.data(), n, T(0), /*simd=*/true);
      for (std::size_t i = 0; i < n / w * w; ++i)
        ASSERT_EQ(cut[i], all[i]) << "row of " << n << ": value " << i << ", in a full vector, took another exp";
    }
  };
  check(0.0f, simd().lanes_f32());
  check(0.0, simd().lanes_f64());
}

// The vector kernel of dot_lanes (simd.hpp dot_lanes_*: the streaming
// backward's D_i) against its scalar definition, bit for bit, in the variant
// in use (simd_variants runs this under each one): float, bf16 and fp16
// operands, every length 0 .. 300 (tails of 0 .. 15 terms after 0 .. 18
// blocks of 16) and 4099, values spread over 2^-20 .. 2^20 (fp16: 2^-10 .. 2^10) with both signs
// so that every partial sum rounds. The inputs must tell orders apart: one
// chain in order (dot_loops) gives other bits at most lengths, or a kernel
// that summed in another order could pass.
template <class X>
void expect_dot_lanes_bitwise(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const int spread = std::is_same_v<X, fp16> ? 10 : 20;  // fp16's largest finite value is 65504
  std::uniform_int_distribution<int> octave(-spread, spread);
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  std::size_t order_differs = 0;
  for (std::size_t n : lengths) {
    std::vector<X> x(n), y(n);
    for (std::size_t l = 0; l < n; ++l) {
      x[l] = convert<X>(std::ldexp(normal(rng), octave(rng)));
      y[l] = convert<X>(std::ldexp(normal(rng), octave(rng)));
    }
    const float want = detail::dot_lanes_scalar<float>(x.data(), y.data(), n);
    const float got = detail::dot_lanes<float>(x.data(), y.data(), n);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
        << precision_traits<X>::name << ", n = " << n << ": " << got << " against " << want << " (seed " << seed
        << ", " << simd_summary() << ")";
    if (std::bit_cast<std::uint32_t>(detail::dot_loops<float>(x.data(), y.data(), n)) !=
        std::bit_cast<std::uint32_t>(want))
      ++order_differs;
  }
  std::printf("dot_lanes %s: %zu lengths bitwise equal to the scalar definition (seed %u, %s); one chain in order "
              "differs at %zu of them\n",
              std::string(precision_traits<X>::name).c_str(), lengths.size(), seed,
              std::string(simd_summary()).c_str(), order_differs);
  EXPECT_GE(order_differs, lengths.size() / 2) << "the inputs do not tell orders of summation apart";
}

TEST(VectorDotLanes, BitwiseTheScalarDefinition) {
  expect_dot_lanes_bitwise<float>(20261204);
  expect_dot_lanes_bitwise<bf16>(20261205);
  expect_dot_lanes_bitwise<fp16>(20261206);
}

// The bf16 backward's operands (simd.hpp: pack_pairs_t_bf16, pack_values_rounded_bf16, pairs_bf16), in
// the variant in use (simd_variants runs this under each one; variants
// without bf16 dot products have none), word for word against their
// definitions: every combination of 1 .. 97 rows and 1 .. 130 columns below
// (whole 16 x 16 blocks, panels of 64 and their tails), values over 2^-20 ..
// 2^20 with both signs; one in eight fp32 values subnormal (the rounding
// flushes them) and one in eight a midpoint between two bf16 values (ties
// to even).
TEST(Bf16Pairs, TheBackwardsOperandsAreTheirDefinitions) {
  const SimdKernels& v = simd();
  if (!v.pack_pairs_t_bf16) GTEST_SKIP() << "no bf16 dot products in " << simd_summary();
  constexpr std::uint32_t seed = 20261205;
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> octave(-20, 20), kind(0, 7);
  auto pair = [](std::uint16_t lo, std::uint16_t hi) { return std::uint32_t(lo) | std::uint32_t(hi) << 16; };
  auto rounded = [](float x) -> std::uint16_t {  // nearest even, subnormals flushed to a zero of their sign
    if (std::fabs(x) < std::numeric_limits<float>::min()) return std::uint16_t(std::signbit(x) ? 0x8000u : 0u);
    return bf16(x).bits;
  };
  std::size_t checked = 0;
  for (std::size_t rows : {1, 2, 3, 31, 32, 33, 64, 97})
    for (std::size_t n : {1, 15, 16, 17, 64, 70, 130}) {
      const std::size_t kp = (rows + 1) / 2, kn = (n + 1) / 2;
      std::vector<bf16> m(rows * n);
      std::vector<float> x(rows * n);
      for (std::size_t e = 0; e < rows * n; ++e) {
        m[e] = bf16(std::ldexp(normal(rng), octave(rng)));
        const int k = kind(rng);
        const float base = float(std::ldexp(normal(rng), octave(rng)));
        x[e] = k == 0 ? base * 0x1p-140f  // subnormal
               : k == 1 ? std::bit_cast<float>((std::bit_cast<std::uint32_t>(base) & 0xFFFF0000u) | 0x8000u)  // a tie
                        : base;
      }
      auto m_at = [&](std::size_t r, std::size_t c) -> std::uint16_t { return r < rows ? m[r * n + c].bits : 0; };
      auto x_at = [&](std::size_t r, std::size_t c) -> std::uint16_t { return r < rows ? rounded(x[r * n + c]) : 0; };
      // A = M^T: row c, pair q
      std::vector<std::uint32_t> a(n * kp, 0xDEADBEEFu);
      v.pack_pairs_t_bf16(m.data(), rows, n, a.data());
      for (std::size_t c = 0; c < n; ++c)
        for (std::size_t q = 0; q < kp; ++q)
          ASSERT_EQ(a[c * kp + q], pair(m_at(2 * q, c), m_at(2 * q + 1, c)))
              << "pack_pairs_t_bf16, rows " << rows << ", d " << n << ", column " << c << ", pair " << q;
      // B in pack_values_bf16's layout from fp32, rounded
      std::vector<std::uint32_t> b(kp * n, 0xDEADBEEFu);
      v.pack_values_rounded_bf16(x.data(), rows, n, n, b.data());
      for (std::size_t c0 = 0; c0 < n; c0 += v.panel) {
        const std::size_t w = std::min(v.panel, n - c0);
        for (std::size_t q = 0; q < kp; ++q)
          for (std::size_t c = c0; c < c0 + w; ++c)
            ASSERT_EQ(b[c0 * kp + q * w + (c - c0)], pair(x_at(2 * q, c), x_at(2 * q + 1, c)))
                << "pack_values_rounded_bf16, rows " << rows << ", n " << n << ", column " << c << ", pair " << q;
      }
      // rows of pairs (ld past them untouched)
      const std::size_t ld = kn + 3;
      std::vector<std::uint32_t> r(rows * ld, 0xDEADBEEFu);
      v.pairs_bf16(x.data(), rows, n, n, r.data(), ld);
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t p = 0; p < kn; ++p)
          ASSERT_EQ(r[i * ld + p], pair(rounded(x[i * n + 2 * p]), 2 * p + 1 < n ? rounded(x[i * n + 2 * p + 1]) : 0))
              << "pairs_bf16, rows " << rows << ", n " << n << ", row " << i << ", pair " << p;
        for (std::size_t p = kn; p < ld; ++p) ASSERT_EQ(r[i * ld + p], 0xDEADBEEFu) << "pairs_bf16 wrote past its row";
      }
      checked += 3 * rows * n;
    }
  std::printf("bf16 backward operands: %zu values word for word (seed %u, %s)\n", checked, seed,
              std::string(simd_summary()).c_str());
}

// The soft-cap's tanh (problem.hpp softcap_row with c = 1, vector kernel and
// scalar tail, and the scalar path of the naive backend) against an exact
// tanh (long double's for float and double) within softcap_tanh_ulps units
// of the result's last place, the figure the error bounds take (metrics.hpp):
// every 256th float bit pattern in [-10, 10] (beyond, tanh is +-1 in float),
// and 2^20 doubles spread over [-20, 20]. Arrays of odd length, so the
// vector kernel's scalar tail is measured too.
template <class T>
double worst_tanh_ulps(std::vector<T> xs, bool simd) {
  std::vector<T> t = xs;
  softcap_row(t.data(), t.size(), 1.0, simd);
  double worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const long double want = std::tanh(static_cast<long double>(xs[i]));
    const double ulp = std::ldexp(1.0, std::max(std::ilogb(double(want)), std::numeric_limits<T>::min_exponent - 1) -
                                           std::numeric_limits<T>::digits + 1);
    worst = std::max(worst, double(std::fabs(static_cast<long double>(t[i]) - want)) / ulp);
  }
  return worst;
}

TEST(VectorTanh, SoftcapWithinItsUlpBoundInFloatAndDouble) {
  std::vector<float> xf;
  for (std::uint32_t bits = 0; bits <= 0x41200000u; bits += 256) {  // [0, 10] and its negatives
    xf.push_back(std::bit_cast<float>(bits));
    xf.push_back(-std::bit_cast<float>(bits));
  }
  xf.push_back(0.5f);  // odd length: a scalar tail
  std::vector<double> xd;
  NormalStream normal(77);
  for (std::size_t i = 0; i < (1u << 20) + 3; ++i) xd.push_back(std::clamp(5 * normal.next(), -20.0, 20.0));
  for (bool simd : {true, false}) {
    const double f = worst_tanh_ulps(xf, simd), d = worst_tanh_ulps(xd, simd);
    std::printf("soft-cap tanh (%s, %s): float worst %.3f ulp over %zu arguments, double worst %.3f ulp over %zu\n",
                simd ? "vector kernel" : "scalar", std::string(simd_summary()).c_str(), f, xf.size(), d, xd.size());
    EXPECT_LE(f, softcap_tanh_ulps);
    EXPECT_LE(d, softcap_tanh_ulps);
  }
}

// The automatic choice takes the bf16 dot-product variant only where its
// rate is at least sqrt(2) times the FMA's: at the two rates measured (attn-lab
// peak: 493.9 over 249.1 GFLOP/s on a Zen 5 EPYC, 81.9 over 168.9 on an Intel
// Xeon with AVX512_FP16), and on either side of the threshold.
TEST(Simd, Bf16DotProductsChosenOnlyWhereTheyPay) {
  EXPECT_TRUE(bf16_dots_pay(493.9, 249.1));
  EXPECT_FALSE(bf16_dots_pay(81.9, 168.9));
  EXPECT_FALSE(bf16_dots_pay(100.0, 100.0));  // equal rates: no arithmetic gained, P~ would lose digits
  EXPECT_TRUE(bf16_dots_pay(100.0 * bf16_dot_min_ratio, 100.0));
  EXPECT_FALSE(bf16_dots_pay(99.9 * bf16_dot_min_ratio, 100.0));
  // the choice this process made agrees with the rate it measured
  if (const auto r = simd_bf16_dot_ratio()) {
    std::printf("bf16 dot product over fp32 FMA, measured at the choice: %.3fx; %s\n", *r, simd_summary().c_str());
    EXPECT_EQ(simd().gemm_bf16 != nullptr, bf16_dots_pay(*r, 1.0));
  }
}

// The vectorised widening of bf16/fp16 tiles equals the scalar conversion
// bit for bit, for every one of the 65,536 patterns of each (at every offset
// of a 16-lane block, and in the scalar tail).
TEST(Widen, EveryBf16AndFp16PatternWidensExactly) {
  std::vector<bf16> b(65536 + 7);
  std::vector<fp16> h(65536 + 7);
  for (std::uint32_t i = 0; i < b.size(); ++i) {
    b[i] = bf16::from_bits(std::uint16_t(i));
    h[i] = std::bit_cast<fp16>(std::uint16_t(i));
  }
  std::vector<float> wb(b.size()), wh(h.size());
  detail::widen_to_float(b.data(), b.size(), wb.data());
  detail::widen_to_float(h.data(), h.size(), wh.data());
  for (std::size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(wb[i]), std::bit_cast<std::uint32_t>(float(b[i]))) << i;
    const float want = float(h[i]);
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(wh[i])) << i;
    else ASSERT_EQ(std::bit_cast<std::uint32_t>(wh[i]), std::bit_cast<std::uint32_t>(want)) << i;
  }
}

// --- parallel_for ---------------------------------------------------------------

TEST(ParallelFor, RunsEveryItemOnceOnAnyThreadCount) {
  for (std::size_t threads : {1, 2, 3, 8})
    for (std::size_t count : {0, 1, 5, 64}) {
      std::vector<std::atomic<int>> seen(count);
      std::atomic<std::size_t> max_worker{0};
      parallel_for(count, threads, [&](std::size_t item, std::size_t worker) {
        ++seen[item];
        std::size_t m = max_worker;
        while (worker > m && !max_worker.compare_exchange_weak(m, worker)) {}
      });
      for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(seen[i], 1) << "item " << i << " threads " << threads;
      EXPECT_LT(max_worker.load(), std::max<std::size_t>(1, std::min(threads, count)));
    }
}

TEST(ParallelFor, AWorkersExceptionReachesTheCaller) {
  EXPECT_THROW(parallel_for(100, 2,
                            [](std::size_t item, std::size_t) {
                              if (item == 37) throw Error("item 37 failed");
                            }),
               Error);
}

// --- Mask semantics ------------------------------------------------------------------

std::vector<std::pair<std::size_t, std::size_t>> ranges(const Mask& m, const Shape& s, std::size_t b = 0) {
  Options opt;
  opt.mask = m;
  MaskView view(opt, s);
  std::vector<std::pair<std::size_t, std::size_t>> r;
  for (std::size_t i = 0; i < s.n_q; ++i) r.emplace_back(view.keys(b, i).begin, view.keys(b, i).size());
  return r;
}
using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;  // (first key, count) per query

TEST(Mask, CausalAlignsBottomRight) {
  // n_q = 2 queries over n_kv = 5 keys: the last query sees every key.
  EXPECT_EQ(ranges(mask::Causal{}, {1, 1, 2, 5, 1, 1}), (Ranges{{0, 4}, {0, 5}}));
  // n_q = 5 over n_kv = 2: the first three queries see nothing (fully masked).
  EXPECT_EQ(ranges(mask::Causal{}, {1, 1, 5, 2, 1, 1}), (Ranges{{0, 0}, {0, 0}, {0, 0}, {0, 1}, {0, 2}}));
  EXPECT_EQ(ranges(mask::Causal{}, {1, 1, 3, 3, 1, 1}), (Ranges{{0, 1}, {0, 2}, {0, 3}}));
}

TEST(Mask, SlidingWindowSeesTheLastWKeys) {
  EXPECT_EQ(ranges(mask::SlidingWindow{2}, {1, 1, 4, 4, 1, 1}), (Ranges{{0, 1}, {0, 2}, {1, 2}, {2, 2}}));
  EXPECT_EQ(ranges(mask::SlidingWindow{1}, {1, 1, 2, 4, 1, 1}), (Ranges{{2, 1}, {3, 1}}));
  EXPECT_EQ(ranges(mask::SlidingWindow{9}, {1, 1, 3, 2, 1, 1}), (Ranges{{0, 0}, {0, 1}, {0, 2}}));
}

TEST(Mask, KeyPaddingIsPerBatch) {
  const mask::KeyPadding kp{{3, 0}};
  EXPECT_EQ(ranges(kp, {2, 1, 2, 4, 1, 1}, 0), (Ranges{{0, 3}, {0, 3}}));
  EXPECT_EQ(ranges(kp, {2, 1, 2, 4, 1, 1}, 1), (Ranges{{0, 0}, {0, 0}}));
}

// Every backend, precision and policy: fully masked rows (by causal
// alignment, key padding, a boolean row, a -inf bias row) give output 0,
// weights 0 and logsumexp -inf; visible rows are untouched by it.
TEST(Mask, FullyMaskedRowsGiveZeroAndMinusInfinityEverywhere) {
  const Shape s{2, 1, 5, 3, 4, 2};
  const Inputs<double> in = random_inputs(s, /*seed=*/11);
  std::vector<std::pair<Mask, std::vector<std::pair<std::size_t, std::size_t>>>> cases;  // mask, masked (b, i)
  cases.push_back({mask::Causal{}, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}});
  cases.push_back({mask::KeyPadding{{3, 0}}, {{1, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}}});
  auto allowed = xt::xtensor<std::uint8_t, 2>::from_shape({5, 3});
  allowed.fill(1);
  for (std::size_t j = 0; j < 3; ++j) allowed(3, j) = 0;
  cases.push_back({mask::Boolean{allowed}, {{0, 3}, {1, 3}}});
  auto bias = xt::xtensor<double, 2>(xt::zeros<double>({5, 3}));
  for (std::size_t j = 0; j < 3; ++j) bias(4, j) = -std::numeric_limits<double>::infinity();
  cases.push_back({mask::AdditiveBias{bias}, {{0, 4}, {1, 4}}});

  for (auto& [m, masked] : cases) {
    for (const BackendInfo& backend : all_backends())
      for (const PrecisionInfo& precision : precisions())
        for (Accumulate acc : accumulate_policies()) {
      SCOPED_TRACE(mask_name(m) + " / " + backend.name + " " + std::string(precision.name) + " " +
                   std::string(accumulate_name(acc)));
      Options opt;
      opt.mask = m;
      opt.need_weights = opt.need_lse = true;
      const RunReport r = backend.run(precision.name, acc, in, opt);
      for (std::size_t b = 0; b < s.batch; ++b)
        for (std::size_t i = 0; i < s.n_q; ++i) {
          const bool is_masked = std::find(masked.begin(), masked.end(), std::pair{b, i}) != masked.end();
          double row_sum = 0;
          for (std::size_t j = 0; j < s.n_kv; ++j) row_sum += (*r.weights)(b, 0, i, j);
          if (is_masked) {
            EXPECT_EQ(row_sum, 0.0) << b << "," << i;
            EXPECT_EQ((*r.lse)(b, 0, i), -std::numeric_limits<double>::infinity()) << b << "," << i;
            for (std::size_t c = 0; c < s.d_v; ++c) EXPECT_EQ(double(r.out(b, 0, i, c)), 0.0);
          } else {
            EXPECT_TRUE(std::isfinite((*r.lse)(b, 0, i))) << b << "," << i;
            EXPECT_GT(row_sum, 0.5) << b << "," << i;
          }
        }
        }
  }
}

// A tiled backend keeps a non-finite value inside the query blocks that can
// see it: under a causal mask, an inf in the last key's V (and a +inf score
// of the last query on it, through K) leaves every row of the earlier query
// blocks bitwise as it is with finite values there. Catches a worker's
// running state (O, l) carried from one query block into the next (the
// rescale by exp(-inf) = 0 on the first tile hides it for finite values:
// 0 * inf is NaN).
TEST(Tiles, NonFiniteValuesStayInTheQueryBlocksThatSeeThem) {
  const std::size_t n = 40, block = 8;
  const Inputs<double> finite = random_inputs({1, 1, n, n, 4, 4}, /*seed=*/5);
  Inputs<double> nonfinite = finite;
  for (std::size_t c = 0; c < 4; ++c) nonfinite.v(0, 0, n - 1, c) = std::numeric_limits<double>::infinity();
  nonfinite.k(0, 0, n - 1, 0) = std::numeric_limits<double>::infinity();
  nonfinite.q(0, 0, n - 1, 0) = 1.0;
  Inputs<double> same_q = finite;
  same_q.q(0, 0, n - 1, 0) = 1.0;
  Options opt;
  opt.mask = mask::Causal{};
  opt.allow_nonfinite = true;
  opt.block_q = opt.block_k = block;
  opt.threads = 1;
  int tiled = 0;
  for (const BackendInfo& backend : all_backends()) {
    if (!backend.traits.tiled) continue;
    ++tiled;
    for (auto [precision, acc] : {std::pair{"fp32", Accumulate::fp32}, std::pair{"fp64", Accumulate::fp64}}) {
      SCOPED_TRACE(backend.name + " " + precision);
      const RunReport a = backend.run(precision, acc, nonfinite, opt), b = backend.run(precision, acc, same_q, opt);
      bool last_row_nonfinite = false;
      for (std::size_t c = 0; c < 4; ++c) last_row_nonfinite |= !std::isfinite(double(a.out(0, 0, n - 1, c)));
      EXPECT_TRUE(last_row_nonfinite) << "the row that sees the inf must show it";
      for (std::size_t i = 0; i + block < n; ++i)  // rows of the earlier query blocks
        for (std::size_t c = 0; c < 4; ++c) ASSERT_EQ(double(a.out(0, 0, i, c)), double(b.out(0, 0, i, c))) << i;
    }
  }
  EXPECT_GE(tiled, 2);
}

// Strips (streaming.cpp's strip_rows; docs/performance.md, sections 45 and
// 49) change no bit: bf16 storage on the dot tiles, fp32 and fp16 on the
// micro-kernel's tiles, with grouped heads under a causal mask over three key
// tiles of 1024; the default blocks (1024 rows taken in strips by the
// avx512amx variant's rules) against blocks of 32 rows (a strip each) and of
// 4096 rows on two threads; output and logsumexp compared bit for bit. A
// precision whose tiles in the kernels in use take no strips is not run; the
// test is skipped, not passed, when none does.
TEST(Tiles, StripsChangeNoBit) {
  const Inputs<double> in = random_inputs({1, 4, 700, 2500, 64, 64, 2}, /*seed=*/7);
  const BackendInfo& streaming = fused_backend();
  Options opt;
  opt.mask = mask::Causal{};
  opt.need_lse = true;
  opt.threads = 1;
  int ran = 0;
  for (std::string precision : {"bf16", "fp32", "fp16"}) {
    const SimdKernels::Tiling& own = precision == "bf16" && simd().gemm_bf16 ? simd().dot_tiles : simd().micro_tiles;
    if (own.strip_bytes == 0) continue;
    ++ran;
    const RunReport base = streaming.run(precision, Accumulate::fp32, in, opt);
    for (auto [block_q, threads] : {std::pair<std::size_t, std::size_t>{32, 1}, {4096, 2}}) {
      SCOPED_TRACE(precision + ", block_q " + std::to_string(block_q) + ", threads " + std::to_string(threads));
      Options other = opt;
      other.block_q = block_q;
      other.threads = threads;
      const RunReport r = streaming.run(precision, Accumulate::fp32, in, other);
      std::size_t differ = 0;
      for (std::size_t x = 0; x < base.out.size(); ++x)
        differ += std::bit_cast<std::uint64_t>(base.out.data()[x]) != std::bit_cast<std::uint64_t>(r.out.data()[x]);
      for (std::size_t x = 0; x < base.lse->size(); ++x)
        differ += std::bit_cast<std::uint64_t>(base.lse->data()[x]) != std::bit_cast<std::uint64_t>(r.lse->data()[x]);
      EXPECT_EQ(differ, 0u);
    }
  }
  if (ran == 0) GTEST_SKIP() << "the kernels in use (" << simd().id << ") take no strips";
}

// Storage accumulation keeps every intermediate within the format's range
// when the answer is: fp16 values of 30,000 averaged over 64 keys (the
// unnormalised sum P~ V would be ~2e6, past fp16's 65504). Every backend's
// output is finite and passes both verdicts of verify().
TEST(Range, Fp16StorageAccumulationAveragesValuesNearTheLimit) {
  Inputs<double> in = random_inputs({1, 1, 8, 64, 8, 8}, /*seed=*/9);
  for (double& x : in.q) x *= 0.1;
  for (double& x : in.v) x = 30000 + 1000 * x;
  int backends = 0;
  for (const BackendInfo& backend : all_backends()) {
    if (backend.traits.exact) continue;
    ++backends;
    SCOPED_TRACE(backend.name);
    Options opt;
    opt.need_weights = opt.need_lse = true;
    const RunReport r = backend.run("fp16", Accumulate::storage, in, opt);
    for (double x : r.out) ASSERT_TRUE(std::isfinite(x));
    const Check c = verify(r, opt);
    EXPECT_TRUE(c.within) << c.out_worst.error << " vs " << c.out_worst.tolerance;
    EXPECT_TRUE(c.tight_within) << c.out_tight.error << " vs " << c.out_tight.tolerance;
  }
  EXPECT_GE(backends, 4);
}

// --- Tensor alignment --------------------------------------------------------------

// Every tensor a kernel reads starts on a 64-byte line (attn/core/tensor_allocator.hpp, force-included by
// meson.build): with malloc's 16 bytes, the fp32 decode step took up to 1.9x as long (performance.md,
// section 34). Between the allocations, odd-sized ones move the heap, as a long benchmark process does.
TEST(TensorAlignment, EveryStorageTypesInputsStartOnACacheLine) {
  auto on_line = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; };
  std::vector<std::unique_ptr<char[]>> shifts;
  for (std::size_t n : {1, 3, 17, 33, 100}) {
    shifts.emplace_back(new char[n * 16 + 8]);
    const Inputs<double> in = random_inputs({1, 3, n, n + 5, 40, 24, 1}, 7);
    auto check = [&](const auto& t) {
      EXPECT_TRUE(on_line(in.q.data()) && on_line(in.k.data()) && on_line(in.v.data()));
      EXPECT_TRUE(on_line(t.q.data())) << n;
      EXPECT_TRUE(on_line(t.k.data())) << n;
      EXPECT_TRUE(on_line(t.v.data())) << n;
    };
    check(convert_inputs<float>(in));
    shifts.emplace_back(new char[n * 48 + 24]);
    check(convert_inputs<bf16>(in));
    check(convert_inputs<fp16>(in));
  }
}

// --- Workspace cap ---------------------------------------------------------------

TEST(Workspace, AScoreMatrixOverTheCapIsAClearError) {
  ::setenv("ATTN_MEMORY_CAP", "4096", 1);
  Options opt;
  try {
    (void)baseline_backend().run("fp32", Accumulate::fp32, random_inputs({1, 1, 64, 64, 1, 1}, 3), opt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("naive needs"), std::string::npos) << e.what();
  }
  // Requested weights count against the cap too, even for a backend with a tiny workspace.
  // Cap: the backend's own workspace model (independent of n; its tiles differ per
  // instruction set) plus 1 KiB fits, the 256 x 256 weights (512 KiB) on top do not.
  Options with_weights;
  with_weights.need_weights = true;
  std::size_t small = 0;
  for (const BackendInfo& b : all_backends()) {
    if (!b.traits.memory_independent_of_n) continue;
    const std::size_t tiles = b.workspace_bytes(precision_info("fp32"), Accumulate::fp32, Shape{1, 1, 256, 256, 1, 1}, with_weights);
    ASSERT_LT(tiles + 1024, 256u * 256u * sizeof(double)) << b.name;
    ::setenv("ATTN_MEMORY_CAP", std::to_string(tiles + 1024).c_str(), 1);
    ++small;
    try {
      (void)b.run("fp32", Accumulate::fp32, random_inputs({1, 1, 256, 256, 1, 1}, 3), with_weights);
      ADD_FAILURE() << b.name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("weights"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(small, 0u);
  ::setenv("ATTN_MEMORY_CAP", "lots", 1);
  EXPECT_THROW(workspace_cap(), Error);
  ::unsetenv("ATTN_MEMORY_CAP");
}

// --- .npy reader ---------------------------------------------------------------------

struct TempDir {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("attn-unit-" + std::to_string(::getpid()));
  TempDir() { std::filesystem::create_directories(dir); }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string file(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
};

void expect_npy_error(const std::string& path, const std::string& fragment) {
  try {
    (void)load_npy(path, "--q");
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Npy, ReadsEveryFloatWidthAndRejectsMalformedFiles) {
  TempDir t;
  xt::xtensor<float, 2> f = {{1.5f, -2.0f}, {0.25f, 3.0f}};
  const NpyTensor loaded = load_npy(t.file("f4.npy", xt::dump_npy(f)), "--q");
  EXPECT_EQ(loaded.rank, 2u);
  EXPECT_EQ(loaded.data(0, 0, 1, 0), 0.25);
  const std::string good = xt::dump_npy(f);
  expect_npy_error(t.file("trunc.npy", good.substr(0, good.size() - 3)), "data bytes");
  expect_npy_error(t.file("magic.npy", "PK\x03\x04 not numpy at all"), "not a valid .npy");
  expect_npy_error(t.file("empty.npy", ""), "not a valid .npy");
  expect_npy_error(t.file("c8.npy", xt::dump_npy(xt::xtensor<std::complex<float>, 1>{{1.0f, 2.0f}})), "dtype");
  expect_npy_error(t.file("r1.npy", xt::dump_npy(xt::xtensor<double, 1>{1.0, 2.0})), "expected [n, d]");
  expect_npy_error((t.dir / "absent.npy").string(), "cannot open");
}

// Hostile headers, each built from a valid file by editing its header; the
// first three are the fuzz target's findings (fuzz/corpus/npy/regression-*).
TEST(Npy, HostileHeadersAreOneClearErrorWithoutALargeAllocation) {
  const std::string good = xt::dump_npy(xt::xtensor<double, 2>{{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  const std::string header = good.substr(10, good.find('\n') - 10);
  auto with_header = [&](const std::string& h, int version = 1) {
    std::string r = "\x93NUMPY";
    r += char(version);
    r += '\0';
    const std::size_t n = h.size() + 1;  // the header ends with the newline
    r += char(n & 0xff);
    r += char((n >> 8) & 0xff);
    if (version > 1) r += std::string("\0\0", 2);
    return r + h + good.substr(good.find('\n'));
  };
  auto message = [](const std::string& bytes) {
    try {
      load_npy_bytes(bytes, "x");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto replaced = [&](std::string what, std::string by) {
    std::string h = header;
    h.replace(h.find(what), what.size(), by);
    return h;
  };
  EXPECT_EQ(load_npy_bytes(good, "x").data(0, 0, 1, 2), 6.0);
  EXPECT_NE(message(std::string("\x93NUMPY\x01\x00\x00\x00", 10)).find("no 'descr'"), std::string::npos);
  std::string lying = good;  // version 2 with a header length of 2^31
  lying[6] = 2;
  lying.insert(8, std::string("\0\0\0\x80", 4).substr(0, 4));
  EXPECT_NE(message(lying).find("runs past the end of the file"), std::string::npos) << message(lying);
  EXPECT_NE(message(with_header(replaced("(2, 3)", "(41469437, 0, 9999937, 999906999999)"))).find("overflows"),
            std::string::npos);
  EXPECT_NE(message(with_header(replaced("(2, 3)", "(2, 3L4)"))).find("separated by commas"), std::string::npos);
  EXPECT_NE(message(with_header(replaced("(2, 3)", "(9999999, 9999999)"))).find("promises"), std::string::npos);
  EXPECT_NE(message(with_header(replaced("<f8", ">f8"))).find("dtype '>f8'"), std::string::npos);
  EXPECT_NE(message(with_header(replaced("False", "True"))).find("Fortran-ordered"), std::string::npos);
  EXPECT_NE(message(with_header(replaced("False", "Maybe"))).find("neither True nor False"), std::string::npos);
  EXPECT_NE(message(with_header(replaced("(2, 3)", "(1, 1, 1, 2, 3)"))).find("expected [n, d]"), std::string::npos)
      << message(with_header(replaced("(2, 3)", "(1, 1, 1, 2, 3)")));
  EXPECT_NE(message(with_header(replaced("'shape': (2, 3)", "'shape': "))).find("'shape'"), std::string::npos);
  EXPECT_NE(message(with_header(header, 7)).find("unsupported .npy version 7.0"), std::string::npos);
}

TEST(Npy, WritesAtomicallyOverAnExistingFile) {
  TempDir t;
  const std::string path = t.file("out.npy", "old contents");
  save_npy_atomic(path, xt::xtensor<double, 1>{1.0, 2.0});
  EXPECT_EQ(load_npy_1d(path, "out")(1), 2.0);
  std::size_t files = 0;
  for (auto& entry : std::filesystem::directory_iterator(t.dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u) << "no temporary file is left behind";
  EXPECT_THROW(save_npy_atomic((t.dir / "no-such-dir" / "x.npy").string(), xt::xtensor<double, 1>{1.0}), Error);
  EXPECT_EQ(load_npy_1d(path, "out")(0), 1.0) << "a failed write leaves the old file";
}

}  // namespace
}  // namespace attn
