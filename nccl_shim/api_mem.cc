// Memory for the GPU datapaths: ncclMemAlloc / ncclMemFree and buffer registration. On a GPU,
// ncclMemAlloc returns a cuMem allocation, as NCCL's does: exportable to other processes as a file
// descriptor and mapped for every device with peer access to it (cudaMalloc where the driver has no
// such cuMem, or PURLIN_CUMEM=0). Registrations and windows are recorded and checked at
// deregistration; the datapath treats their buffers like any other (large calls run in place on
// every buffer it can map, registered or not). Without a GPU these calls fail with NCCL's codes.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/config.h"
#include "core/cuda_probe.h"
#include "core/log.h"
#include "nccl_shim/argcheck.h"
#include "nccl_shim/comm_work.h"
#include "nccl_shim/fallback.h"
#include "nccl_shim/group.h"
#include "nccl_shim/nccl_next.h"
#include "nccl_shim/shim.h"

#if defined(PURLIN_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_memory.h"
#endif

using namespace purlin;
using namespace purlin::shim;

namespace {

// What ncclMemAlloc handed out: a cuMem mapping, or (ptr only) a cudaMalloc allocation.
struct Allocation {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  unsigned long long handle = 0;
  bool cumem = false;
};
std::mutex g_alloc_mutex;
std::unordered_map<void*, Allocation>& allocations() {
  static auto* map = new std::unordered_map<void*, Allocation>();
  return *map;
}

ncclResult_t needs_gpu(ncclComm* comm, const char* fn) {
  return fail(comm, ncclInvalidUsage,
              fmt::format("{}: needs a communicator on a GPU datapath; this one serves the host datapath", fn));
}

// Records a registration of a GPU communicator.
ncclResult_t record(ncclComm* comm, void* buff, size_t size, bool window, int flags, ncclComm::Registration** out) {
  auto* r = new ncclComm::Registration{comm, buff, size, window, flags};
  std::lock_guard<std::mutex> g(comm->mutex);
  comm->registrations.push_back(r);
  *out = r;
  return ncclSuccess;
}

// A window's checks, as NCCL's (and a plain registration's on the host datapath): a buffer and a size.
ncclResult_t add_registration(ncclComm* comm, const char* fn, void* buff, size_t size, bool window, int flags,
                              ncclComm::Registration** out) {
  if (buff == nullptr || size == 0)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: buffer {} of {} bytes cannot be registered", fn, buff, size));
  if (comm->device < 0) return needs_gpu(comm, fn);
  return record(comm, buff, size, window, flags, out);
}

// The registration (window or not) behind a handle, or end(). Call with comm->mutex held.
std::vector<ncclComm::Registration*>::iterator registration_of(ncclComm* comm, const void* handle, bool window) {
  auto it = std::find(comm->registrations.begin(), comm->registrations.end(), handle);
  return it != comm->registrations.end() && (*it)->window == window ? it : comm->registrations.end();
}

ncclResult_t remove_registration(ncclComm* comm, const char* fn, void* handle, bool window) {
  ncclComm::Registration* found = nullptr;
  {
    std::lock_guard<std::mutex> g(comm->mutex);
    if (auto it = registration_of(comm, handle, window); it != comm->registrations.end()) {
      found = *it;
      comm->registrations.erase(it);
    }
  }
  // NCCL answers an unknown registration handle with ncclInvalidUsage ("Could not find handle").
  if (!found)
    return fail(comm, window ? ncclInvalidArgument : ncclInvalidUsage,
                fmt::format("{}: {} is not a registration of this communicator", fn, handle));
  delete found;
  return ncclSuccess;
}

}  // namespace

