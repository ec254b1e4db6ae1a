// AllReduce: a ReduceScatter whose reduced shards an AllGather then spreads, fused in one execution.
#pragma once
#include "collectives/all_gather.h"
#include "collectives/reduce_scatter.h"

namespace purlin::coll {
using AllReduce = Compose<ReduceScatter, AllGather>;
}  // namespace purlin::coll
