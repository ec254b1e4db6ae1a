// Abort at every phase, and revoke and shrink, with ranks as processes. Every phase runs --trials
// times with a random delay before the abort, and nothing may hang: ncclCommAbort returns within
// 5 s, the call it interrupts returns within 5 s of it with the result README names, every process
// exits within 60 s, each rank ends with the threads, open files and host windows (memfd files
// open or mapped) it had before it joined, and no /dev/shm files are left.
//
// Phases (--only):
//   init        a rank never arrives: non-blocking init, then ncclCommAbort; once per run also a
//               blocking init that runs into PURLIN_BOOTSTRAP_TIMEOUT
//   init-death  a rank is killed at a random moment of its init: the others fail (in the
//               rendezvous only at PURLIN_BOOTSTRAP_TIMEOUT), nothing is left (20 trials at most)
//   init-kill   every rank is killed at about the same random moment of its first 20 ms (most often
//               inside its init), or, in every other trial, within 2 ms after its init: no process
//               holds any window the ranks had (their memory went with them), nothing is left in
//               /dev/shm (host datapath only)
//   split       one rank never splits: its peers' split ends by a second thread's abort of the
//               parent, or by that rank's own abort (the connection's loss)
//   collective  one rank never joins an AllReduce: a second thread aborts while the first waits in
//               the AllReduce (host: it returns ncclRemoteError) or in its stream synchronisation
//               (GPU: the AllReduce was enqueued, and the stream ends without a CUDA error)
//   group       a communicator aborted inside a group: ncclGroupEnd says so, the group's other
//               communicator gives correct results
//   finalize    finalize then abort or destroy, blocking and non-blocking, after a peer left by
//               destroy or by abort
//   revoke      ncclCommRevoke ends an AllReduce in flight (host: ncclInvalidUsage; GPU: its stream
//               ends and the state stays ncclSuccess), refuses later ones, and the revoked
//               communicator still splits into one that gives correct results
//   shrink      a rank dies (SIGKILL) or hangs; the survivors' ncclCommShrink with
//               NCCL_SHRINK_ABORT ends their calls in flight (a hung rank's: as a revoke does) and
//               gives a communicator of the survivors with correct results
//
//   test_abort [--trials 100] [--ranks 4] [--datapath host|gpu] [--seed N] [--only PHASE,...]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support.h"
#include "test/common/loopback.h"

namespace faults {
namespace {

constexpr double kAbortLimitS = 5;
constexpr double kProcessLimitS = 60;
constexpr double kBootstrapTimeoutS = 10;  // PURLIN_BOOTSTRAP_TIMEOUT for this test
// A second thread acts at least this long after the first began its call, so that the call is
// inside its wait (an abort that comes first is a use of a destroyed communicator instead).
constexpr int kInsideMs = 50;
constexpr int kEveryRank = -2;  // Phase::may_die: every rank may end by SIGKILL
constexpr int kMaxRanks = 64;
constexpr int kWindowsPerRank = 2 * kMaxRanks;  // its own and every peer's, with room to spare

// Shared by the parent and the ranks of one trial: the host windows the ranks held (inodes), so
// that the parent can look for them once every rank is gone.
struct Shared {
  std::atomic<unsigned long> windows[kMaxRanks][kWindowsPerRank];
};

// What a rank gets: its rank, the ids made by the parent, a delay drawn for this trial, and a
// report that names the phase, trial and rank.
struct Env {
  const Options& o;
  int rank;
  int nranks;
  const std::vector<ncclUniqueId>& ids;
  int delay_ms;
  std::uint64_t salt;
  Report& report;
  Shared* shared;
};

// Records the host windows this rank holds now, for the parent to look for after the trial.
void record_windows(Env& e) {
  int k = 0;
  for (unsigned long ino : window_inodes(::getpid()))
    if (k < kWindowsPerRank) e.shared->windows[e.rank][k++].store(ino);
}

// The threads, open files and host windows of a rank before it joins, checked again after it left.
class Baseline {
 public:
  explicit Baseline(bool gpu)
      : threads_((start_cuda(gpu), threads())), fds_(open_fds()), windows_(window_inodes(::getpid()).size()) {}
  void check(Report& report) const {
    const int t = wait_threads(threads_, 2);
    report.check(t == threads_, "threads: " + std::to_string(t) + " at the end, " + std::to_string(threads_) + " at the start");
    const int f = open_fds();
    report.check(f == fds_, "open files: " + std::to_string(f) + " at the end, " + std::to_string(fds_) + " at the start");
    const std::size_t w = window_inodes(::getpid()).size();
    report.check(w == windows_, "host windows open or mapped: " + std::to_string(w) + " at the end, " +
                                    std::to_string(windows_) + " at the start");
  }

