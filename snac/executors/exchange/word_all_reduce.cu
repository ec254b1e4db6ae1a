// The latency exchange's word kernels (atom::WordAtom) for AllReduce in one shot and in two,
// the sum of bf16, f16 and f32, for 2, 4 and 8 ranks.
#include "snac/executors/sm_word_kernel.cuh"

#include "atom/reduce.h"
#include "collectives/all_reduce.h"

namespace purlin::snac {

template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::bf16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::bf16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::bf16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::f16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::f16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::f16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::f32, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::f32, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduce, Reducer<DataType::f32, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::bf16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::f16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::f16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::f16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::f32, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::f32, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::AllReduceDirect, Reducer<DataType::f32, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
