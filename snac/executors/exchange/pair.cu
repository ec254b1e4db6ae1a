// The pair exchange's kernels (snac/protocol/pair_exchange.h run by atom::WordAtom), for 2, 4 and 8
// ranks.
#include <cuda_runtime.h>

#include "atom/sm/word_atom.cuh"
#include "snac/executors/sm_launch.cuh"
#include "snac/executors/sm_outcome.cuh"
#include "snac/executors/sm_pair.h"
#include "snac/protocol/pair_exchange.h"

namespace purlin::snac {
namespace {

// Items of a step a thread of the flat form has in flight together (atom::WordAtom's Flat).
constexpr int kPairFlat = 8;

// One CTA per channel. Each thread of the first warp describes one peer's slices and reads the
// pair's counters; the round runs, and once it succeeded the first thread counts its messages.
// `Flat`: 0, or the WordAtom form that moves every message's words as one list.
template <int N, bool Aligned, int Flat>
__global__ void __launch_bounds__(kExchangeMaxThreads, 2) pair_kernel(const __grid_constant__ PairArgs a) {
  __shared__ Part in[N];
  __shared__ Part out[N];
  __shared__ atom::LLPacket* pbox[N];
  __shared__ std::uint64_t* acks[N];
  __shared__ std::uint64_t sent[N];
  __shared__ std::uint64_t taken[N];
  __shared__ std::int32_t in_channels[N];
  __shared__ std::int32_t out_channels[N];
  __shared__ unsigned sends, recvs;
  __shared__ atom::SmCtaWords words;
  __shared__ atom::WordTables tables;
  const int c = blockIdx.x, n = a.nranks, t = threadIdx.x;
  // Channel c's slice of a message of `channels` channels and `share` bytes each (exchange_slice).
  const auto slice = [c](const Part& p, int channels, std::uint32_t share, bool* live) {
    *live = p.bytes != 0 && c < channels;
    const std::uint32_t bytes = static_cast<std::uint32_t>(p.bytes), first = share * static_cast<std::uint32_t>(c);
    const std::uint32_t off = first < bytes ? first : bytes;
    return *live ? Part{p.ptr + off, share < bytes - off ? share : bytes - off} : Part{nullptr, 0};
  };
  bool send = false, recv = false;
  if (t < n) {
    in[t] = slice(a.in[t], a.in_channels[t], a.in_share[t], &send);
    out[t] = slice(a.out[t], a.out_channels[t], a.out_share[t], &recv);
    in_channels[t] = a.in_channels[t];
    out_channels[t] = a.out_channels[t];
    pbox[t] = a.pbox[t];
    acks[t] = a.acks[t];
  }
  if (t < 32) {
    const unsigned s = __ballot_sync(0xffffffffu, send), r = __ballot_sync(0xffffffffu, recv);
    if (t == 0) {
      sends = s;
      recvs = r;
      words = atom::SmCtaWords{};
    }
  }
#if __CUDA_ARCH__ >= 900
  if (a.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  // The previous kernel has completed: the counters hold the messages so far.
  if (t < n) {
    sent[t] = a.sent[static_cast<std::uint64_t>(t) * kExchangeMaxChannels + c];
    taken[t] = a.taken[static_cast<std::uint64_t>(t) * kExchangeMaxChannels + c];
  }
  __syncthreads();
#if __CUDA_ARCH__ >= 900
  if (a.pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  Call call;
  call.in = in;
  call.out = out;
  PairContext x;
  x.rank = a.rank;
  x.nranks = n;
  x.channel = c;
  x.box_packets = a.box_packets;
  x.pbox = pbox;
  x.acks = acks;
  x.sent = sent;
  x.taken = taken;
  x.sends = sends;
  x.recvs = recvs;
  x.in_channels = in_channels;
  x.out_channels = out_channels;
  atom::WordAtom<N, void, false, Aligned, Flat> atom(ReduceOp{}, a.guard, &words, &tables, a.pdl, -1, a.one_gpu);
  // Every step agreed on its outcome: the status is the CTA's.
  const Status s = pair_call(atom, x, call);
  if (s == Status::ok && t < n) {
    // Read by the next kernel only after this one completes.
    if (sends >> t & 1u) a.sent[static_cast<std::uint64_t>(t) * kExchangeMaxChannels + c] = sent[t] + 1;
    if (recvs >> t & 1u) a.taken[static_cast<std::uint64_t>(t) * kExchangeMaxChannels + c] = taken[t] + 1;
  }
  report_outcome(s, a.rank, n, a.win, a.guard);
}

template <int N>
cudaError_t launch_pair_for(const PairArgs& a, dim3 grid, dim3 block, cudaStream_t stream) {
  if (a.flat) return launch_kernel<pair_kernel<N, true, kPairFlat>>(grid, block, a.pdl, stream, a);
  return a.aligned ? launch_kernel<pair_kernel<N, true, 0>>(grid, block, a.pdl, stream, a)
                   : launch_kernel<pair_kernel<N, false, 0>>(grid, block, a.pdl, stream, a);
}

}  // namespace

cudaError_t launch_pair(const PairArgs& a, int threads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.channels)), block(static_cast<unsigned>(threads));
  if (a.flat && !a.aligned) return cudaErrorInvalidValue;
  if (a.nranks <= 2) return launch_pair_for<2>(a, grid, block, stream);
  if (a.nranks <= 4) return launch_pair_for<4>(a, grid, block, stream);
  if (a.nranks <= kPairMaxRanks) return launch_pair_for<8>(a, grid, block, stream);
  return cudaErrorInvalidValue;
}

}  // namespace purlin::snac
