// SNAC's roles as CTAs: one kernel per collective, grid = channels x roles, and its launch and
// occupancy query for declaration D. Included by the translation units under
// snac/executors/generic/, which instantiate launch_generic and generic_ctas_per_sm for a few
// collectives each so that they compile in parallel; sm_kernel.cu dispatches to them by kind.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "atom/sm/sm_atom.cuh"
#include "snac/executors/sm_kernel.h"
#include "snac/executors/sm_launch.cuh"
#include "snac/protocol/call.h"

namespace purlin::snac {
namespace {

// Channel c's slice of a part; empty on the channels past the part's own (part_channels).
__device__ __forceinline__ Part slice(const Part& p, int c, const KernelArgs& a) {
  const int channels = part_channels(p.bytes, a.channel_bytes, a.least_part_channels, a.channels);
  std::uint64_t per = (p.bytes + channels - 1) / channels;
  per = (per + kSliceGrain - 1) / kSliceGrain * kSliceGrain;
  std::uint64_t off = std::min<std::uint64_t>(per * c, p.bytes);
  std::uint64_t len = std::min<std::uint64_t>(per, p.bytes - off);
  return Part{p.ptr ? p.ptr + off : nullptr, len};
}

// Copies whole LocalState arrays between device and shared memory, by every thread.
__device__ __forceinline__ void copy_words(std::uint64_t* dst, const std::uint64_t* src, int words) {
  for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}

// The parts of LocalState a role writes during a call (see snac/protocol/): the stage role F's
// producer counters; the consume role F's consumer counters and, in a composition, G's producer
// counters; the gather role G's consumer counters.
__device__ __forceinline__ void write_back(LocalState* dst, const LocalState* src, Role role, bool composed) {
  constexpr int n = kMaxRanks;
  if (role == Role::stage) {
    copy_words(dst->tx[0], src->tx[0], n);
    copy_words(dst->lane_first[0], src->lane_first[0], n);
    copy_words(dst->staged[0], src->staged[0], n);
  } else if (role == Role::consume) {
    copy_words(dst->rx[0], src->rx[0], n);
    if (composed) {
      copy_words(dst->tx[1], src->tx[1], n);
      copy_words(dst->lane_first[1], src->lane_first[1], n);
      copy_words(dst->staged[1], src->staged[1], n);
    }
  } else {
    copy_words(dst->rx[1], src->rx[1], n);
  }
}

// Two CTAs of 512 threads per multiprocessor: the register budget that lets every sharing rank's
// channels be resident together.
template <class D>
__global__ void __launch_bounds__(kSmThreads, 2) snac_kernel(const __grid_constant__ KernelArgs a) {
  constexpr int roles = role_count<D>();
  const int c = blockIdx.x / roles;
  const Role role = static_cast<Role>(blockIdx.x % roles);
  __shared__ Part in[kMaxRanks];
  __shared__ Part out[kMaxRanks];
  __shared__ atom::SmCtaWords cta_words;
  // The channel's protocol state, read once: the roles' many small reads and writes of it then stay
  // on chip, and each role writes back what it owns before the channel's end of call.
  __shared__ LocalState state;
  LocalState* const global_state = a.ctx.state + c;
  for (int i = threadIdx.x; i < a.nin; i += blockDim.x) in[i] = slice(a.in[i], c, a);
  for (int i = threadIdx.x; i < a.nout; i += blockDim.x) out[i] = slice(a.out[i], c, a);
  if (threadIdx.x == 0) cta_words = atom::SmCtaWords{};
  // Launched early behind the previous kernel of the stream: nothing it wrote (our state, the
  // caller's buffers) may be read before it has completed.
#if __CUDA_ARCH__ >= 900
  if (a.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  copy_words(reinterpret_cast<std::uint64_t*>(&state), reinterpret_cast<const std::uint64_t*>(global_state),
             static_cast<int>(sizeof(LocalState) / sizeof(std::uint64_t)));
  __syncthreads();

  Context ctx = a.ctx;
  ctx.win = a.ctx.win + static_cast<std::size_t>(c) * a.ctx.nranks;
  ctx.state = &state;
  ctx.scratch = a.ctx.scratch + static_cast<std::size_t>(c) * a.scratch_bytes;
  Call call;
  call.root = a.root;
  call.type = a.type;
  call.op = a.op;
  call.in = in;
  call.out = out;
  call.mid_bytes = slice(Part{nullptr, a.mid_bytes}, c, a).bytes;

  atom::SmAtom atom(a.type, a.op, a.guard, &cta_words, a.one_gpu);
  const Status s = run_role<D>(atom, ctx, call, role);
  // The peers of every channel watch the fault word of their channel-0 window.
  if (s == Status::invalid_usage) raise_fault(atom, ctx, a.ctx.win, s);
  __syncthreads();
  write_back(global_state, &state, role, D::composed);
  // The barrier orders every thread's write-back before thread 0's fence and count below.
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s != Status::ok) *a.guard.error = static_cast<int>(s);
    __threadfence();
    unsigned finished = atomicAdd(&a.done[c], 1u) + 1;
    if (finished == static_cast<unsigned>(roles)) {
      __threadfence();
      a.done[c] = 0;
      ctx.state = global_state;
      end_call(atom, ctx);
      __threadfence();
    }
  }
  // Everything the next kernel of the stream depends on is written: let it launch.
#if __CUDA_ARCH__ >= 900
  if (a.pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace

template <class D>
cudaError_t launch_generic(const KernelArgs& a, cudaStream_t stream) {
  return launch_kernel<snac_kernel<D>>(dim3(static_cast<unsigned>(a.channels * role_count<D>())), dim3(kSmThreads),
                                       a.pdl, stream, a);
}

template <class D>
cudaError_t generic_ctas_per_sm(int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, snac_kernel<D>, kSmThreads, 0);
}

}  // namespace purlin::snac
