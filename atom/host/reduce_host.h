// The rank-ordered reduction on the CPU, for any element type and operator chosen at run time.
#pragma once

#include <cstddef>

#include "core/types.h"

namespace purlin {

// dst[i] = the reduction of srcs[0..nsrc-1][i] for i in [0, count), folded in source order with
// the semantics of atom/reduce.h (bit-identical to the GPU datapaths). nsrc >= 1. dst may be one of
// the sources exactly, never a partial overlap. For premulsum, op.scalar_ptr (when non-null) must
// be readable by the CPU. Does nothing for a type or operator outside the enums.
void reduce_host(DataType type, const ReduceOp& op, void* dst, const void* const* srcs, int nsrc,
                 std::size_t count);

// dst[i] = src[i] scaled as a PreMulSum producer scales its contribution: widened, multiplied by
// op's scalar in the accumulator type, rounded once to the element type (Reducer<T, premulsum>'s
// first, then finish). dst may equal src.
void scale_host(DataType type, const ReduceOp& op, void* dst, const void* src, std::size_t count);

}  // namespace purlin
