// The API around the collectives:
//   in one process: ncclGetVersion, ncclGetErrorString, ncclGetUniqueId, ncclCommInitAll over 4
//   ranks (no device list: the host datapath has no devices) with grouped collectives over the 4
//   communicators from one thread; the 4 ranks' ncclCommInitRank, then their ncclCommSplit (one
//   per rank, then two per rank), inside one group from one thread; ncclCommGrow of 2 ranks to 4
//   and to 3 in groups from one thread (and a grow with no id, refused on both ranks alike); a
//   group with a call that fails its checks, a V collective's among them (the group fails, nothing
//   runs);
//   ncclGroupSimulateEnd(NULL); ncclGetLastError(NULL) answers with the process's last failure,
//   whichever thread had it; NCCL_COMM_BLOCKING over a config (e2e_api_comm_blocking_1r sets it);
//   ranks as processes: ncclCommCount/UserRank, ncclCommGetAsyncError, ncclCommGrow by the last
//   rank (split off first, the id broadcast to it), argument errors
//   (ncclInvalidArgument, no effect, the communicator still usable, ncclGetLastError set), count 0,
//   ncclCommSuspend / ncclCommResume of memory (collectives refused in between, alone and in groups),
//   ncclCommFinalize + ncclCommDestroy, ncclCommAbort, ncclCommDestroy of a failed communicator
//   (its error, nothing freed; ncclCommAbort frees it) and of one that failed after its finalize.
//
//   e2e_api --ranks N [--filter PATTERN] [--list]
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "buffers.h"
#include "harness.h"
#include "plans.h"
#include "reference.h"
#include "test/common/loopback.h"

// Purlin's V collectives (include/purlin/purlin.h), declared here: these tests include only nccl.h.
extern "C" {
ncclResult_t ncclPurlinAllGatherV(const void*, size_t, void*, const size_t*, const size_t*, ncclDataType_t, ncclComm_t,
                                  cudaStream_t);
ncclResult_t ncclPurlinReduceScatterV(const void*, const size_t*, const size_t*, void*, ncclDataType_t, ncclRedOp_t,
                                      ncclComm_t, cudaStream_t);
ncclResult_t ncclPurlinAlltoAllV(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*,
                                 ncclDataType_t, ncclComm_t, cudaStream_t);
// NCCL 2.29's suspend, resume and growing, and 2.30's memory statistics (the CUDA toolkit's nccl.h may be
// older), with the values of NCCL_SUSPEND_MEM and ncclStatGpuMemSuspended.
ncclResult_t ncclCommSuspend(ncclComm_t, int);
ncclResult_t ncclCommResume(ncclComm_t);
ncclResult_t ncclCommMemStats(ncclComm_t, int, uint64_t*);
ncclResult_t ncclCommGetUniqueId(ncclComm_t, ncclUniqueId*);
ncclResult_t ncclCommGrow(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, ncclConfig_t*);
}
constexpr int kSuspendMem = 0x01;
constexpr int kStatSuspended = 1;

namespace e2e {
namespace {

constexpr cudaStream_t kNoStream = static_cast<cudaStream_t>(0);

// ---- One process ------------------------------------------------------------------------------------

void version(Reporter& report) {
  int v = -1;
  if (report.expect(ncclGetVersion(&v), "ncclGetVersion") && v != NCCL_VERSION_CODE) {
    report.fail("ncclGetVersion gave " + std::to_string(v) + ", the header says " + std::to_string(NCCL_VERSION_CODE));
  }
  // Refused without a WARN, as NCCL refuses it: the last error stays as it was.
  const std::string before = ncclGetLastError(nullptr);
  report.expect(ncclGetVersion(nullptr), "ncclGetVersion(nullptr)", nullptr, ncclInvalidArgument);
  if (ncclGetLastError(nullptr) != before) report.fail("ncclGetVersion(nullptr) changed the last error");
}

void error_strings(Reporter& report) {
  std::set<std::string> seen;
  for (int code = ncclSuccess; code < ncclNumResults; ++code) {
    const char* s = ncclGetErrorString(static_cast<ncclResult_t>(code));
    if (!s || !*s) {
      report.fail("ncclGetErrorString(" + std::to_string(code) + ") is empty");
    } else if (!seen.insert(s).second) {
      report.fail("ncclGetErrorString(" + std::to_string(code) + ") repeats \"" + s + "\"");
    }
  }
  if (!ncclGetErrorString(ncclNumResults)) report.fail("ncclGetErrorString(ncclNumResults) is null");
}

void unique_ids(Reporter& report) {
  ncclUniqueId a, b;
  std::memset(&a, 0, sizeof a);
  std::memset(&b, 0, sizeof b);
  if (report.expect(ncclGetUniqueId(&a), "ncclGetUniqueId") && report.expect(ncclGetUniqueId(&b), "ncclGetUniqueId")) {
    if (std::memcmp(&a, &b, sizeof a) == 0) report.fail("two ncclGetUniqueId calls gave the same id");
  }
  report.expect(ncclGetUniqueId(nullptr), "ncclGetUniqueId(nullptr)", nullptr, ncclInvalidArgument);
}

// Collectives over the n communicators `comms` (ranks 0..n-1 of one communicator, all in this
// process) issued from this one thread in groups, every result checked.
void grouped_calls(Reporter& report, Slab& slab, const ncclComm_t* comms, int n, const std::string& what) {
  auto grouped = [&]<class T>(ncclDataType_t dt, Coll coll, std::size_t count, Op op, int root, bool in_place) {
    const std::string label = what + " grouped " + info(coll).name + "/" + type_name(dt) + "/count=" +
                              std::to_string(count);
    const Content<T> content{Inputs{hash_string(label), false}, n, op};
    slab.reset();
    std::vector<Staged<T>> calls;
    calls.reserve(n);
    for (int i = 0; i < n; ++i) calls.emplace_back(slab, coll, i, n, count, root, in_place, content, i);
    report.expect(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < n; ++i) {
      report.expect(issue(coll, calls[i].send, calls[i].recv, count, dt, builtin(op), root, comms[i], i, n),
                    label, comms[i]);
    }
    if (!report.expect(ncclGroupEnd(), "ncclGroupEnd after " + label)) return;
    for (int i = 0; i < n; ++i) calls[i].check(report, label + " rank " + std::to_string(i));
  };
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}}) {
    grouped.operator()<Float32Type>(ncclFloat32, Coll::AllReduce, count, Op::sum, 0, false);
    grouped.operator()<Half>(ncclFloat16, Coll::AllReduce, count, Op::sum, 0, true);
    grouped.operator()<Int64>(ncclInt64, Coll::AllReduce, count, Op::max, 0, false);
    grouped.operator()<Bf16>(ncclBfloat16, Coll::AllGather, count, Op::sum, 0, false);
    grouped.operator()<Uint8>(ncclUint8, Coll::Broadcast, count, Op::sum, n - 1, false);
  }
}

