// What the CUDA runtime says about this machine, asked lazily: the library loads and runs its host
// datapath where there is no driver or no device.
#pragma once

namespace purlin {

// Number of usable CUDA devices; 0 when the build has no CUDA, there is no driver or no device.
int cuda_device_count();
// The calling thread's current device, or -1 when there is none.
int cuda_current_device();

}  // namespace purlin
