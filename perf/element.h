// Element types and reduction operators as purlin-perf sees them: names, NCCL enums, and the host
// arithmetic its reference results use.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <type_traits>

namespace perf {

// ---- operators -------------------------------------------------------------------------------

// `none` stands for the collectives that do not reduce (printed as nccl-tests prints it).
enum class Op { sum, prod, max, min, avg, premulsum, none };

const char* name_of(Op op);
std::optional<Op> parse_op(std::string_view name);
inline constexpr Op kAllOps[] = {Op::sum, Op::prod, Op::max, Op::min, Op::avg, Op::premulsum};

// ---- element types ---------------------------------------------------------------------------

// The narrow floating types are kept as their bit patterns; conversions go through the CUDA
// toolkit's host-callable functions, rounding to nearest even (saturating for fp8).
struct Half { std::uint16_t bits; };
struct BFloat16 { std::uint16_t bits; };
struct F8E4M3 { std::uint8_t bits; };
struct F8E5M2 { std::uint8_t bits; };

const char* name_of(ncclDataType_t type);
std::optional<ncclDataType_t> parse_type(std::string_view name);
std::size_t size_of(ncclDataType_t type);
inline constexpr ncclDataType_t kAllTypes[] = {
    ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64,
    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

template <class T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) with the C++ element type of `type`. The one place that maps the enum.
template <class F>
decltype(auto) visit_type(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclInt8: return f(TypeTag<std::int8_t>{});
    case ncclUint8: return f(TypeTag<std::uint8_t>{});
    case ncclInt32: return f(TypeTag<std::int32_t>{});
    case ncclUint32: return f(TypeTag<std::uint32_t>{});
    case ncclInt64: return f(TypeTag<std::int64_t>{});
    case ncclUint64: return f(TypeTag<std::uint64_t>{});
    case ncclFloat16: return f(TypeTag<Half>{});
    case ncclFloat32: return f(TypeTag<float>{});
    case ncclFloat64: return f(TypeTag<double>{});
    case ncclBfloat16: return f(TypeTag<BFloat16>{});
    case ncclFloat8e4m3: return f(TypeTag<F8E4M3>{});
    default: return f(TypeTag<F8E5M2>{});
  }
}

// ---- host arithmetic ---------------------------------------------------------------------------

// Element<T> gives the reference arithmetic for T:
//   Acc                       the accumulator (fp32 for 16- and 8-bit floats, as the library does)
//   load(T) -> Acc, store(Acc) -> T
//   combine(op, Acc, Acc), divide(Acc, n) for avg
//   make(random, op, nranks)  a non-zero input suited to op (no overflow to inf, no subnormals)
//   premul_scalar(rank)       rank's own PreMulSum scalar, as nccl-tests chooses it: 1 on even
//                             ranks, 2 on odd ones (exact in every type)
//   close(got, want, nranks)  exact for integers; for floats within the type's relative tolerance
//                             for a reduction over nranks inputs (see FloatElement::spread)
template <class T> struct Element;

// Integers wrap: the reference reduces in the unsigned type of the same width, like the hardware.
template <class T>
struct IntegerElement {
  using Acc = T;
  using U = std::make_unsigned_t<T>;
  static Acc load(T v) { return v; }
  static T store(Acc v) { return v; }
  static Acc combine(Op op, Acc a, Acc b) {
    switch (op) {
      case Op::prod: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case Op::max: return a > b ? a : b;
      case Op::min: return a < b ? a : b;
      default: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    }
  }
  static Acc divide(Acc a, int n) { return static_cast<T>(a / static_cast<T>(n)); }
  static T premul_scalar(int rank) { return T(rank % 2 == 0 ? 1 : 2); }
  static T make(std::uint64_t random, Op op, int /*nranks*/) {
    switch (op) {
      case Op::prod:  // odd factors: a product of odd numbers never wraps to zero
        return static_cast<T>(1 + 2 * (random % 2));
      case Op::sum: case Op::avg: case Op::premulsum:
        return static_cast<T>(1 + random % 4);
      default: {  // max, min and plain copies: a wide range, signed where the type is
        constexpr std::uint64_t span =
            sizeof(T) == 1 ? 100 : (std::uint64_t{1} << (sizeof(T) * 8 - 2));
        T magnitude = static_cast<T>(1 + (random >> 1) % span);
        if constexpr (std::is_signed_v<T>) {
          if (random & 1) return static_cast<T>(-magnitude);
        }
        return magnitude;
      }
    }
  }
  static bool close(T got, T want, int /*nranks*/) { return got == want; }
};

template <> struct Element<std::int8_t> : IntegerElement<std::int8_t> {};
template <> struct Element<std::uint8_t> : IntegerElement<std::uint8_t> {};
template <> struct Element<std::int32_t> : IntegerElement<std::int32_t> {};
template <> struct Element<std::uint32_t> : IntegerElement<std::uint32_t> {};
template <> struct Element<std::int64_t> : IntegerElement<std::int64_t> {};
template <> struct Element<std::uint64_t> : IntegerElement<std::uint64_t> {};

