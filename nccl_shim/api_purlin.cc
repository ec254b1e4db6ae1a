// Purlin's own entry points (include/purlin/purlin.h): the V collectives and the reduction mode.
#include <purlin/purlin.h>

#include "nccl_shim/argcheck.h"
#include "nccl_shim/group.h"
#include "nccl_shim/shim.h"

using namespace purlin;
using namespace purlin::shim;

namespace {

using snac::Part;

std::vector<Part> parts(const void* base, const size_t* counts, const size_t* displs, int n, std::size_t es) {
  std::vector<Part> out(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k)
    out[k] = Part{base ? const_cast<char*>(static_cast<const char*>(base)) + displs[k] * es : nullptr, counts[k] * es};
  return out;
}

}  // namespace

NCCL_API(ncclResult_t, ncclPurlinAllGatherV, const void* sendbuff, size_t sendcount, void* recvbuff,
         const size_t* recvcounts, const size_t* displs, ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream) {
  DataType t;
  CollCheck c{"ncclPurlinAllGatherV", comm, sendbuff, recvbuff, sendcount, datatype, stream};
  c.recv_needed = false;
  if (ncclResult_t e = check_all_gather_v(c, recvcounts, displs, &t); e != ncclSuccess) return e;
  const std::size_t es = size_of(t);
  snac::Op o;
  o.kind = snac::CollKind::all_gather_v;
  o.type = t;
  o.in = {Part{const_cast<char*>(static_cast<const char*>(sendbuff)), sendcount * es}};
  o.out = parts(recvbuff, recvcounts, displs, comm->nranks, es);
  return enqueue(comm, std::move(o), stream);
}

NCCL_API(ncclResult_t, ncclPurlinReduceScatterV, const void* sendbuff, const size_t* recvcounts,
         const size_t* senddispls, void* recvbuff, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
         cudaStream_t stream) {
  DataType t;
  ReduceOp r;
  CollCheck c{"ncclPurlinReduceScatterV", comm, sendbuff, recvbuff, 0, datatype, stream};
  c.reduces = true;
  c.op = op;
  if (ncclResult_t e = check_reduce_scatter_v(c, recvcounts, senddispls, &t, &r); e != ncclSuccess) return e;
  const std::size_t es = size_of(t);
  snac::Op o;
  o.kind = snac::CollKind::reduce_scatter_v;
  o.type = t;
  o.op = r;
  o.in = parts(sendbuff, recvcounts, senddispls, comm->nranks, es);
  o.out = {Part{static_cast<char*>(recvbuff), recvcounts[comm->rank] * es}};
  return enqueue(comm, std::move(o), stream);
}

NCCL_API(ncclResult_t, ncclPurlinAlltoAllV, const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
         void* recvbuff, const size_t* recvcounts, const size_t* rdispls, ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream) {
  DataType t;
  CollCheck c{"ncclPurlinAlltoAllV", comm, sendbuff, recvbuff, 0, datatype, stream};
  if (ncclResult_t e = check_all_to_all_v(c, sendcounts, sdispls, recvcounts, rdispls, &t); e != ncclSuccess) return e;
  const std::size_t es = size_of(t);
  snac::Op o;
  o.kind = snac::CollKind::all_to_all_v;
  o.type = t;
  o.in = parts(sendbuff, sendcounts, sdispls, comm->nranks, es);
  o.out = parts(recvbuff, recvcounts, rdispls, comm->nranks, es);
  return enqueue(comm, std::move(o), stream);
}

NCCL_API(ncclResult_t, ncclPurlinReductionMode, ncclComm_t comm, int* mode) {
  if (ncclResult_t e = check_comm("ncclPurlinReductionMode", comm); e != ncclSuccess) return e;
  if (mode == nullptr) return fail(comm, ncclInvalidArgument, "ncclPurlinReductionMode: mode is NULL");
  *mode = 1;
  return ncclSuccess;
}
