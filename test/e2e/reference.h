// The host reference the end-to-end tests compare the library against, written independently of
// the library: element types and their conversions, seeded inputs, and the reduction contract.
//
// The contract (what every rank must see, bit for bit):
//   each output element is folded over ranks in order 0..n-1 in an accumulator type: float for
//   fp16, bf16, fp8 e4m3 and fp8 e5m2; the type itself otherwise (integers wrap around).
//   sum: acc = x0; acc = acc + xk.   prod: acc = acc * xk.
//   max: acc = xk > acc ? xk : acc.   min: acc = xk < acc ? xk : acc.
//   avg: the sum divided by nranks in the accumulator type (integers truncate toward zero).
//   premulsum (rank k's own scalar s_k): y_k = s_k*x_k rounded to the element type (the product
//   taken in the accumulator type); acc = y_0; acc = acc + y_k.
//   Narrowing rounds to nearest even; fp16 and bf16 overflow to infinity; fp8 e4m3 and e5m2
//   saturate to their largest finite value (448, 57344); NaN stays NaN.
#pragma once

#include <nccl.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "test/common/rng.h"

namespace e2e {

// ---- Narrow floating formats ---------------------------------------------------------------------

// A binary floating format of at most 16 bits: sign, exponent field, mantissa field.
struct NarrowFormat {
  int exp_bits;
  int man_bits;
  bool ieee_specials;  // all-ones exponent means inf/NaN; otherwise (e4m3) only S.1111.111 is NaN
  bool saturate;       // overflow gives the largest finite value instead of infinity
};
inline constexpr NarrowFormat kHalfFormat{5, 10, true, false};
inline constexpr NarrowFormat kBf16Format{8, 7, true, false};
inline constexpr NarrowFormat kE4m3Format{4, 3, false, true};
inline constexpr NarrowFormat kE5m2Format{5, 2, true, true};

constexpr int bias_of(const NarrowFormat& f) { return (1 << (f.exp_bits - 1)) - 1; }
constexpr std::uint32_t man_mask_of(const NarrowFormat& f) { return (1u << f.man_bits) - 1; }
constexpr std::uint32_t exp_all_ones(const NarrowFormat& f) { return (1u << f.exp_bits) - 1; }

// Largest finite magnitude's bit pattern: 0x7BFF (fp16), 0x7F7F (bf16), 0x7E (e4m3), 0x7B (e5m2).
constexpr std::uint32_t max_finite_bits(const NarrowFormat& f) {
  return f.ieee_specials ? (exp_all_ones(f) << f.man_bits) - 1
                         : (exp_all_ones(f) << f.man_bits) | (man_mask_of(f) - 1);
}

inline bool narrow_is_nan(const NarrowFormat& f, std::uint32_t bits) {
  const std::uint32_t mag = bits & ((1u << (f.exp_bits + f.man_bits)) - 1);
  if (f.ieee_specials) return mag > (exp_all_ones(f) << f.man_bits);
  return mag == ((exp_all_ones(f) << f.man_bits) | man_mask_of(f));
}

// Exact value of a narrow pattern, by its definition (m * 2^e).
inline double narrow_to_double(const NarrowFormat& f, std::uint32_t bits) {
  const int bias = bias_of(f);
  const bool negative = (bits >> (f.exp_bits + f.man_bits)) & 1u;
  const std::uint32_t e = (bits >> f.man_bits) & exp_all_ones(f);
  const std::uint32_t m = bits & man_mask_of(f);
  double v;
  if (narrow_is_nan(f, bits)) {
    v = std::nan("");
  } else if (f.ieee_specials && e == exp_all_ones(f)) {
    v = INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(m | (1u << f.man_bits)), static_cast<int>(e) - bias - f.man_bits);
  }
  return negative ? -v : v;
}

