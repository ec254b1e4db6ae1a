// A communicator as SNAC sees it: the bootstrap that joined the ranks, the executor of the datapath
// serving them, and the group semantics (one fused execution per group, Send/Recv matched in order).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/status.h"
#include "snac/executor.h"
#include "snac/hosts.h"
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
  Bootstrap& bootstrap() { return *bootstrap_; }
  // Which host each rank is on.
  const HostLayout& layout() const { return layout_; }
  // Whether Purlin's datapath serves these ranks; if not, `declined` says why.
  bool native() const { return executor_ != nullptr; }
  const std::string& declined() const { return declined_; }
  // Empty when the datapath serves `op`, else why not (the same answer on every rank).
  std::string supports(const Op& op) const;

  // Runs the collectives of a group in order, then its sends and receives fused into rounds (the
  // k-th send to a peer meets that peer's k-th receive from us).
  Status execute(const std::vector<Op>& ops, const std::vector<PeerOp>& p2p, void* stream);

  // A coarse cost model of execute(), in microseconds: a fixed cost per message plus bytes over the
  // datapath's copy bandwidth, both from the policy table (rough figures, not measured per machine).
  double estimate_us(const std::vector<Op>& ops, const std::vector<PeerOp>& p2p) const;

  // Any thread: ends every wait in progress with an error; later operations fail.
  void abort();
  bool aborted() const { return aborted_.load(); }
  // An error the datapath found after a call returned.
  Status async_status() const { return executor_ ? executor_->async_status() : Status::ok; }

  // Collective over this communicator: the ranks passing the same color form a new communicator,
  // ordered by key then by rank here. color < 0: this rank joins none (*out stays null).
  Status split(int color, int key, const Options& options, std::unique_ptr<Communicator>* out);
  // Among the ranks not excluded (the excluded ranks do not call): a new communicator of them in
  // this communicator's order. Uses only point-to-point messages between the survivors.
  Status shrink(const std::vector<int>& excluded, const Options& options, std::unique_ptr<Communicator>* out);

 private:
  Communicator() = default;
  Status distribute_id(const std::vector<int>& members, UniqueId* id);

  int rank_ = 0;
  int nranks_ = 1;
  int device_ = -1;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<Executor> executor_;
  HostLayout layout_;
  std::string declined_;
  Policy policy_;
  std::atomic<bool> aborted_{false};
};

}  // namespace purlin::snac
