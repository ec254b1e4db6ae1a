// The one place that names every collective: from the run-time kind to its declaration type.
// Adding a collective is a declaration in collectives/ and one line here.
#pragma once

#include "collectives/all_gather.h"
#include "collectives/all_reduce.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/scatter.h"
#include "collectives/send_recv.h"
#include "snac/op.h"

namespace purlin::snac {

// Calls f.template operator()<Declaration>() for the declaration of `kind`.
template <class F>
auto dispatch(CollKind kind, F&& f) {
  switch (kind) {
    case CollKind::all_reduce: return f.template operator()<coll::AllReduce>();
    case CollKind::broadcast: return f.template operator()<coll::Broadcast>();
    case CollKind::reduce: return f.template operator()<coll::Reduce>();
    case CollKind::all_gather: return f.template operator()<coll::AllGather>();
    case CollKind::reduce_scatter: return f.template operator()<coll::ReduceScatter>();
    case CollKind::all_to_all: return f.template operator()<coll::AllToAll>();
    case CollKind::gather: return f.template operator()<coll::Gather>();
    case CollKind::scatter: return f.template operator()<coll::Scatter>();
    case CollKind::send_recv: return f.template operator()<coll::SendRecv>();
    case CollKind::all_gather_v: return f.template operator()<coll::AllGatherV>();
    case CollKind::reduce_scatter_v: return f.template operator()<coll::ReduceScatterV>();
    case CollKind::all_to_all_v: return f.template operator()<coll::AllToAllV>();
    case CollKind::all_reduce_direct: return f.template operator()<coll::AllReduceDirect>();
    case CollKind::broadcast_direct: return f.template operator()<coll::BroadcastDirect>();
    case CollKind::reduce_direct: return f.template operator()<coll::ReduceDirect>();
  }
  return f.template operator()<coll::AllReduce>();
}

}  // namespace purlin::snac
