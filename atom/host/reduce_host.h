// The rank-ordered reduction on the CPU, for any element type and operator chosen at run time.
#pragma once

#include <cstddef>

#include "core/types.h"

namespace purlin {

// dst[i] = the reduction of srcs[0..nsrc-1][i] for i in [0, count), folded in source order with
// the semantics of atom/reduce.h (bit-identical to the GPU datapaths). nsrc >= 1. dst may be one of
// the sources exactly, never a partial overlap. This is the consumer's fold: for premulsum it sums
// contributions that their producers scaled already (scale_host). Does nothing for a type or
// operator outside the enums.
void reduce_host(DataType type, const ReduceOp& op, void* dst, const void* const* srcs, int nsrc,
                 std::size_t count);

// The producer's step of a reduction on one contribution of `count` elements: for premulsum
// dst[i] = round_T(s * src[i]) with op's scalar (atom/reduce.h scale_range; op.scalar_ptr, when
// non-null, must be readable by the CPU); for any other operator a copy. dst may be src exactly,
// never a partial overlap.
void scale_host(DataType type, const ReduceOp& op, void* dst, const void* src, std::size_t count);

}  // namespace purlin
