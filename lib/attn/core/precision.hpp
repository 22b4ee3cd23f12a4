// Precisions of the suite: fp64, fp32, bf16, fp16 as storage types, and the
// accumulation policy (fp64, fp32, or the storage type itself).
//
// bf16 is hand-written: GCC 12 has no usable __bf16 and no Debian 12 library
// offers a small, exact bf16 type. Conversions round to nearest, ties to even,
// and are tested over all 65,536 bit patterns. fp16 is GCC's _Float16, whose
// arithmetic rounds after every operation (FLT_EVAL_METHOD == 0), as does bf16
// arithmetic here, so "accumulate in storage precision" means what it says.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

// ATTN_UNFUSED(x): keeps the compiler from fusing the multiply that produced
// x (a float or double, or a vector of them in a register) with an add that
// follows into one FMA. GCC's C++ default (-ffp-contract=fast) fuses a * b + c
// wherever the target has FMA (the AVX2 and AVX-512 variants; a -Dnative=true
// build's baseline), which rounds once where an order of operations that
// says "product rounded, then sum rounded" rounds twice (detail::dot_lanes:
// the same bits in every variant). An empty asm statement that claims to
// change x in its register: no instruction.
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ATTN_UNFUSED(x) asm("" : "+x"(x))
#elif defined(__GNUC__) && defined(__aarch64__)
#define ATTN_UNFUSED(x) asm("" : "+w"(x))
#else
#define ATTN_UNFUSED(x) ((void)0)
#endif

namespace attn {

using fp16 = _Float16;

struct bf16 {
  std::uint16_t bits = 0;

  constexpr bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit bf16(double d) : bits(from_double(d)) {}
  explicit bf16(int i) : bf16(static_cast<double>(i)) {}
  explicit bf16(fp16 h) : bf16(static_cast<float>(h)) {}

  static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
  explicit operator float() const { return std::bit_cast<float>(std::uint32_t(bits) << 16); }
  explicit operator double() const { return static_cast<float>(*this); }
  explicit operator fp16() const { return static_cast<fp16>(static_cast<float>(*this)); }

  // Round a float to bf16, nearest-even; NaN stays NaN (quiet). Inline: the
  // loops that store results in bf16 vectorise it (out of line, a call per
  // value: 3.1% of the samples of a bf16 forward and backward at d = 128,
  // docs/performance.md section 31).
  static constexpr std::uint16_t from_float(float f) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
    // Round to nearest, ties to even: add half an ulp minus one, plus the lsb.
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
  }
  // Round a double to bf16 in one correct rounding (no double rounding).
  static std::uint16_t from_double(double d);
};

// bf16 arithmetic: exact in float (24 >= 2*8+2 significand bits, so the
// float result rounded to bf16 is the correctly rounded bf16 result).
inline bf16 operator+(bf16 a, bf16 b) { return bf16(float(a) + float(b)); }
inline bf16 operator-(bf16 a, bf16 b) { return bf16(float(a) - float(b)); }
inline bf16 operator*(bf16 a, bf16 b) { return bf16(float(a) * float(b)); }
inline bf16 operator/(bf16 a, bf16 b) { return bf16(float(a) / float(b)); }
inline bf16 operator-(bf16 a) { return bf16::from_bits(a.bits ^ 0x8000u); }
inline bf16& operator+=(bf16& a, bf16 b) { return a = a + b; }
inline bf16& operator-=(bf16& a, bf16 b) { return a = a - b; }
inline bf16& operator*=(bf16& a, bf16 b) { return a = a * b; }
inline bf16& operator/=(bf16& a, bf16 b) { return a = a / b; }
inline bool operator<(bf16 a, bf16 b) { return float(a) < float(b); }
inline bool operator>(bf16 a, bf16 b) { return float(a) > float(b); }
inline bool operator<=(bf16 a, bf16 b) { return float(a) <= float(b); }
inline bool operator>=(bf16 a, bf16 b) { return float(a) >= float(b); }
inline bool operator==(bf16 a, bf16 b) { return float(a) == float(b); }

template <class T>
constexpr bool is_native_float = std::is_same_v<T, double> || std::is_same_v<T, float>;
template <class T>
constexpr bool is_narrow_float = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

