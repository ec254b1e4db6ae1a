#include "snac/op.h"

namespace purlin::snac {

const char* name_of(CollKind k) {
  switch (k) {
    case CollKind::all_reduce: return "AllReduce";
    case CollKind::broadcast: return "Broadcast";
    case CollKind::reduce: return "Reduce";
    case CollKind::all_gather: return "AllGather";
    case CollKind::reduce_scatter: return "ReduceScatter";
    case CollKind::all_to_all: return "AllToAll";
    case CollKind::gather: return "Gather";
    case CollKind::scatter: return "Scatter";
    case CollKind::send_recv: return "SendRecv";
    case CollKind::all_gather_v: return "AllGatherV";
    case CollKind::reduce_scatter_v: return "ReduceScatterV";
    case CollKind::all_to_all_v: return "AllToAllV";
    case CollKind::all_reduce_direct: return "AllReduceDirect";
    case CollKind::broadcast_direct: return "BroadcastDirect";
    case CollKind::reduce_direct: return "ReduceDirect";
  }
  return "?";
}

}  // namespace purlin::snac
