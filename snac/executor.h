// What a datapath offers SNAC's callers: run one collective of this rank, stop everything on abort.
// Each datapath binds the protocol templates to its Atom in one executor file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/bootstrap.h"
#include "core/status.h"
#include "snac/op.h"
#include "snac/runtime/policy.h"

namespace purlin::snac {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `op` for this rank; returns when it is complete (host) or enqueued on the stream (GPU).
  virtual Status execute(const Op& op, void* stream) = 0;
  // A communicator of one rank: `bytes` from `src` to `dst` in the order of `stream` (the call's whole
  // work, which needs no coordination); nothing to move when they are the same buffer.
  virtual Status copy_local(char* dst, const char* src, std::uint64_t bytes, void* stream) = 0;
  // Any thread: makes every wait of this executor end with an error.
  virtual void abort() = 0;
  virtual const char* datapath() const = 0;
  // The plan name of the last op executed, e.g. "AllReduce_RSxPull_AGxPull" (logs, benchmarks).
  virtual std::string last_plan() const = 0;
  // The device memory this datapath allocated for the communicator and holds now, in bytes (the
  // peers' memory it maps is theirs, not counted). ncclCommMemStats reports it.
  virtual std::uint64_t device_bytes() const { return 0; }
  // Of device_bytes(), what suspend_memory() gives back (ncclCommSuspend with NCCL_SUSPEND_MEM).
  virtual std::uint64_t suspendable_bytes() const { return 0; }
  // Collective, once every rank's work is complete: gives back the suspendable memory (the peers'
  // mappings of it too) and keeps what it held, so that resume_memory() brings back the state the
  // datapath had at the same addresses (captured graphs replay unchanged). No call may run in
  // between. A datapath with nothing suspendable only waits for the peers.
  virtual Status suspend_memory(Bootstrap& boot) { return boot.barrier(); }
  // Collective: undoes suspend_memory(); every peer's mapping is back when it returns.
  virtual Status resume_memory(Bootstrap& boot) { return boot.barrier(); }
  // An error a datapath found after the call returned (a kernel that timed out or was aborted).
  virtual Status async_status() const { return Status::ok; }
  // The mismatch a peer reported to this rank (invalid_usage), where this datapath can tell: from its
  // fault word (host), or from a kernel that met it (async_status, GPU). Read after a peer's
  // departure, to tell a peer that left because it found the calls different from one that died.
  virtual Status raised_fault() const {
    return async_status() == Status::invalid_usage ? Status::invalid_usage : Status::ok;
  }
  // Whether this datapath serves `op`; if not, *why says so (logged at INFO as the operation is
  // handed to the real NCCL instead). The answer may depend only on values every rank shares.
  virtual bool supports(const Op& op, std::string* why) const {
    (void)op;
    (void)why;
    return true;
  }
};

struct ExecutorArgs {
  Bootstrap* bootstrap = nullptr;  // for exchanging memory handles at creation
  Policy policy;
  int device = -1;
  double timeout_s = 300.0;
  bool one_gpu = false;            // every rank of the communicator runs on this rank's GPU
};

}  // namespace purlin::snac
