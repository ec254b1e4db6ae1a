#include "snac/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>

#include <fmt/format.h>

#include "core/config.h"
#include "core/log.h"
#include "core/topology.h"
#include "core/cuda_probe.h"
#include "snac/window.h"

namespace purlin::snac {

Status Communicator::create(const UniqueId& id, int rank, int nranks, const Options& options,
                            const std::atomic<bool>* abort, std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> comm(new Communicator());
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  comm->device_ = options.device;
  PURLIN_TRY(Bootstrap::create(id, rank, nranks, abort, &comm->bootstrap_));

  // Every rank must be on this host: the host datapath maps its peers' memory.
  struct Hello {
    std::uint64_t host;
    std::uint64_t nonce;
    std::uint64_t gpu;  // identity of the rank's GPU (0: none)
    std::int32_t pid;
  } mine{host_id(), std::random_device{}() * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(getpid()),
         gpu_identity(options.device), getpid()};
  std::vector<Hello> all(static_cast<std::size_t>(nranks));
  PURLIN_TRY(comm->bootstrap_->all_gather(&mine, sizeof(Hello), all.data()));
  std::vector<std::uint64_t> hosts(static_cast<std::size_t>(nranks));
  for (int r = 0; r < nranks; ++r) hosts[r] = all[r].host;
  comm->layout_ = HostLayout::from_ids(hosts);
  if (comm->layout_.hosts() > 1) comm->declined_ = fmt::format("the ranks span {} hosts", comm->layout_.hosts());
  else if (nranks > kMaxRanks)
    comm->declined_ = fmt::format("Purlin serves at most {} ranks on one host (asked for {})", kMaxRanks, nranks);
  if (!comm->declined_.empty()) {
    // No datapath: the bootstrap and the layout serve the caller's hand-over to NCCL.
    comm->policy_ = policy_for(DatapathKind::host, nranks, 1, 0);
    PURLIN_TRY(comm->bootstrap_->barrier());
    log::info(log::kInit, "comm rank {} nranks {}: no Purlin datapath ({})", rank, nranks, comm->declined_);
    *out = std::move(comm);
    return Status::ok;
  }

  ExecutorArgs args;
  args.bootstrap = comm->bootstrap_.get();
  args.tag = fmt::format("{:x}-{:x}", static_cast<unsigned>(all[0].pid), all[0].nonce);
  args.device = options.device;
  args.timeout_s = config().timeout_s;
  if (options.device >= 0) {
    int sharing = 0;  // ranks on this rank's GPU, this one included
    for (int r = 0; r < nranks; ++r) sharing += all[r].gpu == mine.gpu ? 1 : 0;
    args.one_gpu = sharing == nranks;
    args.policy = policy_for(DatapathKind::sm, nranks, sharing, gpu_sm_count(options.device),
                             sm_resident_ctas_per_sm(options.device));
    comm->policy_ = args.policy;
    PURLIN_TRY(make_sm_executor(args, &comm->executor_));
  } else {
    args.policy = policy_for(DatapathKind::host, nranks, 1, 0);
    comm->policy_ = args.policy;
    PURLIN_TRY(make_host_executor(args, &comm->executor_));
  }
  PURLIN_TRY(comm->bootstrap_->barrier());
  log::info(log::kInit, "comm rank {} nranks {} datapath {} ready", rank, nranks, comm->executor_->datapath());
  *out = std::move(comm);
  return Status::ok;
}

Communicator::~Communicator() = default;

std::string Communicator::supports(const Op& op) const {
  if (!executor_) return declined_;
  std::string why;
  return executor_->supports(op, &why) ? std::string() : why;
}

void Communicator::abort() {
  aborted_.store(true);
  if (executor_) executor_->abort();
  if (bootstrap_) bootstrap_->abort();
}

namespace {

// The form a collective runs in. An AllReduce small enough for the policy's direct bound runs as one
// reduce of every rank's whole input (coll::AllReduceDirect), which needs one exchange instead of
// two; both forms fold in rank order, so the result is the same bits.
Op plan(const Op& op, const Policy& policy) {
  if (op.kind != CollKind::all_reduce || op.in.empty() || op.out.empty()) return op;
  std::uint64_t total = 0;
  for (const Part& p : op.out) total += p.bytes;
  if (total == 0 || total > policy.direct_max_bytes) return op;
  Op direct;
  direct.kind = CollKind::all_reduce_direct;
  direct.type = op.type;
  direct.op = op.op;
  direct.in = {Part{op.in.front().ptr, total}};
  direct.out = {Part{op.out.front().ptr, total}};
  return direct;
}

}  // namespace

Status Communicator::execute(const std::vector<Op>& ops, const std::vector<PeerOp>& p2p, void* stream) {
  if (aborted_.load()) return fail(Status::remote_error, "the communicator was aborted or failed");
  if (!executor_) return fail(Status::invalid_usage, fmt::format("no Purlin datapath serves this communicator: {}", declined_));
  for (const Op& op : ops) {
    Status s = executor_->execute(plan(op, policy_), stream);
    if (s != Status::ok) {
      aborted_.store(true);
      return s;
    }
  }
  if (p2p.empty()) return Status::ok;
  // Round k holds the k-th send and the k-th receive of every peer.
  std::vector<int> sends(nranks_, 0), recvs(nranks_, 0);
  std::vector<Op> rounds;
  auto round = [&](int k) -> Op& {
    while (static_cast<int>(rounds.size()) <= k) {
      Op op;
      op.kind = CollKind::send_recv;
      op.in.assign(nranks_, Part{nullptr, 0});
      op.out.assign(nranks_, Part{nullptr, 0});
      rounds.push_back(std::move(op));
    }
    return rounds[k];
  };
  for (const PeerOp& p : p2p) {
    if (p.send) round(sends[p.peer]++).in[p.peer] = Part{p.buf, p.bytes};
    else round(recvs[p.peer]++).out[p.peer] = Part{p.buf, p.bytes};
  }
  for (const Op& op : rounds) {
    Status s = executor_->execute(op, stream);
    if (s != Status::ok) {
      aborted_.store(true);
      return s;
    }
  }
  return Status::ok;
}

double Communicator::estimate_us(const std::vector<Op>& ops, const std::vector<PeerOp>& p2p) const {
  const Policy& p = policy_;
  double us = 0;
  for (const Op& op : ops) {
    std::uint64_t bytes = 0;
    for (const Part& part : op.in) bytes += part.bytes;
    for (const Part& part : op.out) bytes += part.bytes;
    us += p.sim_us_per_op + static_cast<double>(bytes) / (p.sim_gbps * 1e3);
  }
  std::uint64_t bytes = 0;
  for (const PeerOp& o : p2p) bytes += o.bytes;
  if (!p2p.empty()) us += p.sim_us_per_op + static_cast<double>(bytes) / (p.sim_gbps * 1e3);
  return us;
}

Status Communicator::distribute_id(const std::vector<int>& members, UniqueId* id) {
  if (members.front() == rank_) {
    PURLIN_TRY(make_unique_id(id));
    for (std::size_t i = 1; i < members.size(); ++i) PURLIN_TRY(bootstrap_->send(members[i], id, sizeof(*id)));
  } else {
    PURLIN_TRY(bootstrap_->recv(members.front(), id, sizeof(*id)));
  }
  return Status::ok;
}

Status Communicator::split(int color, int key, const Options& options, std::unique_ptr<Communicator>* out) {
  struct Entry {
    std::int32_t color, key, rank;
  } mine{color, key, rank_};
  std::vector<Entry> all(static_cast<std::size_t>(nranks_));
  PURLIN_TRY(bootstrap_->all_gather(&mine, sizeof(Entry), all.data()));
  out->reset();
  if (color < 0) return Status::ok;
  std::vector<Entry> group;
  for (const Entry& e : all)
    if (e.color == color) group.push_back(e);
  std::stable_sort(group.begin(), group.end(),
                   [](const Entry& a, const Entry& b) { return a.key != b.key ? a.key < b.key : a.rank < b.rank; });
  std::vector<int> members;
  int new_rank = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    members.push_back(group[i].rank);
    if (group[i].rank == rank_) new_rank = static_cast<int>(i);
  }
  // The first member by parent rank hands out the id, so it never depends on the keys.
  std::vector<int> by_rank = members;
  std::sort(by_rank.begin(), by_rank.end());
  UniqueId id{};
  PURLIN_TRY(distribute_id(by_rank, &id));
  return create(id, new_rank, static_cast<int>(members.size()), options, &aborted_, out);
}

Status Communicator::shrink(const std::vector<int>& excluded, const Options& options,
                            std::unique_ptr<Communicator>* out) {
  std::vector<int> members;
  int new_rank = -1;
  for (int r = 0; r < nranks_; ++r) {
    if (std::find(excluded.begin(), excluded.end(), r) != excluded.end()) continue;
    if (r == rank_) new_rank = static_cast<int>(members.size());
    members.push_back(r);
  }
  if (new_rank < 0) return fail(Status::invalid_argument, fmt::format("ncclCommShrink: rank {} excludes itself", rank_));
  UniqueId id{};
  PURLIN_TRY(distribute_id(members, &id));
  return create(id, new_rank, static_cast<int>(members.size()), options, nullptr, out);
}

}  // namespace purlin::snac
