// Broadcast: the root scatters its buffer, then every rank gathers all partitions: the root sends
// each byte once and every rank helps spread it.
#pragma once
#include "collectives/all_gather.h"
#include "collectives/scatter.h"

namespace purlin::coll {
using Broadcast = Compose<Scatter, AllGather>;
}  // namespace purlin::coll
