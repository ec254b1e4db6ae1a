// The collective and point-to-point entry points: check, describe the call as partitions of the
// user's buffers under the collective's declaration, hand it to the group.
#include <cstring>

#include <fmt/format.h>

#include "nccl_shim/argcheck.h"
#include "nccl_shim/group.h"
#include "nccl_shim/nccl_next.h"
#include "nccl_shim/shim.h"

namespace purlin::shim {
namespace {

using snac::CollKind;
using snac::Op;
using snac::Part;

char* at(const void* base, std::uint64_t elems, std::size_t es) {
  return const_cast<char*>(static_cast<const char*>(base)) + elems * es;
}

// n parts of `count` elements each, back to back.
void even_parts(const void* base, std::size_t count, int n, std::size_t es, std::vector<Part>* parts) {
  parts->resize(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) (*parts)[k] = Part{at(base, static_cast<std::uint64_t>(k) * count, es), count * es};
}

// A whole buffer of `count` elements: how AllReduce, Broadcast and Reduce are handed over (SNAC's
// plan picks their form and cuts the shards, snac/runtime/plan.h).
void whole(const void* base, std::size_t count, std::size_t es, std::vector<Part>* parts) {
  parts->assign(1, Part{at(base, 0, es), count * es});
}

// The calling thread's call, refilled by every entry point: its parts' storage is kept, so a call
// allocates nothing once the thread has made one as large (enqueue copies it into a group).
Op& make_op(CollKind kind, DataType type, const ReduceOp& rop, int root) {
  thread_local Op op;
  op.kind = kind;
  op.type = type;
  op.op = rop;
  op.root = root;
  op.mid_bytes = 0;
  op.copy_input = false;
  op.input_bytes = 0;
  op.ragged = false;
  return op;
}

}  // namespace
}  // namespace purlin::shim

using namespace purlin;
using namespace purlin::shim;

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclAllReduce", comm, sendbuff, recvbuff, count, datatype, stream};
  c.reduces = true;
  c.op = op;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::all_reduce, t, r, -1);
  whole(sendbuff, count, es, &o.in);
  whole(recvbuff, count, es, &o.out);
  return enqueue(comm, o, stream);
}

namespace {
// ncclBroadcast and ncclBcast: the errors name the function called.
ncclResult_t broadcast(const char* fn, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                       int root, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{fn, comm, sendbuff, recvbuff, count, datatype, stream};
  c.rooted = true;
  c.root = root;
  c.send_needed = comm && is_live(comm) && comm->rank == root;
  c.probe_send = c.send_needed;  // NCCL asks about a Broadcast's send buffer on the root only
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::broadcast, t, r, root);
  // Away from the root the input gives nothing.
  if (comm->rank == root) whole(sendbuff, count, es, &o.in);
  else o.in.assign(1, Part{nullptr, 0});
  whole(recvbuff, count, es, &o.out);
  return enqueue(comm, o, stream);
}
}  // namespace

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return broadcast("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  return broadcast("ncclBcast", buff, buff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclReduce", comm, sendbuff, recvbuff, count, datatype, stream};
  c.reduces = true;
  c.op = op;
  c.rooted = true;
  c.root = root;
  c.recv_needed = comm && is_live(comm) && comm->rank == root;
  c.probe_recv = c.recv_needed;  // NCCL asks about a Reduce's receive buffer on the root only
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::reduce, t, r, root);
  whole(sendbuff, count, es, &o.in);
  // Only the root keeps the result; elsewhere the output names its size only.
  whole(comm->rank == root ? recvbuff : nullptr, count, es, &o.out);
  return enqueue(comm, o, stream);
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclAllGather", comm, sendbuff, recvbuff, sendcount, datatype, stream};
  c.recv_factor = comm && is_live(comm) ? comm->nranks : 1;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (sendcount == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::all_gather, t, r, -1);
  whole(sendbuff, sendcount, es, &o.in);
  even_parts(recvbuff, sendcount, comm->nranks, es, &o.out);
  return enqueue(comm, o, stream);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclReduceScatter", comm, sendbuff, recvbuff, recvcount, datatype, stream};
  c.reduces = true;
  c.op = op;
  c.send_factor = comm && is_live(comm) ? comm->nranks : 1;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (recvcount == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::reduce_scatter, t, r, -1);
  even_parts(sendbuff, recvcount, comm->nranks, es, &o.in);
  whole(recvbuff, recvcount, es, &o.out);
  return enqueue(comm, o, stream);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclAlltoAll", comm, sendbuff, recvbuff, count, datatype, stream};
  c.send_factor = c.recv_factor = comm && is_live(comm) ? comm->nranks : 1;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::all_to_all, t, r, -1);
  const std::size_t bytes = count * es * comm->nranks;
  const char* s = static_cast<const char*>(sendbuff);
  const char* d = static_cast<const char*>(recvbuff);
  o.copy_input = s < d + bytes && d < s + bytes;
  o.input_bytes = bytes;
  even_parts(sendbuff, count, comm->nranks, es, &o.in);
  even_parts(recvbuff, count, comm->nranks, es, &o.out);
  return enqueue(comm, o, stream);
}

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclGather", comm, sendbuff, recvbuff, count, datatype, stream};
  c.rooted = true;
  c.root = root;
  c.recv_needed = comm && is_live(comm) && comm->rank == root;
  c.recv_factor = comm && is_live(comm) ? comm->nranks : 1;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::gather, t, r, root);
  whole(sendbuff, count, es, &o.in);
  even_parts(comm->rank == root ? recvbuff : nullptr, count, comm->nranks, es, &o.out);
  return enqueue(comm, o, stream);
}

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclScatter", comm, sendbuff, recvbuff, count, datatype, stream};
  c.rooted = true;
  c.root = root;
  c.send_needed = comm && is_live(comm) && comm->rank == root;
  c.send_factor = comm && is_live(comm) ? comm->nranks : 1;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  const std::size_t es = size_of(t);
  Op& o = make_op(snac::CollKind::scatter, t, r, root);
  if (comm->rank == root) even_parts(sendbuff, count, comm->nranks, es, &o.in);
  else o.in.assign(static_cast<std::size_t>(comm->nranks), Part{nullptr, 0});
  whole(recvbuff, count, es, &o.out);
  return enqueue(comm, o, stream);
}

NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclSend", comm, sendbuff, nullptr, count, datatype, stream};
  c.rooted = c.p2p = true;
  c.root = peer;
  c.recv_needed = false;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  return enqueue_p2p(comm, snac::PeerOp{true, peer, at(sendbuff, 0, 1), count * size_of(t)}, stream);
}

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclRecv", comm, nullptr, recvbuff, count, datatype, stream};
  c.rooted = c.p2p = true;
  c.root = peer;
  c.send_needed = false;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (count == 0) return ncclSuccess;
  return enqueue_p2p(comm, snac::PeerOp{false, peer, static_cast<char*>(recvbuff), count * size_of(t)}, stream);
}

// ---- One-sided operations (NCCL 2.29, nccl_shim/nccl_next.h) -----------------------------------------
// Not offered: the arguments are checked as NCCL checks them, then the call is refused with the code
// NCCL gives on a communicator without host RMA.

namespace {

ncclResult_t no_rma(ncclComm_t comm, const char* fn) {
  return fail(comm, ncclInvalidArgument,
              fmt::format("{}: one-sided RMA (ncclPutSignal, ncclSignal, ncclWaitSignal) is not supported by this "
                          "library",
                          fn));
}

ncclResult_t check_peer(ncclComm_t comm, const char* fn, int peer) {
  if (peer < 0 || peer >= comm->nranks)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: invalid peer {} (nranks {})", fn, peer, comm->nranks));
  return ncclSuccess;
}

}  // namespace

NCCL_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  const char* fn = "ncclPutSignal";
  (void)localbuff, (void)count, (void)peerWin, (void)peerWinOffset, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (ncclResult_t r = check_peer(comm, fn, peer); r != ncclSuccess) return r;
  if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= ncclNumTypes)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: invalid type {}", fn, static_cast<int>(datatype)));
  return no_rma(comm, fn);
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  const char* fn = "ncclSignal";
  (void)sigIdx, (void)ctx, (void)flags, (void)stream;
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (ncclResult_t r = check_peer(comm, fn, peer); r != ncclSuccess) return r;
  return no_rma(comm, fn);
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
         cudaStream_t stream) {
  const char* fn = "ncclWaitSignal";
  (void)nDesc, (void)signalDescs, (void)stream;
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  return no_rma(comm, fn);
}
