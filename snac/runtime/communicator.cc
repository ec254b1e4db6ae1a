#include "snac/runtime/communicator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <shared_mutex>
#include <system_error>

#include <fmt/format.h>

#include "core/config.h"
#include "core/log.h"
#include "core/topology.h"
#include "core/cuda_probe.h"
#include "snac/executors/datapaths.h"
#include "snac/runtime/plan.h"
#include "snac/window.h"

namespace purlin::snac {
namespace {

// Watchers must not act while the process runs its static destructors (the logger may be gone):
// the first watcher creates this guard, after the logger and the configuration are in use, so it
// is destroyed before them; from then on watchers only wait to be stopped. A watcher holds the
// lock shared while it acts, so the guard's destructor also waits for one in the middle of it.
struct ExitGuard {
  std::shared_mutex* mu = new std::shared_mutex();  // never freed: watchers may outlive the guard
  bool* exiting = new bool(false);
  ~ExitGuard() {
    std::unique_lock<std::shared_mutex> g(*mu);
    *exiting = true;
  }
};

ExitGuard& exit_guard() {
  static ExitGuard guard;
  return guard;
}

// The new communicator's abort flag also ends the exchanges of a split or shrink on the parent.
class Interrupt {
 public:
  Interrupt(Bootstrap& b, const std::atomic<bool>* flag) : b_(b) { b_.set_interrupt(flag); }
  ~Interrupt() { b_.set_interrupt(nullptr); }
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

