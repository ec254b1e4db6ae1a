// Non-blocking communicators (config.blocking = 0), ranks as processes: every call that can
// answer ncclInProgress does (init, init scalable, every collective, a Send/Recv group and a group
// of collectives, split, shrink, finalize, revoke), polling ncclCommGetAsyncError completes it
// with correct results, and the poll is a plain load: it answers at once, from any thread, while
// the work it reports on waits for a peer. While work is in flight the communicator refuses to be
// used (ncclInvalidArgument, as NCCL). A bad argument to a collective puts the communicator in the
// error state, as NCCL does: alone, or inside a group, where every non-blocking communicator of
// the failed group takes the error and none of its calls runs; ncclCommDestroy then returns the
// error and frees nothing, and ncclCommAbort frees it.
//
// Rank 0 makes each collective call only once every other rank has checked that its own call is
// still in flight (it cannot finish without rank 0), so the checks never race the work.
//
//   test_nonblocking [--trials N] [--ranks 4] [--datapath host|gpu] [--seed N]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

constexpr int kSteps = 64;
// A poll is a load: even on a loaded machine it answers far below this.
constexpr double kPollLimitS = 0.05;

struct Board {
  std::atomic<int> checked[kSteps];  // ranks other than 0 that checked their call is in flight
  std::atomic<double> longest_poll{0};
  std::atomic<int> bad_arguments_done{0};  // ranks done with the bad-argument checks
};

void record_max(std::atomic<double>& a, double v) {
  double cur = a.load();
  while (v > cur && !a.compare_exchange_weak(cur, v)) {
  }
}

ncclConfig_t non_blocking() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  return c;
}

// One collective: how to issue it and what each rank's output must be.
struct Coll {
  std::string name;
  std::size_t send_elems, recv_elems;  // per rank, in units of `count`
  bool needs_rank0;  // every other rank's call waits for rank 0's data
  std::function<ncclResult_t(const void*, void*, std::size_t, ncclComm_t, cudaStream_t, int rank, int n)> issue;
  std::function<float(std::uint64_t salt, int rank, int n, std::size_t c, std::size_t i)> input;
  // The expected output element i; NaN-free, so "no expectation" is said by `checks`.
  std::function<float(std::uint64_t salt, int rank, int n, std::size_t c, std::size_t i)> output;
  std::function<bool(int rank)> checks;
};

float sum_over(std::uint64_t salt, int n, std::size_t i) {
  float s = 0;
  for (int q = 0; q < n; ++q) s += value(salt, q, i);
  return s;
}

std::vector<Coll> collectives() {
  auto always = [](int) { return true; };
  auto root_only = [](int r) { return r == 0; };
  auto own = [](std::uint64_t s, int r, int, std::size_t, std::size_t i) { return value(s, r, i); };
  return {
      {"AllReduce", 1, 1, true,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclAllReduce(s, d, c, ncclFloat32, ncclSum, m, st);
       },
       own, [](std::uint64_t s, int, int n, std::size_t, std::size_t i) { return sum_over(s, n, i); }, always},
      {"Broadcast", 1, 1, true,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclBroadcast(s, d, c, ncclFloat32, 0, m, st);
       },
       own, [](std::uint64_t s, int, int, std::size_t, std::size_t i) { return value(s, 0, i); }, always},
      {"Reduce", 1, 1, false,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclReduce(s, d, c, ncclFloat32, ncclSum, 0, m, st);
       },
       own, [](std::uint64_t s, int, int n, std::size_t, std::size_t i) { return sum_over(s, n, i); }, root_only},
      {"AllGather", 1, 0, true,  // recv: n * count
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclAllGather(s, d, c, ncclFloat32, m, st);
       },
       own, [](std::uint64_t s, int, int, std::size_t c, std::size_t i) { return value(s, static_cast<int>(i / c), i % c); },
       always},
      {"ReduceScatter", 0, 1, true,  // send: n * count
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclReduceScatter(s, d, c, ncclFloat32, ncclSum, m, st);
       },
       own, [](std::uint64_t s, int r, int n, std::size_t c, std::size_t i) { return sum_over(s, n, r * c + i); }, always},
      {"AlltoAll", 0, 0, true,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclAlltoAll(s, d, c, ncclFloat32, m, st);
       },
       own, [](std::uint64_t s, int r, int, std::size_t c, std::size_t i) { return value(s, static_cast<int>(i / c), r * c + i % c); },
       always},
      {"Gather", 1, 0, false,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclGather(s, d, c, ncclFloat32, 0, m, st);
       },
       own, [](std::uint64_t s, int, int, std::size_t c, std::size_t i) { return value(s, static_cast<int>(i / c), i % c); },
       root_only},
      {"Scatter", 0, 1, true,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         return ncclScatter(s, d, c, ncclFloat32, 0, m, st);
       },
       own, [](std::uint64_t s, int r, int, std::size_t c, std::size_t i) { return value(s, 0, r * c + i); }, always},
      {"SendRecv ring", 1, 1, false,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int r, int n) {
         ncclGroupStart();
         ncclSend(s, c, ncclFloat32, (r + 1) % n, m, st);
         ncclRecv(d, c, ncclFloat32, (r + n - 1) % n, m, st);
         return ncclGroupEnd();
       },
       own, [](std::uint64_t s, int r, int n, std::size_t, std::size_t i) { return value(s, (r + n - 1) % n, i); },
       always},
      {"group of two AllReduces", 1, 1, true,
       [](const void* s, void* d, std::size_t c, ncclComm_t m, cudaStream_t st, int, int) {
         ncclGroupStart();
         ncclAllReduce(s, d, c / 2, ncclFloat32, ncclSum, m, st);
         ncclAllReduce(static_cast<const float*>(s) + c / 2, static_cast<float*>(d) + c / 2, c - c / 2, ncclFloat32,
                       ncclSum, m, st);
         return ncclGroupEnd();
       },
       own, [](std::uint64_t s, int, int n, std::size_t, std::size_t i) { return sum_over(s, n, i); }, always},
  };
}

