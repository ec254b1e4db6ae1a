// Narrow floating-point element types and their conversions to and from float.
//
// Every conversion is written with integer and bit operations (and one integer-to-float
// conversion that is exact), so the CPU datapath and GPU kernels produce bit-identical results.
// The results equal the CUDA toolkit's conversions (__float2half_rn, __float2bfloat16_rn,
// __nv_cvt_float_to_fp8 with __NV_SATFINITE, and back), which the unit tests check bit for bit.
//
// float -> narrow rounds to nearest, ties to even, and handles subnormals of both formats exactly.
//   fp16, bf16: overflow rounds to infinity (IEEE); infinities stay infinities.
//   fp8 e4m3, e5m2: saturate; anything at or beyond the largest finite value (infinities included)
//     becomes that value with the input's sign (e4m3: 448, e5m2: 57344).
//   A NaN becomes the target's canonical quiet NaN, sign dropped: 0x7FFF (fp16, bf16), 0x7F (fp8).
// narrow -> float is exact. A NaN becomes 0x7FFFFFFF, except bf16, whose bits are simply the
// upper half of a float's and are widened as they are.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/hd.h"

namespace purlin {

// Storage of the narrow element types: the raw bits, no arithmetic.
struct f16_t {
  std::uint16_t bits;
};
struct bf16_t {
  std::uint16_t bits;
};
struct f8e4m3_t {
  std::uint8_t bits;
};
struct f8e5m2_t {
  std::uint8_t bits;
};
static_assert(sizeof(f16_t) == 2 && alignof(f16_t) == 2);
static_assert(sizeof(bf16_t) == 2 && alignof(bf16_t) == 2);
static_assert(sizeof(f8e4m3_t) == 1 && sizeof(f8e5m2_t) == 1);

// ---- bit casts ----------------------------------------------------------------------------------

PURLIN_HD std::uint32_t float_as_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

PURLIN_HD float bits_as_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

PURLIN_HD std::uint64_t double_as_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(d));
#else
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}

PURLIN_HD double bits_as_double(std::uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}

namespace numeric_detail {

inline constexpr std::uint32_t kFloatQuietNaN = 0x7FFFFFFFu;

// All ones when c holds, else zero: selects written as masks compile to straight-line code (and
// vectorise) where a compiler might otherwise branch on data.
PURLIN_HD std::uint32_t mask_if(bool c) { return 0u - static_cast<std::uint32_t>(c); }
PURLIN_HD std::uint32_t select(std::uint32_t mask, std::uint32_t a, std::uint32_t b) {
  return (a & mask) | (b & ~mask);
}

// Rounds a finite magnitude `a` (float bits, sign clear) to a binary format with `Man` stored
// mantissa bits and exponent bias `Bias`, to nearest with ties to even. Returns the magnitude
// code (exponent and mantissa fields). The caller has already handled NaN and values whose
// rounding would leave the format (for IEEE formats a carry into the all-ones exponent is the
// right answer: infinity).
template <int Man, int Bias>
PURLIN_HD std::uint32_t round_magnitude(std::uint32_t a) {
  constexpr std::uint32_t kMinNormal = static_cast<std::uint32_t>(127 - Bias + 1) << 23;
  std::uint32_t code;
  std::uint32_t rem;
  std::uint32_t half;
  if (a >= kMinNormal) {
    // Normal in the target: rebias the exponent and drop the low mantissa bits. A carry out of
    // the mantissa moves into the exponent, which is the correct rounding.
    constexpr int kDrop = 23 - Man;
    const std::uint32_t m = a - (static_cast<std::uint32_t>(127 - Bias) << 23);
    code = m >> kDrop;
    rem = m & ((1u << kDrop) - 1u);
    half = 1u << (kDrop - 1);
  } else {
    // Subnormal (or zero) in the target: the value in units of the smallest subnormal,
    // 2^(1 - Bias - Man), is the full significand shifted right.
    const int e = static_cast<int>(a >> 23);
    const int shift = 151 - Bias - Man - e;  // >= 1 here
    if (shift > 24) return 0;  // below half the smallest subnormal, zero, or a float subnormal
    const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
    code = sig >> shift;
    rem = sig & ((1u << shift) - 1u);
    half = 1u << (shift - 1);
  }
  return code + static_cast<std::uint32_t>(rem > half || (rem == half && (code & 1u)));
}

// Widens the magnitude code (exponent field above `Man` mantissa bits, no sign) of a finite value
// to float bits. Every finite value of these formats is exact in float.
//
// A subnormal m * 2^(1 - Bias - Man) is normalised by converting the integer m to float, which is
// exact (m < 2^Man, far below 2^24: no rounding happens, so every machine gives the same bits),
// then moving the exponent down. This keeps the function branch-free, so host loops over many
// elements vectorise.
template <int Man, int Bias>
PURLIN_HD std::uint32_t widen_magnitude(std::uint32_t code) {
  static_assert(Man >= 1 && Man <= 15);
  const std::uint32_t e = code >> Man;
  const std::uint32_t m = code & ((1u << Man) - 1u);
  const std::uint32_t normal = ((e + 127u - Bias) << 23) | (m << (23 - Man));
  const std::uint32_t sub = float_as_bits(static_cast<float>(static_cast<std::int32_t>(m))) -
                            (static_cast<std::uint32_t>(Bias + Man - 1) << 23);
  return select(mask_if(e != 0), normal, select(mask_if(m != 0), sub, 0u));
}

}  // namespace numeric_detail