// Whether comms[i] is rank i of n.
bool shaped(Reporter& report, const ncclComm_t* comms, int n, const std::string& what) {
  bool ok = true;
  for (int i = 0; i < n; ++i) {
    int count = -1, rank = -1;
    report.expect(ncclCommCount(comms[i], &count), what + " ncclCommCount", comms[i]);
    report.expect(ncclCommUserRank(comms[i], &rank), what + " ncclCommUserRank", comms[i]);
    if (count != n || rank != i) {
      report.fail(what + ": communicator " + std::to_string(i) + " is rank " + std::to_string(rank) + " of " +
                  std::to_string(count));
      ok = false;
    }
  }
  return ok;
}

// ncclCommInitAll(comms, 4, nullptr), then grouped collectives over the 4 communicators from this
// one thread.
void init_all(Reporter& report, Slab& slab) {
  constexpr int n = 4;
  ncclComm_t comms[n] = {};
  if (!report.expect(ncclCommInitAll(comms, n, nullptr), "ncclCommInitAll")) return;
  if (shaped(report, comms, n, "ncclCommInitAll")) grouped_calls(report, slab, comms, n, "InitAll");
  for (int i = 0; i < n; ++i) report.expect(ncclCommDestroy(comms[i]), "ncclCommDestroy");
}

// One thread creates all 4 ranks with ncclCommInitRank inside one group (as nccl-tests does with
// several GPUs per process): the rendezvous runs at ncclGroupEnd; before it the communicators answer
// in progress.
void init_in_group(Reporter& report, Slab& slab) {
  constexpr int n = 4;
  ncclUniqueId id;
  if (!report.expect(ncclGetUniqueId(&id), "ncclGetUniqueId")) return;
  ncclComm_t comms[n] = {};
  report.expect(ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < n; ++i) report.expect(ncclCommInitRank(&comms[i], n, id, i), "ncclCommInitRank in a group");
  ncclResult_t state = ncclSuccess;
  if (comms[0]) {
    report.expect(ncclCommGetAsyncError(comms[0], &state), "ncclCommGetAsyncError before ncclGroupEnd");
    if (state != ncclInProgress)
      report.fail(std::string("before ncclGroupEnd the communicator's state is ") + ncclGetErrorString(state));
  }
  // Its creation is this thread's to finish: aborting it now would wait for itself.
  if (comms[1])
    report.expect(ncclCommAbort(comms[1]), "ncclCommAbort inside the group that creates it", nullptr, ncclInvalidUsage);
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd after the inits")) return;
  for (int i = 0; i < n; ++i) {
    report.expect(ncclCommGetAsyncError(comms[i], &state), "ncclCommGetAsyncError after ncclGroupEnd", comms[i]);
    if (state != ncclSuccess) report.fail(std::string("after ncclGroupEnd the state is ") + ncclGetErrorString(state));
  }
  if (shaped(report, comms, n, "init in a group")) grouped_calls(report, slab, comms, n, "InitRank in a group");

  // Split inside a group from this one thread: colours -2,1,-2,1 make two communicators of 2 ranks
  // (a negative colour other than NCCL_SPLIT_NOCOLOR names a group, as in NCCL).
  ncclComm_t halves[n] = {};
  report.expect(ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < n; ++i)
    report.expect(ncclCommSplit(comms[i], i % 2 ? 1 : -2, i, &halves[i], nullptr), "ncclCommSplit in a group", comms[i]);
  if (report.expect(ncclGroupEnd(), "ncclGroupEnd after the splits")) {
    for (int colour = 0; colour < 2; ++colour) {
      const ncclComm_t pair[2] = {halves[colour], halves[colour + 2]};
      const std::string what = "split colour " + std::to_string(colour);
      if (shaped(report, pair, 2, what)) grouped_calls(report, slab, pair, 2, what);
    }
  }
  for (int i = 0; i < n; ++i)
    if (halves[i]) report.expect(ncclCommDestroy(halves[i]), "ncclCommDestroy of a split communicator");

  // Two splits of every parent in one group, from this one thread: each parent's run in the order
  // called (the first makes the pairs of one parity, the second all 4 in reverse), the parents'
  // at once. Several rounds: splits run at once would pair differently from round to round.
  for (int round = 0; round < 5; ++round) {
    const std::string what = "two splits per parent in a group, round " + std::to_string(round);
    ncclComm_t pairs[n] = {}, reversed[n] = {};
    report.expect(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < n; ++i) {
      report.expect(ncclCommSplit(comms[i], i % 2, i, &pairs[i], nullptr), what + ": first ncclCommSplit", comms[i]);
      report.expect(ncclCommSplit(comms[i], 3, -i, &reversed[i], nullptr), what + ": second ncclCommSplit", comms[i]);
    }
    if (report.expect(ncclGroupEnd(), "ncclGroupEnd after " + what)) {
      for (int parity = 0; parity < 2; ++parity) {
        const ncclComm_t pair[2] = {pairs[parity], pairs[parity + 2]};
        if (shaped(report, pair, 2, what + ", parity " + std::to_string(parity)) && round == 0)
          grouped_calls(report, slab, pair, 2, what + ", parity " + std::to_string(parity));
      }
      const ncclComm_t by_rank[n] = {reversed[3], reversed[2], reversed[1], reversed[0]};
      if (shaped(report, by_rank, n, what + ", reversed") && round == 0)
        grouped_calls(report, slab, by_rank, n, what + ", reversed");
    }
    for (int i = 0; i < n; ++i) {
      if (pairs[i]) report.expect(ncclCommDestroy(pairs[i]), "ncclCommDestroy of a split communicator");
      if (reversed[i]) report.expect(ncclCommDestroy(reversed[i]), "ncclCommDestroy of a split communicator");
    }
  }
  for (int i = 0; i < n; ++i) report.expect(ncclCommDestroy(comms[i]), "ncclCommDestroy");
}