class RankRun {
 public:
  RankRun(const Options& o, int rank, const std::vector<ncclUniqueId>& ids, Board* board, std::uint64_t salt, Report& r)
      : o_(o), rank_(rank), n_(o.ranks), ids_(ids), board_(board), salt_(salt), report_(r) {}

  int run();

 private:
  // Issues `call` and expects ncclInProgress; with `others` > 0 rank 0 calls only once that many
  // other ranks have checked that their call is in flight (it waits for rank 0). Then polls the
  // communicator `watch()` names (read after the call, which may create it) until it settles.
  // `on_stream`: a collective on the GPU datapath, which is done for the host once its kernel is
  // enqueued (ncclSuccess, as NCCL), while the kernel waits on the stream for rank 0's.
  void step(const std::string& what, int others, const std::function<ncclResult_t()>& call,
            const std::function<ncclComm_t()>& watch, bool on_stream = false);
  // A step this rank takes no part in (keeps the step numbers of every rank in line).
  void skip_step() { ++step_; }
  void collective(const Coll& c, ncclComm_t comm, std::size_t count);
  void bad_arguments();

  const Options& o_;
  int rank_, n_;
  const std::vector<ncclUniqueId>& ids_;
  Board* board_;
  std::uint64_t salt_;
  Report& report_;
  int step_ = 0;
  cudaStream_t stream_ = nullptr;
};

