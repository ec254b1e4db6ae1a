#include "nccl_shim/comm_work.h"

#include <chrono>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "nccl_shim/fallback.h"

namespace purlin::shim {
namespace {

bool breaks_comm(ncclResult_t r) {
  return r != ncclSuccess && r != ncclInProgress && r != ncclInvalidArgument && r != ncclInvalidUsage;
}

}  // namespace

ncclResult_t run_work(ncclComm* comm, std::function<ncclResult_t()> work, Settle settle) {
  if (comm->blocking) return work();
  join_background(comm);  // the previous work has settled; its thread may still be returning
  comm->async_error.store(ncclInProgress, std::memory_order_release);
  try {
    comm->background = std::thread([comm, settle, work = std::move(work)] {
      const ncclResult_t r = work();
      const bool keep = settle == Settle::every_error ? r != ncclSuccess : breaks_comm(r);
      comm->async_error.store(keep ? r : ncclSuccess, std::memory_order_release);
    });
  } catch (const std::system_error& e) {
    comm->async_error.store(ncclSuccess, std::memory_order_release);
    return fail(comm, ncclSystemError, fmt::format("cannot start the communicator's background thread: {}", e.what()));
  }
  return ncclInProgress;
}

void join_background(ncclComm* comm) {
  if (comm->background.joinable()) comm->background.join();
}

void wait_idle(const ncclComm* comm, int own) {
  while (comm->users.load(std::memory_order_acquire) > own) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

ncclResult_t comm_state(const ncclComm* comm) {
  const int e = comm->async_error.load(std::memory_order_acquire);
  if (e != ncclSuccess) return static_cast<ncclResult_t>(e);
  // impl is written before impl_ready is raised and never changes afterwards.
  if (comm->impl_ready.load(std::memory_order_acquire)) {
    if (Status s = comm->impl->async_status(); s != Status::ok) return to_nccl(s);
    if (comm->fallback) {
      if (Status s = comm->fallback->async_status(); s != Status::ok) return to_nccl(s);
    }
  }
  return ncclSuccess;
}

std::string failure_reason(const ncclComm* comm) {
  if (comm->impl_ready.load(std::memory_order_acquire)) {
    if (std::string why = comm->impl->failure_reason(); !why.empty()) return why;
  }
  std::lock_guard<std::mutex> g(comm->mutex);
  return comm->failure;
}

void set_failed(ncclComm* comm, ncclResult_t code, const std::string& why) {
  {
    std::lock_guard<std::mutex> g(comm->mutex);
    comm->failure = why;
  }
  comm->async_error.store(code, std::memory_order_release);
}

ncclResult_t check_comm(const char* fn, ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, fmt::format("{}: comm is NULL", fn));
  if (!is_live(comm))
    return fail(nullptr, ncclInvalidArgument,
                fmt::format("{}: comm {} is not a live communicator (destroyed or corrupted)", fn,
                            static_cast<const void*>(comm)));
  // As NCCL: using a communicator whose previous (non-blocking) operation has not settled is an
  // invalid argument; a failed communicator reports its failure.
  const ncclResult_t state = comm_state(comm);
  if (state == ncclInProgress)
    return fail(comm, ncclInvalidArgument,
                fmt::format("{}: the communicator's previous operation is still in progress (poll ncclCommGetAsyncError)", fn));
  if (comm->revoked.load()) return fail(comm, ncclInvalidUsage, fmt::format("{}: comm was revoked", fn));
  if (state != ncclSuccess)
    return fail(comm, state,
                fmt::format("{}: comm is in error state ({}): {}; abort and re-create it", fn,
                            ncclGetErrorString(state), failure_reason(comm)));
  if (comm->finalized.load()) return fail(comm, ncclInvalidUsage, fmt::format("{}: comm was finalized", fn));
  return ncclSuccess;
}

}  // namespace purlin::shim
