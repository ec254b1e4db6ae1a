// Zero-staged Send/Recv on the SM datapath: the two ends of each message agree on the board
// (pair_slots.h) without waiting for each other, and the end that comes second maps the first one's
// buffer here and moves the message in place (snac/protocol/zero_staging.h, legs).
//
// The end that comes first decides alone: it waits in place where the other end can reach its
// buffer (a rank of this process, or cuMem memory that exports a descriptor, which it posts to the
// other end's mailbox before it offers the buffer unless that end still holds the allocation, as
// PairHeld tells), and stages the message otherwise; the other end follows. Both ends stage alike,
// so the staged path's own pairing of messages is unchanged. Legacy CUDA IPC buffers (cudaMalloc)
// of another process are staged: mapping them needs the owner's word that the allocation is still
// the one the handle names, which a first end that does not wait cannot give.
//
// Mappings are kept while PairHeld keeps them, while a graph that captured a call using them lives,
// and until the last call outside graphs that used them has completed on the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/bootstrap.h"
#include "core/cuda_memory.h"
#include "core/fd_passing.h"
#include "core/shm.h"
#include "core/status.h"
#include "snac/executors/mapping_holds.h"
#include "snac/executors/pair_slots.h"

namespace purlin::snac {

class PairBoard {
 public:
  // Collective over `boot` (every rank of the communicator, all on one host).
  static Status create(Bootstrap& boot, int device, double timeout_s, std::unique_ptr<PairBoard>* out);
  ~PairBoard();
  PairBoard(const PairBoard&) = delete;
  PairBoard& operator=(const PairBoard&) = delete;

  enum class Role { staged, wait, move };
  // This rank's message with `peer` on `side` (0: sends `buf`, 1: receives into it), `bytes` long,
  // captured into `graph` or not (null). *role: staged, wait (the peer moves it), or move, with the
  // peer's buffer as mapped here in *peer_buf and the size the peer gave in *peer_bytes (ends that
  // disagree stop on the GPU, where the legs' tags differ: no byte may move then).
  Status meet(int peer, int side, char* buf, std::uint64_t bytes, cudaGraph_t graph, Role* role, char** peer_buf,
              std::uint64_t* peer_bytes);
  // The calls that meet() let move outside graphs were launched on `stream`: their mappings are kept
  // until they complete.
  Status launched(cudaStream_t stream);
  // Peer allocations mapped here (for tests and logs).
  std::size_t held() const { return maps_.size(); }
  // Suspending memory, as PeerBuffers::suspend and resume do for the collectives' buffers: every
  // call is complete; the mappings of the peers' Send/Recv buffers are given back with their
  // addresses kept, and resume() (collective) maps each owner's allocation there again.
  void suspend();
  Status resume();

 private:
  PairBoard() = default;
  struct Mapping {
    cuda::VmmMapping vmm;
    std::uint64_t owner_base = 0;  // the allocation as its owner sees it
    bool listed = false;  // in PairHeld's list of its owner and side
    int graphs = 0;
    std::shared_ptr<MappingFence> fence;
  };
  using Key = std::tuple<int, int, std::uint64_t>;  // (owner, owner's side, buffer id)

  Status take_fd(int from, std::uint64_t tag, int* fd);
  Status map_peer(int owner, int owner_side, std::uint64_t q, const PairOffer& o, cudaGraph_t graph, char** at);
  void release_if_unused(const Key& key);
  void take_returns();
  void reap();

  Bootstrap* boot_ = nullptr;
  int device_ = 0, rank_ = 0, nranks_ = 1;
  std::int32_t pid_ = 0;
  double timeout_s_ = 0;
  ShmSegment segment_;
  std::unique_ptr<PairSlots> slots_;
  std::unique_ptr<FdMailbox> mailbox_;
  std::vector<FdAddress> boxes_;
  std::vector<std::int32_t> pids_;
  std::vector<PairHeld> sent_;  // [side][peer]: this rank's allocations that peer holds (owner's view)
  std::vector<PairHeld> held_;  // [owner side][owner]: what this rank holds of the owner's
  std::map<Key, Mapping> maps_;
  std::map<std::pair<int, std::uint64_t>, int> fds_;  // descriptors received, by (sender, tag)
  std::shared_ptr<MappingReturns<Key>> returns_ = std::make_shared<MappingReturns<Key>>();  // from destroyed graphs
  std::vector<Key> last_used_;
  std::vector<std::pair<cuda::VmmMapping, std::shared_ptr<MappingFence>>> retiring_;
};

}  // namespace purlin::snac
