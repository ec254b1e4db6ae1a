// How a kernel of the SM datapath reports the outcome its CTA agreed on: calls that differ between
// ranks (invalid_usage) stop the peers too, whose waits watch their fault words; any failure is
// stored in the host-mapped error word, which the executor refuses further calls on.
#pragma once

#include <cuda_runtime.h>

#include "atom/sm/sm_atom.cuh"
#include "atom/sm/sm_guard.h"
#include "core/status.h"
#include "snac/window.h"

namespace purlin::snac {

// Every thread of the CTA calls it with the CTA's common status.
__device__ inline void report_outcome(Status s, int rank, int nranks, const Window* win, const atom::SmGuard& guard) {
  if (s == Status::invalid_usage)
    for (int d = threadIdx.x; d < nranks; d += blockDim.x)
      if (d != rank) atom::st_release_sys(win[d].fault, static_cast<std::uint64_t>(s));
  if (s != Status::ok && threadIdx.x == 0) *guard.error = static_cast<int>(s);
}

}  // namespace purlin::snac
