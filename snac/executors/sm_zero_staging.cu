// The zero-staging kernel: one launch per call, a.ctas CTAs, each running its share of the call
// with the SM Atom. Generic over type and operator at run time (the Atom's reduce dispatches once per
// step), so one kernel serves every zero-staging call.
#include <cuda_runtime.h>

#include <algorithm>

#include "atom/sm/sm_wide_atom.cuh"
#include "snac/executors/kernel_list.h"
#include "snac/executors/sm_launch.cuh"
#include "snac/executors/sm_outcome.cuh"
#include "snac/executors/sm_zero_staging.h"
#include "snac/protocol/zero_staging.h"

namespace purlin::snac {
namespace {

__global__ void __launch_bounds__(kZeroStagingThreads, 1) zero_staging_kernel(const __grid_constant__ ZeroStagingArgs a) {
  __shared__ atom::SmCtaWords words;
  __shared__ std::uint64_t call;
  const int c = blockIdx.x;
#if __CUDA_ARCH__ >= 900
  // Launched early behind the previous zero-staging kernel: nothing before it has completed.
  if (a.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (threadIdx.x == 0) {
    words = atom::SmCtaWords{};
    call = *static_cast<volatile std::uint64_t*>(a.calls + c) + 1;
  }
  __syncthreads();
  const ZeroStagingCall z = zero_staging_view(a, call);
  const atom::SmWideAtom atom(a.type, a.op, a.guard, &words, a.one_gpu);
  Status s = Status::ok;
  std::uint64_t* stamp =
      a.stamps ? a.stamps + ((call % kZeroStagingStampCalls) * kZeroStagingMaxCtas + c) * kZeroStagingStamps : nullptr;
  const auto mark = [&](int k) {
    if (!stamp) return;
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint64_t t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      stamp[k] = t;
    }
  };
  mark(0);
  switch (a.phase) {
    case ZeroStagingPhase::whole:
      // zero_staging_call's steps, stamped when stamps are asked for.
      s = zero_staging_barrier(atom, z, c, 2 * call - 1);
      mark(1);
      if (s == Status::ok) zero_staging_move(atom, z, c, a.ctas);
      mark(2);
      if (s == Status::ok) s = zero_staging_barrier(atom, z, c, 2 * call);
#if __CUDA_ARCH__ >= 900
      if (a.release) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
      break;
    case ZeroStagingPhase::arrive: s = zero_staging_barrier(atom, z, c, 2 * call - 1); break;
    case ZeroStagingPhase::leave: s = zero_staging_barrier(atom, z, c, 2 * call); break;
  }
  // The call's number moves on when the call closes (the arrival alone leaves it for the leave).
  mark(3);
  if (threadIdx.x == 0 && a.phase != ZeroStagingPhase::arrive) a.calls[c] = call;
  report_outcome(s, a.rank, a.nranks, a.win, a.guard);
}

}  // namespace

cudaError_t launch_zero_staging(const ZeroStagingArgs& a, cudaStream_t stream) {
  return launch_kernel<zero_staging_kernel>(dim3(static_cast<unsigned>(a.ctas)), dim3(kZeroStagingThreads), a.pdl,
                                            stream, a);
}

int zero_staging_ctas_per_sm() {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, zero_staging_kernel, kZeroStagingThreads, 0) != cudaSuccess) return 0;
  const int legs = zero_staging_legs_ctas_per_sm();
  return legs > 0 ? std::min(blocks, legs) : 0;
}

}  // namespace purlin::snac