// float -> narrow, round to nearest even, from the float's bits.
// The float is sig * 2^(e32 - 150). The result is a multiple q of the target's quantum 2^qe,
// where qe = max(exponent, emin) - man_bits; the pattern ((max(exponent, emin) - emin) << man) + q
// is then the encoding, with a rounding carry moving into the exponent field by itself.
inline std::uint32_t float_to_narrow(const NarrowFormat& f, float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t sign = (u >> 31) << (f.exp_bits + f.man_bits);
  const std::uint32_t inf_bits = exp_all_ones(f) << f.man_bits;
  const std::uint32_t overflow = f.saturate ? max_finite_bits(f) : inf_bits;
  if (std::isnan(x)) {
    const std::uint32_t nan_bits = f.ieee_specials ? inf_bits | (1u << (f.man_bits - 1))
                                                   : inf_bits | man_mask_of(f);
    return sign | nan_bits;
  }
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a == 0x7F800000u) return sign | overflow;
  int e32 = static_cast<int>(a >> 23);
  std::uint32_t sig = a & 0x7FFFFFu;
  if (e32 != 0) {
    sig |= 0x800000u;
  } else {
    e32 = 1;  // float subnormal: same scale as the smallest normal, no implicit bit
  }
  const int emin = 1 - bias_of(f);
  const int exponent = e32 - 127 > emin ? e32 - 127 : emin;
  const int qe = exponent - f.man_bits;
  const int shift = qe - (e32 - 150);  // >= 23 - man_bits >= 13
  std::uint64_t q = 0;
  if (shift <= 24) {
    q = sig >> shift;
    const std::uint32_t rest = sig & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1))) ++q;
  }  // else the value is below half the smallest quantum: zero
  const std::uint64_t bits = (static_cast<std::uint64_t>(exponent - emin) << f.man_bits) + q;
  if (bits > max_finite_bits(f)) return sign | overflow;
  return sign | static_cast<std::uint32_t>(bits);
}

// Decoding tables (built once from the definition above).
template <const NarrowFormat& F>
const float* narrow_table() {
  static const auto table = [] {
    constexpr std::size_t n = std::size_t{1} << (1 + F.exp_bits + F.man_bits);
    auto* t = new float[n];
    for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<float>(narrow_to_double(F, static_cast<std::uint32_t>(i)));
    return t;
  }();
  return table;
}

// ---- Element types -------------------------------------------------------------------------------
//
// Each type says how it is stored, what it accumulates in, how to widen and narrow, how to make a
// seeded input (`general`: the whole useful range; `small`: values near 1 or small integers for prod),
// and a seeded premulsum scalar (never zero; for floating types a full significand between 1/4 and
// 4 of either sign, so that products round and fp8 products also saturate).

template <class Int>
struct IntegerType {
  using Storage = Int;
  using Acc = Int;
  static Acc load(Storage s) { return s; }
  static Storage store(Acc a) { return a; }
  static Storage general(std::uint64_t h) {
    const auto v = static_cast<Int>(h);
    return v == 0 ? Int{1} : v;
  }
  static Storage small(std::uint64_t h) {
    const auto magnitude = static_cast<Int>(1 + h % 3);
    if constexpr (std::is_signed_v<Int>) return (h >> 8) & 1 ? static_cast<Int>(-magnitude) : magnitude;
    return magnitude;
  }
  static Storage scalar(std::uint64_t h) {
    const auto v = static_cast<Int>(h);  // any value: the products wrap around
    return v == 0 ? Int{3} : v;
  }
  static double value(Storage s) { return static_cast<double>(s); }
};

template <const NarrowFormat& F>
struct NarrowType {
  using Storage = std::conditional_t<(F.exp_bits + F.man_bits > 7), std::uint16_t, std::uint8_t>;
  using Acc = float;
  static Acc load(Storage s) { return narrow_table<F>()[s]; }
  static Storage store(Acc a) { return static_cast<Storage>(float_to_narrow(F, a)); }
  static constexpr int kSignShift = F.exp_bits + F.man_bits;
  static Storage pattern(std::uint64_t sign, std::uint64_t exp_field, std::uint64_t man) {
    return static_cast<Storage>(((sign & 1) << kSignShift) | (exp_field << F.man_bits) | (man & man_mask_of(F)));
  }
  static Storage general(std::uint64_t h) {
    if constexpr (F.exp_bits == 8) {
      // bf16: exponents within 2^+-20 so that sums stay finite in float.
      return pattern(h >> 63, static_cast<std::uint64_t>(bias_of(F) - 20) + (h >> 16) % 41, h);
    } else {
      // fp16 and fp8: any finite non-zero pattern, subnormals and the largest values included,
      // so rounding, overflow and saturation all happen.
      constexpr std::uint32_t mag_mask = (1u << kSignShift) - 1;
      std::uint32_t bits = static_cast<std::uint32_t>(h) & ((1u << (kSignShift + 1)) - 1);
      if (F.ieee_specials && ((bits >> F.man_bits) & exp_all_ones(F)) == exp_all_ones(F)) {
        bits ^= 1u << (kSignShift - 1);  // top exponent bit off: a large finite value
      }
      if (!F.ieee_specials && narrow_is_nan(F, bits)) bits ^= 1u;  // S.1111.111 -> S.1111.110
      if ((bits & mag_mask) == 0) bits |= static_cast<std::uint32_t>(bias_of(F)) << F.man_bits;  // 1.0
      return static_cast<Storage>(bits);
    }
  }
  static Storage small(std::uint64_t h) {  // [0.5, 2), either sign
    return pattern(h >> 63, static_cast<std::uint64_t>(bias_of(F) - 1) + ((h >> 32) & 1), h);
  }
  static Storage scalar(std::uint64_t h) {
    return pattern(h >> 63, static_cast<std::uint64_t>(bias_of(F) - 2) + (h >> 32) % 4, h);
  }
  static double value(Storage s) { return narrow_to_double(F, s); }
};