#if defined(PURLIN_HAVE_CUDA)
namespace {

// A cuMem allocation on the current device, or false where this device, driver or configuration
// has none (the caller falls back to cudaMalloc).
bool cumem_alloc(std::size_t size, Allocation* out) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // the cudaMalloc that follows reports the device's trouble
    return false;
  }
  if (config().cumem_disabled || !cuda::vmm_fd_supported(device)) return false;
  cuda::VmmMapping m;
  if (cuda::vmm_alloc(device, size, &m) != Status::ok) {
    log::info(log::kAlloc, "ncclMemAlloc: cuMem allocation of {} bytes failed ({}); using cudaMalloc", size,
              last_error());
    return false;
  }
  if (cuda::vmm_grant_peers(m, device) != Status::ok) {
    log::info(log::kAlloc, "ncclMemAlloc: peer access to a cuMem allocation failed ({}); using cudaMalloc",
              last_error());
    cuda::vmm_free(&m);
    return false;
  }
  *out = Allocation{m.ptr, m.bytes, m.handle, true};
  return true;
}

}  // namespace
#endif

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  // As NCCL, whose cudaMalloc then fails: ncclUnhandledCudaError.
  if (ptr == nullptr) return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (cuda_device_count() == 0)
    return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: no CUDA device is usable on this machine");
  if (size == 0) return ncclSuccess;  // as NCCL (cudaMalloc of 0 bytes): success and a NULL pointer
#if defined(PURLIN_HAVE_CUDA)
  Allocation a;
  if (!cumem_alloc(size, &a)) {
    cudaError_t e = cudaMalloc(&a.ptr, size);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(nullptr, ncclUnhandledCudaError,
                  fmt::format("ncclMemAlloc: cudaMalloc of {} bytes failed: {}", size, cudaGetErrorString(e)));
    }
    a.bytes = size;
  }
  std::lock_guard<std::mutex> g(g_alloc_mutex);
  allocations()[a.ptr] = a;
  *ptr = a.ptr;
  return ncclSuccess;
#else
  return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: this build has no CUDA runtime");
#endif
}

// As NCCL's, it does not wait for work still using the memory: the caller synchronises first.
NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  Allocation a;
  bool ours = false;
  {
    std::lock_guard<std::mutex> g(g_alloc_mutex);
    if (auto it = allocations().find(ptr); it != allocations().end()) {
      a = it->second;
      allocations().erase(it);
      ours = true;
    }
  }
#if defined(PURLIN_HAVE_CUDA)
  // Memory of another allocator, as NCCL frees it: a cuMem mapping is unmapped and released (any
  // other pointer fails there, with ncclUnhandledCudaError); with cuMem off, cudaFree.
  if (!ours && !config().cumem_disabled) {
    if (cuda::vmm_free_foreign(ptr) != Status::ok)
      return fail(nullptr, ncclUnhandledCudaError,
                  fmt::format("ncclMemFree: {} is not the start of a cuMem mapping: {}", ptr, last_error()));
    return ncclSuccess;
  }
  if (a.cumem) {
    cuda::VmmMapping m{a.ptr, a.bytes, a.handle};
    cuda::vmm_free(&m);
    return ncclSuccess;
  }
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(nullptr, ncclUnhandledCudaError, fmt::format("ncclMemFree: cudaFree failed: {}", cudaGetErrorString(e)));
  }
  return ncclSuccess;
#else
  // No CUDA runtime: nothing can have been allocated, as ncclMemAlloc says.
  (void)ours;
  return fail(nullptr, ncclUnhandledCudaError, fmt::format("ncclMemFree: {} was not allocated by ncclMemAlloc", ptr));
#endif
}

// As NCCL 2.30.7's on a GPU: with NCCL_LOCAL_REGISTER=0 nothing is registered (a NULL handle);
// under NCCL_CHECK_MODE the buffer must be memory a device can address, this communicator's device's
// if device memory; with cuMem on, the driver must know every byte of it as CUDA memory
// (ncclUnhandledCudaError otherwise), and host memory is not registered (a NULL handle). NCCL
// crashes on a NULL handle, and checks no communicator where it registers nothing; here both are
// checked first.
NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  const char* fn = "ncclCommRegister";
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (handle == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  *handle = nullptr;
  ncclComm::Registration* reg = nullptr;
  if (comm->device < 0) return add_registration(comm, fn, buff, size, false, 0, &reg);  // the host datapath's codes
  if (!config().local_register) {
    log::info(log::kReg, "Skipping registration for buffer {} size {} (LocalRegister=0)", buff, size);
    return ncclSuccess;
  }
  // As NCCL: asked as the thread's own device.
  if (ncclResult_t r = check_pointer(comm, fn, "buff", buff, -1); r != ncclSuccess) return r;
#if defined(PURLIN_HAVE_CUDA)
  if (!config().cumem_disabled && cuda::vmm_supported(comm->device)) {
    bool host = false;
    if (cuda::registration_span(buff, size, &host) != Status::ok)
      return fail(comm, ncclUnhandledCudaError, fmt::format("{}: buffer {} of {} bytes: {}", fn, buff, size, last_error()));
    if (host) {
      log::info(log::kReg, "Skipping registration for buffer {} size {} since it contains segments backed by CPU memory",
                buff, size);
      return ncclSuccess;
    }
  }
#endif
  if (ncclResult_t r = record(comm, buff, size, false, 0, &reg); r != ncclSuccess) return r;
  *handle = reg;
  return ncclSuccess;
}