 private:
  int threads_;
  int fds_;
  std::size_t windows_;
};

double timed(const std::function<void()>& fn) {
  const double t0 = now_s();
  fn();
  return now_s() - t0;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

ncclConfig_t non_blocking() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  return c;
}

// ncclCommAbort within the limit.
void abort_in_time(Env& e, ncclComm_t comm, const std::string& what) {
  const double s = timed([&] { e.report.expect(ncclCommAbort(comm), ncclSuccess, what); });
  e.report.check(s <= kAbortLimitS, what + " took " + std::to_string(s) + " s");
}

// A call on thread A that cannot complete (a peer never joins it); thread B aborts, revokes or
// shrinks after the delay. Returns the call's result; checks it ended within the limit of B's act.
ncclResult_t interrupt(Env& e, const std::function<ncclResult_t()>& call, const std::function<void()>& act,
                       const std::string& what) {
  std::atomic<double> acted_at{0};
  std::thread b([&] {
    sleep_ms(kInsideMs + e.delay_ms);
    acted_at.store(now_s());
    act();
  });
  const ncclResult_t r = call();
  const double returned = now_s();
  b.join();
  const double late = returned - acted_at.load();
  e.report.check(acted_at.load() > 0, what + " returned " + name_of(r) + " before it was interrupted");
  e.report.check(late <= kAbortLimitS, what + " returned " + std::to_string(late) + " s after it was interrupted");
  return r;
}

// ---- phases ----------------------------------------------------------------------------------------

// nranks - 1 processes run this: the last rank never arrives.
int phase_init(Env& e) {
  const Baseline base(e.o.gpu);
  ncclConfig_t cfg = non_blocking();
  ncclComm_t comm = nullptr;
  e.report.expect(ncclCommInitRankConfig(&comm, e.nranks, e.ids[0], e.rank, &cfg), ncclInProgress,
                  "non-blocking ncclCommInitRankConfig");
  if (!comm) return e.report.exit_code();
  sleep_ms(e.delay_ms);
  ncclResult_t state = ncclSuccess;
  e.report.expect(ncclCommGetAsyncError(comm, &state), ncclSuccess, "ncclCommGetAsyncError");
  e.report.expect(state, ncclInProgress, "the state of an init a rank never arrives at");
  abort_in_time(e, comm, "ncclCommAbort during init");
  base.check(e.report);
  return e.report.exit_code();
}

int phase_init_blocking(Env& e) {
  const Baseline base(e.o.gpu);
  ncclComm_t comm = nullptr;
  const double s = timed([&] {
    ncclResult_t r = ncclCommInitRank(&comm, e.nranks, e.ids[0], e.rank);
    e.report.check(r == ncclRemoteError || r == ncclSystemError,
                   std::string("blocking init without a rank returned ") + name_of(r));
  });
  e.report.check(comm == nullptr, "a failed blocking init left a communicator");
  e.report.check(s <= kBootstrapTimeoutS + 5, "blocking init without a rank took " + std::to_string(s) + " s");
  base.check(e.report);
  return e.report.exit_code();
}

// The last rank is killed (SIGKILL) at a random moment of its init, or just after; the others
// must fail with ncclRemoteError, in init or in the AllReduce that follows, and leave nothing
// behind: a rank killed between creating its shared-memory window and the unlink after the
// exchange leaves the name to the survivors.
int phase_init_death(Env& e) {
  cudaStream_t stream = make_stream(e.o.gpu);
  const Baseline base(e.o.gpu);
  const int last = e.nranks - 1;
  if (e.rank == last) {
    const int after_us = static_cast<int>(e.salt % 30000);
    std::thread([after_us] {
      std::this_thread::sleep_for(std::chrono::microseconds(after_us));
      ::raise(SIGKILL);
    }).detach();
  }
  ncclComm_t comm = nullptr;
  const double started = now_s();
  ncclResult_t r = ncclCommInitRank(&comm, e.nranks, e.ids[0], e.rank);
  if (r == ncclSuccess) {
    const double until = now_s() + kProcessLimitS / 2;
    while (r == ncclSuccess && now_s() < until)
      r = checked_allreduce(e.o.gpu, comm, stream, e.rank, e.nranks, 1000, e.salt, e.report, "AllReduce", false);
    e.report.expect(r, ncclRemoteError, "the first call to fail after the peer's death", comm);
    abort_in_time(e, comm, "ncclCommAbort after the peer's death");
  } else {
    e.report.check(r == ncclRemoteError || r == ncclSystemError,
                   std::string("ncclCommInitRank with a peer killed during it returned ") + name_of(r));
    e.report.check(now_s() - started <= kBootstrapTimeoutS + 5,
                   "the failed init took " + std::to_string(now_s() - started) + " s");
    e.report.check(comm == nullptr, "a failed init left a communicator");
  }
  base.check(e.report);
  destroy_stream(e.o.gpu, stream);
  return e.report.exit_code();
}

int phase_split(Env& e, bool by_thread) {
  const Baseline base(e.o.gpu);
  ncclComm_t comm = nullptr;
  if (!e.report.expect(ncclCommInitRank(&comm, e.nranks, e.ids[0], e.rank), ncclSuccess, "ncclCommInitRank"))
    return 1;
  const int last = e.nranks - 1;
  if (e.rank == last) {
    // Never splits: leaves by abort (its peers see the connection go) or waits for their aborts.
    if (!by_thread) sleep_ms(e.delay_ms);
    else sleep_ms(e.delay_ms + 200);
    abort_in_time(e, comm, "ncclCommAbort of the rank that does not split");
  } else if (by_thread) {
    ncclComm_t child = nullptr;
    ncclResult_t r = interrupt(
        e, [&] { return ncclCommSplit(comm, 0, e.rank, &child, nullptr); },
        [&] { abort_in_time(e, comm, "ncclCommAbort of the parent from a second thread"); }, "ncclCommSplit");
    e.report.check(r != ncclSuccess && child == nullptr,
                   std::string("the aborted split returned ") + name_of(r) + (child ? " and a communicator" : ""));
  } else {
    ncclComm_t child = nullptr;
    const double s = timed([&] {
      ncclResult_t r = ncclCommSplit(comm, 0, e.rank, &child, nullptr);
      e.report.expect(r, ncclRemoteError, "ncclCommSplit with a peer that aborted", comm);
    });
    e.report.check(s <= e.delay_ms / 1000.0 + kAbortLimitS, "the split ended " + std::to_string(s) + " s after it began");
    e.report.check(child == nullptr, "a failed split returned a communicator");
    abort_in_time(e, comm, "ncclCommAbort after the failed split");
  }
  base.check(e.report);
  return e.report.exit_code();
}

int phase_collective(Env& e) {
  cudaStream_t stream = make_stream(e.o.gpu);
  const std::size_t count = 1 + e.salt % 100000;
  auto send = std::make_unique<Buffer>(e.o.gpu, count * sizeof(float));
  auto recv = std::make_unique<Buffer>(e.o.gpu, count * sizeof(float));
  const Baseline base(e.o.gpu);
  ncclComm_t comm = nullptr;
  if (!e.report.expect(ncclCommInitRank(&comm, e.nranks, e.ids[0], e.rank), ncclSuccess, "ncclCommInitRank"))
    return 1;
  const int last = e.nranks - 1;
  if (e.rank == last) {
    sleep_ms(e.delay_ms + 100);  // never joins; leaves once its peers have aborted
    abort_in_time(e, comm, "ncclCommAbort of the rank that does not join");
  } else {
    ncclResult_t r = interrupt(
        e,
        [&] {
          ncclResult_t c = ncclAllReduce(send->data(), recv->data(), count, ncclFloat32, ncclSum, comm, stream);
#if defined(PURLIN_HAVE_CUDA)
          // The GPU datapath enqueues and returns: the first thread waits in the stream instead.
          if (e.o.gpu && c == ncclSuccess) c = cudaStreamSynchronize(stream) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
#endif
          return c;
        },
        [&] { abort_in_time(e, comm, "ncclCommAbort from a second thread"); },
        e.o.gpu ? "the stream synchronisation" : "ncclAllReduce");
    // Host: the AllReduce itself waits, and the abort ends it with ncclRemoteError. GPU: the
    // AllReduce returned once enqueued and the wait is the stream's; the abort ends its kernel, so
    // the stream finishes without a CUDA error (the communicator is gone: no state to ask).
    if (e.o.gpu) e.report.expect(r, ncclSuccess, "the AllReduce enqueued and its stream after the abort");
    else e.report.expect(r, ncclRemoteError, "the aborted ncclAllReduce");
  }
  send.reset();
  recv.reset();
  base.check(e.report);
  destroy_stream(e.o.gpu, stream);
  return e.report.exit_code();
}

int phase_group(Env& e) {
  cudaStream_t stream = make_stream(e.o.gpu);
  const Baseline base(e.o.gpu);
  ncclComm_t a = nullptr, b = nullptr;
  if (!e.report.expect(ncclCommInitRank(&a, e.nranks, e.ids[0], e.rank), ncclSuccess, "ncclCommInitRank a") ||
      !e.report.expect(ncclCommInitRank(&b, e.nranks, e.ids[1], e.rank), ncclSuccess, "ncclCommInitRank b"))
    return 1;
  const std::size_t count = 1 + e.salt % 5000;
  std::vector<float> in(count), out(count, -1.0f);
  for (std::size_t i = 0; i < count; ++i) in[i] = value(e.salt, e.rank, i);
  Buffer sa(e.o.gpu, count * sizeof(float)), ra(e.o.gpu, count * sizeof(float));
  Buffer sb(e.o.gpu, count * sizeof(float)), rb(e.o.gpu, count * sizeof(float));
  sa.upload(in.data(), count * sizeof(float));
  sb.upload(in.data(), count * sizeof(float));
  rb.upload(out.data(), count * sizeof(float));
  e.report.expect(ncclGroupStart(), ncclSuccess, "ncclGroupStart");
  e.report.expect(ncclAllReduce(sa.data(), ra.data(), count, ncclFloat32, ncclSum, a, stream), ncclSuccess, "AllReduce a");
  e.report.expect(ncclAllReduce(sb.data(), rb.data(), count, ncclFloat32, ncclSum, b, stream), ncclSuccess, "AllReduce b");
  sleep_ms(e.delay_ms % 50);
  abort_in_time(e, a, "ncclCommAbort inside the group");
  const double s = timed([&] {
    e.report.expect(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd after an abort inside the group");
  });
  e.report.check(s <= kAbortLimitS, "ncclGroupEnd took " + std::to_string(s) + " s");
  const char* last = ncclGetLastError(nullptr);
  e.report.check(last && *last, "ncclGetLastError is empty after ncclGroupEnd failed");
  e.report.expect(settle(e.o.gpu, b, stream, 60), ncclSuccess, "the group's AllReduce on the other communicator");
  rb.download(out.data(), count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < e.nranks; ++q) want += value(e.salt, q, i);
    if (!e.report.check(out[i] == want, "the other communicator's AllReduce is wrong at " + std::to_string(i))) break;
  }
  checked_allreduce(e.o.gpu, b, stream, e.rank, e.nranks, 100, e.salt + 1, e.report, "AllReduce on b after the group");
  e.report.expect(ncclCommDestroy(b), ncclSuccess, "ncclCommDestroy b");
  base.check(e.report);
  destroy_stream(e.o.gpu, stream);
  return e.report.exit_code();
}

// The last rank leaves first, by destroy (a farewell) or by abort (its peers may notice the loss
// and then answer ncclRemoteError, as NCCL does for a failed communicator: abort it).
int phase_finalize(Env& e, int variant) {
  cudaStream_t stream = make_stream(e.o.gpu);  // before the baseline: the CUDA runtime's threads
  const Baseline base(e.o.gpu);
  const bool nb = variant & 1;            // non-blocking communicator
  const bool destroy = variant & 2;       // destroy, else abort, after finalize
  const bool last_aborts = variant & 4;   // the rank that leaves early aborts, else destroys
  ncclConfig_t cfg = non_blocking();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, e.nranks, e.ids[0], e.rank, nb ? &cfg : nullptr);
  e.report.expect(r, nb ? ncclInProgress : ncclSuccess, "ncclCommInitRankConfig");
  if (!comm) return 1;
  if (nb) e.report.expect(poll_state(comm, 60), ncclSuccess, "the non-blocking init");
  checked_allreduce(e.o.gpu, comm, stream, e.rank, e.nranks, 1000, e.salt, e.report, "AllReduce before finalize");
  const int last = e.nranks - 1;
  if (e.rank == last) {
    if (last_aborts) abort_in_time(e, comm, "ncclCommAbort of the rank that leaves early");
    else e.report.expect(ncclCommDestroy(comm), ncclSuccess, "ncclCommDestroy of the rank that leaves early");
  } else {
    sleep_ms(e.delay_ms % 100);
    r = ncclCommFinalize(comm);
    if (r == ncclInProgress && nb) r = poll_state(comm, kAbortLimitS);
    if (last_aborts && r == ncclRemoteError) {
      abort_in_time(e, comm, "ncclCommAbort of a communicator whose peer aborted");
    } else {
      e.report.expect(r, ncclSuccess, nb ? "the non-blocking ncclCommFinalize" : "ncclCommFinalize", comm);
      e.report.expect(ncclCommFinalize(comm), ncclInvalidArgument, "a second ncclCommFinalize");
      if (destroy) {
        const double s = timed([&] { e.report.expect(ncclCommDestroy(comm), ncclSuccess, "ncclCommDestroy after finalize"); });
        e.report.check(s <= kAbortLimitS, "ncclCommDestroy after finalize took " + std::to_string(s) + " s");
      } else {
        abort_in_time(e, comm, "ncclCommAbort after finalize");
      }
    }
  }
  base.check(e.report);
  destroy_stream(e.o.gpu, stream);
  return e.report.exit_code();
}

int phase_revoke(Env& e) {
  cudaStream_t stream = make_stream(e.o.gpu);
  const std::size_t count = 1 + e.salt % 50000;
  auto send = std::make_unique<Buffer>(e.o.gpu, count * sizeof(float));
  auto recv = std::make_unique<Buffer>(e.o.gpu, count * sizeof(float));
  const Baseline base(e.o.gpu);
  ncclComm_t comm = nullptr;
  if (!e.report.expect(ncclCommInitRank(&comm, e.nranks, e.ids[0], e.rank), ncclSuccess, "ncclCommInitRank"))
    return 1;
  const int last = e.nranks - 1;
  if (e.rank == last) {
    e.report.expect(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclSuccess, "ncclCommRevoke with nothing in flight");
  } else {
    ncclResult_t r = interrupt(
        e,
        [&] {
          ncclResult_t c = ncclAllReduce(send->data(), recv->data(), count, ncclFloat32, ncclSum, comm, stream);
          if (e.o.gpu && c == ncclSuccess) c = settle(true, comm, stream, 60);
          return c;
        },
        [&] {
          const double s = timed([&] { e.report.expect(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclSuccess, "ncclCommRevoke"); });
          e.report.check(s <= kAbortLimitS, "ncclCommRevoke took " + std::to_string(s) + " s");
        },
        "the revoked AllReduce");
    // Host: the AllReduce in flight returns ncclInvalidUsage. GPU: it returned once enqueued; the
    // revoke ends its kernel and the state stays ncclSuccess, so the wait for it (settle) ends with
    // ncclSuccess, neither a CUDA error nor its timeout.
    if (e.o.gpu) e.report.expect(r, ncclSuccess, "the AllReduce enqueued and its stream after the revoke");
    else e.report.expect(r, ncclInvalidUsage, "the AllReduce in flight at the revoke");
  }
  ncclResult_t state = ncclInternalError;
  e.report.expect(ncclCommGetAsyncError(comm, &state), ncclSuccess, "ncclCommGetAsyncError");
  e.report.expect(state, ncclSuccess, "the state of a revoked communicator");
  e.report.expect(ncclAllReduce(send->data(), recv->data(), count, ncclFloat32, ncclSum, comm, stream), ncclInvalidUsage,
                  "ncclAllReduce after the revoke");
  e.report.expect(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclInvalidArgument, "a second ncclCommRevoke");
  e.report.expect(ncclCommFinalize(comm), ncclInvalidArgument, "ncclCommFinalize after the revoke");
  // The revoked communicator's bootstrap still serves a split, whose child works.
  ncclComm_t child = nullptr;
  if (e.report.expect(ncclCommSplit(comm, 0, e.nranks - e.rank, &child, nullptr), ncclSuccess, "ncclCommSplit of the revoked communicator")) {
    int crank = -1;
    e.report.expect(ncclCommUserRank(child, &crank), ncclSuccess, "ncclCommUserRank");
    e.report.check(crank == e.nranks - 1 - e.rank, "the split's keys reverse the ranks");
    checked_allreduce(e.o.gpu, child, stream, crank, e.nranks, 1 + e.salt % 30000, e.salt, e.report, "AllReduce on the split");
    e.report.expect(ncclCommDestroy(child), ncclSuccess, "ncclCommDestroy of the split");
  }
  e.report.expect(ncclCommDestroy(comm), ncclSuccess, "ncclCommDestroy of the revoked communicator");
  send.reset();
  recv.reset();
  base.check(e.report);
  destroy_stream(e.o.gpu, stream);
  return e.report.exit_code();
}

// Every rank kills itself (SIGKILL) at one random moment of the first 20 ms (each within 0.2 ms
// of it), most often inside the init; in odd trials instead at a random moment of the 2 ms after
// its init returned, so that every rank surely holds its own and its peers' windows. No rank lives
// on to clean up after the others: the parent then checks that no process holds any window a rank
// recorded (the memory went with the last process) and that nothing is left in /dev/shm.
int phase_init_kill(Env& e, bool after_init) {
  cudaStream_t stream = make_stream(e.o.gpu);
  auto kill_after = [](int us) {
    std::thread([us] {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
      ::raise(SIGKILL);
    }).detach();
  };
  if (!after_init) kill_after(static_cast<int>(e.salt % 20000 + (e.salt >> (16 + 4 * e.rank)) % 200));
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, e.nranks, e.ids[0], e.rank);
  if (r == ncclSuccess) record_windows(e);
  if (after_init) {
    e.report.expect(r, ncclSuccess, "ncclCommInitRank", comm);
    kill_after(static_cast<int>((e.salt >> (4 * e.rank)) % 2000));
  }
  while (r == ncclSuccess)
    r = checked_allreduce(e.o.gpu, comm, stream, e.rank, e.nranks, 1000, e.salt, e.report, "AllReduce", false);
  for (;;) sleep_ms(1000);  // a peer's death ended the calls: this rank's own kill is due
}