struct Float32Type {
  using Storage = float;
  using Acc = float;
  static Acc load(Storage s) { return s; }
  static Storage store(Acc a) { return a; }
  static Storage from_bits(std::uint64_t sign, std::uint64_t exp_field, std::uint64_t man) {
    const auto u = static_cast<std::uint32_t>(((sign & 1) << 31) | (exp_field << 23) | (man & 0x7FFFFFu));
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static Storage general(std::uint64_t h) { return from_bits(h >> 63, 127 - 30 + (h >> 32) % 61, h); }
  static Storage small(std::uint64_t h) { return from_bits(h >> 63, 126 + ((h >> 32) & 1), h); }
  static Storage scalar(std::uint64_t h) { return from_bits(h >> 63, 125 + (h >> 32) % 4, h); }
  static double value(Storage s) { return s; }
};

struct Float64Type {
  using Storage = double;
  using Acc = double;
  static Acc load(Storage s) { return s; }
  static Storage store(Acc a) { return a; }
  static Storage from_bits(std::uint64_t sign, std::uint64_t exp_field, std::uint64_t man) {
    const std::uint64_t u = ((sign & 1) << 63) | (exp_field << 52) | (man & ((std::uint64_t{1} << 52) - 1));
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
  }
  static Storage general(std::uint64_t h) { return from_bits(h >> 63, 1023 - 60 + ((h >> 52) & 0x7FF) % 121, h); }
  static Storage small(std::uint64_t h) { return from_bits(h >> 63, 1022 + ((h >> 52) & 1), h); }
  static Storage scalar(std::uint64_t h) { return from_bits(h >> 63, 1021 + (h >> 52) % 4, h); }
  static double value(Storage s) { return s; }
};

using Int8 = IntegerType<std::int8_t>;
using Uint8 = IntegerType<std::uint8_t>;
using Int32 = IntegerType<std::int32_t>;
using Uint32 = IntegerType<std::uint32_t>;
using Int64 = IntegerType<std::int64_t>;
using Uint64 = IntegerType<std::uint64_t>;
using Half = NarrowType<kHalfFormat>;
using Bf16 = NarrowType<kBf16Format>;
using E4m3 = NarrowType<kE4m3Format>;
using E5m2 = NarrowType<kE5m2Format>;

inline constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                               ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                               ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

inline const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "float16";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    case ncclBfloat16: return "bfloat16";
    case ncclFloat8e4m3: return "fp8e4m3";
    case ncclFloat8e5m2: return "fp8e5m2";
    default: return "?";
  }
}

inline std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

inline bool is_floating(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 ||
         t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
}

// Calls fn.template operator()<Type>() for the element type `t`.
template <class Fn>
decltype(auto) with_type(ncclDataType_t t, Fn&& fn) {
  switch (t) {
    case ncclInt8: return fn.template operator()<Int8>();
    case ncclUint8: return fn.template operator()<Uint8>();
    case ncclInt32: return fn.template operator()<Int32>();
    case ncclUint32: return fn.template operator()<Uint32>();
    case ncclInt64: return fn.template operator()<Int64>();
    case ncclUint64: return fn.template operator()<Uint64>();
    case ncclFloat16: return fn.template operator()<Half>();
    case ncclFloat32: return fn.template operator()<Float32Type>();
    case ncclFloat64: return fn.template operator()<Float64Type>();
    case ncclBfloat16: return fn.template operator()<Bf16>();
    case ncclFloat8e4m3: return fn.template operator()<E4m3>();
    default: return fn.template operator()<E5m2>();
  }
}

// ---- Operators -----------------------------------------------------------------------------------

enum class Op { sum, prod, max, min, avg, premulsum };
inline constexpr Op kAllOps[] = {Op::sum, Op::prod, Op::max, Op::min, Op::avg, Op::premulsum};

inline const char* op_name(Op op) {
  constexpr const char* names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return names[static_cast<int>(op)];
}

// Arithmetic in the accumulator type; integers wrap around (done in the unsigned type).
template <class A>
A acc_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
  } else {
    return a + b;
  }
}
template <class A>
A acc_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
  } else {
    const volatile A p = a * b;  // rounded on its own: never fused with the add that follows
    return p;
  }
}
template <class A>
A acc_div(A a, int n) {
  return static_cast<A>(a / static_cast<A>(n));  // integer division truncates toward zero
}

