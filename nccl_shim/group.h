// ncclGroupStart / ncclGroupEnd: calls between them are collected per thread and run, per
// communicator, as one fused execution when the outermost group ends. A call outside any group is a
// group of one.
#pragma once

#include <nccl.h>

#include "nccl_shim/shim.h"
#include "snac/communicator.h"
#include "snac/op.h"

namespace purlin::shim {

ncclResult_t group_start();
ncclResult_t group_end();
int group_depth();
// Closes the group like group_end but runs nothing: estimates the group's time in microseconds from
// the executors' cost model instead.
ncclResult_t group_simulate_end(float* us);

// Queue a collective or a Send/Recv on `comm` (runs now when no group is open).
ncclResult_t enqueue(ncclComm* comm, snac::Op op, cudaStream_t stream);
ncclResult_t enqueue_p2p(ncclComm* comm, const snac::PeerOp& p, cudaStream_t stream);

}  // namespace purlin::shim
