// Purlin's own entry points (include/purlin/purlin.h): the V collectives and the reduction mode.
#include <purlin/purlin.h>

#include <fmt/format.h>

#include "nccl_shim/argcheck.h"
#include "nccl_shim/group.h"
#include "nccl_shim/shim.h"

using namespace purlin;
using namespace purlin::shim;

namespace {

using snac::Part;

ncclResult_t check_counts(ncclComm* comm, const char* fn, const char* what, const size_t* counts, const size_t* displs) {
  if (counts == nullptr || displs == nullptr)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: {} counts or displacements are NULL", fn, what));
  return ncclSuccess;
}

std::vector<Part> parts(const void* base, const size_t* counts, const size_t* displs, int n, std::size_t es) {
  std::vector<Part> out(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k)
    out[k] = Part{base ? const_cast<char*>(static_cast<const char*>(base)) + displs[k] * es : nullptr, counts[k] * es};
  return out;
}

bool any(const size_t* counts, int n) {
  for (int k = 0; k < n; ++k)
    if (counts[k]) return true;
  return false;
}

}  // namespace

NCCL_API(ncclResult_t, ncclPurlinAllGatherV, const void* sendbuff, size_t sendcount, void* recvbuff,
         const size_t* recvcounts, const size_t* displs, ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream) {
  const char* fn = "ncclPurlinAllGatherV";
  DataType t;
  ReduceOp r;
  CollCheck c{fn, comm, sendbuff, recvbuff, sendcount, datatype};
  c.recv_needed = false;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (ncclResult_t e = check_counts(comm, fn, "receive", recvcounts, displs); e != ncclSuccess) return e;
  const int n = comm->nranks;
  if (recvcounts[comm->rank] != sendcount)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: recvcounts[{}] = {} differs from sendcount {}", fn,
                                                       comm->rank, recvcounts[comm->rank], sendcount));
  if (any(recvcounts, n) && recvbuff == nullptr) return fail(comm, ncclInvalidArgument, fmt::format("{}: recvbuff is NULL", fn));
  const std::size_t es = size_of(t);
  snac::Op o;
  o.kind = snac::CollKind::all_gather_v;
  o.type = t;
  o.in = {Part{const_cast<char*>(static_cast<const char*>(sendbuff)), sendcount * es}};
  o.out = parts(recvbuff, recvcounts, displs, n, es);
  return enqueue(comm, std::move(o), stream);
}

NCCL_API(ncclResult_t, ncclPurlinReduceScatterV, const void* sendbuff, const size_t* recvcounts,
         const size_t* senddispls, void* recvbuff, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
         cudaStream_t stream) {
  const char* fn = "ncclPurlinReduceScatterV";
  DataType t;
  ReduceOp r;
  CollCheck c{fn, comm, sendbuff, recvbuff, 0, datatype};
  c.reduces = true;
  c.op = op;
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (ncclResult_t e = check_counts(comm, fn, "partition", recvcounts, senddispls); e != ncclSuccess) return e;
  const int n = comm->nranks;
  if (any(recvcounts, n) && sendbuff == nullptr) return fail(comm, ncclInvalidArgument, fmt::format("{}: sendbuff is NULL", fn));
  if (recvcounts[comm->rank] && recvbuff == nullptr)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: recvbuff is NULL", fn));
  const std::size_t es = size_of(t);
  snac::Op o;
  o.kind = snac::CollKind::reduce_scatter_v;
  o.type = t;
  o.op = r;
  o.in = parts(sendbuff, recvcounts, senddispls, n, es);
  o.out = {Part{static_cast<char*>(recvbuff), recvcounts[comm->rank] * es}};
  return enqueue(comm, std::move(o), stream);
}

NCCL_API(ncclResult_t, ncclPurlinAlltoAllV, const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
         void* recvbuff, const size_t* recvcounts, const size_t* rdispls, ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream) {
  const char* fn = "ncclPurlinAlltoAllV";
  DataType t;
  ReduceOp r;
  CollCheck c{fn, comm, sendbuff, recvbuff, 0, datatype};
  if (ncclResult_t e = check_coll(c, &t, &r); e != ncclSuccess) return e;
  if (ncclResult_t e = check_counts(comm, fn, "send", sendcounts, sdispls); e != ncclSuccess) return e;
  if (ncclResult_t e = check_counts(comm, fn, "receive", recvcounts, rdispls); e != ncclSuccess) return e;
  const int n = comm->nranks;
  if (any(sendcounts, n) && sendbuff == nullptr) return fail(comm, ncclInvalidArgument, fmt::format("{}: sendbuff is NULL", fn));
  if (any(recvcounts, n) && recvbuff == nullptr) return fail(comm, ncclInvalidArgument, fmt::format("{}: recvbuff is NULL", fn));
  const std::size_t es = size_of(t);
  snac::Op o;
  o.kind = snac::CollKind::all_to_all_v;
  o.type = t;
  o.in = parts(sendbuff, sendcounts, sdispls, n, es);
  o.out = parts(recvbuff, recvcounts, rdispls, n, es);
  return enqueue(comm, std::move(o), stream);
}

NCCL_API(ncclResult_t, ncclPurlinReductionMode, ncclComm_t comm, int* mode) {
  if (ncclResult_t e = check_comm("ncclPurlinReductionMode", comm); e != ncclSuccess) return e;
  if (mode == nullptr) return fail(comm, ncclInvalidArgument, "ncclPurlinReductionMode: mode is NULL");
  *mode = 1;
  return ncclSuccess;
}
