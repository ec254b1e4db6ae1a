// The work of calls on a communicator: counting the calls that use it (so that destroy and abort
// wait for them instead of freeing what they use), the background thread of a non-blocking
// communicator, and the state ncclCommGetAsyncError reports.
//
// A non-blocking communicator (config.blocking = 0) runs the work of init, collectives and groups,
// split, shrink, finalize and revoke on its background thread: the call returns ncclInProgress and
// the caller polls ncclCommGetAsyncError, which reads atomics only, until it stops answering
// ncclInProgress. One piece of work runs at a time, as NCCL requires of its callers.
#pragma once

#include <nccl.h>

#include <functional>
#include <string>

#include "nccl_shim/shim.h"

namespace purlin::shim {

// Counts one call using comm->impl for its lifetime.
class InUse {
 public:
  explicit InUse(ncclComm* comm) : comm_(comm) { comm_->users.fetch_add(1, std::memory_order_acq_rel); }
  ~InUse() { comm_->users.fetch_sub(1, std::memory_order_acq_rel); }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  ncclComm* comm_;
};

// How the result of background work becomes the communicator's state: `fatal_only` keeps errors
// that break the communicator (a failed call's invalid argument or usage leaves it usable);
// `every_error` keeps them all (an init that failed leaves nothing usable).
enum class Settle { fatal_only, every_error };

// Runs `work` for `comm`: now on a blocking communicator, returning its result; on the background
// thread of a non-blocking one, returning ncclInProgress (or ncclSystemError when no thread can be
// started). The comm must not have background work in flight (check_comm / ensure_ready refuse).
ncclResult_t run_work(ncclComm* comm, std::function<ncclResult_t()> work, Settle settle = Settle::fatal_only);

// Waits for the background work to end; raise the abort or revoke first to make it end soon.
void join_background(ncclComm* comm);

// Waits until no call uses the communicator.
void wait_idle(const ncclComm* comm);

// ncclCommGetAsyncError's answer, from plain loads: ncclInProgress, an init failure, or the
// failure the communicator found (a failed call, a dead peer, an error of the GPU datapath).
ncclResult_t comm_state(const ncclComm* comm);
// Why the communicator failed, for the messages of calls it refuses ("" when unknown).
std::string failure_reason(const ncclComm* comm);

}  // namespace purlin::shim
