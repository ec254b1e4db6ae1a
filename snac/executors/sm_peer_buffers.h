// The peers' user buffers as mapped in this process, for zero-staging (snac/protocol/zero_staging.h).
//
// When a call is captured into a CUDA graph, every rank describes its input and output (the
// allocation each lies in, cudaMalloc or cuMem, and the offset there) over the bootstrap; if every
// rank's can be shared and the calls agree, each rank maps the peers' allocations it has not mapped
// yet (legacy CUDA IPC, or cuMem descriptors passed between the processes) and the call runs in
// place from then on, at every replay. A mapping is kept while some graph that uses it lives (a
// CUDA user object of the graph gives it back) and at most until the communicator goes; allocations
// are told apart by their driver buffer ids, which are never reused, so memory freed and allocated
// again at the same address is mapped afresh. cuMem memory stays valid for its importers after the
// owner frees it, so a replay after the owner freed its buffer writes into memory no one else
// holds rather than into another allocation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/bootstrap.h"
#include "core/cuda_memory.h"
#include "core/fd_passing.h"
#include "core/status.h"
#include "snac/window.h"

namespace purlin::snac {

class PeerBuffers {
 public:
  PeerBuffers(Bootstrap* boot, int device, double timeout_s) : boot_(boot), device_(device), timeout_s_(timeout_s) {}
  ~PeerBuffers();
  PeerBuffers(const PeerBuffers&) = delete;
  PeerBuffers& operator=(const PeerBuffers&) = delete;

  // This rank's side of one call: what every rank must agree on, and its buffers.
  struct Mine {
    std::uint64_t key = 0;       // the call (collective, size, type, operator)
    const char* in = nullptr;
    std::uint64_t in_bytes = 0;  // the input's extent from `in`
    char* out = nullptr;
    std::uint64_t out_bytes = 0;
    bool overlap_ok = true;      // whether input and output may overlap (AllToAll: not at all)
  };

  // Collective over the communicator, for a call captured into `graph`: true in *go when every
  // rank's buffers are mapped here (into in[] and out[], by rank), false when some rank's cannot
  // be shared or the calls differ (every rank then comes to the same answer and stages the call).
  Status share(const Mine& mine, cudaGraph_t graph, bool* go, const char** in, char** out);

 private:
  struct Mapping {
    char* base = nullptr;
    cuda::VmmMapping vmm;
    void* ipc = nullptr;
    int graphs = 0;  // graphs still holding it
  };
  using Key = std::pair<int, std::uint64_t>;  // (rank, buffer id)
  // Graphs that were destroyed give back their mappings here (from a CUDA thread).
  struct Returns {
    std::mutex mu;
    std::vector<Key> keys;
  };

  void take_returns();
  void unmap(Mapping& m);

  Bootstrap* boot_;
  int device_;
  double timeout_s_;
  std::unique_ptr<FdMailbox> mailbox_;
  std::map<Key, Mapping> mapped_;
  std::shared_ptr<Returns> returns_ = std::make_shared<Returns>();
};

}  // namespace purlin::snac