void RankRun::step(const std::string& what, int others, const std::function<ncclResult_t()>& call,
                   const std::function<ncclComm_t()>& watch_fn, bool on_stream) {
  const int k = step_++;
  if (!report_.check(k < kSteps, what + ": more steps than the board holds")) return;
  if (others > 0 && rank_ == 0) {
    const double until = now_s() + 60;
    while (board_->checked[k].load() < others && now_s() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    report_.check(board_->checked[k].load() == others, what + ": the other ranks did not all check their call");
  }
  report_.expect(call(), ncclInProgress, what);
  const ncclComm_t watch = watch_fn();
  if (!report_.check(watch != nullptr, what + " gave no communicator to watch")) return;
  if (others > 0 && rank_ != 0 && on_stream) {
    double longest = 0;
    report_.expect(poll_state(watch, 60, &longest), ncclSuccess, what + " enqueued", watch);
    record_max(board_->longest_poll, longest);
    report_.check(stream_pending(true, stream_), what + ": the stream finished while rank 0 has not called");
    board_->checked[k].fetch_add(1);
  } else if (others > 0 && rank_ != 0) {
    // The work waits for rank 0, which has not called yet: the state must say so at once, from
    // this thread and from another, and the communicator must refuse to be used.
    std::atomic<double> longest{0};
    auto poll_many = [&] {
      for (int i = 0; i < 200; ++i) {
        ncclResult_t s = ncclSuccess;
        const double t0 = now_s();
        ncclResult_t r = ncclCommGetAsyncError(watch, &s);
        record_max(longest, now_s() - t0);
        if (r != ncclSuccess || s != ncclInProgress) {
          report_.check(false, what + ": the state while rank 0 has not called is " + name_of(s) + " (call " +
                                   name_of(r) + "), expected ncclInProgress");
          return;
        }
      }
    };
    std::thread other(poll_many);
    poll_many();
    other.join();
    record_max(board_->longest_poll, longest.load());
    report_.check(longest.load() < kPollLimitS, what + ": a poll took " + std::to_string(longest.load()) + " s");
    int count = 0;
    report_.expect(ncclCommCount(watch, &count), ncclInvalidArgument, what + ": ncclCommCount while in flight");
    board_->checked[k].fetch_add(1);
  }
  double longest = 0;
  report_.expect(poll_state(watch, 60, &longest), ncclSuccess, what + " settling", watch);
  record_max(board_->longest_poll, longest);
}

void RankRun::collective(const Coll& c, ncclComm_t comm, std::size_t count) {
  const std::size_t send_elems = c.send_elems ? count : count * n_;
  const std::size_t recv_elems = c.recv_elems ? count : count * n_;
  std::vector<float> in(send_elems), out(recv_elems, -1.0f);
  for (std::size_t i = 0; i < send_elems; ++i) in[i] = c.input(salt_, rank_, n_, count, i);
  Buffer send(o_.gpu, send_elems * sizeof(float)), recv(o_.gpu, recv_elems * sizeof(float));
  send.upload(in.data(), in.size() * sizeof(float));
  recv.upload(out.data(), out.size() * sizeof(float));
  step("nccl" + c.name, c.needs_rank0 ? n_ - 1 : 0,
       [&] { return c.issue(send.data(), recv.data(), count, comm, stream_, rank_, n_); }, [comm] { return comm; },
       o_.gpu);
  report_.expect(settle(o_.gpu, comm, stream_, 60), ncclSuccess, c.name + " on the stream");
  if (!c.checks(rank_)) return;
  recv.download(out.data(), out.size() * sizeof(float));
  for (std::size_t i = 0; i < recv_elems; ++i) {
    const float want = c.output(salt_, rank_, n_, count, i);
    if (!report_.check(out[i] == want, c.name + ": element " + std::to_string(i) + " is " + std::to_string(out[i]) +
                                           ", expected " + std::to_string(want)))
      break;
  }
}

void RankRun::bad_arguments() {
  ncclConfig_t cfg = non_blocking();
  ncclComm_t alone = nullptr, a = nullptr, b = nullptr;
  step("ncclCommInitRankConfig (a bad argument alone)", n_ - 1,
       [&] { return ncclCommInitRankConfig(&alone, n_, ids_[3], rank_, &cfg); }, [&] { return alone; });
  step("ncclCommInitRankConfig (a bad argument in a group, a)", n_ - 1,
       [&] { return ncclCommInitRankConfig(&a, n_, ids_[4], rank_, &cfg); }, [&] { return a; });
  step("ncclCommInitRankConfig (a bad argument in a group, b)", n_ - 1,
       [&] { return ncclCommInitRankConfig(&b, n_, ids_[5], rank_, &cfg); }, [&] { return b; });
  if (!alone || !a || !b) return;
  constexpr std::size_t count = 64;
  std::vector<float> in(count, 1.0f), out(count, -1.0f);
  Buffer send(o_.gpu, count * sizeof(float)), recv(o_.gpu, count * sizeof(float));
  send.upload(in.data(), count * sizeof(float));
  recv.upload(out.data(), count * sizeof(float));
  auto state_of = [&](ncclComm_t c) {
    ncclResult_t state = ncclInternalError;
    report_.expect(ncclCommGetAsyncError(c, &state), ncclSuccess, "ncclCommGetAsyncError");
    return state;
  };

  // Alone: the call returns the error, the communicator keeps it and refuses the next call.
  report_.expect(ncclBroadcast(send.data(), recv.data(), count, ncclFloat32, n_, alone, stream_), ncclInvalidArgument,
                 "ncclBroadcast with root nranks on a non-blocking communicator");
  report_.expect(state_of(alone), ncclInvalidArgument, "the state after the bad argument");
  report_.expect(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, alone, stream_),
                 ncclInvalidArgument, "a valid ncclAllReduce after the bad argument");
  // ncclCommDestroy returns the error and frees nothing: the communicator still answers.
  report_.expect(ncclCommDestroy(alone), ncclInvalidArgument, "ncclCommDestroy of the failed communicator");
  report_.expect(state_of(alone), ncclInvalidArgument, "the state after the refused ncclCommDestroy");

  // In a group: a valid AllReduce on a, a Send to peer -1 on b. The group fails, nothing runs,
  // and both communicators take the error.
  report_.expect(ncclGroupStart(), ncclSuccess, "ncclGroupStart");
  report_.expect(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, a, stream_), ncclSuccess,
                 "a valid ncclAllReduce in the group");
  report_.expect(ncclSend(send.data(), count, ncclFloat32, -1, b, stream_), ncclInvalidArgument,
                 "ncclSend to peer -1 in the group");
  report_.expect(ncclGroupEnd(), ncclInvalidArgument, "ncclGroupEnd of the group with a bad argument");
  report_.expect(state_of(a), ncclInvalidArgument, "the state of the communicator whose call was valid");
  report_.expect(state_of(b), ncclInvalidArgument, "the state of the communicator whose call was bad");
  report_.expect(settle(o_.gpu, a, stream_, 60), ncclInvalidArgument, "the stream after the failed group");
  recv.download(out.data(), count * sizeof(float));
  report_.check(std::all_of(out.begin(), out.end(), [](float v) { return v == -1.0f; }),
                "the failed group's AllReduce wrote its output");
  for (ncclComm_t c : {a, b})
    report_.expect(ncclCommDestroy(c), ncclInvalidArgument, "ncclCommDestroy of a communicator of the failed group");

  // Abort frees them. Only once every rank is done: a peer's abort fails a communicator with
  // ncclRemoteError, which would hide the state checked above.
  board_->bad_arguments_done.fetch_add(1);
  const double until = now_s() + 60;
  while (board_->bad_arguments_done.load() < n_ && now_s() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  report_.check(board_->bad_arguments_done.load() == n_, "the other ranks did not finish the bad-argument checks");
  for (ncclComm_t c : {alone, a, b}) {
    report_.expect(ncclCommAbort(c), ncclSuccess, "ncclCommAbort of a failed communicator");
    ncclResult_t gone = ncclSuccess;
    report_.expect(ncclCommGetAsyncError(c, &gone), ncclInvalidArgument, "ncclCommGetAsyncError after ncclCommAbort");
  }
}