// The last rank dies (SIGKILL) mid-loop, or hangs; the survivors shrink it away with abort.
int phase_shrink(Env& e, bool dies) {
  cudaStream_t stream = make_stream(e.o.gpu);
  const std::size_t count = 1 + e.salt % 100000;
  auto send = std::make_unique<Buffer>(e.o.gpu, count * sizeof(float));
  auto recv = std::make_unique<Buffer>(e.o.gpu, count * sizeof(float));
  const Baseline base(e.o.gpu);
  ncclComm_t comm = nullptr;
  if (!e.report.expect(ncclCommInitRank(&comm, e.nranks, e.ids[0], e.rank), ncclSuccess, "ncclCommInitRank"))
    return 1;
  const int last = e.nranks - 1;
  const int death_at = e.delay_ms % 40;
  if (e.rank == last) {
    if (dies) {
      for (int it = 0; it < death_at; ++it) ncclAllReduce(send->data(), recv->data(), count, ncclFloat32, ncclSum, comm, stream);
      ::raise(SIGKILL);
    }
    sleep_ms(e.delay_ms + 300);  // hangs: never joins again, then leaves
    abort_in_time(e, comm, "ncclCommAbort of the hung rank");
    base.check(e.report);
    return e.report.exit_code();
  }
  int excluded[1] = {last};
  ncclComm_t shrunk = nullptr;
  auto shrink = [&] {
    const double s = timed([&] {
      e.report.expect(ncclCommShrink(comm, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_ABORT), ncclSuccess,
                      "ncclCommShrink with NCCL_SHRINK_ABORT", comm);
    });
    e.report.check(s <= kAbortLimitS, "ncclCommShrink took " + std::to_string(s) + " s");
  };
  if (dies) {
    ncclResult_t r = ncclSuccess;
    for (int it = 0; r == ncclSuccess && it < 100000; ++it) {
      r = ncclAllReduce(send->data(), recv->data(), count, ncclFloat32, ncclSum, comm, stream);
      if (r == ncclSuccess) r = settle(e.o.gpu, comm, stream, 60);
    }
    e.report.expect(r, ncclRemoteError, "the AllReduce loop when a peer dies");
    shrink();
  } else {
    const ncclResult_t r = interrupt(
        e,
        [&] {
          ncclResult_t c = ncclAllReduce(send->data(), recv->data(), count, ncclFloat32, ncclSum, comm, stream);
          if (e.o.gpu && c == ncclSuccess) c = settle(true, comm, stream, 60);
          return c;
        },
        shrink, "the AllReduce in flight at the shrink");
    // NCCL_SHRINK_ABORT revokes the parent first: the call in flight ends as in the revoke phase.
    if (e.o.gpu) e.report.expect(r, ncclSuccess, "the AllReduce enqueued and its stream after the shrink");
    else e.report.expect(r, ncclInvalidUsage, "the AllReduce in flight at the shrink");
  }
  if (shrunk) {
    int n = 0, r = -1;
    e.report.expect(ncclCommCount(shrunk, &n), ncclSuccess, "ncclCommCount");
    e.report.expect(ncclCommUserRank(shrunk, &r), ncclSuccess, "ncclCommUserRank");
    e.report.check(n == e.nranks - 1 && r == e.rank, "the survivors' communicator is rank " + std::to_string(r) + " of " + std::to_string(n));
    for (std::size_t c : {std::size_t{1}, std::size_t{777}, count})
      checked_allreduce(e.o.gpu, shrunk, stream, r, n, c, e.salt + c, e.report, "AllReduce among the survivors");
    e.report.expect(ncclCommDestroy(shrunk), ncclSuccess, "ncclCommDestroy of the survivors' communicator");
  }
  abort_in_time(e, comm, "ncclCommAbort of the shrunk communicator");
  send.reset();
  recv.reset();
  base.check(e.report);
  destroy_stream(e.o.gpu, stream);
  return e.report.exit_code();
}