// Conversions between the stored bits of a narrow float and fp32.
float to_float(Half v);
float to_float(BFloat16 v);
float to_float(F8E4M3 v);
float to_float(F8E5M2 v);
template <class T> T from_float(float v);
template <> Half from_float<Half>(float v);
template <> BFloat16 from_float<BFloat16>(float v);
template <> F8E4M3 from_float<F8E4M3>(float v);
template <> F8E5M2 from_float<F8E5M2>(float v);

// Floats: T is the stored type, Acc the accumulator; close allows `ulp`, the relative error of one
// rounding order against another, times spread(nranks).
template <class T, class Acc_>
struct FloatElement {
  using Acc = Acc_;
  static Acc load(T v) {
    if constexpr (std::is_same_v<T, Acc>) return v; else return to_float(v);
  }
  static T store(Acc v) {
    if constexpr (std::is_same_v<T, Acc>) return v; else return from_float<T>(v);
  }
  static Acc combine(Op op, Acc a, Acc b) {
    switch (op) {
      case Op::prod: return a * b;
      case Op::max: return a > b ? a : b;
      case Op::min: return a < b ? a : b;
      default: return a + b;
    }
  }
  static Acc divide(Acc a, int n) { return a / static_cast<Acc>(n); }
  static T premul_scalar(int rank) { return store(Acc(rank % 2 == 0 ? 1 : 2)); }
  // Sums see [1, 2); products see values within 0.5/n of 1 so n factors stay near 1; max, min and
  // copies see +-[0.5, 2). Every range is far from zero, infinity and the subnormals of fp8.
  static T make(std::uint64_t random, Op op, int nranks) {
    double u = static_cast<double>(random >> 11) * 0x1.0p-53;  // [0, 1)
    switch (op) {
      case Op::prod: return store(static_cast<Acc>(1.0 + (u - 0.5) / nranks));
      case Op::sum: case Op::avg: case Op::premulsum: return store(static_cast<Acc>(1.0 + u));
      default: {
        double magnitude = 0.5 + 1.5 * u;
        return store(static_cast<Acc>((random & 1) ? -magnitude : magnitude));
      }
    }
  }
  static double to_double(T v) { return static_cast<double>(load(v)); }
  // How many times `ulp` a reduction over nranks inputs may be off by. The reference
  // rounds once; a library that rounds every partial result to T (NCCL's rings do, pipelining in
  // the buffer's type) rounds up to nranks - 1 times more. The inputs of sums are positive, so no
  // partial result is larger than the whole and each rounding moves it at most half a unit in the
  // last place of the result: nranks + 1 half units in all, against one unit for a single rank.
  static double spread(int nranks) { return std::max(1.0, (nranks + 1) / 2.0); }
  // Never more than half the result, whatever the ranks: no order of rounding goes that far.
  static bool close(T got, T want, double ulp, int nranks) {
    const double tolerance = std::min(0.5, ulp * spread(nranks));
    double g = to_double(got), w = to_double(want);
    return std::fabs(g - w) <= tolerance * std::fabs(w);  // false for NaN
  }
};

// `ulp`: one unit in the last place at 1.0 for the narrow types (with fp32 accumulation a different
// summation order moves a result across one rounding boundary, never more), times spread(nranks)
// for partial results rounded to the type.
template <> struct Element<Half> : FloatElement<Half, float> {
  static bool close(Half g, Half w, int nranks) { return FloatElement::close(g, w, 0x1.0p-10, nranks); }
};
template <> struct Element<BFloat16> : FloatElement<BFloat16, float> {
  static bool close(BFloat16 g, BFloat16 w, int nranks) { return FloatElement::close(g, w, 0x1.0p-7, nranks); }
};
template <> struct Element<F8E4M3> : FloatElement<F8E4M3, float> {
  static bool close(F8E4M3 g, F8E4M3 w, int nranks) { return FloatElement::close(g, w, 0x1.0p-3, nranks); }
};
template <> struct Element<F8E5M2> : FloatElement<F8E5M2, float> {
  static bool close(F8E5M2 g, F8E5M2 w, int nranks) { return FloatElement::close(g, w, 0x1.0p-2, nranks); }
};
template <> struct Element<float> : FloatElement<float, float> {
  static bool close(float g, float w, int nranks) { return FloatElement::close(g, w, 1e-5, nranks); }
};
template <> struct Element<double> : FloatElement<double, double> {
  static bool close(double g, double w, int nranks) { return FloatElement::close(g, w, 1e-12, nranks); }
};

// The bitwise complement of v: never equal to v, and for the values purlin-perf generates never
// within tolerance of it either. Used to poison outputs.
template <class T>
T complement(T v) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  for (auto& b : bytes) b = static_cast<unsigned char>(~b);
  std::memcpy(&v, bytes, sizeof(T));
  return v;
}

}  // namespace perf
