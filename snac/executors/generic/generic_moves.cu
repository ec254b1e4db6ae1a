// The generic kernels of Broadcast (composed and direct), AlltoAll and AlltoAllV (Send/Recv
// rounds are AlltoAllV's declaration).
#include "snac/executors/sm_kernel.cuh"

#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"

namespace purlin::snac {

template cudaError_t launch_generic<coll::Broadcast>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::Broadcast>(int*);
template cudaError_t launch_generic<coll::BroadcastDirect>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::BroadcastDirect>(int*);
template cudaError_t launch_generic<coll::AllToAll>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::AllToAll>(int*);
template cudaError_t launch_generic<coll::AllToAllV>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::AllToAllV>(int*);

}  // namespace purlin::snac
