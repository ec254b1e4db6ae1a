// One kernel launch of the SM datapath: `grid` x `block` on `stream`, behind the previous kernel of
// the stream with programmatic dependent launch when `pdl` (the kernel then waits with
// griddepcontrol.wait before it reads what that kernel wrote). Every kernel launched here is in
// the list that communicator init loads (kernel_list.h).
#pragma once

#include <cuda_runtime.h>

#include "snac/executors/kernel_list.h"

namespace purlin::snac {

template <auto Kernel, class Args>
cudaError_t launch_kernel(dim3 grid, dim3 block, bool pdl, cudaStream_t stream, const Args& a) {
  (void)kListed<Kernel>;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (pdl) {
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, Kernel, a);
}

}  // namespace purlin::snac
