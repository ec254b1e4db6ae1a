// What keeps a peer's buffer mapped in this process while the GPU may still use it (zero-staging's
// PeerBuffers and PairBoard): an event after the last call outside graphs that used the mapping, and
// a hold of each graph that captured a call using it, handed back when the graph is destroyed.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cuda_memory.h"
#include "core/status.h"

namespace purlin::snac {

// While the calling thread captures a graph, the driver calls of mapping and the fences' queries are
// not stream work: relaxed capture mode lets them run.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// An event recorded on a stream after the calls that used some mappings.
struct MappingFence {
  cudaEvent_t event = nullptr;
  MappingFence() = default;
  MappingFence(const MappingFence&) = delete;
  MappingFence& operator=(const MappingFence&) = delete;
  ~MappingFence() {
    if (event) cudaEventDestroy(event);
  }
  // A failed query (a sticky error of the context) counts as done: nothing runs any more.
  bool done() const { return cudaEventQuery(event) != cudaErrorNotReady; }

  static Status after(cudaStream_t stream, std::shared_ptr<MappingFence>* out) {
    auto fence = std::make_shared<MappingFence>();
    PURLIN_TRY(cuda::check(cudaEventCreateWithFlags(&fence->event, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    PURLIN_TRY(cuda::check(cudaEventRecord(fence->event, stream), "cudaEventRecord"));
    *out = std::move(fence);
    return Status::ok;
  }
};

// The mappings in `maps` that `used` names (those of calls just launched outside graphs on `stream`)
// are kept until an event after those calls completes; `used` is emptied.
template <class Map, class Key>
Status fence_used(cudaStream_t stream, std::vector<Key>* used, Map* maps) {
  if (used->empty()) return Status::ok;
  std::shared_ptr<MappingFence> fence;
  PURLIN_TRY(MappingFence::after(stream, &fence));
  for (const Key& k : *used)
    if (auto it = maps->find(k); it != maps->end()) it->second.fence = fence;
  used->clear();
  return Status::ok;
}

// The keys of mappings that destroyed graphs gave back (filled from a CUDA thread).
template <class Key>
struct MappingReturns {
  std::mutex mu;
  std::vector<Key> keys;

  std::vector<Key> take() {
    std::vector<Key> out;
    std::lock_guard<std::mutex> lock(mu);
    out.swap(keys);
    return out;
  }
};

// Makes `graph` hold `keys` until it is destroyed, when they go to `returns` (at once where the graph
// cannot hold them, with the failure).
template <class Key>
Status hold_in_graph(cudaGraph_t graph, const std::shared_ptr<MappingReturns<Key>>& returns, std::vector<Key> keys) {
  struct Hold {
    std::shared_ptr<MappingReturns<Key>> returns;
    std::vector<Key> keys;
  };
  auto* hold = new Hold{returns, std::move(keys)};
  cudaUserObject_t obj = nullptr;
  const Status s = cuda::check(cudaUserObjectCreate(
                                   &obj, hold,
                                   [](void* p) {
                                     auto* h = static_cast<Hold*>(p);
                                     {
                                       std::lock_guard<std::mutex> lock(h->returns->mu);
                                       h->returns->keys.insert(h->returns->keys.end(), h->keys.begin(), h->keys.end());
                                     }
                                     delete h;
                                   },
                                   1, cudaUserObjectNoDestructorSync),
                               "cudaUserObjectCreate");
  if (s != Status::ok) {
    // Not held: the keys go back at once, as a destroyed graph's would.
    {
      std::lock_guard<std::mutex> lock(returns->mu);
      returns->keys.insert(returns->keys.end(), hold->keys.begin(), hold->keys.end());
    }
    delete hold;
    return s;
  }
  const Status r = cuda::check(cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove), "cudaGraphRetainUserObject");
  // Not held by the graph: the reference is still ours, and releasing it gives the keys back now.
  if (r != Status::ok) cudaUserObjectRelease(obj, 1);
  return r;
}

}  // namespace purlin::snac
