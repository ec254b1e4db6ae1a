// The zero-staged Send/Recv kernel: one launch per round, a CTA per share where this rank moves a
// message and one where it only waits (snac/protocol/zero_staging.h, legs), with the SM Atom; or,
// where the copy engines move, one CTA before their copies and one after.
#include <cuda_runtime.h>

#include "atom/sm/sm_wide_atom.cuh"
#include "snac/executors/kernel_list.h"
#include "snac/executors/sm_outcome.cuh"
#include "snac/executors/sm_zero_staging.h"
#include "snac/protocol/zero_staging.h"

namespace purlin::snac {
namespace {

__global__ void __launch_bounds__(kZeroStagingThreads, 1) zero_staging_legs_kernel(const __grid_constant__ ZeroStagingLegArgs a) {
  __shared__ atom::SmCtaWords words;
  if (threadIdx.x == 0) words = atom::SmCtaWords{};
  __syncthreads();
  ZeroStagingLegs z;
  z.rank = a.rank;
  z.count = a.count;
  z.shares = a.shares;
  z.phase = a.phase;
  z.legs = a.legs;
  z.words = a.words;
  z.counters = a.counters;
  const atom::SmWideAtom atom(DataType::uint8, ReduceOp{}, a.guard, &words, a.one_gpu);
  const Status s = zero_staging_legs_call(atom, z, static_cast<int>(blockIdx.x));
  report_outcome(s, a.rank, a.nranks, a.win, a.guard);
}

}  // namespace

cudaError_t launch_zero_staging_legs(const ZeroStagingLegArgs& a, cudaStream_t stream) {
  bool moves = false;
  if (a.phase == ZeroStagingPhase::whole)
    for (int i = 0; i < a.count; ++i) moves = moves || a.legs[i].role == LegRole::move;
  (void)kListed<zero_staging_legs_kernel>;
  zero_staging_legs_kernel<<<dim3(moves ? static_cast<unsigned>(a.shares) : 1u), dim3(kZeroStagingThreads), 0, stream>>>(a);
  return cudaGetLastError();
}

int zero_staging_legs_ctas_per_sm() {
  int blocks = 0;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, zero_staging_legs_kernel, kZeroStagingThreads, 0) == cudaSuccess
             ? blocks
             : 0;
}

}  // namespace purlin::snac
