// SNAC's roles as CTAs: one kernel per collective, grid = channels x roles.
#include <cuda_runtime.h>

#include <algorithm>

#include "atom/sm/sm_atom.cuh"
#include "snac/dispatch.h"
#include "snac/executors/sm_kernel.h"
#include "snac/protocol.h"

namespace purlin::snac {
namespace {

__device__ __forceinline__ Part slice(const Part& p, int c, int channels) {
  std::uint64_t per = (p.bytes + channels - 1) / channels;
  per = (per + kSliceGrain - 1) / kSliceGrain * kSliceGrain;
  std::uint64_t off = std::min<std::uint64_t>(per * c, p.bytes);
  std::uint64_t len = std::min<std::uint64_t>(per, p.bytes - off);
  return Part{p.ptr ? p.ptr + off : nullptr, len};
}

__device__ __forceinline__ std::uint64_t slice_bytes(std::uint64_t bytes, int c, int channels) {
  return slice(Part{nullptr, bytes}, c, channels).bytes;
}

template <class D>
__global__ void __launch_bounds__(kSmThreads) snac_kernel(const __grid_constant__ KernelArgs a) {
  constexpr int roles = role_count<D>();
  const int c = blockIdx.x / roles;
  const Role role = static_cast<Role>(blockIdx.x % roles);
  __shared__ Part in[kMaxRanks];
  __shared__ Part out[kMaxRanks];
  __shared__ int status_word;
  for (int i = threadIdx.x; i < a.nin; i += blockDim.x) in[i] = slice(a.in[i], c, a.channels);
  for (int i = threadIdx.x; i < a.nout; i += blockDim.x) out[i] = slice(a.out[i], c, a.channels);
  __syncthreads();

  Context ctx = a.ctx;
  ctx.win = a.ctx.win + static_cast<std::size_t>(c) * a.ctx.nranks;
  ctx.state = a.ctx.state + c;
  ctx.scratch = a.ctx.scratch + static_cast<std::size_t>(c) * a.scratch_bytes;
  Call call;
  call.root = a.root;
  call.type = a.type;
  call.op = a.op;
  call.in = in;
  call.out = out;
  call.mid_bytes = slice_bytes(a.mid_bytes, c, a.channels);

  atom::SmAtom atom(a.type, a.op, a.guard, &status_word);
  Status s = Status::ok;
  if (role != Role::gather) s = begin_call(atom, ctx);
  if (s == Status::ok) s = run_role<D>(atom, ctx, call, role);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s != Status::ok) *a.guard.error = static_cast<int>(s);
    __threadfence();
    unsigned finished = atomicAdd(&a.done[c], 1u) + 1;
    if (finished == static_cast<unsigned>(roles)) {
      __threadfence();
      a.done[c] = 0;
      end_call(ctx);
      __threadfence();
    }
  }
}

template <class D>
cudaError_t launch(const KernelArgs& a, cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>(a.channels * role_count<D>()));
  snac_kernel<D><<<grid, kSmThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_snac(CollKind kind, const KernelArgs& args, cudaStream_t stream) {
  return dispatch(kind, [&]<class D>() { return launch<D>(args, stream); });
}

}  // namespace purlin::snac