// ---- Seeded inputs -------------------------------------------------------------------------------

inline std::uint64_t mix64(std::uint64_t z) { return rng::finalise(z); }

inline std::uint64_t hash_string(const std::string& s) {  // FNV-1a, then mixed
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return mix64(h);
}

// Rank r's input element i is a pure function of (seed, r, i), so any rank can compute any other
// rank's input, and the reference for its own output, without exchanging data.
struct Inputs {
  std::uint64_t seed = 0;
  bool small = false;  // prod-friendly values

  std::uint64_t rank_key(int rank) const {
    return mix64(seed ^ (0x632BE59BD9B4E019ull * static_cast<std::uint64_t>(rank + 1)));
  }
  static std::uint64_t element_hash(std::uint64_t key, std::size_t i) {
    return mix64(key + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(i) + 1));
  }
  template <class T>
  typename T::Storage at_key(std::uint64_t key, std::size_t i) const {
    const std::uint64_t h = element_hash(key, i);
    return small ? T::small(h) : T::general(h);
  }
  template <class T>
  typename T::Storage at(int rank, std::size_t i) const {
    return at_key<T>(rank_key(rank), i);
  }
  // out[j] = rank's input element (from + j), j < len.
  template <class T>
  void fill(typename T::Storage* out, int rank, std::size_t from, std::size_t len) const {
    const std::uint64_t key = rank_key(rank);
    for (std::size_t j = 0; j < len; ++j) out[j] = at_key<T>(key, from + j);
  }
};

// Rank `rank`'s premulsum scalar in a case whose scalars come from `seed`: a different one on
// every rank, as NCCL's users (nccl-tests among them) pass.
template <class T>
typename T::Storage rank_scalar(std::uint64_t seed, int rank) {
  return T::scalar(mix64(seed ^ (0xD6E8FEB86659FD93ull * static_cast<std::uint64_t>(rank + 1))));
}

// out[j] = the reduction over ranks 0..nranks-1 (in order) of input element (from + j), for
// 1 <= nranks <= 64. `scalars` seeds the ranks' premulsum scalars (rank_scalar).
template <class T>
void reduce_reference(typename T::Storage* out, const Inputs& in, int nranks, Op op, std::uint64_t scalars,
                      std::size_t from, std::size_t len) {
  using A = typename T::Acc;
  constexpr int kMaxRanks = 64;
  if (nranks < 1 || nranks > kMaxRanks) throw std::invalid_argument("reduce_reference: 1 to 64 ranks");
  std::uint64_t keys[kMaxRanks];
  A s[kMaxRanks];
  for (int k = 0; k < nranks; ++k) {
    keys[k] = in.rank_key(k);
    s[k] = T::load(rank_scalar<T>(scalars, k));
  }
  // x(k, i): rank k's contribution to element i as it enters the fold.
  auto fold = [&](auto x, auto step, auto last) {
    for (std::size_t j = 0; j < len; ++j) {
      const std::size_t i = from + j;
      A acc = x(0, i);
      for (int k = 1; k < nranks; ++k) acc = step(acc, x(k, i));
      out[j] = T::store(last(acc));
    }
  };
  auto input = [&](int k, std::size_t i) { return T::load(in.template at_key<T>(keys[k], i)); };
  auto same = [](A a) { return a; };
  auto add = [](A a, A x) { return acc_add(a, x); };
  switch (op) {
    case Op::sum: fold(input, add, same); break;
    case Op::prod: fold(input, [](A a, A x) { return acc_mul(a, x); }, same); break;
    case Op::max: fold(input, [](A a, A x) { return x > a ? x : a; }, same); break;
    case Op::min: fold(input, [](A a, A x) { return x < a ? x : a; }, same); break;
    case Op::avg: fold(input, add, [nranks](A a) { return acc_div(a, nranks); }); break;
    case Op::premulsum:
      fold([&](int k, std::size_t i) { return T::load(T::store(acc_mul(s[k], input(k, i)))); }, add, same);
      break;
  }
}

// "0x3c00 (1)" for diagnostics.
template <class T>
std::string describe(typename T::Storage s) {
  char buf[96];
  std::uint64_t bits = 0;
  std::memcpy(&bits, &s, sizeof s);
  std::snprintf(buf, sizeof buf, "0x%0*llx (%.9g)", static_cast<int>(2 * sizeof s),
                static_cast<unsigned long long>(bits), T::value(s));
  return buf;
}

}  // namespace e2e
