// The generic kernels of AllGather, AllGatherV, Gather and Scatter.
#include "snac/executors/sm_kernel.cuh"

#include "collectives/all_gather.h"
#include "collectives/gather.h"
#include "collectives/scatter.h"

namespace purlin::snac {

template cudaError_t launch_generic<coll::AllGather>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::AllGather>(int*);
template cudaError_t launch_generic<coll::AllGatherV>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::AllGatherV>(int*);
template cudaError_t launch_generic<coll::Gather>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::Gather>(int*);
template cudaError_t launch_generic<coll::Scatter>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::Scatter>(int*);

}  // namespace purlin::snac
