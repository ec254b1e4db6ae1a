// AllReduce: a ReduceScatter whose reduced shards an AllGather then spreads, fused in one execution.
// The same result, declared directly: every rank offers its whole input to every rank, and each
// reduces all of them (one exchange instead of two, n times the bytes read; for small messages).
#pragma once
#include "collectives/all_gather.h"
#include "collectives/reduce_scatter.h"

namespace purlin::coll {
using AllReduce = Compose<ReduceScatter, AllGather>;
using AllReduceDirect = Declare<Consume::reduce, Layout::packed, Layout::packed>;
}  // namespace purlin::coll
