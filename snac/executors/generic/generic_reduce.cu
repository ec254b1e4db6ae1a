// The generic kernels of Reduce, composed and direct.
#include "snac/executors/sm_kernel.cuh"

#include "collectives/reduce.h"

namespace purlin::snac {

template cudaError_t launch_generic<coll::Reduce>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::Reduce>(int*);
template cudaError_t launch_generic<coll::ReduceDirect>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::ReduceDirect>(int*);

}  // namespace purlin::snac