// A call inside a group that fails its checks fails the whole group, and none of its calls run:
// the communicators stay usable and in step.
void group_error(Reporter& report, Slab& slab) {
  constexpr int n = 4;
  ncclComm_t comms[n] = {};
  if (!report.expect(ncclCommInitAll(comms, n, nullptr), "ncclCommInitAll")) return;
  slab.reset();
  const std::size_t count = 1000;
  float* buf = reinterpret_cast<float*>(slab.take(count * sizeof(float) * 2, 0));
  for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(i % 7);
  std::memset(buf + count, 0xA5, count * sizeof(float));  // the AllReduces' output: must stay poisoned
  report.expect(ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < n; ++i)
    report.expect(ncclAllReduce(buf, buf + count, count, ncclFloat32, ncclSum, comms[i], kNoStream), "ncclAllReduce");
  report.expect(ncclBroadcast(buf, buf, count, ncclFloat32, n + 5, comms[0], kNoStream), "ncclBroadcast, root out of range",
                comms[0], ncclInvalidArgument);
  report.expect(ncclGroupEnd(), "ncclGroupEnd of a group with a bad call", nullptr, ncclInvalidArgument);
  const std::string why = ncclGetLastError(nullptr);
  if (why.find("dropped") == std::string::npos) report.fail("ncclGetLastError after the failed group: \"" + why + "\"");
  const auto* out = reinterpret_cast<const unsigned char*>(buf + count);
  for (std::size_t i = 0; i < count * sizeof(float); ++i)
    if (out[i] != 0xA5) {
      report.fail("the failed group ran an AllReduce: its output byte " + std::to_string(i) + " was written");
      break;
    }
  if (shaped(report, comms, n, "after a failed group")) grouped_calls(report, slab, comms, n, "after a failed group");

  // ncclGroupSimulateEnd without a simInfo ends the group as ncclGroupEnd does.
  report.expect(ncclGroupStart(), "ncclGroupStart");
  report.expect(ncclGroupSimulateEnd(nullptr), "ncclGroupSimulateEnd(NULL)");
  report.expect(ncclGroupEnd(), "ncclGroupEnd after ncclGroupSimulateEnd(NULL)", nullptr, ncclInvalidUsage);
  for (int i = 0; i < n; ++i) report.expect(ncclCommDestroy(comms[i]), "ncclCommDestroy");
}

// A V collective whose counts or displacements fail their checks fails its group as any other
// call does: ncclGroupEnd returns the error and none of the group's calls run.
void group_error_v(Reporter& report, Slab& slab) {
  constexpr int n = 4;
  ncclComm_t comms[n] = {};
  if (!report.expect(ncclCommInitAll(comms, n, nullptr), "ncclCommInitAll")) return;
  slab.reset();
  const std::size_t count = 1000;
  float* buf = reinterpret_cast<float*>(slab.take(count * sizeof(float) * 2, 0));
  for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(i % 7);
  float* out_v = buf + count;
  const auto* out = reinterpret_cast<const unsigned char*>(buf + count);
  const std::size_t counts[n] = {count / 4, count / 4, count / 4, count / 4};
  const std::size_t displs[n] = {0, count / 4, count / 2, 3 * count / 4};
  const std::size_t wrong[n] = {count / 4 + 1, count / 4, count / 4, count / 4};
  const std::size_t far[n] = {0, count / 4, count / 2, std::numeric_limits<std::size_t>::max() / 2};
  struct VCall {
    const char* what;
    std::function<ncclResult_t()> call;
  };
  const VCall bad_v[] = {
      {"ncclPurlinAllGatherV, recvcounts NULL",
       [&] { return ncclPurlinAllGatherV(buf, count / 4, out_v, nullptr, displs, ncclFloat32, comms[0], kNoStream); }},
      {"ncclPurlinAllGatherV, recvcounts[rank] != sendcount",
       [&] { return ncclPurlinAllGatherV(buf, count / 4, out_v, wrong, displs, ncclFloat32, comms[0], kNoStream); }},
      {"ncclPurlinReduceScatterV, senddispls NULL",
       [&] { return ncclPurlinReduceScatterV(buf, counts, nullptr, out_v, ncclFloat32, ncclSum, comms[0], kNoStream); }},
      {"ncclPurlinReduceScatterV, a displacement whose byte offset overflows",
       [&] { return ncclPurlinReduceScatterV(buf, counts, far, out_v, ncclFloat32, ncclSum, comms[0], kNoStream); }},
      {"ncclPurlinAlltoAllV, sendcounts NULL",
       [&] { return ncclPurlinAlltoAllV(buf, nullptr, displs, out_v, counts, displs, ncclFloat32, comms[0], kNoStream); }},
      {"ncclPurlinAlltoAllV, recvbuff NULL",
       [&] { return ncclPurlinAlltoAllV(buf, counts, displs, nullptr, counts, displs, ncclFloat32, comms[0], kNoStream); }},
  };
  for (const VCall& v : bad_v) {
    std::memset(buf + count, 0xA5, count * sizeof(float));  // the AllReduces' output: must stay poisoned
    report.expect(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < n; ++i)
      report.expect(ncclAllReduce(buf, buf + count, count, ncclFloat32, ncclSum, comms[i], kNoStream), "ncclAllReduce");
    report.expect(v.call(), v.what, comms[0], ncclInvalidArgument);
    report.expect(ncclGroupEnd(), std::string("ncclGroupEnd of a group with ") + v.what, nullptr, ncclInvalidArgument);
    for (std::size_t i = 0; i < count * sizeof(float); ++i)
      if (out[i] != 0xA5) {
        report.fail(std::string("the group that failed on ") + v.what + " ran an AllReduce: its output byte " +
                    std::to_string(i) + " was written");
        break;
      }
  }
  if (shaped(report, comms, n, "after the failed groups"))
    grouped_calls(report, slab, comms, n, "after the failed groups");
  for (int i = 0; i < n; ++i) report.expect(ncclCommDestroy(comms[i]), "ncclCommDestroy");
}

