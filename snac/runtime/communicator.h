// A communicator as SNAC sees it: the bootstrap that joined the ranks, the executor of the datapath
// serving them, and the group semantics (one fused execution per group, Send/Recv matched in order).
//
// Faults: a watcher thread checks the peers' bootstrap connections every kWatchPeriodMs. A peer
// whose connection closes without a farewell (its process died, or it aborted) fails the
// communicator: every wait of the datapath ends, async_status() reports remote_error, and later
// collectives fail at once. Split and shrink go on working among the ranks still connected.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "core/status.h"
#include "snac/executor.h"
#include "snac/runtime/hosts.h"
#include "snac/op.h"

namespace purlin::snac {

// One Send or Recv of a group, before the group is fused into Send/Recv rounds.
struct PeerOp {
  bool send;
  int peer;
  char* buf;
  std::uint64_t bytes;
};

class Communicator {
 public:
  struct Options {
    int device = -1;  // CUDA device, or -1 on the host datapath
    // A child's (split's, shrink's or grow's): called with its rank, its size and the id its ranks
    // meet at, once they are known, before it joins its ranks. Unset: nothing is called.
    std::function<void(int rank, int nranks, const UniqueId& id)> placed;
  };
  const Policy& policy() const { return policy_; }

  // Joins the ranks of `id` and builds the datapath. Blocking. Where Purlin cannot serve the ranks
  // (they span hosts, or no datapath takes them) the communicator is made without a datapath and
  // native() says why; the caller hands its work to the real NCCL.
  static Status create(const UniqueId& id, int rank, int nranks, const Options& options,
                       const std::atomic<bool>* abort, std::unique_ptr<Communicator>* out);
  ~Communicator();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  const char* datapath() const { return executor_ ? executor_->datapath() : "none"; }
  std::string last_plan() const { return executor_ ? executor_->last_plan() : std::string(); }
  // Device memory the datapath holds for this communicator, in bytes (0 without one), and what of it
  // suspend() gives back.
  std::uint64_t device_bytes() const { return executor_ ? executor_->device_bytes() : 0; }
  std::uint64_t suspendable_bytes() const { return executor_ ? executor_->suspendable_bytes() : 0; }
  // Collective (ncclCommSuspend with NCCL_SUSPEND_MEM): once every rank's work is complete, the
  // datapath gives back its suspendable memory; collectives are refused (invalid_usage) until
  // resume() brings it back at the same addresses. Suspending twice, or resuming a communicator
  // that is not suspended, is invalid_usage.
  Status suspend();
  Status resume();
  bool suspended() const { return suspended_.load(); }
  Bootstrap& bootstrap() { return *bootstrap_; }
  // Which host each rank is on.
  const HostLayout& layout() const { return layout_; }
  // Whether Purlin's datapath serves these ranks; if not, `declined` says why.
  bool native() const { return executor_ != nullptr; }
  const std::string& declined() const { return declined_; }
  // Empty when the datapath serves `op`, else why not (the same answer on every rank).
  std::string supports(const Op& op) const;

  // Runs the collectives of a group in order, then its sends and receives fused into rounds (the
  // k-th send to a peer meets that peer's k-th receive from us). Allocates nothing once the calling
  // thread has run calls as large before.
  Status execute(std::span<const Op> ops, std::span<const PeerOp> p2p, void* stream);

  // A coarse cost model of execute(), in microseconds: a fixed cost per message plus bytes over the
  // datapath's copy bandwidth, both from the policy table (rough figures, not measured per machine).
  double estimate_us(const std::vector<Op>& ops, const std::vector<PeerOp>& p2p) const;

  // Any thread: ends every wait in progress (datapath and bootstrap) with an error; later
  // operations fail. Peers see this rank fail.
  void abort();
  bool aborted() const { return aborted_.load(); }
  // Any thread: ends every wait of the datapath in progress; later collectives fail with
  // invalid_usage. The bootstrap stays usable for split and shrink (ncclCommRevoke, and
  // ncclCommShrink with NCCL_SHRINK_ABORT).
  void revoke();
  // This rank makes no more calls (ncclCommFinalize): its peers are told that its departure, by
  // destroy or by abort, is no failure.
  void finalize();
  // A failure found outside any call: a dead peer (the watcher) or an error of the datapath after
  // a call returned (GPU). Plain loads; never blocks.
  Status async_status() const;  // (no datapath: the failures the watcher found)
  // The message that goes with a failure async_status() reports.
  std::string failure_reason() const;

