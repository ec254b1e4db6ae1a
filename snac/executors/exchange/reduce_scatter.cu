// The latency exchange's kernels for ReduceScatter, any type and operator.
#include "snac/executors/sm_exchange_kernel.cuh"

#include "collectives/reduce_scatter.h"

namespace purlin::snac {

template cudaError_t launch_exchange<coll::ReduceScatter, void>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
