// The peers' user buffers as mapped in this process, for zero-staging (snac/protocol/zero_staging.h).
//
// Every rank describes its input and output (the allocation each lies in, cudaMalloc or cuMem, and
// the offset there); if every rank's can be shared and the calls agree, each rank maps the peers'
// allocations it has not mapped yet (legacy CUDA IPC, or cuMem descriptors passed between the
// processes) and the call runs in place. Allocations are told apart by their driver buffer ids,
// which are never reused, so memory freed and allocated again at the same address is mapped afresh.
// cuMem memory stays valid for its importers after the owner frees it, so a call after the owner
// freed its buffer writes into memory no one else holds rather than into another allocation.
//
// A call captured into a CUDA graph agrees over the bootstrap, and its mappings are kept while some
// graph that uses them lives (a CUDA user object of the graph gives them back) and at most until the
// communicator goes.
//
// A call outside any graph agrees through shared memory (core/shm_gather.h): the ranks' host threads
// meet at every such call, and only the first call on an allocation goes over the bootstrap to map
// it. Which allocations the ranks hold for such calls is the same on every rank, derived from the
// calls alone: the kEagerPerOwner allocations of each rank used last. One that drops out is given
// back once the calls that used it have completed on the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "core/bootstrap.h"
#include "core/cuda_memory.h"
#include "core/fd_passing.h"
#include "core/shm_gather.h"
#include "core/status.h"
#include "snac/executors/mapping_holds.h"
#include "snac/window.h"

namespace purlin::snac {

class PeerBuffers {
 public:
  PeerBuffers(Bootstrap* boot, int device, double timeout_s) : boot_(boot), device_(device), timeout_s_(timeout_s) {}
  ~PeerBuffers();
  PeerBuffers(const PeerBuffers&) = delete;
  PeerBuffers& operator=(const PeerBuffers&) = delete;

  // This rank's side of one call: what every rank must agree on, and its buffers. A side the
  // collective does not use on this rank (a rooted collective's away from the root) is null: it is
  // not mapped, and the peers see it as null.
  struct Mine {
    std::uint64_t key = 0;       // the call (collective, size, type, operator)
    const char* in = nullptr;
    std::uint64_t in_bytes = 0;  // the input's extent from `in`
    char* out = nullptr;
    std::uint64_t out_bytes = 0;
    // Whether input and output may overlap anyhow, or (AlltoAll) only be one buffer exactly.
    bool overlap_ok = true;
  };

  // Collective over the communicator, for a call captured into `graph`: true in *go when every
  // rank's buffers are mapped here (into in[] and out[], by rank), false when some rank's cannot
  // be shared or the calls differ (every rank then comes to the same answer and stages the call).
  Status share(const Mine& mine, cudaGraph_t graph, bool* go, const char** in, char** out);
  // Collective over the communicator: sets up the agreement of calls outside graphs (share_eager).
  // Every rank then says which of its collectives met there and which did not (ran), so that a rank
  // at an agreement whose peer ran the same call another way fails at once (Status::invalid_usage).
  Status start_eager();
  // The same as share for a call outside any graph (collective over the communicator, every rank at
  // the same call), `call` the rank's count of its collectives (ShmGather's call numbers). After a
  // call it let run (*go), launched() must follow.
  Status share_eager(const Mine& mine, std::uint64_t call, bool* go, const char** in, char** out);
  // This rank's collective `call` ran: says so to the peers if it did not meet them at the agreement
  // (nothing for call 0, a Send/Recv round, or before start_eager).
  void ran(std::uint64_t call) {
    if (gather_ && call && call != eager_met_) gather_->pass(call);
  }
  // The call share_eager let run was launched on `stream`: its mappings are kept until it completes.
  Status launched(cudaStream_t stream);

