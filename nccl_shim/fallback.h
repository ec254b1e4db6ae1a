// The hand-over to the real NCCL for one communicator: when its ranks span hosts, when Purlin's
// datapath declines them or one of their operations, and for the operations PURLIN_FALLBACK names.
// It keeps a real NCCL communicator of all ranks (its unique id travels over our bootstrap, so the
// caller still passes one ncclUniqueId) and, across hosts with the same number of ranks on each, one
// per rail for the hierarchical collectives (snac/runtime/hierarchy.h); the ranks of this rank's host keep
// a Purlin communicator of their own. A communicator that needs none of this has no Fallback, and
// nothing of the real NCCL is loaded for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "nccl_shim/real_nccl.h"
#include "nccl_shim/shim.h"
#include "snac/runtime/communicator.h"
#include "snac/runtime/hierarchy.h"

namespace purlin::shim {

class Fallback {
 public:
  // Collective over comm->impl's ranks, right after it was made: the ranks agree on
  // PURLIN_FALLBACK, and when the communicator needs the real NCCL, it is loaded and its
  // communicators made (every rank fails, naming PURLIN_NCCL_LIBRARY, when any rank finds none).
  // *out stays null when Purlin serves everything.
  static Status attach(ncclComm* comm, std::unique_ptr<Fallback>* out);
  ~Fallback();

  // Runs a group as snac::Communicator::execute does (collectives in order, then the sends and
  // receives), each operation on its route.
  Status execute(const std::vector<snac::Op>& ops, const std::vector<snac::PeerOp>& p2p, cudaStream_t stream);
  // Any thread: aborts the real communicators and this host's Purlin communicator.
  void abort();
  // An error the real NCCL or this host's communicator reported after a call returned.
  Status async_status() const;
  // Device memory held for this communicator beside the ncclComm's own datapath: this host's
  // communicator's, and the real NCCL's communicators' as the real NCCL reports it (where it can).
  std::uint64_t device_bytes() const;
  // Suspending memory (ncclCommSuspend with NCCL_SUSPEND_MEM), after the ncclComm's own
  // communicator: this host's Purlin communicator, then the real NCCL's communicators, each a
  // collective call in the same order on every rank; resume() brings them back. Where the real NCCL
  // has no suspend (before 2.29) can_suspend() says why, and nothing is suspended.
  bool can_suspend(std::string* why) const;
  Status suspend();
  Status resume();
  // Of device_bytes(), what suspend() gives back.
  std::uint64_t suspendable_bytes() const;

 private:
  Fallback() = default;
  Status make_real(const std::vector<int>& members, int my_index, RealComm** out);
  // Waits for a real NCCL call on `real` that answered ncclInProgress (a non-blocking real
  // communicator) and turns its result into a Status, naming `what`.
  Status settle_real(RealComm* real, ncclResult_t r, const char* what) const;
  // The sum of one ncclCommMemStats statistic over the real communicators (0 where the real NCCL
  // cannot tell, before 2.29).
  std::uint64_t real_stat(int stat) const;
  Status run(const snac::Op& op, cudaStream_t stream);
  Status run_p2p(const std::vector<snac::PeerOp>& p2p, cudaStream_t stream);
  snac::RouteChoice route(const snac::Op& op) const;
  void note(const snac::Op& op, const snac::RouteChoice& choice);

  int rank_ = 0;
  int nranks_ = 0;
  int device_ = -1;
  std::uint32_t forced_ = 0;
  const RealNccl* lib_ = nullptr;
  snac::Communicator* world_ = nullptr;         // the ncclComm's own (not owned)
  std::unique_ptr<snac::Communicator> host_;    // across hosts: the ranks of this host
  snac::Communicator* local_ = nullptr;         // serves Purlin's part: host_, else world_
  std::atomic<RealComm*> all_{nullptr};         // every rank
  std::atomic<RealComm*> rail_{nullptr};        // this rank's rail, for hierarchical collectives
  std::mutex noted_mutex_;
  std::vector<std::uint8_t> noted_;             // per CollKind: the routes already logged (bit per Route)
};

}  // namespace purlin::shim