// ---- trials ----------------------------------------------------------------------------------------

struct Phase {
  std::string name;
  int processes_short = 0;  // processes not started (a rank that never arrives)
  int ids = 1;
  int may_die = -1;         // a rank that may end by SIGKILL (kEveryRank: each of them)
  std::function<int(Env&, int trial)> body;
  bool (*records_windows)(int trial) = nullptr;  // trials whose ranks all record their host windows
};

// `windows_seen` (when given) adds the number of host windows the ranks recorded.
bool run_trial(const Options& o, const Phase& p, int t, std::mt19937_64& rng, std::size_t* windows_seen = nullptr) {
  Report report(p.name + " trial " + std::to_string(t));
  std::vector<ncclUniqueId> ids(p.ids);
  for (auto& id : ids)
    if (!report.expect(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId")) return false;
  const int delay_ms = static_cast<int>(rng() % 300);
  const std::uint64_t salt = rng();
  const int processes = o.ranks - p.processes_short;
  const std::set<std::string> shm_before = shm_names();
  static Shared* const shared = shared_object<Shared>();  // one block for every trial, cleared before each
  for (auto& rank_windows : shared->windows)
    for (auto& w : rank_windows) w.store(0);
  ranks::Group group(processes, [&](int r) {
    Report rep(p.name + " trial " + std::to_string(t) + " rank " + std::to_string(r));
    Env e{o, r, o.ranks, ids, delay_ms, salt, rep, shared};
    return p.body(e, t);
  });
  report.check(group.wait(ranks::Clock::now() + ranks::seconds(kProcessLimitS)) == ranks::Stop::none,
               "ranks still running after " + std::to_string(kProcessLimitS) + " s");
  std::vector<pid_t> pids;
  for (int r = 0; r < processes; ++r) {
    pids.push_back(group[r].pid);
    const bool may_die = r == p.may_die || p.may_die == kEveryRank;
    const bool ok = group[r].ok() || (may_die && group[r].signal() == SIGKILL);
    report.check(ok, "rank " + std::to_string(r) + ": " + ranks::describe(group[r]));
  }
  const auto left = shm_files(pids, shm_before);
  report.check(left.empty(), "shared-memory files left: " + (left.empty() ? std::string() : left.front()));
  // The windows the ranks recorded: once they have all exited, no process may hold one.
  std::set<unsigned long> windows;
  for (int r = 0; r < processes; ++r)
    for (int k = 0; k < kWindowsPerRank; ++k)
      if (const unsigned long ino = shared->windows[r][k].load()) windows.insert(ino);
  if (p.records_windows && p.records_windows(t)) report.check(!windows.empty(), "the ranks recorded no host window");
  for (pid_t holder : window_holders(windows))
    report.check(false, "process " + std::to_string(holder) + " still holds a window of the trial's ranks");
  if (windows_seen) *windows_seen += windows.size();
  return report.failures() == 0;
}

}  // namespace
}  // namespace faults

