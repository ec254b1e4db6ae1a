// The latency exchange's kernels for Reduce in two shots (ReduceScatter, then Gather at the root),
// any type and operator, and the sum of bf16, f16 and f32 with every form.
#include "snac/executors/sm_exchange_kernel.cuh"

#include "atom/reduce.h"
#include "collectives/reduce.h"

namespace purlin::snac {

template cudaError_t launch_exchange<coll::Reduce, void>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::Reduce, Reducer<DataType::bf16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::Reduce, Reducer<DataType::f16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::Reduce, Reducer<DataType::f32, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