 private:
  Bootstrap& b_;
};

// The ranks must run one protocol: how a message is cut, staged, slotted and planned comes from
// each process's environment and policy file, and ranks that disagree would read one another's
// memory at the wrong places without any tag telling. Compares every rank's with rank 0's. The
// channels count too: every rank's window holds one part per channel, and peers address them all.
Status agree_on_policy(Bootstrap& boot, const Policy& p) {
  static constexpr const char* kNames[] = {"staging bytes (PURLIN_STAGING_BYTES)",
                                           "chunk bytes (PURLIN_CHUNK_BYTES)",
                                           "slots (PURLIN_SLOTS)",
                                           "latency-path bound (PURLIN_LATENCY_MAX_BYTES)",
                                           "packets per pair",
                                           "channel bytes (PURLIN_CHANNEL_BYTES)",
                                           "direct bound (PURLIN_DIRECT_MAX_BYTES)",
                                           "Broadcast's direct bound (PURLIN_BROADCAST_DIRECT_MAX_BYTES)",
                                           "channels (PURLIN_CHANNELS, or GPUs of different sizes)",
                                           "latency exchange bound (PURLIN_EXCHANGE_MAX_BYTES)",
                                           "exchange channel bytes (PURLIN_EXCHANGE_CHANNEL_BYTES)",
                                           "exchange channels (PURLIN_EXCHANGE_CHANNELS)",
                                           "pair exchange bound (PURLIN_EXCHANGE_MAX_BYTES)",
                                           "zero-staging bound (PURLIN_ZERO_STAGING_MIN_BYTES)",
                                           "Broadcast's and Reduce's zero-staging bound (PURLIN_ZERO_STAGING_MIN_BYTES)",
                                           "AllReduce's zero-staging bound (PURLIN_ZERO_STAGING_MIN_BYTES)",
                                           "zero-staging CTAs (PURLIN_ZERO_STAGING_CTAS)",
                                           "zero-staging's bound for all CTAs (PURLIN_ZERO_STAGING_FULL_BYTES)",
                                           "zero-staging outside graphs (PURLIN_ZERO_STAGING_EAGER)",
                                           "AllGather's copy-engine bound (PURLIN_CE_MIN_BYTES)",
                                           "AlltoAll's copy-engine bound (PURLIN_CE_MIN_BYTES)",
                                           "Broadcast's copy-engine bound (PURLIN_CE_MIN_BYTES)",
                                           "Gather's and Scatter's copy-engine bound (PURLIN_CE_MIN_BYTES)",
                                           "Send/Recv's copy-engine bound (PURLIN_CE_MIN_BYTES)"};
  using Terms = std::array<std::uint64_t, std::size(kNames)>;
  const Terms mine{p.staging_half,     p.chunk_bytes,   static_cast<std::uint64_t>(p.slots), p.latency_max_bytes,
                   p.packets_per_pair, p.channel_bytes, p.direct_max_bytes,                   p.broadcast_direct_max_bytes,
                   static_cast<std::uint64_t>(p.workers), p.exchange_max_bytes, p.exchange_channel_bytes,
                   static_cast<std::uint64_t>(p.exchange_channels), p.pair_max_bytes, p.zero_staging_min_bytes,
                   p.zero_staging_rooted_min_bytes, p.zero_staging_all_reduce_min_bytes,
                   static_cast<std::uint64_t>(p.zero_staging_ctas), p.zero_staging_full_bytes, p.zero_staging_eager ? 1u : 0u,
                   p.ce_all_gather_min_bytes, p.ce_all_to_all_min_bytes, p.ce_broadcast_min_bytes,
                   p.ce_gather_scatter_min_bytes, p.ce_send_recv_min_bytes};
  std::vector<Terms> all(static_cast<std::size_t>(boot.nranks()));
  PURLIN_TRY(boot.all_gather(mine.data(), sizeof(Terms), all.data()));
  for (int r = 1; r < boot.nranks(); ++r)
    for (std::size_t k = 0; k < mine.size(); ++k)
      if (all[r][k] != all[0][k])
        return fail(Status::invalid_usage,
                    fmt::format("the ranks' policies differ: rank {} has {} {}, rank 0 has {}; set the PURLIN_* "
                                "variables and PURLIN_POLICY_FILE alike for every rank",
                                r, kNames[k], all[r][k], all[0][k]));
  return Status::ok;
}

}  // namespace

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
    std::uint64_t gpu;  // identity of the rank's GPU (0: none)
  } mine{host_id(), gpu_identity(options.device)};
  std::vector<Hello> all(static_cast<std::size_t>(nranks));
  PURLIN_TRY(comm->bootstrap_->all_gather(&mine, sizeof(Hello), all.data()));
  std::vector<std::uint64_t> hosts(static_cast<std::size_t>(nranks));
  for (int r = 0; r < nranks; ++r) hosts[r] = all[r].host;
  // As NCCL: two ranks of one host on one GPU only with NCCL_MULTI_RANK_GPU_ENABLE. Every rank sees
  // the same table, so all of them fail alike.
  if (!config().multi_rank_gpu)
    for (int r = 0; r < nranks; ++r)
      for (int q = 0; q < r; ++q)
        if (all[r].gpu != 0 && all[r].gpu == all[q].gpu && all[r].host == all[q].host)
          return fail(Status::invalid_usage,
                      fmt::format("Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 "
                                  "to enable this configuration. (ranks {} and {})",
                                  q, r));
  comm->layout_ = HostLayout::from_ids(hosts);
  if (comm->layout_.hosts() > 1) comm->declined_ = fmt::format("the ranks span {} hosts", comm->layout_.hosts());
  else if (nranks > kMaxRanks)
    comm->declined_ = fmt::format("Purlin serves at most {} ranks on one host (asked for {})", kMaxRanks, nranks);
  // The most ranks on any one GPU: every rank derives its policy, channel count included, from it,
  // so that all of them cut a message into the same slices.
  Site site{options.device, nranks, 1};
  if (options.device >= 0)
    for (int r = 0; r < nranks; ++r) {
      int on_gpu = 0;
      for (int q = 0; q < nranks; ++q) on_gpu += all[q].gpu == all[r].gpu ? 1 : 0;
      site.sharing = std::max(site.sharing, on_gpu);
    }
  if (!comm->declined_.empty()) {
    // No datapath: the bootstrap and the layout serve the caller's hand-over to NCCL; the policy of
    // the datapath host buffers would take still answers ncclGroupSimulateEnd.
    for (const Datapath* d : datapaths()) {
      std::string unused;
      if (d->applies(Site{-1, nranks, 1}, &unused)) {
        comm->policy_ = d->policy(Site{-1, nranks, 1});
        break;
      }
    }
    PURLIN_TRY(comm->bootstrap_->barrier());
    PURLIN_TRY(comm->start_watching());
    log::info(log::kInit, "comm rank {} nranks {}: no Purlin datapath ({})", rank, nranks, comm->declined_);
    *out = std::move(comm);
    return Status::ok;
  }

  const Datapath* chosen = nullptr;
  for (const Datapath* d : datapaths()) {
    std::string why;
    if (!d->applies(site, &why)) log::info(log::kInit, "comm rank {}: datapath {} does not apply: {}", rank, d->name, why);
    else if (!chosen) chosen = d;
  }
  if (!chosen) return fail(Status::internal_error, "no datapath of this build applies to the communicator");
  log::info(log::kInit, "comm rank {}: datapath {} (the first that applies, of {})", rank, chosen->name,
            datapaths().size());
  ExecutorArgs args;
  args.bootstrap = comm->bootstrap_.get();
  args.device = options.device;
  args.timeout_s = config().timeout_s;
  args.one_gpu = options.device >= 0 && site.sharing == nranks;
  args.policy = chosen->policy(site);
  comm->policy_ = args.policy;
  PURLIN_TRY(agree_on_policy(*comm->bootstrap_, args.policy));
  PURLIN_TRY(chosen->make(args, &comm->executor_));
  PURLIN_TRY(comm->bootstrap_->barrier());
  PURLIN_TRY(comm->start_watching());
  log::info(log::kInit, "comm rank {} nranks {} datapath {} ready", rank, nranks, comm->executor_->datapath());
  *out = std::move(comm);
  return Status::ok;
}

