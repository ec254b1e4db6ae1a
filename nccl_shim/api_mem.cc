// Memory the GPU datapaths can share without staging: ncclMemAlloc and buffer registration. The
// host datapath has no such memory: these calls say so with NCCL's codes.
#include <fmt/format.h>

#include "core/cuda_probe.h"
#include "nccl_shim/argcheck.h"
#include "nccl_shim/shim.h"

using namespace purlin;
using namespace purlin::shim;

namespace {
ncclResult_t needs_gpu(ncclComm* comm, const char* fn) {
  return fail(comm, ncclInvalidUsage,
              fmt::format("{}: needs a communicator on the GPU datapath; this one serves the host datapath", fn));
}
}  // namespace

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: size is 0");
  return fail(nullptr, ncclUnhandledCudaError,
              cuda_device_count() == 0 ? "ncclMemAlloc: no CUDA device is usable on this machine"
                                       : "ncclMemAlloc: GPU memory allocation is not available in this build");
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  return fail(nullptr, ncclInvalidArgument,
              fmt::format("ncclMemFree: {} was not allocated by ncclMemAlloc", ptr));
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (ncclResult_t r = check_comm("ncclCommRegister", comm); r != ncclSuccess) return r;
  if (handle == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  *handle = nullptr;
  (void)buff;
  (void)size;
  return needs_gpu(comm, "ncclCommRegister");
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  if (ncclResult_t r = check_comm("ncclCommDeregister", comm); r != ncclSuccess) return r;
  (void)handle;
  return needs_gpu(comm, "ncclCommDeregister");
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  if (ncclResult_t r = check_comm("ncclCommWindowRegister", comm); r != ncclSuccess) return r;
  if (win == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
  *win = nullptr;
  (void)buff;
  (void)size;
  (void)winFlags;
  return needs_gpu(comm, "ncclCommWindowRegister");
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  if (ncclResult_t r = check_comm("ncclCommWindowDeregister", comm); r != ncclSuccess) return r;
  (void)win;
  return needs_gpu(comm, "ncclCommWindowDeregister");
}
