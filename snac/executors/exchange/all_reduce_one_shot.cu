// The latency exchange's kernels for AllReduce in one shot (every rank folds every input), any type and operator.
#include "snac/executors/sm_exchange_kernel.cuh"

#include "collectives/all_reduce.h"

namespace purlin::snac {

template cudaError_t launch_exchange<coll::AllReduceDirect, void>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
