// Argument checks of every entry point, in one place, with NCCL's codes and messages that name the
// function and the offending value ("ncclAllReduce: invalid root 9 (nranks 8)").
#pragma once

#include <nccl.h>

#include <cstddef>

#include "core/types.h"
#include "nccl_shim/comm_work.h"  // check_comm
#include "nccl_shim/shim.h"

namespace purlin::shim {

struct CollCheck {
  const char* fn;
  ncclComm_t comm;
  const void* send;
  const void* recv;
  std::size_t count;
  ncclDataType_t type;
  cudaStream_t stream = nullptr;  // for the INFO (COLL) line
  bool reduces = false;        // takes an op
  ncclRedOp_t op = ncclSum;
  bool rooted = false;         // takes a root
  int root = 0;
  bool p2p = false;            // takes a peer (root holds it)
  bool send_needed = true;     // a null send buffer with count > 0 is an error (on this rank)
  bool recv_needed = true;
  std::size_t send_factor = 1; // elements in the send buffer = count * send_factor
  std::size_t recv_factor = 1;
  // Under NCCL_CHECK_MODE (or NCCL_CHECK_POINTERS=1), the buffers asked about as NCCL's ArgsCheck
  // asks: a collective's whatever its count (Broadcast's send buffer and Reduce's receive buffer on
  // the root only), a Send's or Recv's when it has elements.
  bool probe_send = true;
  bool probe_recv = true;
};

// On success fills the element type and the reduction the datapath will apply. A failure fails
// the group this thread has open (group_failed); a bad argument on a live non-blocking
// communicator also puts it in that error state, as NCCL does (abort it).
ncclResult_t check_coll(const CollCheck& c, DataType* type, ReduceOp* op);

// NCCL_CHECK_MODE's check of one buffer of `fn` (named `what`), as NCCL's CudaPtrCheck: memory
// `as_device` can address (-1: the calling thread's device), and the communicator's device's where
// it is device memory; ncclInvalidArgument otherwise. Nothing is asked with the mode off or on the
// host datapath.
ncclResult_t check_pointer(ncclComm* comm, const char* fn, const char* what, const void* ptr, int as_device);

// The V collectives of include/purlin/purlin.h: check_coll's checks (c.count is AllGatherV's
// sendcount, 0 for the others) and those of the per-rank counts and displacements, in elements,
// with the same effect on a failure.
ncclResult_t check_all_gather_v(const CollCheck& c, const size_t* recvcounts, const size_t* displs, DataType* type);
ncclResult_t check_reduce_scatter_v(const CollCheck& c, const size_t* recvcounts, const size_t* senddispls,
                                    DataType* type, ReduceOp* op);
ncclResult_t check_all_to_all_v(const CollCheck& c, const size_t* sendcounts, const size_t* sdispls,
                                const size_t* recvcounts, const size_t* rdispls, DataType* type);

}  // namespace purlin::shim