int RankRun::run() {
  stream_ = make_stream(o_.gpu);
  ncclConfig_t cfg = non_blocking();
  // Init, and init scalable: both wait for rank 0 to arrive.
  ncclComm_t comm = nullptr, scalable = nullptr;
  step("ncclCommInitRankConfig", n_ - 1, [&] { return ncclCommInitRankConfig(&comm, n_, ids_[0], rank_, &cfg); },
       [&] { return comm; });
  if (!comm) return 1;
  ncclUniqueId two[2] = {ids_[1], ids_[2]};
  step("ncclCommInitRankScalable", n_ - 1, [&] { return ncclCommInitRankScalable(&scalable, n_, rank_, 2, two, &cfg); },
       [&] { return scalable; });

  for (const Coll& c : collectives())
    for (std::size_t count : {std::size_t{5}, std::size_t{4099}, std::size_t{70000}}) collective(c, comm, count);

  // Split: rank 0 is among the members, so every member's split waits for it; the last rank
  // joins none (its call still answers in progress, and it polls the parent).
  ncclComm_t child = nullptr;
  const int color = rank_ == n_ - 1 ? NCCL_SPLIT_NOCOLOR : 1;
  step("ncclCommSplit", n_ - 1, [&] { return ncclCommSplit(comm, color, -rank_, &child, nullptr); },
       [&] { return child ? child : comm; });
  if (rank_ == n_ - 1) {
    report_.check(child == nullptr, "NCCL_SPLIT_NOCOLOR returned a communicator");
  } else if (report_.check(child != nullptr, "ncclCommSplit returned no communicator")) {
    report_.expect(poll_state(child, 60), ncclSuccess, "the split's communicator settling", child);
    report_.expect(poll_state(comm, 60), ncclSuccess, "the parent settling after the split", comm);
    int crank = -1;
    report_.expect(ncclCommUserRank(child, &crank), ncclSuccess, "ncclCommUserRank of the split");
    report_.check(crank == n_ - 2 - rank_, "the split's keys reverse the ranks");
    checked_allreduce(o_.gpu, child, stream_, crank, n_ - 1, 3000, salt_ + 9, report_, "AllReduce on the split");
  }

  // Shrink the scalable communicator: the last rank leaves it, the others shrink it away.
  ncclComm_t shrunk = nullptr;
  if (scalable && rank_ == n_ - 1) {
    skip_step();
    report_.expect(ncclCommDestroy(scalable), ncclSuccess, "ncclCommDestroy of the rank shrunk away");
    scalable = nullptr;
  } else if (scalable) {
    int excluded[1] = {n_ - 1};
    step("ncclCommShrink", n_ - 2,
         [&] { return ncclCommShrink(scalable, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT); },
         [&] { return shrunk; });
    if (report_.check(shrunk != nullptr, "ncclCommShrink returned no communicator")) {
      report_.expect(poll_state(shrunk, 60), ncclSuccess, "the shrunk communicator settling", shrunk);
      report_.expect(poll_state(scalable, 60), ncclSuccess, "the parent settling after the shrink", scalable);
      checked_allreduce(o_.gpu, shrunk, stream_, rank_, n_ - 1, 5000, salt_ + 11, report_, "AllReduce after the shrink");
    }
  }

  // Finalize and revoke are local: they answer in progress and settle on their own.
  step("ncclCommFinalize", 0, [&] { return ncclCommFinalize(comm); }, [&] { return comm; });
  if (child) step("ncclCommRevoke", 0, [&] { return ncclCommRevoke(child, NCCL_REVOKE_DEFAULT); }, [&] { return child; });
  else skip_step();
  if (shrunk) step("ncclCommFinalize of the shrunk communicator", 0, [&] { return ncclCommFinalize(shrunk); }, [&] { return shrunk; });
  else skip_step();

  bad_arguments();

  for (ncclComm_t c : {child, shrunk, scalable, comm})
    if (c) report_.expect(ncclCommDestroy(c), ncclSuccess, "ncclCommDestroy");
  destroy_stream(o_.gpu, stream_);
  return report_.exit_code();
}

}  // namespace
}  // namespace faults