namespace {

// Deregistration is bookkeeping of this process: as NCCL, it needs a live communicator only, not a
// healthy one (PyTorch deregisters before it aborts a failed communicator), and a NULL handle is
// nothing to do.
ncclResult_t deregister(const char* fn, ncclComm_t comm, void* handle, bool window) {
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (handle == nullptr) return ncclSuccess;
  return remove_registration(comm, fn, handle, window);
}

}  // namespace

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  return deregister("ncclCommDeregister", comm, handle, false);
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  if (ncclResult_t r = check_comm("ncclCommWindowRegister", comm); r != ncclSuccess) return r;
  if (win == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
  *win = nullptr;
  // Any flags, as NCCL takes them (2.30's NCCL_WIN_STRICT_ORDERING among them): it checks none.
  ncclComm::Registration* reg = nullptr;
  if (ncclResult_t r = add_registration(comm, "ncclCommWindowRegister", buff, size, true, winFlags, &reg); r != ncclSuccess)
    return r;
  *win = reinterpret_cast<ncclWindow_t>(reg);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  return deregister("ncclCommWindowDeregister", comm, win, true);
}

// ---- NCCL 2.29 and 2.30 additions (nccl_shim/nccl_next.h) -----------------------------------------

NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  const char* fn = "ncclWinGetUserPtr";
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (outUserPtr == nullptr) return fail(comm, ncclInvalidArgument, "ncclWinGetUserPtr: outUserPtr is NULL");
  // As NCCL on a communicator without symmetric memory: no window, no pointer.
  if (comm->device < 0) {
    log::info(log::kInit, "{}: a communicator on the host datapath has no windows", fn);
    *outUserPtr = nullptr;
    return ncclSuccess;
  }
  if (win == nullptr) return fail(comm, ncclInvalidArgument, "ncclWinGetUserPtr: win is NULL");
  {
    std::lock_guard<std::mutex> g(comm->mutex);
    if (auto it = registration_of(comm, win, true); it != comm->registrations.end()) {
      *outUserPtr = (*it)->ptr;
      return ncclSuccess;
    }
  }
  // NCCL's answer to a window it does not know (fail takes the communicator's lock itself).
  return fail(comm, ncclInternalError, fmt::format("{}: {} is not a window of this communicator", fn,
                                                   static_cast<const void*>(win)));
}

