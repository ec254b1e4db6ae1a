// The lean exchange kernels' launcher (snac/executors/sm_exchange.h's launch_lean), for the
// translation units that instantiate them (snac/executors/exchange/lean_*.cu) and no other: a unit
// that launches the kernels of every form only declares it, so the two build apart.
#pragma once

#include "snac/executors/sm_exchange_kernel.cuh"

namespace purlin::snac {

template <class D, class Fixed, int Slots>
cudaError_t launch_lean(const ExchangeArgs& a, int threads, cudaStream_t stream) {
  static_assert(Slots > 0 && exchange_has_lean<D, Fixed>(), "a lean kernel of a kernel that has the one-word form");
  return launch_exchange_slots<D, Fixed, Slots>(a, threads, stream);
}

}  // namespace purlin::snac
