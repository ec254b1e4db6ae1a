// Element types and reduction operators. The numeric values equal NCCL's enums.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/hd.h"

namespace purlin {

enum class DataType : int {
  int8 = 0,
  uint8 = 1,
  int32 = 2,
  uint32 = 3,
  int64 = 4,
  uint64 = 5,
  f16 = 6,
  f32 = 7,
  f64 = 8,
  bf16 = 9,
  f8e4m3 = 10,
  f8e5m2 = 11,
};
inline constexpr int kNumDataTypes = 12;

PURLIN_HD constexpr std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::int8: case DataType::uint8: case DataType::f8e4m3: case DataType::f8e5m2: return 1;
    case DataType::f16: case DataType::bf16: return 2;
    case DataType::int32: case DataType::uint32: case DataType::f32: return 4;
    case DataType::int64: case DataType::uint64: case DataType::f64: return 8;
  }
  return 0;
}

PURLIN_HD constexpr bool is_floating(DataType t) {
  return t == DataType::f16 || t == DataType::f32 || t == DataType::f64 || t == DataType::bf16 ||
         t == DataType::f8e4m3 || t == DataType::f8e5m2;
}

const char* name_of(DataType t);

// The arithmetic a reduction applies. PreMulSum multiplies each contribution by a scalar of the
// element type, then sums. Avg sums then divides by the rank count (integers truncate).
enum class RedOpKind : int { sum = 0, prod = 1, max = 2, min = 3, avg = 4, premulsum = 5 };
inline constexpr int kNumBuiltinOps = 5;

const char* name_of(RedOpKind k);

// Where a PreMulSum scalar lives: read once at creation (host) or read by the datapath when it runs.
enum class ScalarResidence : int { device = 0, host_immediate = 1 };

// A reduction as the datapath sees it: the kind, the rank count (for avg) and the PreMulSum scalar,
// either by value (8 bytes holding the element type's bit pattern) or through a pointer read at
// execution time.
struct ReduceOp {
  RedOpKind kind = RedOpKind::sum;
  std::uint64_t scalar_bits = 0;         // host_immediate scalar, element type's bits, zero-extended
  const void* scalar_ptr = nullptr;      // device-resident scalar (read when the datapath runs)
  int nranks = 1;                        // divisor for avg
};

}  // namespace purlin
