#include "nccl_shim/argcheck.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/config.h"
#include "core/cuda_probe.h"
#include "core/log.h"
#include "nccl_shim/comm_work.h"
#include "nccl_shim/group.h"

namespace purlin::shim {

namespace {

// As NCCL's ncclEnqueueCheck: a call on a usable communicator (check_comm passed) that fails its
// checks fails the group this thread has open, and on a non-blocking communicator it also sets
// the communicator's error for good: later calls are refused and ncclCommGetAsyncError reports it.
ncclResult_t refuse(ncclComm* comm, ncclResult_t r) {
  if (r != ncclSuccess && !comm->blocking) set_failed(comm, r, "a call failed its checks: " + last_error());
  return group_failed(r);
}

// Everything but the communicator, which check_comm has found usable.
ncclResult_t check_coll_args(const CollCheck& c, DataType* type, ReduceOp* op) {
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
  }
  return ncclSuccess;
}

// NCCL_CHECK_MODE's check of the buffers asked about (send, recv), as the communicator's device
// (NCCL switches to it first): a driver query per buffer and call, so off by default, as in NCCL;
// without it the kernels fault on memory no device can address or on another device's.
ncclResult_t probe(const CollCheck& c, bool send, bool recv) {
  if (send)
    if (ncclResult_t r = check_pointer(c.comm, c.fn, "sendbuff", c.send, c.comm->device); r != ncclSuccess) return r;
  return recv ? check_pointer(c.comm, c.fn, "recvbuff", c.recv, c.comm->device) : ncclSuccess;
}

// A collective's or Send/Recv's checks, NCCL's pointer checks last (as its ArgsCheck orders them).
ncclResult_t coll_args(const CollCheck& c, DataType* type, ReduceOp* op) {
  if (ncclResult_t r = check_coll_args(c, type, op); r != ncclSuccess) return r;
  if (c.p2p) return probe(c, c.send_needed && c.count > 0, c.recv_needed && c.count > 0);
  return probe(c, c.probe_send, c.probe_recv);
}

// A V collective's counts and displacements of one buffer, one of each per rank: both given, and
// the end of every partition within what a byte offset can address.
ncclResult_t check_parts(const CollCheck& c, DataType type, const char* counts_name, const size_t* counts,
                         const char* displs_name, const size_t* displs) {
  if (counts == nullptr) return fail(c.comm, ncclInvalidArgument, fmt::format("{}: {} is NULL", c.fn, counts_name));
  if (displs == nullptr) return fail(c.comm, ncclInvalidArgument, fmt::format("{}: {} is NULL", c.fn, displs_name));
  const std::size_t limit = std::numeric_limits<std::size_t>::max() / size_of(type);
  for (int k = 0; k < c.comm->nranks; ++k) {
    if (counts[k] > limit || displs[k] > limit - counts[k])
      return fail(c.comm, ncclInvalidArgument,
                  fmt::format("{}: partition {} ({}[{}] {} + {}[{}] {} elements of {}) overflows the byte size of the "
                              "buffer", c.fn, k, displs_name, k, displs[k], counts_name, k, counts[k], name_of(type)));
  }
  return ncclSuccess;
}

bool any(const size_t* counts, int n) {
  for (int k = 0; k < n; ++k)
    if (counts[k]) return true;
  return false;
}

ncclResult_t null_buffer(const CollCheck& c, const char* buffer, const char* counts_name) {
  return fail(c.comm, ncclInvalidArgument, fmt::format("{}: {} is NULL with {} not all 0", c.fn, buffer, counts_name));
}

ncclResult_t all_gather_v_args(const CollCheck& c, const size_t* recvcounts, const size_t* displs, DataType* type) {
  ReduceOp unused;
  if (ncclResult_t r = check_coll_args(c, type, &unused); r != ncclSuccess) return r;
  if (ncclResult_t r = check_parts(c, *type, "recvcounts", recvcounts, "displs", displs); r != ncclSuccess) return r;
  const int me = c.comm->rank;
  if (recvcounts[me] != c.count)
    return fail(c.comm, ncclInvalidArgument,
                fmt::format("{}: recvcounts[{}] = {} differs from sendcount {}", c.fn, me, recvcounts[me], c.count));
  if (c.recv == nullptr && any(recvcounts, c.comm->nranks)) return null_buffer(c, "recvbuff", "recvcounts");
  return probe(c, c.count > 0, any(recvcounts, c.comm->nranks));
}

ncclResult_t reduce_scatter_v_args(const CollCheck& c, const size_t* recvcounts, const size_t* senddispls,
                                   DataType* type, ReduceOp* op) {
  if (ncclResult_t r = check_coll_args(c, type, op); r != ncclSuccess) return r;
  if (ncclResult_t r = check_parts(c, *type, "recvcounts", recvcounts, "senddispls", senddispls); r != ncclSuccess)
    return r;
  if (c.send == nullptr && any(recvcounts, c.comm->nranks)) return null_buffer(c, "sendbuff", "recvcounts");
  const int me = c.comm->rank;
  if (c.recv == nullptr && recvcounts[me] > 0)
    return fail(c.comm, ncclInvalidArgument, fmt::format("{}: recvbuff is NULL with recvcounts[{}] {}", c.fn, me,
                                                         recvcounts[me]));
  return probe(c, any(recvcounts, c.comm->nranks), recvcounts[me] > 0);
}

// An AlltoAllV's partitions of one rank: none it sends may share a byte with one it receives, as
// its peers write what they send into its receive partitions while they may still read its send
// partitions in place. The spans of the two buffers are compared first; partition pairs only where
// those meet.
ncclResult_t parts_apart(const CollCheck& c, std::size_t es, const size_t* sendcounts, const size_t* sdispls,
                         const size_t* recvcounts, const size_t* rdispls) {
  const int n = c.comm->nranks;
  const auto base_s = reinterpret_cast<std::uintptr_t>(c.send), base_r = reinterpret_cast<std::uintptr_t>(c.recv);
  auto span = [&](std::uintptr_t base, const size_t* counts, const size_t* displs) {
    std::uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int k = 0; k < n; ++k) {
      if (counts[k] == 0) continue;
      lo = std::min<std::uintptr_t>(lo, base + displs[k] * es);
      hi = std::max<std::uintptr_t>(hi, base + (displs[k] + counts[k]) * es);
    }
    return std::pair{lo, hi};
  };
  const auto [slo, shi] = span(base_s, sendcounts, sdispls);
  const auto [rlo, rhi] = span(base_r, recvcounts, rdispls);
  if (slo >= rhi || rlo >= shi) return ncclSuccess;
  for (int s = 0; s < n; ++s) {
    if (sendcounts[s] == 0) continue;
    const std::uintptr_t a = base_s + sdispls[s] * es, b = a + sendcounts[s] * es;
    for (int r = 0; r < n; ++r) {
      if (recvcounts[r] == 0) continue;
      const std::uintptr_t x = base_r + rdispls[r] * es, y = x + recvcounts[r] * es;
      if (a < y && x < b)
        return fail(c.comm, ncclInvalidArgument,
                    fmt::format("{}: send partition {} overlaps receive partition {}; an AlltoAllV in place is not "
                                "supported (give the send and receive partitions separate memory)", c.fn, s, r));
    }
  }
  return ncclSuccess;
}