Communicator::~Communicator() {
  stop_watching();
  // Tells the peers that the connection closing next is an orderly departure, not a death.
  if (bootstrap_ && !aborted_.load()) bootstrap_->leave();
}

Status Communicator::start_watching() {
  exit_guard();
  try {
    watcher_ = std::thread([this] { watch(); });
  } catch (const std::system_error& e) {
    return fail(Status::system_error, fmt::format("cannot start the communicator's watcher thread: {}", e.what()));
  }
  return Status::ok;
}

void Communicator::watch() {
  // Copies: the guard object itself is gone once the process exits.
  std::shared_mutex* const exit_mu = exit_guard().mu;
  const bool* const exiting = exit_guard().exiting;
  std::unique_lock<std::mutex> l(watch_mu_);
  for (;;) {
    watch_cv_.wait_for(l, std::chrono::milliseconds(kWatchPeriodMs), [this] { return watch_stop_; });
    if (watch_stop_) return;
    if (aborted_.load() || failure_.load() != 0) continue;  // nothing left to find
    std::shared_lock<std::shared_mutex> alive(*exit_mu);
    if (*exiting) continue;
    const int dead = bootstrap_->failed_peer();
    if (dead >= 0) {
      // Not logged here: the calls that fail because of it report it on their own threads.
      set_failure(Status::remote_error,
                  fmt::format("rank {} of {}: rank {} left without a farewell (its process died or it aborted)", rank_,
                              nranks_, dead),
                  false, true);
    }
  }
}