namespace {

// Suspend and resume wait for every rank: inside a group they run at the outermost ncclGroupEnd,
// after the group's calls (defer_after); on a non-blocking communicator, in the background. A
// failure past the checks of state leaves memory half given back or half mapped: it breaks the
// communicator (abort it), as a failed collective does.
ncclResult_t memory_work(const char* fn, ncclComm* comm, bool suspend) {
  auto work = [fn, comm, serial = comm->serial, suspend]() -> ncclResult_t {
    InUse use(comm, serial);
    if (!use) return fail(nullptr, ncclInvalidArgument, fmt::format("{}: the communicator was destroyed", fn));
    // The real NCCL's part, where there is one, is suspended after Purlin's and resumed before it
    // (once Purlin's is found suspended).
    Fallback* real = comm->fallback.get();
    Status s = Status::ok;
    bool breaks = false;  // the failure came from the real NCCL's part, after Purlin's went through
    if (suspend) {
      s = comm->impl->suspend();
      if (s == Status::ok && real) breaks = (s = real->suspend()) != Status::ok;
    } else {
      if (real && comm->impl->suspended()) breaks = (s = real->resume()) != Status::ok;
      if (s == Status::ok) s = comm->impl->resume();
    }
    if (s == Status::ok) return ncclSuccess;
    const std::string why = fmt::format("{}: {}", fn, last_error());
    if (breaks) set_failed(comm, static_cast<ncclResult_t>(s == Status::invalid_usage ? Status::internal_error : s), why);
    return propagate(comm, adopt_error(s, why));
  };
  if (comm->blocking && group_depth() > 0) {
    defer_after(std::move(work), comm);
    return ncclSuccess;
  }
  return run_work(comm, std::move(work));
}

// What suspending needs beyond a usable communicator, as NCCL checks it, and a real NCCL that can
// suspend where the communicator hands work to one.
ncclResult_t check_suspend(const char* fn, ncclComm* comm) {
  if (config().mem_manager_disabled)
    return fail(comm, ncclInvalidUsage, fmt::format("{}: not supported with NCCL_DISABLE_MEM_MANAGER set", fn));
  if (std::string why; comm->fallback && !comm->fallback->can_suspend(&why))
    return fail(comm, ncclInvalidUsage, fmt::format("{}: {}", fn, why));
  return ncclSuccess;
}

}  // namespace

// Suspending memory, as NCCL's memory manager: a collective call that waits for the work of every
// rank, then gives back the GPU datapath's suspendable memory (ncclStatGpuMemSuspend) until
// ncclCommResume, which maps it again at the same addresses (captured graphs replay unchanged). No
// collective runs in between: one is refused with ncclInvalidUsage, and the communicator stays
// usable.
NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  const char* fn = "ncclCommSuspend";
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if ((flags & NCCL_SUSPEND_MEM) == 0) return ncclSuccess;  // nothing else can be suspended
  if (ncclResult_t r = check_suspend(fn, comm); r != ncclSuccess) return r;
  // (Inside a group the state is checked when the group ends, after the calls before this one.)
  if (group_depth() == 0 && comm->impl->suspended())
    return fail(comm, ncclInvalidUsage, "ncclCommSuspend: the communicator is suspended already");
  return memory_work(fn, comm, true);
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  const char* fn = "ncclCommResume";
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (ncclResult_t r = check_suspend(fn, comm); r != ncclSuccess) return r;
  if (group_depth() == 0 && !comm->impl->suspended())
    return fail(comm, ncclInvalidUsage, "ncclCommResume: the communicator is not suspended");
  return memory_work(fn, comm, false);
}

// The device memory a communicator holds, as NCCL's memory manager counts it: the GPU datapath's
// window where its peers map it by cuMem descriptors can be suspended, the rest persists. With
// NCCL_DISABLE_MEM_MANAGER set, refused as NCCL refuses it then.
NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  const char* fn = "ncclCommMemStats";
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (value == nullptr) return fail(comm, ncclInvalidArgument, fmt::format("{}: value is NULL", fn));
  if (config().mem_manager_disabled)
    return fail(comm, ncclInvalidUsage, fmt::format("{}: not supported with NCCL_DISABLE_MEM_MANAGER set", fn));
  std::uint64_t suspendable = comm->impl ? comm->impl->suspendable_bytes() : 0;
  if (comm->fallback && !comm->abort_flag.load()) suspendable += comm->fallback->suspendable_bytes();
  switch (stat) {
    case ncclStatGpuMemTotal:
    case ncclStatGpuMemPersist:
      *value = comm->impl ? comm->impl->device_bytes() : 0;
      // An aborted communicator's real NCCL part may be going: it is not asked then.
      if (comm->fallback && !comm->abort_flag.load()) *value += comm->fallback->device_bytes();
      if (stat == ncclStatGpuMemPersist) *value -= suspendable;
      return ncclSuccess;
    case ncclStatGpuMemSuspend:
      *value = suspendable;
      return ncclSuccess;
    case ncclStatGpuMemSuspended:
      *value = comm->impl && comm->impl->suspended() ? 1 : 0;
      return ncclSuccess;
  }
  return fail(comm, ncclInvalidArgument, fmt::format("{}: unknown stat {}", fn, static_cast<int>(stat)));
}
