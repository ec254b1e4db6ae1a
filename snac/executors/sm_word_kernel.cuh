// The latency exchange's word kernels: snac/protocol/exchange.h run by atom::WordAtom, compiled per
// declaration, rank bound N (2, 4, 8) and Reducer; snac/executors/exchange/word_*.cu instantiate
// them, apart from the kernels of atom::LLAtom, so that the two build in parallel.
#pragma once

#include <cuda_runtime.h>

#include "atom/sm/word_atom.cuh"
#include "snac/executors/sm_exchange.h"
#include "snac/executors/sm_exchange_device.cuh"
#include "snac/executors/sm_launch.cuh"
#include "snac/executors/sm_outcome.cuh"
#include "snac/protocol/exchange.h"

namespace purlin::snac {

// One CTA per channel. The kernel's only shared state is what every thread reads once: the
// channel's slices of the call's parts, the boxes' addresses and the epoch. Launched early behind
// the previous kernel (programmatic dependent launch), it cuts the slices while that one still runs,
// then waits for it, takes the channel's epoch (one word, in this rank's memory) and lets the next
// kernel launch. Nothing else is copied in or out, and no counter is kept per call: the epoch is the
// packets' flag.
template <class D, class Fixed, int N>
__global__ void __launch_bounds__(kExchangeMaxThreads, 2) word_kernel(const __grid_constant__ ExchangeArgs a) {
  __shared__ Part in[N];
  __shared__ Part out[N];
  __shared__ atom::LLPacket* inbox[N];
  __shared__ atom::SmCtaWords words;
  __shared__ atom::WordTables tables;
  __shared__ std::uint64_t epoch;
  const int c = blockIdx.x, n = a.nranks;
  const std::uint64_t entered = a.stamps && c == 0 && threadIdx.x == 0 ? atom::global_ns() : 0;
  exchange_cut(a, c, in, out, inbox);
#if __CUDA_ARCH__ >= 900
  if (a.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (threadIdx.x == 0) {
    words = atom::SmCtaWords{};
    // The previous kernel has completed: the word holds the calls so far. The next kernel reads it
    // only after this one completes.
    const std::uint64_t e = *static_cast<volatile std::uint64_t*>(a.epoch + c) + 1;
    a.epoch[c] = e;
    epoch = e;
  }
  __syncthreads();
#if __CUDA_ARCH__ >= 900
  if (a.pdl && a.trigger == PdlTrigger::start) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  std::uint64_t* stamps = exchange_stamps(a, c, epoch, entered);
  Call call;
  call.root = a.root;
  call.type = a.type;
  call.op = a.op;
  call.in = in;
  call.out = out;
  // The next kernel launches at the start, after the last phase's pushes, or at the end.
  constexpr int last = D::composed ? 1 : 0;
  const int trigger = a.trigger == PdlTrigger::last ? last : -1;
  const ExchangeContext x{a.rank, n, c, a.channels, epoch, a.box_packets, inbox};
  atom::WordAtom<N, Fixed, D::consume == coll::Consume::reduce> atom(a.op, a.guard, &words, &tables, a.pdl, trigger);
  // Every step agreed on its outcome: the status is the CTA's.
  const Status s = exchange_call<D>(atom, x, call);
  if (stamps && threadIdx.x == 0) stamps[kExchangeEndStamp] = atom::global_ns();
  report_outcome(s, a.rank, n, a.win, a.guard);
}

template <class D, class Fixed, int N>
cudaError_t launch_word(const ExchangeArgs& a, int threads, cudaStream_t stream) {
  static_assert(exchange_has_lean<D, Fixed>(), "a word kernel folds with a fixed Reducer, or copies");
  return launch_kernel<word_kernel<D, Fixed, N>>(dim3(static_cast<unsigned>(a.channels)), dim3(static_cast<unsigned>(threads)),
                       a.pdl, stream, a);
}

}  // namespace purlin::snac
