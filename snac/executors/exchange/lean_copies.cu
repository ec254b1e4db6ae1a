// The latency exchange's lean kernels (the one-word form alone, atom::LLAtom's Slots) for the copies (AllGather, AlltoAll,
// Broadcast, Gather, Scatter), up to 4 slots.
#include "snac/executors/sm_exchange_lean.cuh"

#include "collectives/all_gather.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/scatter.h"

namespace purlin::snac {

template cudaError_t launch_lean<coll::AllGather, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::AllGather, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::AllToAll, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::AllToAll, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::BroadcastDirect, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::BroadcastDirect, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Gather, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Gather, void, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Scatter, void, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Scatter, void, 4>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
