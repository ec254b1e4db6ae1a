// The generic kernels of AllReduce, composed (ReduceScatter then AllGather) and direct.
#include "snac/executors/sm_kernel.cuh"

#include "collectives/all_reduce.h"

namespace purlin::snac {

template cudaError_t launch_generic<coll::AllReduce>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::AllReduce>(int*);
template cudaError_t launch_generic<coll::AllReduceDirect>(const KernelArgs&, cudaStream_t);
template cudaError_t generic_ctas_per_sm<coll::AllReduceDirect>(int*);

}  // namespace purlin::snac