  // Collective over this communicator: the ranks passing the same color form a new communicator,
  // ordered by key then by rank here. color kNoColor: this rank joins none (*out stays null); any other
  // value, negative ones too, names a group.
  // `abort` (may be null) ends the new communicator's creation when raised; abort() of this
  // communicator raises it too while the creation runs.
  static constexpr int kNoColor = -1;  // the value of NCCL_SPLIT_NOCOLOR
  Status split(int color, int key, const Options& options, std::atomic<bool>* abort,
               std::unique_ptr<Communicator>* out);
  // Among the ranks not excluded (the excluded ranks do not call): a new communicator of them in
  // this communicator's order. Uses only point-to-point messages between the survivors. `abort` as
  // for split.
  Status shrink(const std::vector<int>& excluded, const Options& options, std::atomic<bool>* abort,
                std::unique_ptr<Communicator>* out);
  // Collective over this communicator (ncclCommGrow on the existing ranks): a new communicator of
  // `nranks` ranks, more than this one's, where each rank keeps its rank and the new ranks join
  // through the id. The id is the one some rank passes (`id` null elsewhere). No id, two different
  // ones, one that is not an id, or ranks that disagree on `nranks` are invalid_argument on every
  // rank alike. `abort` as for split.
  Status grow(const UniqueId* id, int nranks, const Options& options, std::atomic<bool>* abort,
              std::unique_ptr<Communicator>* out);

 private:
  Communicator() = default;
  Status distribute_id(const std::vector<int>& members, UniqueId* id);
  // Creates a child communicator while abort() may raise `abort`.
  Status create_child(const UniqueId& id, int rank, int nranks, const Options& options, std::atomic<bool>* abort,
                      std::unique_ptr<Communicator>* out);
  // The watcher: checks the peers until stop_watching(); records a dead peer as the failure.
  Status start_watching();
  void watch();
  void stop_watching();
  // Records the first failure and ends the datapath's waits; `report` also logs it and makes it the
  // calling thread's last error. A peer's departure (`departure`, the watcher's) gives way to a
  // mismatch found later: the peer that found the ranks' calls different raised the fault and
  // aborted, and its exit may reach the watcher before the fault reaches this rank's call. Returns
  // whether it recorded this failure.
  bool set_failure(Status s, std::string why, bool report, bool departure = false);
  // The failure recorded, or a mismatch the datapath found after a departure was recorded.
  Status failure() const;
  bool mismatch_after_departure() const;
  // The error a collective reports when the communicator cannot run it (revoked, failed, aborted).
  Status refusal() const;
  // suspend() and resume() once their state is checked: the datapath's part, then the new state.
  Status switch_memory(bool suspend);

  static constexpr int kWatchPeriodMs = 100;

  int rank_ = 0;
  int nranks_ = 1;
  int device_ = -1;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<Executor> executor_;
  HostLayout layout_;
  std::string declined_;
  Policy policy_;
  std::atomic<bool> aborted_{false};  // abort(): everything stops, children being created too
  std::atomic<bool> revoked_{false};  // revoke(): collectives stop, the bootstrap goes on
  std::atomic<bool> suspended_{false};  // suspend(): collectives wait for resume()
  std::atomic<int> failure_{0};       // a Status: the first failure of a call or of a peer
  std::atomic<bool> departure_{false};  // failure_ is a peer's departure (the watcher's)
  mutable std::atomic<bool> reported_async_{false};  // the datapath's failure has had its WARN line
  mutable std::mutex failure_mu_;
  std::string failure_why_;
  std::mutex child_mu_;
  std::atomic<bool>* child_abort_ = nullptr;  // the flag of a child being created
  std::atomic<bool> child_abort_own_{false};  // used when the caller gives none
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
};

}  // namespace purlin::snac
