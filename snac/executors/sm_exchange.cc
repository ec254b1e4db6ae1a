// The latency exchange's kernels by run-time kind, type and operator.
#include "snac/executors/sm_exchange.h"

#include "atom/reduce.h"
#include "collectives/all_gather.h"
#include "collectives/all_reduce.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/scatter.h"

namespace purlin::snac {
namespace {

// A reduction's kernel: compiled for the call's type and operator where there is one.
template <class D>
cudaError_t launch_reduction(const ExchangeArgs& a, int threads, cudaStream_t stream) {
  switch (exchange_fold(a.type, a.op)) {
    case ExchangeFold::bf16_sum: return launch_exchange<D, Reducer<DataType::bf16, RedOpKind::sum>>(a, threads, stream);
    case ExchangeFold::f16_sum: return launch_exchange<D, Reducer<DataType::f16, RedOpKind::sum>>(a, threads, stream);
    case ExchangeFold::f32_sum: return launch_exchange<D, Reducer<DataType::f32, RedOpKind::sum>>(a, threads, stream);
    case ExchangeFold::any: break;
  }
  return launch_exchange<D, void>(a, threads, stream);
}

}  // namespace

void UniformSide::prepare(int n, int channels) {
  const auto share_of = [channels](std::uint64_t len) {
    return static_cast<std::uint32_t>(len ? exchange_slice(Part{nullptr, len}, 0, channels).bytes : 0);
  };
  stride = share = tail_share = 0;
  if (form == Form::packed || form == Form::blocks) {
    stride = form == Form::blocks ? static_cast<std::uint32_t>(bytes) : 0;
    share = share_of(bytes);
    return;
  }
  // The shards as part() cuts them: full ones of `stride` bytes, then at most one shorter.
  const Part first = part(0, n);
  stride = static_cast<std::uint32_t>(first.bytes);
  share = share_of(stride);
  if (stride) tail_share = share_of(bytes % stride);
}

ExchangeFold exchange_fold(DataType type, const ReduceOp& op) {
  if (op.kind != RedOpKind::sum) return ExchangeFold::any;
  switch (type) {
    case DataType::bf16: return ExchangeFold::bf16_sum;
    case DataType::f16: return ExchangeFold::f16_sum;
    case DataType::f32: return ExchangeFold::f32_sum;
    default: return ExchangeFold::any;
  }
}

bool exchange_serves(CollKind kind) {
  switch (kind) {
    case CollKind::all_reduce:
    case CollKind::all_reduce_direct:
    case CollKind::reduce_scatter:
    case CollKind::reduce:
    case CollKind::reduce_direct:
    case CollKind::all_gather:
    case CollKind::all_to_all:
    case CollKind::broadcast_direct:
    case CollKind::gather:
    case CollKind::scatter: return true;
    default: return false;
  }
}

namespace {

// Which kernels compiled for one form exist for `kind` with a's type and operator: a reduction's
// (the sum of bf16, f16 or f32), a copy's (any type), or none (the kernels for any type and
// operator serve it).
enum class Fixed { none, reduction, copy };
Fixed fixed_kernels(CollKind kind, const ExchangeArgs& a) {
  switch (kind) {
    case CollKind::all_reduce:
    case CollKind::all_reduce_direct:
    case CollKind::reduce_scatter:
    case CollKind::reduce:
    case CollKind::reduce_direct: return exchange_fold(a.type, a.op) == ExchangeFold::any ? Fixed::none : Fixed::reduction;
    case CollKind::all_gather:
    case CollKind::all_to_all:
    case CollKind::broadcast_direct:
    case CollKind::gather:
    case CollKind::scatter: return Fixed::copy;
    default: return Fixed::none;
  }
}

}  // namespace

int exchange_word_ranks(CollKind kind, const ExchangeArgs& a) {
  if (config().exchange_word_disabled || fixed_kernels(kind, a) == Fixed::none) return 0;
  for (int ranks : {2, 4, 8})
    if (a.nranks <= ranks) return ranks;
  return 0;
}

int exchange_lean_slots(CollKind kind, const ExchangeArgs& a, std::uint64_t slice_packets, int threads) {
  // The one-word form needs a thread per word of every message (atom::LLAtom's one_word).
  if (config().exchange_lean_disabled || slice_packets > static_cast<std::uint64_t>(threads)) return 0;
  const Fixed fixed = fixed_kernels(kind, a);
  if (fixed == Fixed::none) return 0;  // no one-word form
  // A copy's kernel has the one-word form up to 4 slots.
  const int most = fixed == Fixed::reduction ? kExchangeLeanMaxSlots : 4;
  for (int slots : {2, 4, kExchangeLeanMaxSlots})
    if (slots <= most && a.nranks <= slots) return slots;
  return 0;
}

cudaError_t launch_exchange(CollKind kind, const ExchangeArgs& a, int threads, cudaStream_t stream) {
  switch (kind) {
    case CollKind::all_reduce: return launch_reduction<coll::AllReduce>(a, threads, stream);
    case CollKind::all_reduce_direct: return launch_reduction<coll::AllReduceDirect>(a, threads, stream);
    case CollKind::reduce_scatter: return launch_reduction<coll::ReduceScatter>(a, threads, stream);
    case CollKind::reduce: return launch_reduction<coll::Reduce>(a, threads, stream);
    case CollKind::reduce_direct: return launch_reduction<coll::ReduceDirect>(a, threads, stream);
    case CollKind::all_gather: return launch_exchange<coll::AllGather, void>(a, threads, stream);
    case CollKind::all_to_all: return launch_exchange<coll::AllToAll, void>(a, threads, stream);
    case CollKind::broadcast_direct: return launch_exchange<coll::BroadcastDirect, void>(a, threads, stream);
    case CollKind::gather: return launch_exchange<coll::Gather, void>(a, threads, stream);
    case CollKind::scatter: return launch_exchange<coll::Scatter, void>(a, threads, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace purlin::snac