ncclResult_t all_to_all_v_args(const CollCheck& c, const size_t* sendcounts, const size_t* sdispls,
                               const size_t* recvcounts, const size_t* rdispls, DataType* type) {
  ReduceOp unused;
  if (ncclResult_t r = check_coll_args(c, type, &unused); r != ncclSuccess) return r;
  if (ncclResult_t r = check_parts(c, *type, "sendcounts", sendcounts, "sdispls", sdispls); r != ncclSuccess) return r;
  if (ncclResult_t r = check_parts(c, *type, "recvcounts", recvcounts, "rdispls", rdispls); r != ncclSuccess) return r;
  if (c.send == nullptr && any(sendcounts, c.comm->nranks)) return null_buffer(c, "sendbuff", "sendcounts");
  if (c.recv == nullptr && any(recvcounts, c.comm->nranks)) return null_buffer(c, "recvbuff", "recvcounts");
  if (ncclResult_t r = probe(c, any(sendcounts, c.comm->nranks), any(recvcounts, c.comm->nranks)); r != ncclSuccess)
    return r;
  return parts_apart(c, size_of(*type), sendcounts, sdispls, recvcounts, rdispls);
}

// check_comm, and a suspended communicator, which runs no collective until ncclCommResume (a
// group's own suspend and resume run after its calls, so the state now is the one the call runs in).
ncclResult_t check_caller(const CollCheck& c) {
  if (ncclResult_t r = check_comm(c.fn, c.comm); r != ncclSuccess) return r;
  if (c.comm->impl && c.comm->impl->suspended())
    return fail(c.comm, ncclInvalidUsage,
                fmt::format("{}: the communicator is suspended (ncclCommSuspend); ncclCommResume it first", c.fn));
  return ncclSuccess;
}

