// Reduce: a ReduceScatter whose reduced shards are gathered at the root.
// The same result, declared directly: every rank offers its whole input to the root, which reduces
// them all in rank order (one exchange instead of two, the whole reduction on one rank; for small
// messages).
#pragma once
#include "collectives/gather.h"
#include "collectives/reduce_scatter.h"

namespace purlin::coll {
using Reduce = Compose<ReduceScatter, Gather>;
using ReduceDirect = Declare<Consume::reduce, Layout::packed, Layout::packed, Root::consumer>;
}  // namespace purlin::coll