// ncclCommGrow (NCCL 2.29) from this one thread inside groups: 2 ranks grow to 4, then the same 2
// to 3, each existing rank keeping its rank and the new ranks joining through the id. The first time
// the rank that made the id passes it, as NCCL's header says; the second time neither existing rank
// passes one, which Purlin also accepts (the maker's own is taken). Grows where no existing rank has
// an id, or where the ranks disagree on the total, fail on both alike, and the parents stay usable.
// Each grown communicator's collectives are checked, and the parents' after them.
void grow_in_group(Reporter& report, Slab& slab) {
  constexpr int n = 2;
  ncclUniqueId id;
  ncclComm_t comms[n] = {};
  if (!report.expect(ncclGetUniqueId(&id), "ncclGetUniqueId")) return;
  report.expect(ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < n; ++i) report.expect(ncclCommInitRank(&comms[i], n, id, i), "ncclCommInitRank in a group");
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd after the inits")) return;
  for (const int total : {4, 3}) {
    const std::string what = "grown from 2 to " + std::to_string(total);
    const int maker = total == 4 ? 0 : 1;
    ncclUniqueId grow_id;
    if (!report.expect(ncclCommGetUniqueId(comms[maker], &grow_id), what + ": ncclCommGetUniqueId", comms[maker]))
      break;
    std::vector<ncclComm_t> grown(static_cast<std::size_t>(total), nullptr);
    report.expect(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < n; ++i) {
      const ncclUniqueId* passed = total == 4 && i == maker ? &grow_id : nullptr;
      report.expect(ncclCommGrow(comms[i], total, passed, -1, &grown[i], nullptr), what + ": existing rank's ncclCommGrow",
                    comms[i]);
    }
    for (int r = n; r < total; ++r)
      report.expect(ncclCommGrow(nullptr, total, &grow_id, r, &grown[r], nullptr), what + ": new rank's ncclCommGrow");
    if (report.expect(ncclGroupEnd(), "ncclGroupEnd after the grows") && shaped(report, grown.data(), total, what))
      grouped_calls(report, slab, grown.data(), total, what);
    for (ncclComm_t c : grown)
      if (c) report.expect(ncclCommDestroy(c), "ncclCommDestroy of a grown communicator");
    if (shaped(report, comms, n, what + ", the parents")) grouped_calls(report, slab, comms, n, what + ", the parents");
  }
  for (const bool with_id : {false, true}) {
    // Without an id; with one, but the ranks disagree on the total (3 and 4).
    const std::string what = with_id ? "grows to different totals" : "grows with no id";
    ncclUniqueId grow_id;
    if (with_id) report.expect(ncclCommGetUniqueId(comms[0], &grow_id), what + ": ncclCommGetUniqueId", comms[0]);
    ncclComm_t failed[n] = {};
    report.expect(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < n; ++i)
      report.expect(ncclCommGrow(comms[i], with_id ? 3 + i : 3, with_id && i == 0 ? &grow_id : nullptr, -1, &failed[i],
                                 nullptr),
                    what, comms[i]);
    report.expect(ncclGroupEnd(), "ncclGroupEnd after " + what, nullptr, ncclInvalidArgument);
    // Made in the group and failed at its end: in the error state, which ncclCommAbort frees.
    for (int i = 0; i < n; ++i)
      if (failed[i]) report.expect(ncclCommAbort(failed[i]), "ncclCommAbort of a failed grow's communicator");
    if (shaped(report, comms, n, "after " + what)) grouped_calls(report, slab, comms, n, "after " + what);
  }
  for (int i = 0; i < n; ++i) report.expect(ncclCommDestroy(comms[i]), "ncclCommDestroy");
}

// NCCL_COMM_BLOCKING (0 or 1) overrides a config's blocking, as in NCCL: a 1-rank communicator
// made with blocking = 0 and one made with no config, under whatever this process's environment sets.
void comm_blocking(Reporter& report) {
  const char* env = std::getenv("NCCL_COMM_BLOCKING");
  const std::string forced = env ? env : "";
  for (const bool with_config : {true, false}) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const bool blocking = forced == "1" || (forced != "0" && !with_config);
    const std::string what = std::string(with_config ? "config.blocking = 0" : "no config") +
                             ", NCCL_COMM_BLOCKING=" + (forced.empty() ? "(unset)" : forced);
    ncclUniqueId id;
    if (!report.expect(ncclGetUniqueId(&id), "ncclGetUniqueId")) return;
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, with_config ? &config : nullptr);
    report.expect(r, "ncclCommInitRankConfig, " + what, nullptr, blocking ? ncclSuccess : ncclInProgress);
    ncclResult_t state = ncclInProgress;
    for (int i = 0; comm && state == ncclInProgress && i < 10000; ++i) {
      ncclCommGetAsyncError(comm, &state);
      if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state != ncclSuccess) report.fail(what + ": the communicator's state is " + ncclGetErrorString(state));
    if (comm) report.expect(ncclCommDestroy(comm), "ncclCommDestroy");
  }
}

