// Mismatched calls: the ranks of a communicator call the same collective with different counts,
// data types or reduction ops, or send and receive messages of different sizes (rank 0 differs from
// the others). Every rank must end with
// ncclInvalidUsage, from the call itself, from ncclCommGetAsyncError, or at the latest from the
// next call (a Broadcast root consumes nothing and may finish the mismatched call; the next call
// here is an AllReduce, which waits for the peers), within ten times the time README quotes (see
// detect_limit_s) and without the timeout's help (PURLIN_TIMEOUT stays at its default);
// ncclGetLastError says the calls differed; nothing is written past the end of any output (the
// bytes after it stay poisoned); abort returns promptly and every process exits.
//
//   test_mismatch [--ranks 4] [--datapath host|gpu] [--only CASE[,CASE...]]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support.h"
#include "test/common/loopback.h"

namespace faults {
namespace {

// Seconds from a rank's mismatched call until it has ncclInvalidUsage: README's figure (the
// slowest rank over every case) times 10, 0.06 s on the host datapath (4 ranks on 2 cores), 0.008 s
// on the GPU datapath (one H200, ranks under MPS). The margin is for the machine that runs CI, 2
// cores that other builds may be using; a mismatch found only by PURLIN_TIMEOUT (300 s by default)
// still fails.
// The in-place Send/Recv case, of 20 MB messages, has its own figure on the host datapath: 0.12 s.
constexpr double kMargin = 10;
double detect_limit_s(const Options& o, bool large) { return (o.gpu ? 0.008 : large ? 0.12 : 0.06) * kMargin; }
constexpr double kAbortLimitS = 5;
constexpr double kExitLimitS = 60;
constexpr std::size_t kGuardBytes = 256;
constexpr unsigned char kPoison = 0xA5;

// One rank's view of the call: what it passes.
struct Args {
  std::size_t count;       // elements (AllGather, AllToAll: per rank; ReduceScatter: per shard)
  ncclDataType_t type;
  ncclRedOp_t op = ncclSum;
  int root = 0;
};

// send_recv: a group of a send to the next rank and a receive from the previous, of `count` each.
enum class Kind { all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send_recv };

struct Case {
  const char* name;
  Kind kind;
  Args rank0, others;
};

const Case kCases[] = {
    {"allreduce_count_packets", Kind::all_reduce, {1000, ncclFloat32}, {1003, ncclFloat32}},
    {"allreduce_packets_vs_staged", Kind::all_reduce, {256, ncclFloat32}, {400000, ncclFloat32}},
    {"allreduce_count_staged", Kind::all_reduce, {300000, ncclFloat32}, {400000, ncclFloat32}},
    {"allreduce_type", Kind::all_reduce, {5000, ncclFloat32}, {5000, ncclInt32}},
    {"allreduce_op", Kind::all_reduce, {5000, ncclFloat32, ncclMax}, {5000, ncclFloat32, ncclSum}},
    {"allgather_count", Kind::all_gather, {1000, ncclFloat32}, {2000, ncclFloat32}},
    {"reducescatter_type", Kind::reduce_scatter, {3000, ncclFloat32}, {3000, ncclInt32}},
    {"broadcast_count", Kind::broadcast, {5000, ncclFloat32}, {6000, ncclFloat32}},
    {"alltoall_count", Kind::all_to_all, {1000, ncclFloat32}, {1200, ncclFloat32}},
    // Messages above the staged path's buffering (16 MiB), from ncclMemAlloc. On the GPU they meet
    // in place, and the end that moves would move them on the copy engines (PURLIN_CE_MIN_BYTES=1,
    // set in main), whose copies nothing on the GPU can hold back once queued. On the host datapath
    // the ranks that do not pair with rank 0 are still busy with them while rank 0 aborts and exits:
    // their peer watch may see the exit before their calls see rank 0's fault word, and the
    // mismatch must still be what they report.
    {"sendrecv_count_in_place", Kind::send_recv, {5000000, ncclFloat32}, {5000004, ncclFloat32}},
};

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 4;
  }
}