void Communicator::stop_watching() {
  {
    std::lock_guard<std::mutex> g(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

bool Communicator::set_failure(Status s, std::string why, bool report, bool departure) {
  {
    std::lock_guard<std::mutex> g(failure_mu_);
    // The first failure is the one reported, unless it was a departure and this is a mismatch.
    if (failure_.load() != 0 && !(departure_.load() && s == Status::invalid_usage)) return false;
    failure_why_ = why;
    departure_.store(departure);
    failure_.store(static_cast<int>(s), std::memory_order_release);
  }
  if (report) fail(s, why);
  if (executor_) executor_->abort();
  return true;
}

bool Communicator::mismatch_after_departure() const {
  return departure_.load() && executor_ && executor_->raised_fault() == Status::invalid_usage;
}

Status Communicator::failure() const {
  const int f = failure_.load(std::memory_order_acquire);
  if (f != 0 && mismatch_after_departure()) return Status::invalid_usage;
  return static_cast<Status>(f);
}

Status Communicator::async_status() const {
  if (const Status f = failure(); f != Status::ok) return f;
  // A kernel that revoke() stopped reports the stop; the revoke itself is no failure (later calls
  // are refused as revoked instead).
  if (revoked_.load()) return Status::ok;
  const Status s = executor_ ? executor_->async_status() : Status::ok;
  // A kernel that stopped (a peer that did not arrive within PURLIN_TIMEOUT, a mismatch) says so
  // once, as NCCL warns when its proxy or kernels fail: the poll that finds it is often the first
  // the caller hears of it.
  if (s != Status::ok && !reported_async_.exchange(true))
    log::warn("rank {} of {}: {} (status {})", rank_, nranks_, failure_reason(), static_cast<int>(s));
  return s;
}

std::string Communicator::failure_reason() const {
  const bool mismatch = mismatch_after_departure();
  if (!mismatch) {
    std::lock_guard<std::mutex> g(failure_mu_);
    if (!failure_why_.empty()) return failure_why_;
  }
  if (mismatch || (executor_ && executor_->async_status() == Status::invalid_usage))
    return fmt::format("{}: it stopped on the {} datapath, and the communicator runs no collective again",
                       kDifferentArguments, executor_->datapath());
  if (executor_ && executor_->async_status() != Status::ok)
    return fmt::format("a collective of this communicator stopped on the {} datapath before it completed (a peer "
                       "failed or did not arrive within PURLIN_TIMEOUT, or the communicator was aborted)",
                       executor_->datapath());
  return {};
}

Status Communicator::refusal() const {
  if (revoked_.load())
    return fail(Status::invalid_usage,
                "the communicator's collectives were stopped (ncclCommRevoke, or ncclCommShrink with NCCL_SHRINK_ABORT)");
  if (const Status f = failure(); f != Status::ok) return fail(f, "the communicator failed: " + failure_reason());
  if (aborted_.load()) return fail(Status::remote_error, "the communicator was aborted");
  return Status::ok;
}

std::string Communicator::supports(const Op& op) const {
  if (!executor_) return declined_;
  std::string why;
  return executor_->supports(op, &why) ? std::string() : why;
}

void Communicator::abort() {
  aborted_.store(true);
  {
    std::lock_guard<std::mutex> g(child_mu_);
    if (child_abort_) child_abort_->store(true);
  }
  if (executor_) executor_->abort();
  if (bootstrap_) bootstrap_->abort();
}

Status Communicator::create_child(const UniqueId& id, int rank, int nranks, const Options& options,
                                  std::atomic<bool>* abort, std::unique_ptr<Communicator>* out) {
  {
    std::lock_guard<std::mutex> g(child_mu_);
    if (aborted_.load()) abort->store(true);
    child_abort_ = abort;
  }
  if (options.placed) options.placed(rank, nranks, id);
  Status s = create(id, rank, nranks, options, abort, out);
  std::lock_guard<std::mutex> g(child_mu_);
  child_abort_ = nullptr;
  return s;
}

void Communicator::finalize() {
  if (bootstrap_) bootstrap_->leave();
}

void Communicator::revoke() {
  revoked_.store(true);
  if (executor_) executor_->abort();
}

Status Communicator::suspend() {
  if (suspended_.load()) return fail(Status::invalid_usage, "the communicator is suspended already");
  return switch_memory(true);
}

Status Communicator::resume() {
  if (!suspended_.load()) return fail(Status::invalid_usage, "the communicator is not suspended");
  return switch_memory(false);
}

// Without a datapath (the ranks span hosts) nothing is held: the ranks only meet. A failure past
// the checks of state leaves the memory half given back or half mapped: the communicator fails.
Status Communicator::switch_memory(bool suspend) {
  PURLIN_TRY(refusal());
  const Status s = !executor_ ? bootstrap_->barrier()
                   : suspend  ? executor_->suspend_memory(*bootstrap_)
                              : executor_->resume_memory(*bootstrap_);
  if (s != Status::ok) {
    set_failure(s, last_error(), false);
    return s;
  }
  suspended_.store(suspend);
  return Status::ok;
}

namespace {

// With one rank every collective leaves its input in its output, unless the reduction scales it
// (PreMulSum): a copy, or nothing in place, as NCCL does. Reductions of one source in the datapath
// convert through the accumulation type and back, which gives the same bits; PreMulSum runs the
// datapath, whose producer step leaves round_T(s * x) (atom/reduce.h) for its one-source sum.
bool one_rank_copy(const Op& op) {
  if (op.in.size() != 1 || op.out.size() != 1 || op.in[0].bytes != op.out[0].bytes) return false;
  switch (op.kind) {
    case CollKind::all_reduce:
    case CollKind::reduce:
    case CollKind::reduce_scatter:
    case CollKind::reduce_scatter_v: return op.op.kind != RedOpKind::premulsum;
    default: return true;
  }
}

}  // namespace

Status Communicator::execute(std::span<const Op> ops, std::span<const PeerOp> p2p, void* stream) {
  PURLIN_TRY(refusal());
  if (suspended_.load())
    return fail(Status::invalid_usage, "the communicator is suspended (ncclCommSuspend): ncclCommResume it first");
  if (!executor_) return fail(Status::invalid_usage, fmt::format("no Purlin datapath serves this communicator: {}", declined_));
  // A failed call leaves the protocol state inconsistent across ranks: the communicator is broken.
  // A call that revoke() or a dead peer stopped says why.
  auto failed_with = [this](Status s) {
    if (revoked_.load() || aborted_.load()) return refusal();
    // The datapath reported it already. A mismatch this call found replaces a departure the watcher
    // recorded first.
    if (set_failure(s, last_error(), false)) return s;
    return refusal();
  };
  // With one rank, a call that is a copy (one_rank_copy) is only that copy.
  const bool alone = nranks_ == 1;
  auto copy = [&](const Op& op) { return executor_->copy_local(op.out[0].ptr, op.in[0].ptr, op.in[0].bytes, stream); };
  // The planned form of a call, kept per thread so that its parts' storage is reused.
  thread_local Op planned;
  for (const Op& op : ops) {
    Status s = alone && one_rank_copy(op) ? copy(op) : executor_->execute(plan(op, rank_, nranks_, policy_, &planned), stream);
    if (s != Status::ok) return failed_with(s);
  }
  if (p2p.empty()) return Status::ok;
  // Round k holds the k-th send and the k-th receive of every peer. The rounds' storage is the
  // thread's, kept from call to call.
  thread_local std::vector<int> sends, recvs;
  thread_local std::vector<Op> rounds;
  sends.assign(static_cast<std::size_t>(nranks_), 0);
  recvs.assign(static_cast<std::size_t>(nranks_), 0);
  std::size_t used = 0;
  auto round = [&](int k) -> Op& {
    for (; used <= static_cast<std::size_t>(k); ++used) {
      if (rounds.size() == used) rounds.emplace_back();
      Op& op = rounds[used];
      op.kind = CollKind::send_recv;
      op.in.assign(static_cast<std::size_t>(nranks_), Part{nullptr, 0});
      op.out.assign(static_cast<std::size_t>(nranks_), Part{nullptr, 0});
    }
    return rounds[static_cast<std::size_t>(k)];
  };
  for (const PeerOp& p : p2p) {
    if (p.send) round(sends[p.peer]++).in[p.peer] = Part{p.buf, p.bytes};
    else round(recvs[p.peer]++).out[p.peer] = Part{p.buf, p.bytes};
  }
  for (std::size_t k = 0; k < used; ++k) {
    const Op& op = rounds[k];
    Status s = alone && one_rank_copy(op) ? copy(op) : executor_->execute(op, stream);
    if (s != Status::ok) return failed_with(s);
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
    PURLIN_TRY(make_unique_id(id, IdFor::child));
    for (std::size_t i = 1; i < members.size(); ++i) PURLIN_TRY(bootstrap_->send(members[i], id, sizeof(*id)));
  } else {
    PURLIN_TRY(bootstrap_->recv(members.front(), id, sizeof(*id)));
  }
  return Status::ok;
}

Status Communicator::split(int color, int key, const Options& options, std::atomic<bool>* abort,
                           std::unique_ptr<Communicator>* out) {
  if (!abort) abort = &child_abort_own_;
  Interrupt interrupt(*bootstrap_, abort);
  struct Entry {
    std::int32_t color, key, rank;
  } mine{color, key, rank_};
  std::vector<Entry> all(static_cast<std::size_t>(nranks_));
  PURLIN_TRY(bootstrap_->all_gather(&mine, sizeof(Entry), all.data()));
  out->reset();
  if (color == kNoColor) return Status::ok;
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
  return create_child(id, new_rank, static_cast<int>(members.size()), options, abort, out);
}

Status Communicator::shrink(const std::vector<int>& excluded, const Options& options, std::atomic<bool>* abort,
                            std::unique_ptr<Communicator>* out) {
  if (!abort) abort = &child_abort_own_;
  Interrupt interrupt(*bootstrap_, abort);
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
  return create_child(id, new_rank, static_cast<int>(members.size()), options, abort, out);
}

Status Communicator::grow(const UniqueId* id, int nranks, const Options& options, std::atomic<bool>* abort,
                          std::unique_ptr<Communicator>* out) {
  if (!abort) abort = &child_abort_own_;
  Interrupt interrupt(*bootstrap_, abort);
  out->reset();
  // What each rank brings, gathered before any rank may fail, so that all fail alike.
  struct Offer {
    std::int32_t given;
    std::int32_t nranks;
    UniqueId id;
  };
  Offer mine;
  std::memset(&mine, 0, sizeof(mine));
  mine.given = id != nullptr;
  mine.nranks = nranks;
  if (id) mine.id = *id;
  std::vector<Offer> all(static_cast<std::size_t>(nranks_));
  PURLIN_TRY(bootstrap_->all_gather(&mine, sizeof(Offer), all.data()));
  const UniqueId* chosen = nullptr;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Offer& o = all[r];
    if (o.nranks != nranks)
      return fail(Status::invalid_argument,
                  fmt::format("ncclCommGrow: ranks disagree on the total ranks ({} here, {} on rank {})", nranks,
                              o.nranks, r));
    if (!o.given) continue;
    if (o.id.magic != kUniqueIdMagic)
      return fail(Status::invalid_argument,
                  fmt::format("ncclCommGrow: rank {} passed an id that ncclCommGetUniqueId did not make", r));
    if (chosen && std::memcmp(chosen, &o.id, sizeof(UniqueId)) != 0)
      return fail(Status::invalid_argument, "ncclCommGrow: existing ranks passed different unique ids");
    chosen = &o.id;
  }
  if (nranks <= nranks_)
    return fail(Status::invalid_argument,
                fmt::format("ncclCommGrow: total ranks {} is not more than the current {}", nranks, nranks_));
  if (!chosen)
    return fail(Status::invalid_argument,
                "ncclCommGrow: no existing rank passed a unique id (the rank that called ncclCommGetUniqueId must)");
  return create_child(*chosen, rank_, nranks, options, abort, out);
}

}  // namespace purlin::snac