// Deregistering nothing (a NULL handle or window) succeeds, also on a revoked communicator:
// deregistration needs a live communicator only, as in NCCL.
void deregister_nothing(Reporter& report) {
  ncclComm_t comm = nullptr;
  if (!report.expect(ncclCommInitAll(&comm, 1, nullptr), "ncclCommInitAll")) return;
  for (const bool revoked : {false, true}) {
    if (revoked) report.expect(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), "ncclCommRevoke", comm);
    const std::string when = revoked ? " on a revoked communicator" : "";
    report.expect(ncclCommDeregister(comm, nullptr), "ncclCommDeregister(NULL)" + when, comm);
    report.expect(ncclCommWindowDeregister(comm, nullptr), "ncclCommWindowDeregister(NULL)" + when, comm);
  }
  report.expect(ncclCommDestroy(comm), "ncclCommDestroy");
}

// As NCCL, ncclGetLastError(NULL) answers with the process's last failure, whichever thread had
// it: a thread that saw no failure gets another thread's, and so does a thread whose own failure
// came before.
void last_error_across_threads(Reporter& report) {
  report.expect(ncclGetUniqueId(nullptr), "ncclGetUniqueId(nullptr) on this thread", nullptr, ncclInvalidArgument);
  ncclResult_t r = ncclSuccess;
  std::thread([&] { r = ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, nullptr, kNoStream); }).join();
  if (r != ncclInvalidArgument) report.fail(std::string("ncclAllReduce on a NULL comm returned ") + ncclGetErrorString(r));
  std::string seen;
  std::thread([&] { seen = ncclGetLastError(nullptr); }).join();
  if (seen.find("ncclAllReduce: comm is NULL") == std::string::npos)
    report.fail("ncclGetLastError(NULL) on a thread that saw no failure: \"" + seen + "\"");
  seen = ncclGetLastError(nullptr);
  if (seen.find("ncclAllReduce: comm is NULL") == std::string::npos)
    report.fail("ncclGetLastError(NULL) on the thread whose own failure came first: \"" + seen + "\"");
}

void one_process(RankEnv& env) {
  Slab slab(std::size_t{16} << 20);
  run_case(env.report, "Api/version", [&] { version(env.report); });
  run_case(env.report, "Api/error_strings", [&] { error_strings(env.report); });
  run_case(env.report, "Api/unique_id", [&] { unique_ids(env.report); });
  run_case(env.report, "Api/init_all", [&] { init_all(env.report, slab); });
  run_case(env.report, "Api/init_in_group", [&] { init_in_group(env.report, slab); });
  run_case(env.report, "Api/grow_in_group", [&] { grow_in_group(env.report, slab); });
  run_case(env.report, "Api/group_error", [&] { group_error(env.report, slab); });
  run_case(env.report, "Api/group_error_v", [&] { group_error_v(env.report, slab); });
  run_case(env.report, "Api/last_error_across_threads", [&] { last_error_across_threads(env.report); });
  run_case(env.report, "Api/comm_blocking", [&] { comm_blocking(env.report); });
  run_case(env.report, "Api/deregister_nothing", [&] { deregister_nothing(env.report); });
}

// ---- Ranks as processes -----------------------------------------------------------------------------

// A valid AllReduce on `comm` with its result checked: shows the communicator still works.
void still_usable(RankEnv& env, ncclComm_t comm, Slab& slab, const std::string& label) {
  using T = Float32Type;
  const Content<T> content{Inputs{hash_string(label), false}, env.nranks, Op::sum};
  slab.reset();
  const Staged<T> call(slab, Coll::AllReduce, env.rank, env.nranks, 1000, 0, false, content);
  const ncclResult_t rc = ncclAllReduce(call.send, call.recv, 1000, ncclFloat32, ncclSum, comm, kNoStream);
  if (env.report.expect(rc, label, comm)) call.check(env.report, label);
}

void shape(RankEnv& env) {
  int count = -1, rank = -1;
  env.report.expect(ncclCommCount(env.comm, &count), "ncclCommCount", env.comm);
  env.report.expect(ncclCommUserRank(env.comm, &rank), "ncclCommUserRank", env.comm);
  if (count != env.nranks || rank != env.rank) {
    env.report.fail("rank " + std::to_string(rank) + " of " + std::to_string(count));
  }
  ncclResult_t async = ncclInternalError;
  env.report.expect(ncclCommGetAsyncError(env.comm, &async), "ncclCommGetAsyncError", env.comm);
  env.report.expect(async, "the asynchronous error", env.comm);
}

