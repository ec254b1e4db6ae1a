// The latency exchange's kernels for the collectives that copy: AllGather, AlltoAll, Broadcast (the root's whole buffer to every
// rank), Gather and Scatter.
#include "snac/executors/sm_exchange_kernel.cuh"

#include "collectives/all_gather.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/scatter.h"

namespace purlin::snac {

template cudaError_t launch_exchange<coll::AllGather, void>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::AllToAll, void>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::BroadcastDirect, void>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::Gather, void>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::Scatter, void>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