// Conversion between any two number types of the suite, including the
// multiprecision type of the reference (which goes through double: exact
// from every storage type, one extra rounding towards bf16/fp16).
template <class To, class From>
inline To convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, bf16> && std::is_same_v<To, fp16>) {
    return static_cast<fp16>(static_cast<float>(x));  // bf16 -> float is exact
  } else if constexpr ((is_native_float<To> || is_narrow_float<To>) &&
                       (is_native_float<From> || is_narrow_float<From>)) {
    return static_cast<To>(x);
  } else if constexpr (is_native_float<To> || is_narrow_float<To>) {
    return convert<To>(static_cast<double>(x));  // from multiprecision
  } else {
    return To(static_cast<double>(x));  // to multiprecision
  }
}

template <class T>
struct precision_traits;

template <>
struct precision_traits<double> {
  static constexpr std::string_view name = "fp64";
  static constexpr double unit_roundoff = 0x1p-53;
  static constexpr double max_finite = std::numeric_limits<double>::max();
  static constexpr double min_subnormal = 0x1p-1074;  // the subnormals' spacing
};
template <>
struct precision_traits<float> {
  static constexpr std::string_view name = "fp32";
  static constexpr double unit_roundoff = 0x1p-24;
  static constexpr double max_finite = std::numeric_limits<float>::max();
  static constexpr double min_subnormal = 0x1p-149;
};
template <>
struct precision_traits<bf16> {
  static constexpr std::string_view name = "bf16";
  static constexpr double unit_roundoff = 0x1p-8;
  static constexpr double max_finite = 0x1.fep127;  // bits 0x7f7f
  static constexpr double min_subnormal = 0x1p-133;
};
template <>
struct precision_traits<fp16> {
  static constexpr std::string_view name = "fp16";
  static constexpr double unit_roundoff = 0x1p-11;
  static constexpr double max_finite = 65504.0;
  static constexpr double min_subnormal = 0x1p-24;
};

// Explicit instantiation helper: X(T) once per storage type of the suite.
#define ATTN_FOR_EACH_STORAGE(X) X(double) X(float) X(::attn::bf16) X(::attn::fp16)

template <class T>
concept StorageType = requires { precision_traits<T>::name; };

// How a backend accumulates dot products, sums and the softmax.
enum class Accumulate { fp64, fp32, storage };

constexpr std::string_view accumulate_name(Accumulate a) {
  switch (a) {
    case Accumulate::fp64: return "fp64";
    case Accumulate::fp32: return "fp32";
    case Accumulate::storage: return "storage";
  }
  return "?";
}

// The type a backend computes in, given storage S and policy P.
template <class S, Accumulate P>
using accumulate_t = std::conditional_t<P == Accumulate::fp64, double,
                                        std::conditional_t<P == Accumulate::fp32, float, S>>;

// The default policy: fp64 for fp64 storage, fp32 otherwise.
template <class S>
constexpr Accumulate default_accumulate = std::is_same_v<S, double> ? Accumulate::fp64 : Accumulate::fp32;

// Elementary functions in the accumulation type A, rounded to A.
// bf16/fp16 go through float, then round once (the float result is far more
// accurate than a bf16/fp16 ulp);
// multiprecision types find their own exp/log by argument-dependent lookup.
template <class A>
inline A exp_of(A x) {
  if constexpr (is_native_float<A>) return std::exp(x);
  else if constexpr (is_narrow_float<A>) return A(std::exp(static_cast<float>(x)));
  else return A(exp(x));
}
template <class A>
inline A log_of(A x) {
  if constexpr (is_native_float<A>) return std::log(x);
  else if constexpr (is_narrow_float<A>) return A(std::log(static_cast<float>(x)));
  else return A(log(x));
}
template <class A>
inline A tanh_of(A x) {
  if constexpr (is_native_float<A>) return std::tanh(x);
  else if constexpr (is_narrow_float<A>) return A(std::tanh(static_cast<float>(x)));
  else return A(tanh(x));
}
template <class A>
inline A neg_infinity() {
  return convert<A>(-std::numeric_limits<float>::infinity());
}

}  // namespace attn