// Each bad call must return ncclInvalidArgument, leave its buffers alone and set the last error;
// then a valid collective must work. Every rank makes the same calls.
void bad_arguments(RankEnv& env, Slab& slab) {
  using T = Float32Type;
  const int r = env.rank, n = env.nranks;
  ncclComm_t comm = env.comm;
  constexpr std::size_t c = 64;
  const std::size_t total = c * static_cast<std::size_t>(n);
  // `call` gets a valid send buffer (c * nranks elements of input) and a poisoned receive buffer.
  auto bad = [&](const std::string& what, ncclComm_t blamed, auto&& call) {
    run_case(env.report, "Api/bad_argument/" + what, [&] {
      const Content<T> content{Inputs{hash_string(what), false}, n, Op::sum};
      slab.reset();
      const Placed<T> send(slab, {total, {input_at(0, total, r, 0)}, {}}, content);
      const Placed<T> recv(slab, {total, {}, {}}, content, 1);
      const ncclResult_t rc = call(static_cast<const void*>(send.data), static_cast<void*>(recv.data));
      env.report.expect(rc, what, comm, ncclInvalidArgument);
      send.check(content, "sendbuff after " + what, env.report);
      recv.check(content, "recvbuff after " + what, env.report);
      const char* last = ncclGetLastError(blamed);
      if (!last || !*last) env.report.fail("ncclGetLastError is empty after " + what);
      still_usable(env, comm, slab, "AllReduce after " + what);
    });
  };
  const auto f32 = ncclFloat32;
  const auto bad_type = static_cast<ncclDataType_t>(ncclNumTypes);
  const auto uncreated_op = static_cast<ncclRedOp_t>(ncclNumOps);
  const auto bad_op = static_cast<ncclRedOp_t>(99);
  const cudaStream_t s = kNoStream;
  using B = const void*;
  using R = void*;

  bad("AllReduce_null_comm", nullptr, [&](B sb, R rb) { return ncclAllReduce(sb, rb, c, f32, ncclSum, nullptr, s); });
  bad("Broadcast_null_comm", nullptr, [&](B sb, R rb) { return ncclBroadcast(sb, rb, c, f32, 0, nullptr, s); });
  bad("AllReduce_type_12", comm, [&](B sb, R rb) { return ncclAllReduce(sb, rb, c, bad_type, ncclSum, comm, s); });
  bad("AllGather_type_12", comm, [&](B sb, R rb) { return ncclAllGather(sb, rb, c, bad_type, comm, s); });
  bad("Broadcast_type_-1", comm,
      [&](B sb, R rb) { return ncclBroadcast(sb, rb, c, static_cast<ncclDataType_t>(-1), 0, comm, s); });
  bad("Send_type_12", comm, [&](B sb, R) { return ncclSend(sb, c, bad_type, 0, comm, s); });
  bad("AllReduce_op_5_not_created", comm,
      [&](B sb, R rb) { return ncclAllReduce(sb, rb, c, f32, uncreated_op, comm, s); });
  bad("ReduceScatter_op_99", comm, [&](B sb, R rb) { return ncclReduceScatter(sb, rb, c, f32, bad_op, comm, s); });
  bad("Reduce_op_99", comm, [&](B sb, R rb) { return ncclReduce(sb, rb, c, f32, bad_op, 0, comm, s); });
  bad("Broadcast_root_nranks", comm, [&](B sb, R rb) { return ncclBroadcast(sb, rb, c, f32, n, comm, s); });
  bad("Bcast_root_-1", comm, [&](B, R rb) { return ncclBcast(rb, c, f32, -1, comm, s); });
  bad("Reduce_root_nranks", comm, [&](B sb, R rb) { return ncclReduce(sb, rb, c, f32, ncclSum, n, comm, s); });
  bad("Gather_root_nranks", comm, [&](B sb, R rb) { return ncclGather(sb, rb, c, f32, n, comm, s); });
  bad("Scatter_root_-1", comm, [&](B sb, R rb) { return ncclScatter(sb, rb, c, f32, -1, comm, s); });
  bad("AllReduce_null_sendbuff", comm, [&](B, R rb) { return ncclAllReduce(nullptr, rb, c, f32, ncclSum, comm, s); });
  bad("AllReduce_null_recvbuff", comm, [&](B sb, R) { return ncclAllReduce(sb, nullptr, c, f32, ncclSum, comm, s); });
  bad("AllGather_null_recvbuff", comm, [&](B sb, R) { return ncclAllGather(sb, nullptr, c, f32, comm, s); });
  bad("AlltoAll_null_sendbuff", comm, [&](B, R rb) { return ncclAlltoAll(nullptr, rb, c, f32, comm, s); });
  bad("Send_null_buffer", comm, [&](B, R) { return ncclSend(nullptr, c, f32, 0, comm, s); });
  bad("Recv_null_buffer", comm, [&](B, R) { return ncclRecv(nullptr, c, f32, 0, comm, s); });
  bad("Send_peer_nranks", comm, [&](B sb, R) { return ncclSend(sb, c, f32, n, comm, s); });
  bad("Recv_peer_-1", comm, [&](B, R rb) { return ncclRecv(rb, c, f32, -1, comm, s); });
}

// Count 0: success and no effect for every collective (the matrix checks it per type as well).
void count_zero(RankEnv& env, Slab& slab) {
  using T = Int32;
  const int r = env.rank, n = env.nranks;
  for (const CollInfo& ci : kColls) {
    run_case(env.report, std::string("Api/count0/") + ci.name, [&] {
      const Content<T> content{Inputs{hash_string(ci.name), false}, n, Op::sum};
      slab.reset();
      const Placed<T> send(slab, {16, {input_at(0, 16, r, 0)}, {}}, content);
      const Placed<T> recv(slab, {16, {}, {}}, content, 1);
      const ncclResult_t rc = issue(ci.coll, send.data, recv.data, 0, ncclInt32, ncclSum, 0, env.comm, r, n);
      env.report.expect(rc, std::string("nccl") + ci.name + " with count 0", env.comm);
      send.check(content, "sendbuff", env.report);
      recv.check(content, "recvbuff", env.report);
    });
  }
}

