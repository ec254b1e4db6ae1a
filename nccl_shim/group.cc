#include "nccl_shim/group.h"

#include <algorithm>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/log.h"
#include "nccl_shim/comm_work.h"
#include "nccl_shim/fallback.h"

namespace purlin::shim {
namespace {

struct Batch {
  ncclComm* comm;
  std::uint64_t serial;  // the comm's, to tell it from a later one at the same address
  cudaStream_t stream;
  std::vector<snac::Op> ops;
  std::vector<snac::PeerOp> p2p;
};

// A blocking init, split or shrink called inside a group.
struct Deferred {
  std::function<ncclResult_t()> work;
  const ncclComm* parent;  // a split's or shrink's; null for an init
};

struct GroupState {
  int depth = 0;
  std::vector<Batch> batches;             // one per communicator, in order of first use
  std::vector<Deferred> deferred;         // in call order
  std::vector<Deferred> after;            // suspend and resume, in call order
  std::vector<const ncclComm*> creating;  // the communicators they create
  ncclResult_t error = ncclSuccess;       // the first call of the group that failed its checks
  std::string why;                        // and its message
};

thread_local GroupState tls_group;

Batch& batch_for(ncclComm* comm, cudaStream_t stream) {
  for (Batch& b : tls_group.batches)
    if (b.comm == comm) return b;
  tls_group.batches.push_back(Batch{comm, comm->serial, stream, {}, {}});
  return tls_group.batches.back();
}

// A communicator destroyed or aborted between the call and the end of its group.
ncclResult_t gone(const Batch& b) {
  return fail(nullptr, ncclInvalidUsage,
              fmt::format("ncclGroupEnd: communicator {} was destroyed or aborted before its calls ran; its {} calls "
                          "are dropped", static_cast<const void*>(b.comm), b.ops.size() + b.p2p.size()));
}

// The outcome of a communicator's calls. A call refused for its arguments leaves a blocking
// communicator usable, as NCCL's do; anything else (a peer lost, a timeout, an internal failure)
// puts it in the error state. A non-blocking one takes any failure as its state (flush).
ncclResult_t settle(ncclComm* comm, Status s) {
  if (s == Status::ok) return ncclSuccess;
  if (s != Status::invalid_argument && s != Status::invalid_usage) comm->async_error.store(static_cast<int>(s));
  return propagate(comm, s);
}

ncclResult_t run_batch(const Batch& b) {
  InUse use(b.comm, b.serial);
  if (!use) return gone(b);
  return settle(b.comm, b.comm->fallback ? b.comm->fallback->execute(b.ops, b.p2p, b.stream)
                                         : b.comm->impl->execute(b.ops, b.p2p, b.stream));
}

// Runs job(0..n-1) at once, each on a thread of its own. Where no thread can be started, the jobs
// left run here, one after another: those that wait for one another then end in their timeouts
// instead of ending the process.
void run_at_once(std::size_t n, const std::function<void(std::size_t)>& job) {
  std::vector<std::thread> threads;
  std::size_t started = 0;
  try {
    for (; started < n; ++started) threads.emplace_back(job, started);
  } catch (const std::system_error& e) {
    log::warn("ncclGroupEnd: cannot start a thread ({}); {} of the group's {} jobs run one after another", e.what(),
              n - started, n);
  }
  for (std::size_t i = started; i < n; ++i) job(i);
  for (auto& t : threads) t.join();
}

// Runs every deferred init, split and shrink at once, each on a thread of its own: each waits in
// its rendezvous for peers that may be further work of this very group. The splits and shrinks of
// one parent share a thread and run in call order: at once, they would take one another's
// messages on the parent's bootstrap in whatever order their threads came to it, which differs
// from rank to rank. A failure's message becomes this thread's last error.
ncclResult_t run_deferred(std::vector<Deferred> work) {
  if (work.empty()) return ncclSuccess;
  std::vector<std::vector<std::size_t>> chains;  // indices into `work`, one chain per parent
  for (std::size_t i = 0; i < work.size(); ++i) {
    auto same_parent = [&](const std::vector<std::size_t>& chain) {
      return work[i].parent != nullptr && work[chain.front()].parent == work[i].parent;
    };
    if (auto it = std::find_if(chains.begin(), chains.end(), same_parent); it != chains.end()) it->push_back(i);
    else chains.push_back({i});
  }
  std::vector<ncclResult_t> results(work.size(), ncclSuccess);
  std::vector<std::string> why(work.size());
  auto run = [&](std::size_t c) {
    // Later work of a chain runs after a failure too: the other ranks' counterparts wait for it.
    for (std::size_t i : chains[c]) {
      results[i] = work[i].work();
      if (results[i] != ncclSuccess) why[i] = last_error();
    }
  };
  run_at_once(chains.size(), run);
  for (std::size_t i = 0; i < work.size(); ++i)
    if (results[i] != ncclSuccess) {
      adopt_error(static_cast<Status>(results[i]), why[i]);
      return results[i];
    }
  return ncclSuccess;
}

// What the group this thread closes holds, taken out of it: the thread's group is empty after.
struct Closed {
  std::vector<Batch> batches;
  std::vector<Deferred> deferred;
  std::vector<Deferred> after;
  ncclResult_t error;  // the first call that failed its checks
  std::string why;

