// Reduce: a ReduceScatter whose reduced shards are gathered at the root.
#pragma once
#include "collectives/gather.h"
#include "collectives/reduce_scatter.h"

namespace purlin::coll {
using Reduce = Compose<ReduceScatter, Gather>;
}  // namespace purlin::coll
