// Every kernel the SM datapath can launch, listed when the library loads, so that a communicator
// loads them all at init instead of at their first launch.
//
// Why: a first launch that must grow the context's per-thread stack to the kernel's depth waits until
// every kernel running in the context ends. Where ranks are threads of one process sharing a device,
// a rank's first launch of a kernel then waited for a peer's kernel that spins on this rank's data:
// neither ended (measured; loading the kernels without raising the stack did not help). Reserving
// the deepest stack at init leaves no launch waiting for the context; loading every kernel there
// also takes the module loads (lazy by default) off the first calls.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace purlin::snac {

// Adds `kernel` (a __global__ function's host stub) to the list; true, so that it can initialise a
// variable at load time.
bool list_kernel(const void* kernel);

// Listed once per instantiation that names it: a launch site writes `(void)kListed<kernel>`.
template <auto Kernel>
inline const bool kListed = list_kernel(reinterpret_cast<const void*>(Kernel));

// Loads every listed kernel on the current device and raises the context's per-thread stack to the
// deepest of them. Logs at INFO what it loaded and how long it took.
Status load_kernels(int device);

// The least PTX version (e.g. 90 for compute_90) among the listed kernels as loaded on `device`
// (the code they were compiled from, JIT-compiled or not); 0 before load_kernels(device).
int kernels_ptx_version(int device);

}  // namespace purlin::snac
