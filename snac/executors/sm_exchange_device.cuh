// What the latency exchange's kernels (of every form, lean and word) do alike on the device: cut
// the channel's slices of the call's parts into shared memory, and start a call's stamps.
#pragma once

#include <cuda_runtime.h>

#include "atom/ll_packet.h"
#include "atom/sm/sm_atom.cuh"
#include "snac/call.h"
#include "snac/executors/sm_exchange.h"

namespace purlin::snac {

// Channel c's slices of every input and output part, and every rank's boxes, by the CTA's threads
// (the caller's barrier publishes them). Reads only the kernel's arguments: safe before the wait
// for the previous kernel.
__device__ inline void exchange_cut(const ExchangeArgs& a, int c, Part* in, Part* out, atom::LLPacket** inbox) {
  const int n = a.nranks, nin = a.in.parts(n), nout = a.out.parts(n);
  for (int i = threadIdx.x; i < nin; i += blockDim.x) in[i] = a.in.slice(i, c);
  for (int i = threadIdx.x; i < nout; i += blockDim.x) out[i] = a.out.slice(i, c);
  for (int i = threadIdx.x; i < n; i += blockDim.x) inbox[i] = a.inbox[i];
}

// Channel 0's row of stamps for the call of `epoch` (PURLIN_STAMPS), or null: its entry (`entered`)
// and the start of its work, the rest cleared for the steps to fill.
__device__ inline std::uint64_t* exchange_stamps(const ExchangeArgs& a, int c, std::uint64_t epoch, std::uint64_t entered) {
  std::uint64_t* stamps = a.stamps && c == 0 ? a.stamps + (epoch % kExchangeStampCalls) * kExchangeStamps : nullptr;
  if (stamps && threadIdx.x == 0) {
    stamps[0] = entered;
    stamps[1] = atom::global_ns();
    for (int i = 2; i < kExchangeStamps; ++i) stamps[i] = 0;
  }
  return stamps;
}

}  // namespace purlin::snac
