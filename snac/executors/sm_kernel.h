// The kernel behind the SM datapath: what one launch takes, and the launcher. The executor
// (sm_executor.cc) fills the arguments; the kernel (sm_kernel.cu) runs SNAC's roles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "atom/sm/sm_guard.h"
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

// Launches the kernel of collective `kind` (grid = channels x roles) on `stream`.
cudaError_t launch_snac(CollKind kind, const KernelArgs& args, cudaStream_t stream);

// The least, over every collective's kernel, of the CTAs one multiprocessor holds at once (the
// current device); 0 when the occupancy query fails.
int snac_ctas_per_sm();

}  // namespace purlin::snac
