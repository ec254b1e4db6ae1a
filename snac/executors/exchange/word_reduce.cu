// The latency exchange's word kernels (atom::WordAtom) for ReduceScatter and Reduce (the root's
// whole buffer), the sum of bf16, f16 and f32, for 2, 4 and 8 ranks.
#include "snac/executors/sm_word_kernel.cuh"

#include "atom/reduce.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"

namespace purlin::snac {

template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::bf16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::bf16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::bf16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::f16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::f16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::f16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::f32, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::f32, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceScatter, Reducer<DataType::f32, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::f16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::f16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::f16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::f32, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::f32, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::ReduceDirect, Reducer<DataType::f32, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
