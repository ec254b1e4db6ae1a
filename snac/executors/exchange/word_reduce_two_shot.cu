// The latency exchange's word kernels (atom::WordAtom) for Reduce in two shots, the sum of bf16,
// f16 and f32, for 2, 4 and 8 ranks.
#include "snac/executors/sm_word_kernel.cuh"

#include "atom/reduce.h"
#include "collectives/reduce.h"

namespace purlin::snac {

template cudaError_t launch_word<coll::Reduce, Reducer<DataType::bf16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::bf16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::bf16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::f16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::f16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::f16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::f32, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::f32, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_word<coll::Reduce, Reducer<DataType::f32, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