// Communicators from two more ids: one finalized then destroyed, one aborted; the first still works.
void teardown(RankEnv& env, Slab& slab) {
  const int r = env.rank, n = env.nranks;
  run_case(env.report, "Api/finalize_destroy", [&] {
    ncclComm_t c = nullptr;
    if (!env.report.expect(ncclCommInitRank(&c, n, env.ids.at(0), r), "ncclCommInitRank")) return;
    still_usable(env, c, slab, "AllReduce before finalize");
    if (env.report.expect(ncclCommFinalize(c), "ncclCommFinalize", c)) {
      ncclResult_t async = ncclInternalError;
      env.report.expect(ncclCommGetAsyncError(c, &async), "ncclCommGetAsyncError after finalize", c);
      env.report.expect(async, "the asynchronous error after finalize", c);
    }
    env.report.expect(ncclCommDestroy(c), "ncclCommDestroy after finalize");
    still_usable(env, env.comm, slab, "AllReduce on the first communicator");
  });
  run_case(env.report, "Api/abort", [&] {
    ncclComm_t c = nullptr;
    if (!env.report.expect(ncclCommInitRank(&c, n, env.ids.at(1), r), "ncclCommInitRank")) return;
    still_usable(env, c, slab, "AllReduce before abort");
    env.report.expect(ncclCommAbort(c), "ncclCommAbort");
    still_usable(env, env.comm, slab, "AllReduce on the first communicator");
  });
}

// The state of `comm` once it is no longer ncclSuccess, or ncclSuccess after `seconds`.
ncclResult_t wait_for_failure(ncclComm_t comm, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  ncclResult_t state = ncclSuccess;
  while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclSuccess &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return state;
}

// As NCCL: ncclCommDestroy of a communicator in the error state returns its error and frees
// nothing (it still answers); ncclCommAbort frees it. The last rank aborts without a farewell,
// which fails the others' communicator. A communicator finalized before it failed is destroyed.
void destroy_failed(RankEnv& env, Slab& slab) {
  const int r = env.rank, n = env.nranks, last = n - 1;
  if (n < 2) return;  // no peer to fail
  run_case(env.report, "Api/destroy_failed", [&] {
    ncclComm_t c = nullptr;
    if (!env.report.expect(ncclCommInitRank(&c, n, env.ids.at(2), r), "ncclCommInitRank")) return;
    if (r == last) {
      env.report.expect(ncclCommAbort(c), "ncclCommAbort of the rank that fails the others");
    } else {
      env.report.expect(wait_for_failure(c, 30), "the state once a peer aborted", c, ncclRemoteError);
      env.report.expect(ncclCommDestroy(c), "ncclCommDestroy of the failed communicator", c, ncclRemoteError);
      const std::string why = ncclGetLastError(nullptr);
      if (why.find("ncclCommDestroy") == std::string::npos || why.find("abort") == std::string::npos)
        env.report.fail("ncclGetLastError after the refused ncclCommDestroy: \"" + why + "\"");
      ncclResult_t state = ncclSuccess;
      env.report.expect(ncclCommGetAsyncError(c, &state), "ncclCommGetAsyncError after the refused ncclCommDestroy", c);
      env.report.expect(state, "the state after the refused ncclCommDestroy", c, ncclRemoteError);
      env.report.expect(ncclCommDestroy(c), "a second ncclCommDestroy", c, ncclRemoteError);
      env.report.expect(ncclCommAbort(c), "ncclCommAbort of the failed communicator");
      env.report.expect(ncclCommGetAsyncError(c, &state), "ncclCommGetAsyncError after ncclCommAbort", nullptr,
                        ncclInvalidArgument);
    }
    still_usable(env, env.comm, slab, "AllReduce on the first communicator");
  });
  run_case(env.report, "Api/destroy_failed_after_finalize", [&] {
    ncclComm_t c = nullptr;
    if (!env.report.expect(ncclCommInitRank(&c, n, env.ids.at(3), r), "ncclCommInitRank")) return;
    if (r != last) env.report.expect(ncclCommFinalize(c), "ncclCommFinalize", c);
    still_usable(env, env.comm, slab, "AllReduce after the others' finalize");  // every finalize is done
    if (r == last) {
      env.report.expect(ncclCommAbort(c), "ncclCommAbort of the rank that fails the others");
    } else {
      env.report.expect(wait_for_failure(c, 30), "the state once a peer aborted after the finalize", c,
                        ncclRemoteError);
      env.report.expect(ncclCommDestroy(c), "ncclCommDestroy of a communicator that failed after its finalize", c);
    }
    still_usable(env, env.comm, slab, "AllReduce on the first communicator");
  });
}

// ncclCommMemStats' ncclStatGpuMemSuspended of `comm`, or -1 when the call fails.
long long suspended_stat(ncclComm_t comm) {
  std::uint64_t v = 7;
  return ncclCommMemStats(comm, kStatSuspended, &v) == ncclSuccess ? static_cast<long long>(v) : -1;
}