  // Suspending memory, once every call is complete (SmExecutor::suspend_memory): gives back this
  // rank's mappings of the peers' cuMem allocations, keeping their addresses, so that an owner's
  // memory is freed when the owner gives it back. resume() (collective) maps each owner's
  // allocation at the same address again: the memory then at the owner's base, new memory where the
  // owner mapped new memory there (a cuMem allocator across a sleep), so graphs captured on the
  // buffers replay on the owner's memory of now. An owner whose allocation is not back by then is
  // left unmapped here, with a WARN line: graphs that use it must be captured again.
  void suspend();
  Status resume();

  // Allocations of each rank kept mapped for calls outside graphs.
  static constexpr std::size_t kEagerPerOwner = 8;
  // How many peer allocations this rank holds mapped, and how many of them for calls outside graphs
  // (for tests and logs).
  std::size_t held() const { return mapped_.size(); }
  std::size_t held_eager() const;

  struct Offer;  // one rank's description of its call (sm_peer_buffers.cc)

 private:
  struct Mapping {
    char* base = nullptr;
    cuda::VmmMapping vmm;
    std::uint64_t owner_base = 0;  // cuMem: the allocation as its owner sees it (its size: vmm.bytes)
    void* ipc = nullptr;
    int graphs = 0;       // graphs still holding it
    bool eager = false;   // held for calls outside graphs
    std::shared_ptr<MappingFence> fence;  // after the last such call that used it
  };
  using Key = std::pair<int, std::uint64_t>;  // (rank, buffer id)

  void take_returns();
  void unmap(Mapping& m);
  // Gives a mapping that nothing holds any more back: now, or once its last call completed.
  void release(std::map<Key, Mapping>::iterator it);
  // Ends calls outside graphs' hold on `key`'s mapping: given back once its last call completed,
  // or at once (after that call) with `now`.
  void drop_eager(const Key& key, bool now);
  // Allocations of calls outside graphs that a rank's buffers of `all` show were freed: those of
  // the same rank at overlapping addresses (a rank's live allocations never overlap). Dropped at
  // once, alike on every rank: CUDA IPC refuses to map a new allocation at the place of one whose
  // mapping is still open.
  void drop_stale(const std::vector<Offer>& all);
  void reap();
  Status describe_call(const Mine& mine, Offer* my);
  // The allocations of a call as every rank names them: each rank's input's, and its output's where
  // that is another one. With `mapped_only`, only those this rank maps (of ranks in other processes).
  std::vector<Key> call_keys(const std::vector<Offer>& all, const Offer& my, bool mapped_only) const;
  // Collective over the bootstrap: maps every peer allocation of `all` not mapped here yet; *ok
  // (alike on every rank) when every rank mapped all of them.
  Status map_peers(const std::vector<Offer>& all, const Offer& my, bool* ok);
  void point(const std::vector<Offer>& all, const Offer& my, const char** in, char** out) const;

  Bootstrap* boot_;
  int device_;
  double timeout_s_;
  std::unique_ptr<FdMailbox> mailbox_;
  std::map<Key, Mapping> mapped_;
  std::shared_ptr<MappingReturns<Key>> returns_ = std::make_shared<MappingReturns<Key>>();  // from destroyed graphs
  // Calls outside graphs. Alike on every rank: every rank's allocations that calls used, with the
  // number of the call that used each last and where it lies in its owner's address space, and
  // those that some rank could not map (staged).
  struct Agreed {
    std::uint64_t last = 0;
    std::uint64_t base = 0, bytes = 0;
  };
  std::unique_ptr<ShmGather> gather_;
  std::uint64_t eager_met_ = 0;  // the last collective that met at the agreement
  std::uint64_t eager_calls_ = 0;
  std::map<Key, Agreed> agreed_;
  std::set<Key> refused_;
  std::vector<Key> last_used_;  // this rank's mappings of the last call that ran
  std::vector<std::pair<Mapping, std::shared_ptr<MappingFence>>> retiring_;
};

}  // namespace purlin::snac
