// Broadcast: the root scatters its buffer, then every rank gathers all partitions: the root sends
// each byte once and every rank helps spread it.
// The same result, declared directly: the root offers its whole buffer to every rank (one exchange
// instead of two, n times the bytes sent by the root; for small messages).
#pragma once
#include "collectives/all_gather.h"
#include "collectives/scatter.h"

namespace purlin::coll {
using Broadcast = Compose<Scatter, AllGather>;
using BroadcastDirect = Declare<Consume::copy, Layout::packed, Layout::packed, Root::producer>;
}  // namespace purlin::coll