// Elements of the send and receive buffers this rank passes.
void extents(Kind k, const Args& a, int n, std::size_t* send, std::size_t* recv) {
  switch (k) {
    case Kind::all_reduce: case Kind::broadcast: *send = *recv = a.count; return;
    case Kind::all_gather: *send = a.count; *recv = a.count * n; return;
    case Kind::reduce_scatter: *send = a.count * n; *recv = a.count; return;
    case Kind::all_to_all: *send = *recv = a.count * n; return;
    case Kind::send_recv: *send = *recv = a.count; return;
  }
}

ncclResult_t issue(Kind k, const Args& a, void* send, void* recv, ncclComm_t comm, cudaStream_t s) {
  switch (k) {
    case Kind::all_reduce: return ncclAllReduce(send, recv, a.count, a.type, a.op, comm, s);
    case Kind::all_gather: return ncclAllGather(send, recv, a.count, a.type, comm, s);
    case Kind::reduce_scatter: return ncclReduceScatter(send, recv, a.count, a.type, a.op, comm, s);
    case Kind::broadcast: return ncclBroadcast(send, recv, a.count, a.type, a.root, comm, s);
    case Kind::all_to_all: return ncclAlltoAll(send, recv, a.count, a.type, comm, s);
    case Kind::send_recv: {
      int n = 0, me = 0;
      ncclCommCount(comm, &n);
      ncclCommUserRank(comm, &me);
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(send, a.count, a.type, (me + 1) % n, comm, s);
      if (r == ncclSuccess) r = ncclRecv(recv, a.count, a.type, (me + n - 1) % n, comm, s);
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    }
  }
  return ncclInternalError;
}

struct Board {
  std::atomic<double> detect_s[64];
  std::atomic<double> abort_s[64];
  std::atomic<int> settled{0};  // ranks whose consistent AllReduce completed (or failed)
};

int rank_main(const Options& o, const ncclUniqueId& id, const Case& c, int rank, Board* board) {
  Report report(std::string("mismatch ") + c.name + " rank " + std::to_string(rank));
  const int n = o.ranks;
  const Args& a = rank == 0 ? c.rank0 : c.others;
  cudaStream_t stream = make_stream(o.gpu);
  std::size_t send_elems = 0, recv_elems = 0;
  extents(c.kind, a, n, &send_elems, &recv_elems);
  const std::size_t es = type_size(a.type);
  const std::size_t send_bytes = send_elems * es, recv_bytes = recv_elems * es;
  std::vector<unsigned char> in(send_bytes);
  for (std::size_t i = 0; i < send_bytes; ++i) in[i] = static_cast<unsigned char>(1 + (i * 31 + rank * 7) % 251);
  std::vector<unsigned char> poisoned(recv_bytes + kGuardBytes, kPoison);
  const bool cumem = c.kind == Kind::send_recv;
  Buffer send(o.gpu, send_bytes + kGuardBytes, cumem), recv(o.gpu, recv_bytes + kGuardBytes, cumem);
  send.upload(in.data(), send_bytes);
  recv.upload(poisoned.data(), poisoned.size());

  ncclComm_t comm = nullptr;
  if (!report.expect(ncclCommInitRank(&comm, n, id, rank), ncclSuccess, "ncclCommInitRank")) return 1;
  // One consistent call first: the communicator works before the mismatch.
  {
    Buffer x(o.gpu, 64 * sizeof(float)), y(o.gpu, 64 * sizeof(float));
    std::vector<float> ones(64, 1.0f), got(64, 0.0f);
    x.upload(ones.data(), sizeof(float) * 64);
    ncclResult_t r = ncclAllReduce(x.data(), y.data(), 64, ncclFloat32, ncclSum, comm, stream);
    if (r == ncclSuccess) r = settle(o.gpu, comm, stream, 30);
    report.expect(r, ncclSuccess, "the consistent AllReduce before the mismatch");
    y.download(got.data(), sizeof(float) * 64);
    report.check(got == std::vector<float>(64, static_cast<float>(n)), "the consistent AllReduce gave a wrong result");
  }
  // Every rank past it before any issues the mismatched call. Otherwise two ranks that finished it
  // can meet in the mismatched call and raise the fault while a third, descheduled, still waits for
  // the consistent call's last packets: the fault is the communicator's, so that rank stops there with
  // ncclInvalidUsage, and this test would read it as the consistent call failing.
  board->settled.fetch_add(1);
  for (const double until = now_s() + 30; board->settled.load() < n && now_s() < until;)
    std::this_thread::sleep_for(std::chrono::microseconds(100));

  const double limit = detect_limit_s(o, c.kind == Kind::send_recv);
  const double t0 = now_s();
  ncclResult_t r = issue(c.kind, a, send.data(), recv.data(), comm, stream);
  if (r == ncclSuccess) r = settle(o.gpu, comm, stream, limit + 5);
  if (r == ncclSuccess) {
    // This rank's call completed (a root that consumes nothing): the next call must be refused.
    Buffer x(o.gpu, 64 * sizeof(float)), y(o.gpu, 64 * sizeof(float));
    r = ncclAllReduce(x.data(), y.data(), 64, ncclFloat32, ncclSum, comm, stream);
    if (r == ncclSuccess) r = settle(o.gpu, comm, stream, limit + 5);
  }
  const double detected = now_s() - t0;
  board->detect_s[rank].store(detected);
  report.expect(r, ncclInvalidUsage, "the mismatched call (or the one after it)");
  report.check(detected <= limit, "the mismatch surfaced after " + std::to_string(detected) + " s");
  const char* last = ncclGetLastError(comm);
  report.check(last && std::strstr(last, "different arguments"),
               std::string("ncclGetLastError does not name the mismatch: ") + (last ? last : "(null)"));

  std::vector<unsigned char> tail(recv_bytes + kGuardBytes);
  recv.download(tail.data(), tail.size());
  bool intact = true;
  for (std::size_t i = recv_bytes; i < tail.size(); ++i) intact = intact && tail[i] == kPoison;
  report.check(intact, "bytes past the end of the output were written");

  const double t1 = now_s();
  report.expect(ncclCommAbort(comm), ncclSuccess, "ncclCommAbort");
  board->abort_s[rank].store(now_s() - t1);
  report.check(now_s() - t1 <= kAbortLimitS, "ncclCommAbort took " + std::to_string(now_s() - t1) + " s");
  destroy_stream(o.gpu, stream);
  return report.exit_code();
}

