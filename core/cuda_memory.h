// Device memory the GPU datapaths share: allocations another process can map through CUDA IPC,
// and pinned host words both the CPU and a running kernel see (abort and error flags).
// Only built when the library links the CUDA runtime.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace purlin::cuda {

// Exactly cudaIpcMemHandle_t's 64 bytes, without CUDA's header.
struct IpcHandle {
  char bytes[64];
};

// Zero-filled device memory on the current device, exportable with ipc_export.
Status alloc(std::size_t bytes, void** ptr);
void free(void* ptr);
Status ipc_export(void* ptr, IpcHandle* out);
// Maps a peer process's allocation; undo with ipc_close.
Status ipc_import(const IpcHandle& handle, void** ptr);
void ipc_close(void* ptr);

// Lets kernels on the current device (`device`) read and write `peer`'s memory through plain
// pointers, as ranks of one process on different GPUs need. Enabling twice is not an error; a
// pair of devices without peer access (no NVLink, no PCIe P2P) is.
Status enable_peer_access(int device, int peer);

// Pinned, mapped host memory: `host` for the CPU, `device` for kernels.
Status host_mapped_alloc(std::size_t bytes, void** host, void** device);
void host_mapped_free(void* host);

// (Device counts, identities and multiprocessors: core/cuda_probe.h.)
Status set_device(int device);

// Wraps a failed CUDA call: logs and records "what: cuda error text" and returns cuda_error.
Status check(int cuda_error, const char* what);

}  // namespace purlin::cuda
