// The latency exchange's lean kernels (the one-word form alone, atom::LLAtom's Slots) for Reduce in
// two shots, the sum of bf16, f16 and f32.
#include "snac/executors/sm_exchange_lean.cuh"

#include "atom/reduce.h"
#include "collectives/reduce.h"

namespace purlin::snac {

template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::bf16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::bf16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::bf16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::f16, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::f16, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::f16, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::f32, RedOpKind::sum>, 2>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::f32, RedOpKind::sum>, 4>(const ExchangeArgs&, int, cudaStream_t);
template cudaError_t launch_lean<coll::Reduce, Reducer<DataType::f32, RedOpKind::sum>, 8>(const ExchangeArgs&, int, cudaStream_t);

}  // namespace purlin::snac
