// The generic kernels of ReduceScatter and ReduceScatterV.
#include "snac/executors/sm_kernel.cuh"

#include "collectives/reduce_scatter.h"

namespace purlin::snac {

template cudaError_t launch_generic<coll::ReduceScatter>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::ReduceScatter>(int*);
template cudaError_t launch_generic<coll::ReduceScatterV>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::ReduceScatterV>(int*);

}  // namespace purlin::snac
