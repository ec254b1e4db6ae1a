#include "core/cuda_memory.h"

#include <cstring>
#include <type_traits>

#include <cuda.h>  // the driver's types; its functions are reached through cudaGetDriverEntryPointByVersion
#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace purlin::cuda {
namespace {

// The driver functions of cuMem, found at run time (the library does not link libcuda).
struct Vmm {
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) attribute = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&::cuMemRetainAllocationHandle) retain = nullptr;
  decltype(&::cuPointerGetAttributes) attributes = nullptr;
  decltype(&::cuMemGetAddressRange) address_range = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) properties = nullptr;
  decltype(&::cuPointerGetAttribute) attribute_of = nullptr;
  bool found = false;
};

template <class Fn>
bool entry(const char* name, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

const Vmm& vmm() {
  static const Vmm v = [] {
    Vmm v;
    v.found = entry("cuDeviceGet", &v.device_get) && entry("cuDeviceGetAttribute", &v.attribute) &&
              entry("cuGetErrorString", &v.error_string) &&
              entry("cuMemGetAllocationGranularity", &v.granularity) && entry("cuMemCreate", &v.create) &&
              entry("cuMemRelease", &v.release) && entry("cuMemAddressReserve", &v.reserve) &&
              entry("cuMemAddressFree", &v.address_free) && entry("cuMemMap", &v.map) &&
              entry("cuMemUnmap", &v.unmap) && entry("cuMemSetAccess", &v.set_access) &&
              entry("cuMemExportToShareableHandle", &v.export_handle) &&
              entry("cuMemImportFromShareableHandle", &v.import_handle) &&
              entry("cuMemRetainAllocationHandle", &v.retain) && entry("cuPointerGetAttributes", &v.attributes);
    // Only ncclMemFree of another allocator's mapping needs it: its absence costs nothing else.
    entry("cuMemGetAddressRange", &v.address_range);
    // ncclCommRegister's look at a buffer only.
    entry("cuMemGetAllocationPropertiesFromHandle", &v.properties);
    entry("cuPointerGetAttribute", &v.attribute_of);
    return v;
  }();
  return v;
}

Status drv(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::ok;
  const char* text = nullptr;
  if (vmm().error_string) vmm().error_string(r, &text);
  return fail(Status::cuda_error, fmt::format("{}: CUDA driver error {} ({})", what, static_cast<int>(r), text ? text : "?"));
}

CUmemAllocationProp allocation_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Maps `handle` at the reserved range [base, base + bytes) and lets `device` read and write it.
Status map_at(int device, unsigned long long handle, CUdeviceptr base, std::size_t bytes) {
  const Vmm& v = vmm();
  PURLIN_TRY(drv(v.map(base, bytes, 0, handle, 0), "cuMemMap"));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Status s = drv(v.set_access(base, bytes, &access, 1), "cuMemSetAccess");
  if (s != Status::ok) v.unmap(base, bytes);
  return s;
}

// Reserves an address range for `handle`, maps it and lets `device` read and write it.
Status map_for(int device, unsigned long long handle, std::size_t bytes, VmmMapping* out) {
  const Vmm& v = vmm();
  CUdeviceptr base = 0;
  PURLIN_TRY(drv(v.reserve(&base, bytes, 0, 0, 0), "cuMemAddressReserve"));
  if (Status s = map_at(device, handle, base, bytes); s != Status::ok) {
    v.address_free(base, bytes);
    return s;
  }
  out->ptr = reinterpret_cast<void*>(base);
  out->bytes = bytes;
  out->handle = handle;
  return Status::ok;
}

Status import_handle(int fd, unsigned long long* handle) {
  const Vmm& v = vmm();
  if (!v.found) return fail(Status::cuda_error, "cuMem: the driver's virtual memory functions were not found");
  CUmemGenericAllocationHandle h = 0;
  PURLIN_TRY(drv(v.import_handle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                 "cuMemImportFromShareableHandle"));
  *handle = h;
  return Status::ok;
}

}  // namespace

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

bool vmm_supported(int device) {
  const Vmm& v = vmm();
  if (!v.found) return false;
  CUdevice dev = 0;
  int vmm_ok = 0;
  if (v.device_get(&dev, device) != CUDA_SUCCESS) return false;
  if (v.attribute(&vmm_ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS) return false;
  return vmm_ok != 0;
}

bool vmm_fd_supported(int device) {
  if (!vmm_supported(device)) return false;
  const Vmm& v = vmm();
  CUdevice dev = 0;
  int fd_ok = 0;
  if (v.device_get(&dev, device) != CUDA_SUCCESS) return false;
  if (v.attribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) != CUDA_SUCCESS) return false;
  return fd_ok != 0;
}

