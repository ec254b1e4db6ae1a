// The latency exchange's word kernels (atom::WordAtom) for the copies: AllGather, AlltoAll, Broadcast
// (the root's whole buffer to every rank), Gather and Scatter, for 2, 4 and 8 ranks.
#include "snac/executors/sm_word_kernel.cuh"

#include "collectives/all_gather.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/scatter.h"

namespace purlin::snac {

template cudaError_t launch_word<coll::AllGather, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllGather, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllGather, void, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllToAll, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllToAll, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllToAll, void, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::BroadcastDirect, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::BroadcastDirect, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::BroadcastDirect, void, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Gather, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Gather, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Gather, void, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Scatter, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Scatter, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Scatter, void, 8>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
