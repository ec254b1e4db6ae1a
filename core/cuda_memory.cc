#include "core/cuda_memory.h"

#include <cstring>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace purlin::cuda {

Status check(int e, const char* what) {
  if (e == cudaSuccess) return Status::ok;
  auto err = static_cast<cudaError_t>(e);
  cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
  return fail(Status::cuda_error, fmt::format("{}: CUDA error {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err)));
}

Status alloc(std::size_t bytes, void** ptr) {
  PURLIN_TRY(check(cudaMalloc(ptr, bytes), "cudaMalloc"));
  Status s = check(cudaMemset(*ptr, 0, bytes), "cudaMemset");
  if (s != Status::ok) {
    cudaFree(*ptr);
    *ptr = nullptr;
  }
  return s;
}

void free(void* ptr) {
  if (ptr) cudaFree(ptr);
}

Status ipc_export(void* ptr, IpcHandle* out) {
  static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(IpcHandle));
  cudaIpcMemHandle_t h;
  PURLIN_TRY(check(cudaIpcGetMemHandle(&h, ptr), "cudaIpcGetMemHandle"));
  std::memcpy(out->bytes, &h, sizeof(h));
  return Status::ok;
}

Status ipc_import(const IpcHandle& handle, void** ptr) {
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.bytes, sizeof(h));
  return check(cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
}

void ipc_close(void* ptr) {
  if (ptr) cudaIpcCloseMemHandle(ptr);
}

Status enable_peer_access(int device, int peer) {
  if (device == peer) return Status::ok;
  int can = 0;
  PURLIN_TRY(check(cudaDeviceCanAccessPeer(&can, device, peer), "cudaDeviceCanAccessPeer"));
  if (!can)
    return fail(Status::system_error,
                fmt::format("device {} cannot access device {}'s memory (no peer access between them)", device, peer));
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return Status::ok;
  }
  return check(e, "cudaDeviceEnablePeerAccess");
}

Status host_mapped_alloc(std::size_t bytes, void** host, void** device) {
  PURLIN_TRY(check(cudaHostAlloc(host, bytes, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc"));
  std::memset(*host, 0, bytes);
  Status s = check(cudaHostGetDevicePointer(device, *host, 0), "cudaHostGetDevicePointer");
  if (s != Status::ok) cudaFreeHost(*host);
  return s;
}

void host_mapped_free(void* host) {
  if (host) cudaFreeHost(host);
}

Status set_device(int device) { return check(cudaSetDevice(device), "cudaSetDevice"); }

}  // namespace purlin::cuda