bool run_case(const Options& o, const Case& c) {
  Report report(std::string("mismatch ") + c.name);
  ncclUniqueId id;
  if (!report.expect(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId")) return false;
  auto* board = shared_object<Board>();
  const auto start = ranks::Clock::now();
  ranks::Group group(o.ranks, [&](int r) { return rank_main(o, id, c, r, board); });
  const bool by_themselves = group.wait(start + ranks::seconds(kExitLimitS)) == ranks::Stop::none;
  report.check(by_themselves, "some ranks did not exit within " + std::to_string(kExitLimitS) + " s");
  double detect = 0, abort = 0;
  for (int r = 0; r < o.ranks; ++r) {
    report.check(group[r].ok(), "rank " + std::to_string(r) + ": " + ranks::describe(group[r]));
    detect = std::max(detect, board->detect_s[r].load());
    abort = std::max(abort, board->abort_s[r].load());
  }
  std::printf("%-28s every rank got ncclInvalidUsage: slowest after %.3f s, abort %.3f s: %s\n", c.name, detect, abort,
              report.failures() ? "FAILED" : "ok");
  return report.failures() == 0;
}

}  // namespace
}  // namespace faults

int main(int argc, char** argv) {
  using namespace faults;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  setenv("PURLIN_CE_MIN_BYTES", "1", 0);  // zero-staged copies on the copy engines (unless set otherwise)
  Options defaults;
  defaults.trials = 1;
  const Options o = parse_options(argc, argv, defaults);
  select_datapath(o);
  std::printf("mismatched calls: %d ranks, %s datapath, rank 0's call differs from the others'\n", o.ranks,
              o.gpu ? "gpu" : "host");
  int failed = 0, ran = 0;
  const double started = now_s();
  for (int t = 0; t < o.trials; ++t)
    for (const Case& c : kCases) {
      if (!selected(o, c.name)) continue;
      ++ran;
      if (!run_case(o, c)) ++failed;
    }
  std::printf("mismatched calls: %d of %d cases passed in %.1f s\n", ran - failed, ran, now_s() - started);
  return failed == 0 ? 0 : 1;
}
