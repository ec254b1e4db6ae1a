// ncclGroupStart / ncclGroupEnd: calls between them are collected per thread and run, per
// communicator, as one fused execution when the outermost group ends. A call outside any group is a
// group of one.
#pragma once

#include <nccl.h>

#include <functional>

#include "nccl_shim/shim.h"
#include "snac/runtime/communicator.h"
#include "snac/op.h"

namespace purlin::shim {

ncclResult_t group_start();
ncclResult_t group_end();
int group_depth();
// Closes the group like group_end but runs no call: estimates the group's time in microseconds from
// the executors' cost model instead. With `us` null (a simInfo not set up) the group's calls are
// dropped and the answer is ncclInvalidArgument.
ncclResult_t group_simulate_end(float* us);

// Work that waits for peers (a blocking init, split or shrink) called inside a group: it runs at
// the outermost ncclGroupEnd, all of the group's at once, each on a thread of its own, as in NCCL
// (one thread may create the communicators of several ranks in one group). The work settles the
// state of the communicator it creates. Work on one `parent` (its splits and shrinks) runs one
// after another in the order it was called: every rank pairs its n-th split of a parent with the
// n-th of the others, as outside a group.
void defer(std::function<ncclResult_t()> work, const ncclComm* creates, const ncclComm* parent = nullptr);
// Suspend and resume called inside a group (blocking communicators): they run at the outermost
// ncclGroupEnd after the group's calls, so that a call made before them in the group runs first
// and the state a call finds when it is made is the one it runs in; several communicators' at once
// (one thread may hold several ranks), one communicator's in call order. A group that fails its
// checks drops them with its calls.
void defer_after(std::function<ncclResult_t()> work, const ncclComm* comm);
// Whether `comm` is created by work deferred to the end of the group this thread has open: it can
// be neither destroyed nor aborted before that end (the work would wait for it forever).
bool created_at_group_end(const ncclComm* comm);
// A call made inside a group that failed its checks: the group ends with the first such error
// and runs none of its calls, as NCCL's does, and its non-blocking communicators take that error
// as their state. Returns `r`.
ncclResult_t group_failed(ncclResult_t r);

// Queue a collective or a Send/Recv on `comm` (runs now when no group is open: on a blocking
// communicator served by Purlin alone, straight to the datapath, with no copy of `op`).
ncclResult_t enqueue(ncclComm* comm, const snac::Op& op, cudaStream_t stream);
ncclResult_t enqueue_p2p(ncclComm* comm, const snac::PeerOp& p, cudaStream_t stream);

}  // namespace purlin::shim