// Every rank suspends the communicator's memory (a collective call), finds its collectives refused
// with ncclInvalidUsage and their buffers untouched, resumes it, and runs collectives on it again;
// then the same inside a group.
void suspend_resume(RankEnv& env, Slab& slab) {
  run_case(env.report, "Api/suspend_resume", [&] {
    using T = Float32Type;
    ncclComm_t comm = env.comm;
    still_usable(env, comm, slab, "AllReduce before ncclCommSuspend");
    // E2E_SUSPEND_REFUSED=1: the communicator hands work to a real NCCL that cannot suspend (older
    // than 2.29), and refuses to suspend.
    const char* refused = std::getenv("E2E_SUSPEND_REFUSED");
    if (refused && std::string(refused) == "1") {
      env.report.expect(ncclCommSuspend(comm, kSuspendMem), "ncclCommSuspend over an NCCL without it", comm,
                        ncclInvalidUsage);
      still_usable(env, comm, slab, "AllReduce after the refused ncclCommSuspend");
      return;
    }
    if (!env.report.expect(ncclCommSuspend(comm, kSuspendMem), "ncclCommSuspend", comm)) return;
    if (suspended_stat(comm) != 1) env.report.fail("suspended is " + std::to_string(suspended_stat(comm)) + ", not 1");
    const Content<T> content{Inputs{hash_string("suspended"), false}, env.nranks, Op::sum};
    slab.reset();
    const Placed<T> send(slab, {64, {input_at(0, 64, env.rank, 0)}, {}}, content);
    const Placed<T> recv(slab, {64, {}, {}}, content, 1);
    env.report.expect(ncclAllReduce(send.data, recv.data, 64, ncclFloat32, ncclSum, comm, kNoStream),
                      "ncclAllReduce while suspended", comm, ncclInvalidUsage);
    recv.check(content, "recvbuff after the refused ncclAllReduce", env.report);
    const std::string why = ncclGetLastError(comm);
    if (why.find("suspended") == std::string::npos) env.report.fail("the last error does not say why: \"" + why + "\"");
    env.report.expect(ncclCommSuspend(comm, kSuspendMem), "a second ncclCommSuspend", comm, ncclInvalidUsage);
    if (!env.report.expect(ncclCommResume(comm), "ncclCommResume", comm)) return;
    if (suspended_stat(comm) != 0) env.report.fail("suspended is " + std::to_string(suspended_stat(comm)) + ", not 0");
    still_usable(env, comm, slab, "AllReduce after ncclCommResume");
    env.report.expect(ncclCommResume(comm), "a second ncclCommResume", comm, ncclInvalidUsage);
    // In a group, a collective called before the suspend runs before it.
    slab.reset();
    const Content<T> before{Inputs{hash_string("before the group's suspend"), false}, env.nranks, Op::sum};
    const Staged<T> call(slab, Coll::AllReduce, env.rank, env.nranks, 1000, 0, false, before);
    ncclGroupStart();
    env.report.expect(ncclAllReduce(call.send, call.recv, 1000, ncclFloat32, ncclSum, comm, kNoStream),
                      "ncclAllReduce in a group, before its ncclCommSuspend", comm);
    env.report.expect(ncclCommSuspend(comm, kSuspendMem), "ncclCommSuspend in a group", comm);
    env.report.expect(ncclGroupEnd(), "ncclGroupEnd of the suspend", comm);
    call.check(env.report, "the AllReduce called before the group's ncclCommSuspend");
    if (suspended_stat(comm) != 1) env.report.fail("suspended by a group is " + std::to_string(suspended_stat(comm)));
    ncclGroupStart();
    env.report.expect(ncclCommResume(comm), "ncclCommResume in a group", comm);
    env.report.expect(ncclGroupEnd(), "ncclGroupEnd of the resume", comm);
    still_usable(env, comm, slab, "AllReduce after a group's ncclCommResume");
  });
}

// ncclCommGrow with ranks as processes: every rank but the last splits off a communicator, whose
// rank 0 makes the id to grow with; the id reaches the last rank by a Broadcast over the whole
// communicator; then the split's ranks grow it by the last rank. Each keeps its rank, and the grown
// communicator's AllReduce is checked.
void grow_processes(RankEnv& env, Slab& slab) {
  if (env.nranks < 2) return;
  const bool joining = env.rank == env.nranks - 1;
  ncclComm_t part = nullptr;
  const int colour = joining ? NCCL_SPLIT_NOCOLOR : 0;
  if (!env.report.expect(ncclCommSplit(env.comm, colour, env.rank, &part, nullptr), "ncclCommSplit", env.comm)) return;
  slab.reset();
  auto* id = reinterpret_cast<ncclUniqueId*>(slab.take(sizeof(ncclUniqueId), 0));
  std::memset(id, 0, sizeof(*id));
  if (env.rank == 0) env.report.expect(ncclCommGetUniqueId(part, id), "ncclCommGetUniqueId", part);
  env.report.expect(ncclBroadcast(id, id, sizeof(*id), ncclUint8, 0, env.comm, kNoStream), "ncclBroadcast of the id",
                    env.comm);
  ncclComm_t grown = nullptr;
  const ncclResult_t rc = joining ? ncclCommGrow(nullptr, env.nranks, id, env.rank, &grown, nullptr)
                                  : ncclCommGrow(part, env.nranks, env.rank == 0 ? id : nullptr, -1, &grown, nullptr);
  if (env.report.expect(rc, joining ? "ncclCommGrow of the new rank" : "ncclCommGrow of an existing rank", part)) {
    int count = -1, rank = -1;
    ncclCommCount(grown, &count);
    ncclCommUserRank(grown, &rank);
    if (count != env.nranks || rank != env.rank)
      env.report.fail("the grown communicator is rank " + std::to_string(rank) + " of " + std::to_string(count));
    else
      still_usable(env, grown, slab, "AllReduce on the grown communicator");
    env.report.expect(ncclCommDestroy(grown), "ncclCommDestroy of the grown communicator");
  }
  if (part) env.report.expect(ncclCommDestroy(part), "ncclCommDestroy of the split");
}

void ranks(RankEnv& env) {
  Slab slab(std::size_t{16} << 20);
  run_case(env.report, "Api/count_rank_async", [&] { shape(env); });
  run_case(env.report, "Api/grow_processes", [&] { grow_processes(env, slab); });
  bad_arguments(env, slab);
  count_zero(env, slab);
  suspend_resume(env, slab);
  teardown(env, slab);
  destroy_failed(env, slab);
}

}  // namespace
}  // namespace e2e

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  const auto started = std::chrono::steady_clock::now();
  const e2e::Options options = e2e::parse_options(argc, argv);
  e2e::Totals totals = e2e::run_ranks(options, 1, /*join=*/false, /*extra_ids=*/0, e2e::one_process);
  const e2e::Totals more = e2e::run_ranks(options, options.nranks, /*join=*/true, /*extra_ids=*/4, e2e::ranks);
  totals.passed += more.passed;
  totals.failed += more.failed;
  return e2e::finish(options, totals, started);
}
