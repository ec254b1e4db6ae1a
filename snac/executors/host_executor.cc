// The host datapath bound to SNAC: windows in shared memory (memfd, handed over as descriptors), the
// protocol's roles on threads.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "atom/host/host_atom.h"
#include "core/config.h"
#include "core/fd_passing.h"
#include "core/log.h"
#include "core/shm.h"
#include "snac/dispatch.h"
#include "snac/executor.h"
#include "snac/executors/datapaths.h"
#include "snac/protocol/call.h"
#include "snac/protocol/exchange.h"

namespace purlin::snac {
namespace {

// A thread that runs one job at a time, standing in for a group of CTAs of one role.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> g(m_);
      job_ = std::move(job);
      done_ = false;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [this] { return done_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [this] { return stop_ || job_; });
      if (stop_) return;
      auto job = std::move(job_);
      job_ = nullptr;
      l.unlock();
      job();
      l.lock();
      done_ = true;
      cv_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool done_ = true;
  bool stop_ = false;
  std::thread thread_;
};

class HostExecutor final : public Executor {
 public:
  Status init(const ExecutorArgs& args) {
    Bootstrap& boot = *args.bootstrap;
    policy_ = args.policy;
    timeout_s_ = args.timeout_s;
    const int n = boot.nranks(), me = boot.rank();
    if (n > kMaxRanks)
      return fail(Status::invalid_usage, fmt::format("the host datapath serves at most {} ranks (asked for {})", kMaxRanks, n));
    geo_ = WindowGeometry::make(n, policy_.staging_half, policy_.packets_per_pair);
    // The latency exchange's boxes (one channel) follow the window.
    if (policy_.exchange_max_bytes) {
      xctx_.box_packets = atom::ll_packets(policy_.exchange_max_bytes);
      exchange_bytes_ = sizeof(atom::LLPacket) * xctx_.box_packets * exchange_boxes(n);
    }
    segments_.resize(n);
    PURLIN_TRY(ShmSegment::create(geo_.total + exchange_bytes_, &segments_[me]));
    PURLIN_TRY(exchange_windows(boot));
    windows_.resize(n);
    for (int r = 0; r < n; ++r) windows_[r] = Window::at(segments_[r].data(), geo_);
    inbox_.resize(n);
    for (int r = 0; r < n; ++r)
      inbox_[r] = reinterpret_cast<atom::LLPacket*>(static_cast<char*>(segments_[r].data()) + geo_.total);
    xctx_.rank = me;
    xctx_.nranks = n;
    xctx_.inbox = inbox_.data();
    state_ = std::make_unique<LocalState>();
    *state_ = LocalState{};
    scratch_.resize(static_cast<std::size_t>(n + 1) * policy_.latency_max_bytes + 64);
    ctx_.rank = me;
    ctx_.nranks = n;
    ctx_.geo = geo_;
    ctx_.win = windows_.data();
    ctx_.state = state_.get();
    ctx_.scratch = scratch_.data();
    ctx_.latency_max = policy_.latency_max_bytes;
    ctx_.chunk_cap = policy_.chunk_bytes;
    ctx_.slots = policy_.slots;
    log::info(log::kInit | log::kShm, "host datapath: rank {}/{} window {} B in shared memory, policy {}", me, n,
              geo_.total, policy_.name);
    return Status::ok;
  }

  // Every rank hands its window's descriptor to every other and maps theirs. Ranks that are
  // threads of one process go the same way: each holds a mailbox of its own.
  Status exchange_windows(Bootstrap& boot) {
    const int n = boot.nranks(), me = boot.rank();
    std::unique_ptr<FdMailbox> box;
    Status s = FdMailbox::open(&box);
    // Every rank takes part in the all-gather, so that one that failed to open its mailbox ends
    // the others' exchange at once (an empty address) instead of by timeout.
    FdAddress mine{};
    if (s == Status::ok) mine = box->address();
    std::vector<FdAddress> boxes(static_cast<std::size_t>(n));
    PURLIN_TRY(boot.all_gather(&mine, sizeof(FdAddress), boxes.data()));
    PURLIN_TRY(s);
    std::vector<int> others;
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      if (boxes[r].name[1] == '\0')
        return fail(Status::remote_error, fmt::format("rank {} could not open its descriptor mailbox", r));
      others.push_back(r);
    }
    std::vector<ReceivedFd> got;
    s = box->exchange(me, segments_[me].fd(), others, others, boxes, config().bootstrap_timeout_s,
                      [&boot] { return boot.stopped(); }, &got);
    for (const ReceivedFd& g : got) {
      if (s == Status::ok) s = ShmSegment::map(g.fd, geo_.total + exchange_bytes_, &segments_[g.from]);
      ::close(g.fd);
    }
    segments_[me].close_fd();
    return s;
  }

