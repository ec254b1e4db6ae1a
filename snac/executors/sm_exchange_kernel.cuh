// The latency exchange's kernel template; each translation unit of snac/executors/exchange/
// instantiates it for its collectives, so that they compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "atom/sm/ll_atom.cuh"
#include "snac/executors/sm_exchange.h"
#include "snac/executors/sm_exchange_device.cuh"
#include "snac/executors/sm_launch.cuh"
#include "snac/executors/sm_outcome.cuh"
#include "snac/protocol/exchange.h"

namespace purlin::snac {

// One CTA per channel. Nothing is copied in or out of a per-call state: the channel's epoch is one
// word. Launched early behind the previous kernel of the stream (programmatic dependent launch), the
// kernel builds the call's tables for the epoch it expects before that kernel has completed; the
// Atom's first step waits for it and checks the epoch (atom::LLStart). `Fixed`: the Reducer the
// folds are compiled for (void: any, chosen at run time).
// At most kExchangeMaxThreads threads of 128 registers (half a multiprocessor's register file at
// most, and a quarter for the 128 threads of a 1 KiB message): the CTAs of every rank sharing the GPU
// must be resident beside the generic kernels' (snac/executors/sm_datapath.cc keeps room), never a multiprocessor
// each. With 64 the one-word form spilled its packets to local memory. `Slots`: 0, or the lean
// kernel of atom::LLAtom for launches whose ExchangeArgs::slots says so.
template <class D, class Fixed, int Slots>
__global__ void __launch_bounds__(kExchangeMaxThreads, 2) exchange_kernel(const __grid_constant__ ExchangeArgs a) {
  __shared__ Part in[kMaxRanks];
  __shared__ Part out[kMaxRanks];
  // Every rank's boxes as mapped here: a second phase builds its tables after the first, on the
  // critical path, where each read of a.inbox in global memory is a memory latency.
  __shared__ atom::LLPacket* inbox[kMaxRanks];
  __shared__ atom::LLTables tables;
  __shared__ atom::SmCtaWords words;
  __shared__ std::uint64_t expected;
  const int c = blockIdx.x, n = a.nranks;
  const std::uint64_t entered = a.stamps && c == 0 && threadIdx.x == 0 ? atom::global_ns() : 0;
  exchange_cut(a, c, in, out, inbox);
  if (threadIdx.x == 0) {
    words = atom::SmCtaWords{};
    expected = *static_cast<volatile std::uint64_t*>(a.epoch + c) + 1;
  }
  __syncthreads();
  // Stamps (channel 0): entry, start of work, then the Atom's (the start, every phase's pushes and
  // receives), the end.
  std::uint64_t* stamps = exchange_stamps(a, c, expected, entered);
  Call call;
  call.root = a.root;
  call.type = a.type;
  call.op = a.op;
  call.in = in;
  call.out = out;
  Status s;
  // The next kernel launches at the first phase's start, after the last phase's pushes, or at the end
  // (after no phase's).
  constexpr int last = D::composed ? 1 : 0;
  const bool at_start = a.trigger == PdlTrigger::start;
  const int after = a.trigger == PdlTrigger::last ? last : last + 1;
  for (;;) {
    const ExchangeContext x{a.rank, n, c, a.channels, expected, a.box_packets, inbox};
    atom::LLAtom<Fixed, D::consume == coll::Consume::reduce, Slots> atom(
        a.type, a.op, a.guard, &words, &tables, atom::LLStart{a.pdl, a.epoch + c, expected, at_start, after},
        stamps ? stamps + 2 : nullptr);
    s = exchange_call<D>(atom, x, call);
    if (static_cast<int>(s) != atom::ll_restart) break;
    // Built for another epoch than the word holds: again, for that one (the wait is behind us).
    __syncthreads();
    if (threadIdx.x == 0) expected = *static_cast<volatile std::uint64_t*>(a.epoch + c) + 1;
    __syncthreads();
  }
  if (stamps && threadIdx.x == 0) stamps[kExchangeEndStamp] = atom::global_ns();
  report_outcome(s, a.rank, n, a.win, a.guard);
}

template <class D, class Fixed, int Slots>
cudaError_t launch_exchange_slots(const ExchangeArgs& a, int threads, cudaStream_t stream) {
  return launch_kernel<exchange_kernel<D, Fixed, Slots>>(dim3(static_cast<unsigned>(a.channels)),
                       dim3(static_cast<unsigned>(threads)), a.pdl, stream, a);
}

// The word kernel that a.word names (snac/executors/exchange/word_*.cu), the lean one that a.slots
// names (lean_*.cu), or the kernel with every form: each compiled in its own translation units, so
// that they build in parallel.
template <class D, class Fixed>
cudaError_t launch_exchange(const ExchangeArgs& a, int threads, cudaStream_t stream) {
  if constexpr (exchange_has_lean<D, Fixed>()) {
    switch (a.word) {
      case 2: return launch_word<D, Fixed, 2>(a, threads, stream);
      case 4: return launch_word<D, Fixed, 4>(a, threads, stream);
      case 8: return launch_word<D, Fixed, 8>(a, threads, stream);
      default: break;
    }
    switch (a.slots) {
      case 2: return launch_lean<D, Fixed, 2>(a, threads, stream);
      case 4: return launch_lean<D, Fixed, 4>(a, threads, stream);
      case kExchangeLeanMaxSlots:
        if constexpr (D::consume == coll::Consume::reduce) return launch_lean<D, Fixed, kExchangeLeanMaxSlots>(a, threads, stream);
        break;
      default: break;
    }
  }
  return launch_exchange_slots<D, Fixed, 0>(a, threads, stream);
}

}  // namespace purlin::snac
