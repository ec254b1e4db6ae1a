// The kernel behind the SM datapath: what one launch takes, and the launcher. The executor
// (sm_executor.cc) fills the arguments; the kernel (sm_kernel.cu) runs SNAC's roles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "atom/sm/sm_guard.h"
#include "core/hd.h"
#include "snac/call.h"
#include "snac/op.h"
#include "snac/window.h"

namespace purlin::snac {

inline constexpr int kSmThreads = 512;
// Slices of a partition start on this boundary, so every channel's pieces stay 16-byte aligned and
// small messages stay whole in channel 0.
inline constexpr std::uint64_t kSliceGrain = 4096;

struct KernelArgs {
  Context ctx;                // channel 0; channel c: win + c * nranks, state + c, scratch + c * scratch_bytes
  int channels;
  std::uint64_t channel_bytes;  // a part gets one channel per this many bytes (0: every channel)
  int least_part_channels;      // ... and at least this many (or the launch's, if fewer)
  std::uint64_t scratch_bytes;
  int root;
  DataType type;
  ReduceOp op;
  std::uint64_t mid_bytes;
  int nin, nout;
  atom::SmGuard guard;
  bool one_gpu;               // every rank of the communicator runs on this GPU
  bool pdl;                   // launched with programmatic dependent launch
  unsigned* done;             // [channels]: CTAs finished, for the channel's end of call
  Part in[kMaxRanks];
  Part out[kMaxRanks];
};

// The channels a part of `bytes` is cut into: one per `channel_bytes` (all `channels` when 0), at
// least `least`, at most `channels`. The kernel slices every part by it; the host launches it for
// the call's largest part, which covers every part. Both ends of a message compute it from the
// message's size and the collective alone, so ranks whose calls launch different channel counts
// (Send/Recv rounds, AllToAllV) still cut each message alike.
PURLIN_HD int part_channels(std::uint64_t bytes, std::uint64_t channel_bytes, int least, int channels) {
  if (channel_bytes == 0) return channels;
  std::uint64_t want = (bytes + channel_bytes - 1) / channel_bytes;
  if (want < static_cast<std::uint64_t>(least)) want = static_cast<std::uint64_t>(least);
  return want < 1 ? 1 : want > static_cast<std::uint64_t>(channels) ? channels : static_cast<int>(want);
}

// Launches the kernel of collective `kind` (grid = channels x roles) on `stream`.
cudaError_t launch_snac(CollKind kind, const KernelArgs& args, cudaStream_t stream);

// The same for declaration D, and the CTAs of its kernel one multiprocessor holds (*blocks):
// defined in sm_kernel.cuh, instantiated for a few declarations in each file of
// snac/executors/generic/.
template <class D>
cudaError_t launch_generic(const KernelArgs& args, cudaStream_t stream);
template <class D>
cudaError_t generic_ctas_per_sm(int* blocks);

// The least, over every collective's kernel, of the CTAs one multiprocessor holds at once (the
// current device); 0 when the occupancy query fails.
int snac_ctas_per_sm();

}  // namespace purlin::snac