  std::size_t calls() const {
    std::size_t n = 0;
    for (const Batch& b : batches) n += b.ops.size() + b.p2p.size();
    return n;
  }
};

Closed close_group() {
  tls_group.creating.clear();
  return Closed{std::exchange(tls_group.batches, {}), std::exchange(tls_group.deferred, {}),
                std::exchange(tls_group.after, {}), std::exchange(tls_group.error, ncclSuccess),
                std::exchange(tls_group.why, {})};
}

// A group that fails before its calls run, as NCCL's: every non-blocking communicator with calls
// in it takes the group's error as its state (blocking ones stay usable).
void fail_batches(const std::vector<Batch>& batches, ncclResult_t error, const std::string& why) {
  for (const Batch& b : batches) {
    InUse use(b.comm, b.serial);
    if (use && !b.comm->blocking) set_failed(b.comm, error, "its group failed: " + why);
  }
}

// Closes the group without running its calls; communicators being created are still created
// (their peers wait for them).
ncclResult_t discard_group(const std::string& why) {
  Closed g = close_group();
  run_deferred(std::move(g.deferred));
  fail_batches(g.batches, ncclInvalidArgument, why);
  return fail(nullptr, ncclInvalidArgument, fmt::format("{}; the group's {} calls are dropped", why, g.calls()));
}

ncclResult_t flush() {
  Closed g = close_group();
  // The communicators being created run in any case: their peers wait for them.
  ncclResult_t result = run_deferred(std::move(g.deferred));
  if (g.error != ncclSuccess) {
    // As NCCL: a call that failed its checks fails the group, and none of its calls run.
    fail_batches(g.batches, g.error, g.why);
    return fail(nullptr, g.error,
                fmt::format("ncclGroupEnd: a call of the group failed its checks ({}); the group's other {} "
                            "calls are dropped", ncclGetErrorString(g.error), g.calls()));
  }
  auto note = [&result](ncclResult_t r) {
    if (result == ncclSuccess || (result == ncclInProgress && r != ncclSuccess)) result = r;
  };
  // Non-blocking communicators run their batch in the background; blocking ones run here.
  std::vector<const Batch*> now;
  for (Batch& b : g.batches) {
    InUse use(b.comm, b.serial);  // held while this thread touches the comm
    if (!use) {
      note(gone(b));
    } else if (b.comm->blocking) {
      now.push_back(&b);
    } else {
      // As NCCL: any failure of a non-blocking communicator's group becomes its state, a refused
      // argument included.
      note(run_work(b.comm, [b] { return run_batch(b); }, Settle::every_error));
    }
  }
  if (now.size() == 1) {
    note(run_batch(*now[0]));
  } else if (now.size() > 1) {
    // Several communicators (e.g. one per rank in this process): each waits for its peers, so they
    // must run at the same time.
    std::vector<ncclResult_t> results(now.size(), ncclSuccess);
    run_at_once(now.size(), [&](std::size_t i) { results[i] = run_batch(*now[i]); });
    for (ncclResult_t r : results) note(r);
  }
  note(run_deferred(std::move(g.after)));
  return result;
}

}  // namespace

int group_depth() { return tls_group.depth; }

ncclResult_t group_start() {
  ++tls_group.depth;
  return ncclSuccess;
}

ncclResult_t group_end() {
  if (tls_group.depth == 0)
    return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd: not inside a group (ncclGroupStart missing)");
  if (--tls_group.depth > 0) return ncclSuccess;
  return flush();
}

ncclResult_t group_simulate_end(float* us) {
  if (tls_group.depth == 0)
    return fail(nullptr, ncclInvalidUsage, "ncclGroupSimulateEnd: not inside a group (ncclGroupStart missing)");
  if (--tls_group.depth > 0) return ncclSuccess;
  if (us == nullptr) return discard_group("ncclGroupSimulateEnd: simInfo not set up with NCCL_SIM_INFO_INITIALIZER");
  // Communicators being created are created: the simulation is of the calls only.
  Closed g = close_group();
  if (ncclResult_t r = run_deferred(std::move(g.deferred)); r != ncclSuccess) return r;
  if (g.error != ncclSuccess) {
    fail_batches(g.batches, g.error, g.why);
    return fail(nullptr, g.error, fmt::format("ncclGroupSimulateEnd: a call of the group failed its checks ({})",
                                              ncclGetErrorString(g.error)));
  }
  // Communicators of a group run at the same time: the estimate is the slowest one's.
  double worst = 0;
  for (const Batch& b : g.batches) worst = std::max(worst, b.comm->impl->estimate_us(b.ops, b.p2p));
  *us = static_cast<float>(worst);
  return ncclSuccess;
}

void defer(std::function<ncclResult_t()> work, const ncclComm* creates, const ncclComm* parent) {
  tls_group.deferred.push_back(Deferred{std::move(work), parent});
  if (creates) tls_group.creating.push_back(creates);
}

void defer_after(std::function<ncclResult_t()> work, const ncclComm* comm) {
  tls_group.after.push_back(Deferred{std::move(work), comm});
}

bool created_at_group_end(const ncclComm* comm) {
  return std::find(tls_group.creating.begin(), tls_group.creating.end(), comm) != tls_group.creating.end();
}

ncclResult_t group_failed(ncclResult_t r) {
  if (r != ncclSuccess && tls_group.depth > 0 && tls_group.error == ncclSuccess) {
    tls_group.error = r;
    tls_group.why = last_error();  // the message the failed check just recorded
  }
  return r;
}

// Outside any group a call on a blocking communicator that Purlin serves alone runs at once, straight
// on the datapath, as flush() would run its group of one.
bool runs_now(const ncclComm* comm) { return tls_group.depth == 0 && comm->blocking && !comm->fallback; }

ncclResult_t enqueue(ncclComm* comm, const snac::Op& op, cudaStream_t stream) {
  {
    InUse use(comm);
    if (!use) return group_failed(check_comm("ncclGroupEnd", comm));  // destroyed by another thread meanwhile
    if (runs_now(comm)) return settle(comm, comm->impl->execute({&op, 1}, {}, stream));
    batch_for(comm, stream).ops.push_back(op);
  }
  return tls_group.depth == 0 ? flush() : ncclSuccess;
}

ncclResult_t enqueue_p2p(ncclComm* comm, const snac::PeerOp& p, cudaStream_t stream) {
  {
    InUse use(comm);
    if (!use) return group_failed(check_comm("ncclGroupEnd", comm));
    if (runs_now(comm)) return settle(comm, comm->impl->execute({}, {&p, 1}, stream));
    batch_for(comm, stream).p2p.push_back(p);
  }
  return tls_group.depth == 0 ? flush() : ncclSuccess;
}

}  // namespace purlin::shim
