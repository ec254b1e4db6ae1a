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

// Device memory shared with peer processes through cuMem: physical memory exported as a POSIX file
// descriptor (core/fd_passing.h carries it to the peer). Every importer holds its own reference to
// the physical memory, so its mapping stays valid until it unmaps it, even when the exporting
// process dies (a legacy IPC mapping does not outlive its exporter).
struct VmmMapping {
  void* ptr = nullptr;
  std::size_t bytes = 0;           // mapped size, a multiple of the allocation granularity
  unsigned long long handle = 0;   // CUmemGenericAllocationHandle
};
// Whether `device` has cuMem (virtual memory management), as NCCL asks before it uses it.
bool vmm_supported(int device);
// Whether `device` can export cuMem allocations as POSIX file descriptors.
bool vmm_fd_supported(int device);
// Zero-filled memory of at least `bytes` on `device`, mapped for it and exportable.
Status vmm_alloc(int device, std::size_t bytes, VmmMapping* out);
// A new file descriptor for the allocation (the caller closes it).
Status vmm_export_fd(const VmmMapping& m, int* fd);
// Maps the allocation behind a peer's descriptor (`bytes` as the peer allocated it) for `device`.
// The descriptor stays the caller's.
Status vmm_import_fd(int fd, std::size_t bytes, int device, VmmMapping* out);
// Unmaps and drops this process's reference (exported or imported), and gives back the address
// range; a mapping that vmm_unmap left empty gives back its range only.
void vmm_free(VmmMapping* m);
// Frees a cuMem mapping made elsewhere in the process, as NCCL's ncclMemFree frees any: unmaps the
// mapping that starts at `ptr`, drops its creator's reference to the physical memory (which goes
// once no other mapping holds it) and gives back the range, which must be the mapping's own size.
// A pointer that names no cuMem allocation, or one inside a mapping, fails with nothing changed.
Status vmm_free_foreign(void* ptr);
// What NCCL 2.30's ncclCommRegister (cuMem on) asks the driver of a buffer before it registers it:
// fails with the driver's error where `ptr` lies in no CUDA allocation (NULL, pageable host memory,
// freed memory) or, for cuMem memory, where a byte of [ptr, ptr + bytes) lies in no mapping; sets
// *host_backed where the buffer is host memory or a mapping of it is (NCCL then registers nothing).
Status registration_span(const void* ptr, std::size_t bytes, bool* host_backed);
// Suspending memory: unmaps the physical memory and drops this process's reference to it (handle 0)
// but keeps the address range reserved, so that pointers into it (kernel arguments, captured graphs)
// name the memory mapped there again by vmm_remap or vmm_import_fd_at. The physical memory is freed
// once every process that mapped it has done this.
void vmm_unmap(VmmMapping* m);
// Maps new physical memory of the mapping's size on `device` at its reserved range (after
// vmm_unmap), for `device`; its contents are undefined.
Status vmm_remap(int device, VmmMapping* m);
// Maps the allocation behind a peer's descriptor at the mapping's reserved range (after vmm_unmap),
// for `device`. The peer's allocation must be the size of the range. The descriptor stays the
// caller's.
Status vmm_import_fd_at(int fd, int device, VmmMapping* m);
// Lets kernels of every other device that has peer access to `device` read and write the mapping
// too (a mapping is accessible only to its own device at first), as NCCL grants for ncclMemAlloc.
Status vmm_grant_peers(const VmmMapping& m, int device);

// The allocation holding a device buffer, as a peer process needs it to map the buffer.
enum class ShareKind : std::uint8_t {
  none,    // cannot be shared: host or managed memory, a range over several allocations, cuMem that
           // exports no POSIX descriptor
  ipc,     // cudaMalloc memory: legacy CUDA IPC of `base`
  vmm_fd,  // a cuMem mapping of one whole allocation that exports a POSIX descriptor
};
struct BufferShare {
  ShareKind kind = ShareKind::none;
  std::uint64_t id = 0;       // the allocation's buffer id: unique in this process, never reused
  std::uint64_t base = 0;     // the allocation's first byte (its mapping's, for cuMem)
  std::uint64_t bytes = 0;    // its size
  int device = -1;            // the device it lives on
};
// Describes the allocation holding [ptr, ptr + bytes). A pointer the driver does not know (host
// memory) gives kind none and Status::ok; only a failing driver call is an error.
Status describe_buffer(const void* ptr, std::size_t bytes, BufferShare* out);
// A new descriptor for the cuMem allocation mapped at `base` (kind vmm_fd; the caller closes it).
Status vmm_export_buffer_fd(std::uint64_t base, int* fd);

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