int main(int argc, char** argv) {
  using namespace faults;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  Options defaults;
  defaults.trials = 1;
  const Options o = parse_options(argc, argv, defaults);
  select_datapath(o);
  std::printf("non-blocking: %d trials, %d ranks, %s datapath, seed %llu\n", o.trials, o.ranks, o.gpu ? "gpu" : "host",
              static_cast<unsigned long long>(o.seed));
  std::mt19937_64 rng(o.seed);
  int failed = 0;
  double longest = 0;
  const double started = now_s();
  for (int t = 0; t < o.trials; ++t) {
    Report report("non-blocking trial " + std::to_string(t));
    std::vector<ncclUniqueId> ids(6);
    for (auto& id : ids) report.expect(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId");
    auto* board = shared_object<Board>();
    const std::uint64_t salt = rng();
    ranks::Group group(o.ranks, [&](int r) {
      Report rep("non-blocking trial " + std::to_string(t) + " rank " + std::to_string(r));
      return RankRun(o, r, ids, board, salt, rep).run();
    });
    report.check(group.wait(ranks::Clock::now() + ranks::seconds(300)) == ranks::Stop::none,
                 "ranks still running after 300 s");
    for (int r = 0; r < o.ranks; ++r)
      report.check(group[r].ok(), "rank " + std::to_string(r) + ": " + ranks::describe(group[r]));
    longest = std::max(longest, board->longest_poll.load());
    if (report.failures()) ++failed;
  }
  std::printf("non-blocking: %d of %d trials passed in %.1f s; slowest ncclCommGetAsyncError %.1f us\n",
              o.trials - failed, o.trials, now_s() - started, longest * 1e6);
  return failed == 0 ? 0 : 1;
}
