// The latency exchange's kernels for Reduce (every input to the root, folded there), any type and operator.
#include "snac/executors/sm_exchange_kernel.cuh"

#include "collectives/reduce.h"

namespace purlin::snac {

template cudaError_t launch_exchange<coll::ReduceDirect, void>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