Status vmm_alloc(int device, std::size_t bytes, VmmMapping* out) {
  const Vmm& v = vmm();
  if (!v.found) return fail(Status::cuda_error, "cuMem: the driver's virtual memory functions were not found");
  const CUmemAllocationProp prop = allocation_prop(device);
  std::size_t grain = 0;
  PURLIN_TRY(drv(v.granularity(&grain, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity"));
  if (grain == 0) grain = std::size_t(2) << 20;
  const std::size_t size = (bytes + grain - 1) / grain * grain;
  CUmemGenericAllocationHandle handle = 0;
  PURLIN_TRY(drv(v.create(&handle, size, &prop, 0), "cuMemCreate"));
  Status s = map_for(device, handle, size, out);
  if (s != Status::ok) {
    v.release(handle);
    return s;
  }
  // Zeroed, and waited for here: a caller may unmap the allocation at once (a window that turns out
  // to be shared by plain pointers), which must not race the memset (on two H200s, ranks as threads
  // then failed their init with an illegal address in 5 of 12 runs). The memset gets a non-blocking
  // stream of its own, so the wait covers nothing else running on the device.
  cudaStream_t zero = nullptr;
  s = check(cudaStreamCreateWithFlags(&zero, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  if (s == Status::ok) s = check(cudaMemsetAsync(out->ptr, 0, size, zero), "cudaMemsetAsync");
  if (s == Status::ok) s = check(cudaStreamSynchronize(zero), "cudaStreamSynchronize");
  if (zero) cudaStreamDestroy(zero);
  if (s != Status::ok) vmm_free(out);
  return s;
}

Status vmm_export_fd(const VmmMapping& m, int* fd) {
  int handle_fd = -1;
  PURLIN_TRY(drv(vmm().export_handle(&handle_fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                 "cuMemExportToShareableHandle"));
  *fd = handle_fd;
  return Status::ok;
}

Status vmm_import_fd(int fd, std::size_t bytes, int device, VmmMapping* out) {
  unsigned long long handle = 0;
  PURLIN_TRY(import_handle(fd, &handle));
  Status s = map_for(device, handle, bytes, out);
  if (s != Status::ok) vmm().release(handle);
  return s;
}

void vmm_free(VmmMapping* m) {
  if (m->ptr == nullptr) return;
  vmm_unmap(m);
  vmm().address_free(reinterpret_cast<CUdeviceptr>(m->ptr), m->bytes);
  *m = VmmMapping{};
}

Status vmm_free_foreign(void* ptr) {
  const Vmm& v = vmm();
  if (!v.found || !v.address_range)
    return fail(Status::cuda_error, "cuMem: the driver's virtual memory functions were not found");
  CUmemGenericAllocationHandle handle = 0;
  PURLIN_TRY(drv(v.retain(&handle, ptr), "cuMemRetainAllocationHandle"));
  PURLIN_TRY(drv(v.release(handle), "cuMemRelease"));  // the reference the retain took
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const auto at = reinterpret_cast<CUdeviceptr>(ptr);
  PURLIN_TRY(drv(v.address_range(&base, &size, at), "cuMemGetAddressRange"));
  // NCCL's cuMemUnmap of a pointer inside a mapping fails here, after its retain and release too.
  if (base != at)
    return fail(Status::cuda_error, fmt::format("cuMemUnmap: {} is inside the mapping at {:#x}, not its start", ptr, base));
  PURLIN_TRY(drv(v.unmap(at, size), "cuMemUnmap"));
  PURLIN_TRY(drv(v.release(handle), "cuMemRelease"));  // the creator's reference
  return drv(v.address_free(at, size), "cuMemAddressFree");
}

Status registration_span(const void* ptr, std::size_t bytes, bool* host_backed) {
  *host_backed = false;
  const Vmm& v = vmm();
  if (!v.found || !v.address_range || !v.properties || !v.attribute_of)
    return fail(Status::cuda_error, "cuMem: the driver's virtual memory functions were not found");
  const auto at = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  PURLIN_TRY(drv(v.address_range(&base, &size, at), "cuMemGetAddressRange"));
  // One attribute at a time, as NCCL asks: unlike cuPointerGetAttributes, it fails on an address
  // the driver does not know.
  unsigned memory_type = 0;
  PURLIN_TRY(drv(v.attribute_of(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at), "cuPointerGetAttribute"));
  if (memory_type == CU_MEMORYTYPE_HOST) {
    *host_backed = true;
    return Status::ok;
  }
  int legacy = 0;
  PURLIN_TRY(drv(v.attribute_of(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, base), "cuPointerGetAttribute"));
  if (legacy) return Status::ok;  // cudaMalloc memory: one allocation, as the driver sees it
  // cuMem: every mapping the span touches, in order.
  const CUdeviceptr end = at + bytes;
  for (CUdeviceptr next = at; next < end;) {
    PURLIN_TRY(drv(v.address_range(&base, &size, next), "cuMemGetAddressRange"));
    if (!*host_backed) {
      CUmemGenericAllocationHandle handle = 0;
      PURLIN_TRY(drv(v.retain(&handle, reinterpret_cast<void*>(next)), "cuMemRetainAllocationHandle"));
      CUmemAllocationProp prop{};
      const Status s = drv(v.properties(&prop, handle), "cuMemGetAllocationPropertiesFromHandle");
      v.release(handle);
      PURLIN_TRY(s);
      *host_backed = prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
    }
    if (size == 0) break;  // no progress to be made: the driver named an empty range
    next = (base ? base : next) + size;
  }
  return Status::ok;
}

void vmm_unmap(VmmMapping* m) {
  if (m->ptr == nullptr || m->handle == 0) return;
  const Vmm& v = vmm();
  v.unmap(reinterpret_cast<CUdeviceptr>(m->ptr), m->bytes);
  v.release(m->handle);
  m->handle = 0;
}

Status vmm_remap(int device, VmmMapping* m) {
  const Vmm& v = vmm();
  if (!v.found) return fail(Status::cuda_error, "cuMem: the driver's virtual memory functions were not found");
  if (m->ptr == nullptr || m->handle != 0) return fail(Status::internal_error, "vmm_remap: the range is not unmapped");
  const CUmemAllocationProp prop = allocation_prop(device);
  CUmemGenericAllocationHandle handle = 0;
  PURLIN_TRY(drv(v.create(&handle, m->bytes, &prop, 0), "cuMemCreate"));
  if (Status s = map_at(device, handle, reinterpret_cast<CUdeviceptr>(m->ptr), m->bytes); s != Status::ok) {
    v.release(handle);
    return s;
  }
  m->handle = handle;
  return Status::ok;
}

Status vmm_import_fd_at(int fd, int device, VmmMapping* m) {
  if (m->ptr == nullptr || m->handle != 0)
    return fail(Status::internal_error, "vmm_import_fd_at: the range is not unmapped");
  unsigned long long handle = 0;
  PURLIN_TRY(import_handle(fd, &handle));
  if (Status s = map_at(device, handle, reinterpret_cast<CUdeviceptr>(m->ptr), m->bytes); s != Status::ok) {
    vmm().release(handle);
    return s;
  }
  m->handle = handle;
  return Status::ok;
}

Status describe_buffer(const void* ptr, std::size_t bytes, BufferShare* out) {
  *out = BufferShare{};
  const Vmm& v = vmm();
  if (!v.found || ptr == nullptr) return Status::ok;
  unsigned memory_type = 0, managed = 0, legacy = 0, mapped = 0;
  unsigned long long id = 0, handle_types = 0;
  CUdeviceptr range_start = 0, mapping_base = 0;
  std::size_t range_size = 0, mapping_size = 0;
  int ordinal = -1;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                 CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                 CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
  void* data[] = {&memory_type, &managed, &id, &ordinal, &legacy, &range_start, &range_size,
                  &mapped, &handle_types, &mapping_base, &mapping_size};
  const CUresult r = v.attributes(sizeof(attrs) / sizeof(attrs[0]), attrs, data,
                                  reinterpret_cast<CUdeviceptr>(ptr));
  // Host memory the driver never saw answers CUDA_ERROR_INVALID_VALUE: not shareable, not an error.
  if (r != CUDA_SUCCESS) return Status::ok;
  if (memory_type != CU_MEMORYTYPE_DEVICE || managed || id == 0) return Status::ok;
  const auto p = reinterpret_cast<std::uint64_t>(ptr);
  BufferShare b;
  b.id = id;
  b.device = ordinal;
  if (legacy) {
    b.kind = ShareKind::ipc;
    b.base = range_start;
    b.bytes = range_size;
  } else if (mapped && (handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && mapping_size) {
    b.kind = ShareKind::vmm_fd;
    b.base = mapping_base;
    b.bytes = mapping_size;
  } else {
    return Status::ok;
  }
  if (p < b.base || p + bytes > b.base + b.bytes) return Status::ok;  // spans allocations
  *out = b;
  return Status::ok;
}

Status vmm_export_buffer_fd(std::uint64_t base, int* fd) {
  const Vmm& v = vmm();
  if (!v.found) return fail(Status::cuda_error, "cuMem: the driver's virtual memory functions were not found");
  CUmemGenericAllocationHandle handle = 0;
  PURLIN_TRY(drv(v.retain(&handle, reinterpret_cast<void*>(static_cast<std::uintptr_t>(base))),
                 "cuMemRetainAllocationHandle"));
  int handle_fd = -1;
  Status s = drv(v.export_handle(&handle_fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                 "cuMemExportToShareableHandle");
  v.release(handle);
  if (s == Status::ok) *fd = handle_fd;
  return s;
}

Status vmm_grant_peers(const VmmMapping& m, int device) {
  int count = 0;
  PURLIN_TRY(check(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  for (int d = 0; d < count; ++d) {
    int can = 0;
    if (d == device || cudaDeviceCanAccessPeer(&can, d, device) != cudaSuccess || !can) continue;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = d;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    PURLIN_TRY(drv(vmm().set_access(reinterpret_cast<CUdeviceptr>(m.ptr), m.bytes, &access, 1), "cuMemSetAccess(peer)"));
  }
  return Status::ok;
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
