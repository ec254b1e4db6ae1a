// Errors, reduction operators and groups.
#include <cstring>

#include <fmt/format.h>

#include "core/log.h"
#include "nccl_shim/argcheck.h"
#include "nccl_shim/comm_work.h"
#include "nccl_shim/group.h"
#include "nccl_shim/shim.h"

namespace purlin::shim {

}  // namespace purlin::shim

using namespace purlin;
using namespace purlin::shim;

// NCCL 2.30's ncclTimeout (a device API wait that timed out), past the enum of the nccl.h built
// against.
constexpr int kNcclTimeout = 8;

NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  if (static_cast<int>(result) == kNcclTimeout) return "timeout";
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the Purlin developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  // Without a comm, as NCCL: the process's last failure, whichever thread it happened on (NCCL keeps
  // one buffer for the process). With a live comm, that communicator's last failure (NCCL ignores
  // the argument), so that ranks as threads of one process each read their own.
  thread_local std::string copy;
  if (comm && is_live(comm)) {
    {
      std::lock_guard<std::mutex> g(comm->mutex);
      if (!comm->last_error.empty()) {
        copy = comm->last_error;
        return copy.c_str();
      }
    }
    // A failure no call of this communicator has returned yet (found by its watcher, or by a
    // kernel on the stream): why the communicator failed.
    if (const ncclResult_t state = comm_state(comm); state != ncclSuccess && state != ncclInProgress) {
      copy = fmt::format("{}: {}", ncclGetErrorString(state), failure_reason(comm));
      return copy.c_str();
    }
  }
  copy = last_error_of_process();
  return copy.c_str();
}

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  const char* fn = "ncclRedOpCreatePreMulSum";
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (op == nullptr) return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op is NULL");
  if (scalar == nullptr) return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: scalar is NULL");
  if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= ncclNumTypes)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: invalid data type {}", fn, static_cast<int>(datatype)));
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: invalid residence {}", fn, static_cast<int>(residence)));
  ncclComm::RedOpSlot slot;
  slot.live = true;
  slot.type = static_cast<DataType>(datatype);
  slot.op.kind = RedOpKind::premulsum;
  slot.op.nranks = comm->nranks;
  if (residence == ncclScalarHostImmediate) std::memcpy(&slot.op.scalar_bits, scalar, size_of(slot.type));
  else slot.op.scalar_ptr = scalar;
  std::lock_guard<std::mutex> g(comm->mutex);
  std::size_t index = 0;
  while (index < comm->redops.size() && comm->redops[index].live) ++index;
  if (index == ncclComm::kRedOpSlots)
    return fail(nullptr, ncclInvalidUsage, fmt::format("{}: {} operators are live; destroy some first", fn, index));
  if (index == comm->redops.size()) {
    comm->redops.push_back(slot);
  } else {
    slot.generation = (comm->redops[index].generation + 1) % ncclComm::kRedOpGenerations;
    comm->redops[index] = slot;
  }
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(index + slot.generation * ncclComm::kRedOpSlots));
  return ncclSuccess;
}

// As NCCL: the operator is checked before the communicator.
NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  const char* fn = "ncclRedOpDestroy";
  const int o = static_cast<int>(op);
  if (o >= 0 && o < ncclNumOps)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: operator {} is built in, not user-created", fn, o));
  if (o < 0) return fail(comm, ncclInvalidArgument, fmt::format("{}: operator {} is garbage", fn, o));
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  {
    std::lock_guard<std::mutex> g(comm->mutex);
    if (ncclComm::RedOpSlot* slot = comm->redop(o)) {
      slot->live = false;
      return ncclSuccess;
    }
  }
  return fail(comm, ncclInvalidArgument, fmt::format("{}: operator {} does not exist (destroyed?)", fn, o));
}

// Deprecated in NCCL and declared by its header only where NCCL_OS_LINUX is defined, still exported:
// logging follows NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE as they are set now.
NCCL_API(void, ncclResetDebugInit) { log::reload(); }

NCCL_API(ncclResult_t, ncclGroupStart) { return group_start(); }
NCCL_API(ncclResult_t, ncclGroupEnd) { return group_end(); }

// As NCCL: without a simInfo the group simply ends; with one not set up, the group is closed and
// its calls dropped.
NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr) return group_end();
  const bool valid =
      simInfo->magic == 0x74685283 && simInfo->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float);
  float us = 0;
  if (ncclResult_t r = group_simulate_end(valid ? &us : nullptr); r != ncclSuccess) return r;
  simInfo->estimatedTime = us;
  return ncclSuccess;
}