  Status execute(const Op& op, void*) override {
    if (abort_.load()) return fail(Status::remote_error, "the communicator was aborted");
    if (std::atomic_ref<std::uint64_t>(*windows_[ctx_.rank].fault).load(std::memory_order_acquire) != 0) {
      abort_.store(true);
      return fail(Status::invalid_usage,
                  fmt::format("a peer found that {}: the communicator runs no collective again", kDifferentArguments));
    }
    Call call = op.call();
    std::vector<Part> private_in;
    if (op.copy_input) {
      // Partitions may land before they are read: read the input from a copy.
      copy_.assign(op.in.front().ptr, op.in.front().ptr + op.input_bytes);
      private_in = op.in;
      for (Part& p : private_in) p.ptr = copy_.data() + (p.ptr - op.in.front().ptr);
      call.in = private_in.data();
    }
    if (exchanges(op)) return dispatch(op.kind, [&]<class D>() { return exchange<D>(call, name_of(op.kind)); });
    return dispatch(op.kind, [&]<class D>() { return run<D>(call, name_of(op.kind)); });
  }

  Status copy_local(char* dst, const char* src, std::uint64_t bytes, void*) override {
    if (abort_.load()) return fail(Status::remote_error, "the communicator was aborted");
    if (dst != src) std::memmove(dst, src, bytes);
    std::lock_guard<std::mutex> g(plan_m_);
    last_plan_ = PlanName{"OneRank", "copy", false};
    return Status::ok;
  }

  void abort() override { abort_.store(true); }
  const char* datapath() const override { return "host"; }
  std::string last_plan() const override {
    PlanName p;
    {
      std::lock_guard<std::mutex> g(plan_m_);
      p = last_plan_;
    }
    if (!p.name) return {};
    return p.twice ? fmt::format("{}_{}_{}", p.name, p.how, p.how) : fmt::format("{}_{}", p.name, p.how);
  }
  // A fault a peer raised in this rank's window (it found the ranks' calls different), whether or
  // not a call of this rank has met it yet.
  Status raised_fault() const override {
    if (windows_.empty() || !windows_[ctx_.rank].fault) return Status::ok;
    return static_cast<Status>(std::atomic_ref<std::uint64_t>(*windows_[ctx_.rank].fault).load(std::memory_order_acquire));
  }

 private:
  // The latency exchange serves every collective but Send/Recv rounds (which not every rank calls)
  // whose messages are all within the policy's bound.
  bool exchanges(const Op& op) const {
    if (!exchange_bytes_ || op.kind == CollKind::send_recv) return false;
    for (const Part& p : op.in)
      if (p.bytes > policy_.exchange_max_bytes) return false;
    for (const Part& p : op.out)
      if (p.bytes > policy_.exchange_max_bytes) return false;
    return true;
  }

  template <class D>
  Status exchange(const Call& call, const char* name) {
    std::atomic<bool> failed{false};
    atom::WaitGuard guard{&abort_, &failed, timeout_s_, windows_[ctx_.rank].fault};
    atom::HostAtom atom(call.type, call.op, guard);
    xctx_.epoch = ++exchange_epoch_;
    {
      std::lock_guard<std::mutex> g(plan_m_);
      last_plan_ = PlanName{name, "LLxExchange", false};
    }
    const Status s = exchange_call<D>(atom, xctx_, call);
    if (s != Status::ok) {
      abort_.store(true);  // the ranks' exchanges are no longer in step
      if (s == Status::invalid_usage) raise_fault(atom, ctx_, windows_.data(), s);
    }
    return s;
  }

