// The latency exchange's kernels for the reductions compiled for one type and operator: the sum of bf16, f16 and f32.
#include "snac/executors/sm_exchange_kernel.cuh"

#include "atom/reduce.h"
#include "collectives/all_reduce.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"

namespace purlin::snac {

template cudaError_t launch_exchange<coll::AllReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::AllReduceDirect, Reducer<DataType::f16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::AllReduceDirect, Reducer<DataType::f32, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::AllReduce, Reducer<DataType::bf16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::AllReduce, Reducer<DataType::f16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::AllReduce, Reducer<DataType::f32, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::ReduceScatter, Reducer<DataType::bf16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::ReduceScatter, Reducer<DataType::f16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::ReduceScatter, Reducer<DataType::f32, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::ReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::ReduceDirect, Reducer<DataType::f16, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_exchange<coll::ReduceDirect, Reducer<DataType::f32, RedOpKind::sum>>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