// A pointer as NCCL's lines print one (printf's %p: "(nil)" for NULL).
std::string pointer_text(const void* p) { return p ? fmt::format("{}", p) : "(nil)"; }

// NCCL's INFO (COLL) line of a call that passed its checks, which users compare across ranks to
// find where the ranks' calls part: the call's name as NCCL's ("AllReduce"), the comm's count of
// such calls (opCount), the arguments and the stream. A Send or Recv shows its buffer as recvbuff,
// as NCCL's do.
ncclResult_t passed(const CollCheck& c, ncclResult_t r) {
  r = refuse(c.comm, r);
  if (r != ncclSuccess) return r;
  const std::uint64_t count = c.comm->calls.fetch_add(1, std::memory_order_relaxed);
  if (!log::enabled(log::Level::info, log::kColl)) return r;
  std::string_view name = c.fn;
  if (name == "ncclBcast") name = "ncclBroadcast";
  if (name.starts_with("nccl")) name.remove_prefix(4);
  const void* send = c.p2p ? nullptr : c.send;
  const void* recv = c.p2p ? (c.send ? c.send : c.recv) : c.recv;
  log::info(log::kColl, "{}: opCount {:x} sendbuff {} recvbuff {} count {} datatype {} op {} root {} comm {} [nranks={}] stream {}",
            name, count, pointer_text(send), pointer_text(recv), c.count, static_cast<int>(c.type),
            static_cast<int>(c.op), c.root, pointer_text(c.comm), c.comm->nranks, pointer_text(c.stream));
  return r;
}

}  // namespace

ncclResult_t check_pointer(ncclComm* comm, const char* fn, const char* what, const void* ptr, int as_device) {
  if (comm->check_mode == CheckMode::off || comm->device < 0) return ncclSuccess;
  const PointerFacts f = cuda_pointer_facts(ptr, as_device);
  if (!f.valid) return fail(comm, ncclInvalidArgument, fmt::format("{}: {} {} is not a valid pointer", fn, what, ptr));
  if (f.device >= 0 && f.device != comm->device)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: {} {} is memory of device {}, the communicator's is device {}",
                                                       fn, what, ptr, f.device, comm->device));
  return ncclSuccess;
}

ncclResult_t check_coll(const CollCheck& c, DataType* type, ReduceOp* op) {
  if (ncclResult_t r = check_caller(c); r != ncclSuccess) return group_failed(r);
  return passed(c, coll_args(c, type, op));
}

ncclResult_t check_all_gather_v(const CollCheck& c, const size_t* recvcounts, const size_t* displs, DataType* type) {
  if (ncclResult_t r = check_caller(c); r != ncclSuccess) return group_failed(r);
  return passed(c, all_gather_v_args(c, recvcounts, displs, type));
}

ncclResult_t check_reduce_scatter_v(const CollCheck& c, const size_t* recvcounts, const size_t* senddispls,
                                    DataType* type, ReduceOp* op) {
  if (ncclResult_t r = check_caller(c); r != ncclSuccess) return group_failed(r);
  return passed(c, reduce_scatter_v_args(c, recvcounts, senddispls, type, op));
}

ncclResult_t check_all_to_all_v(const CollCheck& c, const size_t* sendcounts, const size_t* sdispls,
                                const size_t* recvcounts, const size_t* rdispls, DataType* type) {
  if (ncclResult_t r = check_caller(c); r != ncclSuccess) return group_failed(r);
  return passed(c, all_to_all_v_args(c, sendcounts, sdispls, recvcounts, rdispls, type));
}

}  // namespace purlin::shim