  template <class D>
  Status run(const Call& call, const char* name) {
    std::atomic<bool> failed{false};
    atom::WaitGuard guard{&abort_, &failed, timeout_s_, windows_[ctx_.rank].fault};
    atom::HostAtom atom(call.type, call.op, guard);
    constexpr int roles = role_count<D>();
    Status status[roles]{};
    std::string why[roles];  // the messages of roles that failed on worker threads
    const bool latency = all_latency<D>(ctx_, call);
    {
      std::lock_guard<std::mutex> g(plan_m_);
      last_plan_ = plan_name<D>(name, latency);
    }
    if (latency) {
      // Stage never waits on this call's consumers, so the roles may run in order on this thread.
      for (int r = 0; r < roles; ++r) {
        status[r] = run_role<D>(atom, ctx_, call, static_cast<Role>(r));
        if (status[r] != Status::ok) break;
      }
    } else {
      for (int r = 1; r < roles; ++r) {
        workers_[r - 1].post([&, r] {
          atom::HostAtom a(call.type, call.op, guard);
          status[r] = run_role<D>(a, ctx_, call, static_cast<Role>(r));
          if (status[r] != Status::ok) {
            why[r] = last_error();
            failed.store(true);
          }
        });
      }
      status[0] = run_role<D>(atom, ctx_, call, Role::stage);
      if (status[0] != Status::ok) failed.store(true);
      for (int r = 1; r < roles; ++r) workers_[r - 1].wait();
    }
    // The first role that failed stopped its siblings (they report remote_error): report its cause.
    Status cause = Status::ok;
    int culprit = 0;
    for (int r = 0; r < roles; ++r)
      if (status[r] == Status::invalid_usage || (status[r] != Status::ok && cause == Status::ok)) {
        cause = status[r];
        culprit = r;
      }
    if (cause != Status::ok) {
      if (culprit > 0 && !why[culprit].empty()) adopt_error(cause, why[culprit]);
      abort_.store(true);  // the protocol state is no longer consistent across ranks
      if (cause == Status::invalid_usage) raise_fault(atom, ctx_, windows_.data(), cause);
      return cause;
    }
    end_call(atom, ctx_);
    return Status::ok;
  }

  // The last call's plan, named when asked (a call formats nothing): the collective, how its
  // phases ran, and whether it had two (a composed form).
  struct PlanName {
    const char* name = nullptr;
    const char* how = nullptr;
    bool twice = false;
  };
  template <class D>
  static PlanName plan_name(const char* name, bool latency) {
    return PlanName{name, latency ? "LLxPush" : "StagedxPull", D::composed};
  }

  Policy policy_;
  double timeout_s_ = 300.0;
  WindowGeometry geo_{};
  std::vector<ShmSegment> segments_;
  std::vector<Window> windows_;
  std::unique_ptr<LocalState> state_;
  std::vector<char> scratch_;
  std::vector<char> copy_;
  Context ctx_{};
  std::uint64_t exchange_bytes_ = 0;
  std::vector<atom::LLPacket*> inbox_;
  ExchangeContext xctx_{};
  std::uint64_t exchange_epoch_ = 0;
  std::atomic<bool> abort_{false};
  Worker workers_[2];
  mutable std::mutex plan_m_;
  PlanName last_plan_;
};

}  // namespace

Status make_host_executor(const ExecutorArgs& args, std::unique_ptr<Executor>* out) {
  std::unique_ptr<HostExecutor> exec;
  try {
    exec = std::make_unique<HostExecutor>();  // starts the worker threads
  } catch (const std::system_error& e) {
    return fail(Status::system_error, fmt::format("cannot start the host datapath's worker threads: {}", e.what()));
  }
  PURLIN_TRY(exec->init(args));
  *out = std::move(exec);
  return Status::ok;
}

namespace {

// Few, large chunks: every notification costs a scheduler round trip when ranks outnumber cores.
Policy host_defaults(const Regime&) {
  Policy p;
  p.name = "host/default";
  p.staging_half = 4u << 20;
  p.chunk_bytes = 512u << 10;
  p.slots = 4;
  p.latency_max_bytes = 8u << 10;
  p.direct_max_bytes = p.exchange_direct_max_bytes = p.exchange_reduce_direct_max_bytes = 8u << 10;
  p.broadcast_direct_max_bytes = 8u << 10;
  p.sim_us_per_op = 20.0;
  p.sim_gbps = 5.0;
  return p;
}

// One channel; the latency exchange is off unless PURLIN_EXCHANGE_MAX_BYTES asks for it.
void host_derive(const Regime& r, int, Policy* p) {
  const Config& c = config();
  p->exchange_channels = 1;
  p->exchange_max_bytes = c.exchange_disabled || r.nranks < 2 ? 0 : c.exchange_max_bytes;
}

bool host_applies(const Site& site, std::string* why) {
  if (site.device < 0) return true;
  *why = fmt::format("the communicator runs on CUDA device {}: its buffers are GPU memory", site.device);
  return false;
}

Policy host_policy(const Site& site) { return policy_for(host_policy_recipe(), Regime{site.nranks, 1}); }

}  // namespace

const PolicyRecipe& host_policy_recipe() {
  static const PolicyRecipe recipe{"host", host_defaults, host_derive};
  return recipe;
}

const Datapath& host_datapath() {
  static const Datapath entry{"host", host_applies, host_policy, make_host_executor};
  return entry;
}

}  // namespace purlin::snac