int main(int argc, char** argv) {
  using namespace faults;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  ::setenv("PURLIN_BOOTSTRAP_TIMEOUT", std::to_string(kBootstrapTimeoutS).c_str(), 1);
  Options defaults;
  defaults.trials = 2;
  const Options o = parse_options(argc, argv, defaults);
  select_datapath(o);
  std::printf("abort: %d trials per phase, %d ranks, %s datapath, seed %llu\n", o.trials, o.ranks,
              o.gpu ? "gpu" : "host", static_cast<unsigned long long>(o.seed));
  const std::vector<Phase> phases = {
      {"init", 1, 1, -1, [](Env& e, int) { return phase_init(e); }},
      {"split", 0, 1, -1, [](Env& e, int t) { return phase_split(e, t % 2 == 0); }},
      {"collective", 0, 1, -1, [](Env& e, int) { return phase_collective(e); }},
      {"group", 0, 2, -1, [](Env& e, int) { return phase_group(e); }},
      {"finalize", 0, 1, -1, [](Env& e, int t) { return phase_finalize(e, t % 8); }},
      {"revoke", 0, 1, -1, [](Env& e, int) { return phase_revoke(e); }},
  };
  std::mt19937_64 rng(o.seed);
  int failed = 0, ran = 0;
  const double started = now_s();
  auto run = [&](const Phase& p, int trials) {
    if (!selected(o, p.name)) return;
    const double t0 = now_s();
    int bad = 0;
    std::size_t windows = 0;
    for (int t = 0; t < trials; ++t)
      if (!run_trial(o, p, t, rng, &windows)) ++bad;
    std::printf("%-16s %d of %d trials passed in %.1f s", p.name.c_str(), trials - bad, trials, now_s() - t0);
    if (windows) std::printf(" (%zu host windows of ranks looked for afterwards)", windows);
    std::printf("\n");
    failed += bad;
    ran += trials;
  };
  for (const Phase& p : phases) run(p, o.trials);
  // A kill inside the rendezvous costs the survivors PURLIN_BOOTSTRAP_TIMEOUT: at most 20 trials.
  run({"init-death", 0, 1, o.ranks - 1, [](Env& e, int) { return phase_init_death(e); }}, std::min(o.trials, 20));
  // The host datapath's windows are memfd files that could outlive their ranks; the GPU's are cuMem
  // or CUDA IPC memory, and killing every client of an MPS server at once is not a test of this
  // library.
  if (!o.gpu)
    run({"init-kill", 0, 1, kEveryRank, [](Env& e, int t) { return phase_init_kill(e, t % 2 == 1); },
         [](int t) { return t % 2 == 1; }},
        o.trials);
  else if (selected(o, "init-kill")) std::printf("%-16s skipped: host datapath only\n", "init-kill");
  // A rank that dies on every trial (SIGKILL) and one that hangs, alternately.
  run({"shrink", 0, 1, o.ranks - 1, [](Env& e, int t) { return phase_shrink(e, t % 2 == 0); }}, o.trials);
  // One blocking init against the bootstrap timeout per run: it takes kBootstrapTimeoutS.
  run({"init-blocking", 1, 1, -1, [](Env& e, int) { return phase_init_blocking(e); }}, std::min(o.trials, 1));
  std::printf("abort: %d of %d trials passed in %.1f s\n", ran - failed, ran, now_s() - started);
  return failed == 0 ? 0 : 1;
}
