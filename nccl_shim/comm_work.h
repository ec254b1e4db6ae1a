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

#include <cstdint>
#include <functional>
#include <string>

#include "nccl_shim/shim.h"

namespace purlin::shim {

// One call's use of a communicator, counted for the call's lifetime. It is taken only while the
// communicator is registered (and, with a serial, still the same one): teardown unregisters first
// and then waits for the uses to end, so a call holding one never sees its comm freed. Test it:
// a use that was not taken means the communicator is gone.
class InUse {
 public:
  explicit InUse(ncclComm* comm, std::uint64_t serial = 0) : comm_(acquire_use(comm, serial) ? comm : nullptr) {}
  ~InUse() {
    if (comm_) comm_->users.fetch_sub(1, std::memory_order_acq_rel);
  }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;
  explicit operator bool() const { return comm_ != nullptr; }

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

// Waits until no call uses the communicator but the `own` uses of the caller.
void wait_idle(const ncclComm* comm, int own = 0);

// ncclCommGetAsyncError's answer, from plain loads: ncclInProgress, an init failure, or the
// failure the communicator found (a failed call, a dead peer, an error of the GPU datapath).
ncclResult_t comm_state(const ncclComm* comm);
// Why the communicator failed, for the messages of calls it refuses ("" when unknown).
std::string failure_reason(const ncclComm* comm);
// Puts a live communicator in the error state `code` (not ncclSuccess or ncclInProgress) for
// `why`, as NCCL's ncclCommSetAsyncError: later calls are refused, and ncclCommGetAsyncError
// and ncclCommDestroy report it.
void set_failed(ncclComm* comm, ncclResult_t code, const std::string& why);

// Whether `comm` may take a call of `fn`: not NULL, live, settled, not revoked, failed or finalized.
// Otherwise records why and returns NCCL's code for it.
ncclResult_t check_comm(const char* fn, ncclComm_t comm);

}  // namespace purlin::shim