// ---- fp16 (1-5-10, bias 15) ---------------------------------------------------------------------

PURLIN_HD float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t mag = h & 0x7FFFu;
  const std::uint32_t finite = sign | numeric_detail::widen_magnitude<10, 15>(mag);
  const std::uint32_t special =
      mag == 0x7C00u ? (sign | 0x7F800000u) : numeric_detail::kFloatQuietNaN;
  return bits_as_float(
      numeric_detail::select(numeric_detail::mask_if(mag >= 0x7C00u), special, finite));
}

PURLIN_HD std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_as_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFFu;
  if (a >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 2^16: infinity
  return static_cast<std::uint16_t>(sign | numeric_detail::round_magnitude<10, 15>(a));
}

// ---- bf16 (1-8-7, the upper half of a float) ----------------------------------------------------

PURLIN_HD float bf16_to_float(std::uint16_t b) {
  return bits_as_float(static_cast<std::uint32_t>(b) << 16);
}

PURLIN_HD std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_as_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  // Same exponent range as float: add just under half an ulp, plus one when the kept part is odd,
  // and truncate. Overflow carries into the infinity encoding, as IEEE rounding requires.
  const std::uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

// ---- fp8 e4m3 (1-4-3, bias 7, no infinities, NaN = S.1111.111) ---------------------------------

PURLIN_HD float f8e4m3_to_float(std::uint8_t c) {
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t mag = c & 0x7Fu;
  const std::uint32_t finite = sign | numeric_detail::widen_magnitude<3, 7>(mag);
  return bits_as_float(numeric_detail::select(numeric_detail::mask_if(mag == 0x7Fu),
                                              numeric_detail::kFloatQuietNaN, finite));
}

PURLIN_HD std::uint8_t float_to_f8e4m3(float f) {
  const std::uint32_t u = float_as_bits(f);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;
  if (a >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // >= 448: saturate
  return static_cast<std::uint8_t>(sign | numeric_detail::round_magnitude<3, 7>(a));
}

// ---- fp8 e5m2 (1-5-2, bias 15, the upper byte of an fp16) ---------------------------------------

PURLIN_HD float f8e5m2_to_float(std::uint8_t c) {
  return f16_to_float(static_cast<std::uint16_t>(static_cast<std::uint16_t>(c) << 8));
}

PURLIN_HD std::uint8_t float_to_f8e5m2(float f) {
  const std::uint32_t u = float_as_bits(f);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;
  if (a >= 0x47600000u) return static_cast<std::uint8_t>(sign | 0x7Bu);  // >= 57344: saturate
  return static_cast<std::uint8_t>(sign | numeric_detail::round_magnitude<2, 15>(a));
}

// ---- typed spellings ----------------------------------------------------------------------------

PURLIN_HD float to_float(f16_t v) { return f16_to_float(v.bits); }
PURLIN_HD float to_float(bf16_t v) { return bf16_to_float(v.bits); }
PURLIN_HD float to_float(f8e4m3_t v) { return f8e4m3_to_float(v.bits); }
PURLIN_HD float to_float(f8e5m2_t v) { return f8e5m2_to_float(v.bits); }

// from_float<f16_t>(x) and so on.
template <class Narrow>
PURLIN_HD Narrow from_float(float f);
template <>
PURLIN_HD f16_t from_float<f16_t>(float f) { return f16_t{float_to_f16(f)}; }
template <>
PURLIN_HD bf16_t from_float<bf16_t>(float f) { return bf16_t{float_to_bf16(f)}; }
template <>
PURLIN_HD f8e4m3_t from_float<f8e4m3_t>(float f) { return f8e4m3_t{float_to_f8e4m3(f)}; }
template <>
PURLIN_HD f8e5m2_t from_float<f8e5m2_t>(float f) { return f8e5m2_t{float_to_f8e5m2(f)}; }

}  // namespace purlin
