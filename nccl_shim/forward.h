// A collective or a group's sends and receives, as SNAC describes them, run by the real NCCL on one
// of its communicators: the partitions of the description give back the buffers and counts of
// nccl.h's calls. Operations that nccl.h lacks become groups of its calls: AllGatherV a Broadcast
// from every rank, ReduceScatterV a Reduce to every rank, AlltoAllV (and AlltoAll, Gather and
// Scatter in NCCL before 2.28) Sends and Recvs.
#pragma once

#include <nccl.h>

#include <vector>

#include "core/status.h"
#include "nccl_shim/real_nccl.h"
#include "snac/runtime/communicator.h"
#include "snac/op.h"

namespace purlin::shim {

// Enqueues `op` of rank `rank` among `nranks` (the ranks of `comm`, roots included) on `stream`.
// `device` is the communicator's CUDA device (-1: host buffers), where an in-place AlltoAll's input
// is copied first (NCCL does not promise in-place AlltoAll).
Status forward_op(const RealNccl& lib, RealComm* comm, int rank, int nranks, int device, const snac::Op& op,
                  cudaStream_t stream);

// Enqueues the sends and receives of a group, peers in `comm`'s ranks, as one NCCL group.
Status forward_p2p(const RealNccl& lib, RealComm* comm, const std::vector<snac::PeerOp>& p2p, cudaStream_t stream);

}  // namespace purlin::shim
