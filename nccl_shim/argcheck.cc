#include "nccl_shim/argcheck.h"

#include <cstdint>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "core/cuda_probe.h"
#include "nccl_shim/comm_work.h"
#include "nccl_shim/group.h"

namespace purlin::shim {

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

namespace {

ncclResult_t check_coll_args(const CollCheck& c, DataType* type, ReduceOp* op) {
  if (ncclResult_t r = check_comm(c.fn, c.comm); r != ncclSuccess) return r;
  ncclComm* comm = c.comm;
  if (static_cast<int>(c.type) < 0 || static_cast<int>(c.type) >= ncclNumTypes)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: invalid data type {}", c.fn, static_cast<int>(c.type)));
  *type = static_cast<DataType>(c.type);
  if (c.rooted && (c.root < 0 || c.root >= comm->nranks))
    return fail(comm, ncclInvalidArgument,
                fmt::format("{}: invalid {} {} (nranks {})", c.fn, c.p2p ? "peer" : "root", c.root, comm->nranks));
  if (c.reduces) {
    int o = static_cast<int>(c.op);
    if (o >= 0 && o < ncclNumOps) {
      *op = ReduceOp{static_cast<RedOpKind>(o), 0, nullptr, comm->nranks};
    } else {
      // Read the slot under the lock; report (which takes the lock again) after releasing it.
      bool live = false;
      ncclComm::RedOpSlot found;
      {
        std::lock_guard<std::mutex> g(comm->mutex);
        if (const ncclComm::RedOpSlot* slot = comm->redop(o)) {
          live = true;
          found = *slot;
        }
      }
      if (!live) return fail(comm, ncclInvalidArgument, fmt::format("{}: invalid reduction operator {}", c.fn, o));
      if (found.type != *type)
        return fail(comm, ncclInvalidArgument,
                    fmt::format("{}: reduction operator {} was created for {}, not {}", c.fn, o, name_of(found.type),
                                name_of(*type)));
      *op = found.op;
    }
  }
  const std::size_t es = size_of(*type);
  const std::size_t big = std::max(c.send_factor, c.recv_factor);
  if (c.count > std::numeric_limits<std::size_t>::max() / es / big)
    return fail(comm, ncclInvalidArgument,
                fmt::format("{}: count {} of {} overflows the byte size of the buffers", c.fn, c.count, name_of(*type)));
  if (c.count > 0) {
    if (c.send_needed && c.send == nullptr)
      return fail(comm, ncclInvalidArgument, fmt::format("{}: sendbuff is NULL with count {}", c.fn, c.count));
    if (c.recv_needed && c.recv == nullptr)
      return fail(comm, ncclInvalidArgument, fmt::format("{}: recvbuff is NULL with count {}", c.fn, c.count));
    // Memory of another GPU: NCCL checks it only under NCCL_CHECK_POINTERS=1; its kernels then fault.
    if (comm->device >= 0) {
      for (auto [what, ptr, needed] : {std::tuple{"sendbuff", c.send, c.send_needed}, std::tuple{"recvbuff", c.recv, c.recv_needed}}) {
        const int d = needed ? cuda_pointer_device(ptr) : -1;
        if (d >= 0 && d != comm->device)
          return fail(comm, ncclInvalidArgument, fmt::format("{}: {} {} is memory of device {}, the communicator's is device {}",
                                                             c.fn, what, ptr, d, comm->device));
      }
    }
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t check_coll(const CollCheck& c, DataType* type, ReduceOp* op) {
  return group_failed(check_coll_args(c, type, op));
}

}  // namespace purlin::shim
