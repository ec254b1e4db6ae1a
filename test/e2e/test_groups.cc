// Groups, point-to-point patterns and several communicators, ranks as processes:
//   - a group mixing receives, an AllReduce, sends (to self and to several peers, several
//     messages to the same peer) and an in-place AllGather; a group of collectives only; nested
//     groups;
//   - send/receive patterns: ring in both directions, all pairs (self included), blocking pairs
//     outside any group;
//   - chains of separate Send/Recv calls that complete only because small sends are buffered
//     (test/common/chains.h): the README's former limitation and random chains;
//   - ncclCommSplit by color rank % 2 and key -rank with one rank NCCL_SPLIT_NOCOLOR, and a
//     collective on each part; two splits of one parent in one group (each rank's first makes
//     one communicator, its second another, whatever order their work comes to); communicators
//     used at once (split duplicates and a second unique id), calls interleaved and grouped
//     across communicators.
//
//   e2e_groups --ranks N [--filter PATTERN] [--list]
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "buffers.h"
#include "harness.h"
#include "plans.h"
#include "reference.h"
#include "test/common/chains.h"
#include "test/common/loopback.h"

namespace e2e {
namespace {

constexpr cudaStream_t kNoStream = static_cast<cudaStream_t>(0);
constexpr std::size_t kSlabBytes = std::size_t{96} << 20;

struct Ctx {
  RankEnv& env;
  Slab& slab;
  int r() const { return env.rank; }
  int n() const { return env.nranks; }
  Reporter& report() const { return env.report; }
};

// ---- Messages of the mixed group ------------------------------------------------------------------

// Rank src sends to itself, its two successors and its predecessor (each once).
std::vector<int> destinations(int src, int n) {
  std::vector<int> d;
  for (int step : {0, 1, 2, -1}) {
    const int peer = ((src + step) % n + n) % n;
    if (std::find(d.begin(), d.end(), peer) == d.end()) d.push_back(peer);
  }
  return d;
}
int messages(int src, int dst) { return 1 + (src + 2 * dst) % 3; }  // 1 to 3 to the same peer
std::size_t message_count(int src, int dst, int j) {
  constexpr std::size_t counts[] = {1, 1000, 65537, 7, 0};
  return counts[static_cast<std::size_t>(src * 7 + dst * 3 + j) % 5];
}
std::size_t message_from(int src, int dst, int j) {  // disjoint input ranges per message
  return (std::size_t{1} << 30) + ((static_cast<std::size_t>(src) * 64 + static_cast<std::size_t>(dst)) * 8 +
                                   static_cast<std::size_t>(j)) * (std::size_t{1} << 20);
}

template <class T>
struct Message {
  int peer;
  std::size_t count;
  Placed<T> buffer;
};

template <class T>
void mixed_group(Ctx& cx, ncclDataType_t dt, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  const Content<T> content{Inputs{hash_string(name), false}, n, Op::sum};
  cx.slab.reset();
  constexpr std::size_t kReduceCount = 4099, kGatherCount = 1000, kGatherFrom = std::size_t{1} << 28;
  const Staged<T> all_reduce(cx.slab, Coll::AllReduce, r, n, kReduceCount, 0, false, content, 1);
  const Staged<T> all_gather(cx.slab, Coll::AllGather, r, n, kGatherCount, 0, true, content, 2, kGatherFrom);

  std::vector<Message<T>> sends, recvs;
  for (int dst : destinations(r, n)) {
    for (int j = 0; j < messages(r, dst); ++j) {
      const std::size_t c = message_count(r, dst, j);
      sends.push_back({dst, c, Placed<T>(cx.slab, {c, {input_at(0, c, r, message_from(r, dst, j))}, {}}, content, j)});
    }
  }
  for (int src = 0; src < n; ++src) {
    const auto d = destinations(src, n);
    if (std::find(d.begin(), d.end(), r) == d.end()) continue;
    for (int j = 0; j < messages(src, r); ++j) {
      const std::size_t c = message_count(src, r, j);
      recvs.push_back(
          {src, c, Placed<T>(cx.slab, {c, {}, {input_at(0, c, src, message_from(src, r, j))}}, content, j + 1)});
    }
  }

  // In the group: half the receives, the AllReduce, every send, the AllGather, the other receives.
  const std::size_t half = recvs.size() / 2;
  report.expect(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t i = 0; i < half; ++i) {
    report.expect(ncclRecv(recvs[i].buffer.data, recvs[i].count, dt, recvs[i].peer, comm, kNoStream), "ncclRecv", comm);
  }
  report.expect(ncclAllReduce(all_reduce.send, all_reduce.recv, kReduceCount, dt, ncclSum, comm, kNoStream),
                "ncclAllReduce", comm);
  for (auto& m : sends) {
    report.expect(ncclSend(m.buffer.data, m.count, dt, m.peer, comm, kNoStream), "ncclSend", comm);
  }
  report.expect(ncclAllGather(all_gather.send, all_gather.recv, kGatherCount, dt, comm, kNoStream), "ncclAllGather",
                comm);
  for (std::size_t i = half; i < recvs.size(); ++i) {
    report.expect(ncclRecv(recvs[i].buffer.data, recvs[i].count, dt, recvs[i].peer, comm, kNoStream), "ncclRecv", comm);
  }
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) return;

  all_reduce.check(report, "AllReduce");
  all_gather.check(report, "AllGather");
  for (const auto& m : sends) m.buffer.check(content, "send to " + std::to_string(m.peer), report);
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    recvs[i].buffer.check(content, "receive #" + std::to_string(i) + " from " + std::to_string(recvs[i].peer), report);
  }
}

// Several collectives in one group: AllReduce (avg), ReduceScatter (max), Broadcast, Reduce (min),
// AlltoAll, issued in that order by every rank.
template <class T>
void collectives_group(Ctx& cx, ncclDataType_t dt, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  const Inputs in{hash_string(name), false};
  const Content<T> avg{in, n, Op::avg}, max{in, n, Op::max},
      min{in, n, Op::min}, copy{in, n, Op::sum};
  cx.slab.reset();
  const int root = n - 1;
  const Staged<T> ar(cx.slab, Coll::AllReduce, r, n, 1000, 0, false, avg, 1, 0);
  const Staged<T> rs(cx.slab, Coll::ReduceScatter, r, n, 777, 0, true, max, 2, 1 << 20);
  const Staged<T> bc(cx.slab, Coll::Broadcast, r, n, 65537, root, false, copy, 3, 2 << 20);
  const Staged<T> rd(cx.slab, Coll::Reduce, r, n, 4099, 0, true, min, 0, 3 << 20);
  const Staged<T> a2a(cx.slab, Coll::AlltoAll, r, n, 333, 0, false, copy, 1, 4 << 20);
  report.expect(ncclGroupStart(), "ncclGroupStart");
  report.expect(ncclAllReduce(ar.send, ar.recv, 1000, dt, ncclAvg, comm, kNoStream), "ncclAllReduce", comm);
  report.expect(ncclReduceScatter(rs.send, rs.recv, 777, dt, ncclMax, comm, kNoStream), "ncclReduceScatter", comm);
  report.expect(ncclBroadcast(bc.send, bc.recv, 65537, dt, root, comm, kNoStream), "ncclBroadcast", comm);
  report.expect(ncclReduce(rd.send, rd.recv, 4099, dt, ncclMin, 0, comm, kNoStream), "ncclReduce", comm);
  report.expect(ncclAlltoAll(a2a.send, a2a.recv, 333, dt, comm, kNoStream), "ncclAlltoAll", comm);
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) return;
  ar.check(report, "AllReduce");
  rs.check(report, "ReduceScatter");
  bc.check(report, "Broadcast");
  rd.check(report, "Reduce");
  a2a.check(report, "AlltoAll");
}

// Groups inside groups: the work runs at the outermost ncclGroupEnd.
void nested_groups(Ctx& cx, const std::string& name) {
  using T = Float32Type;
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  const Content<T> content{Inputs{hash_string(name), false}, n, Op::sum};
  cx.slab.reset();
  const Staged<T> ar(cx.slab, Coll::AllReduce, r, n, 4096, 0, false, content, 0, 0);
  const Staged<T> ring(cx.slab, Coll::SendRecv, r, n, 5000, 0, false, content, 1, 1 << 20);
  report.expect(ncclGroupStart(), "ncclGroupStart");
  report.expect(ncclGroupStart(), "ncclGroupStart (nested)");
  report.expect(ncclAllReduce(ar.send, ar.recv, 4096, ncclFloat32, ncclSum, comm, kNoStream), "ncclAllReduce", comm);
  report.expect(ncclGroupEnd(), "ncclGroupEnd (nested)", comm);
  report.expect(ncclGroupStart(), "ncclGroupStart (nested)");
  report.expect(ncclSend(ring.send, 5000, ncclFloat32, (r + 1) % n, comm, kNoStream), "ncclSend", comm);
  report.expect(ncclRecv(ring.recv, 5000, ncclFloat32, (r + n - 1) % n, comm, kNoStream), "ncclRecv", comm);
  report.expect(ncclGroupEnd(), "ncclGroupEnd (nested)", comm);
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) return;
  ar.check(report, "AllReduce");
  ring.check(report, "ring");
}

// ---- Send/receive patterns ------------------------------------------------------------------------

// Each rank sends one message to rank+1 and one to rank-1 and receives from both (with two ranks,
// two messages to the same peer, matched in order).
template <class T>
void ring_both_ways(Ctx& cx, ncclDataType_t dt, std::size_t count, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  const Content<T> content{Inputs{hash_string(name), false}, n, Op::sum};
  cx.slab.reset();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const std::size_t up = 0, down = std::size_t{1} << 24;  // input ranges of the two directions
  const Placed<T> to_next(cx.slab, {count, {input_at(0, count, r, up)}, {}}, content, 0);
  const Placed<T> to_prev(cx.slab, {count, {input_at(0, count, r, down)}, {}}, content, 1);
  const Placed<T> from_prev(cx.slab, {count, {}, {input_at(0, count, prev, up)}}, content, 2);
  const Placed<T> from_next(cx.slab, {count, {}, {input_at(0, count, next, down)}}, content, 3);
  report.expect(ncclGroupStart(), "ncclGroupStart");
  report.expect(ncclSend(to_next.data, count, dt, next, comm, kNoStream), "ncclSend", comm);
  report.expect(ncclSend(to_prev.data, count, dt, prev, comm, kNoStream), "ncclSend", comm);
  report.expect(ncclRecv(from_prev.data, count, dt, prev, comm, kNoStream), "ncclRecv", comm);
  report.expect(ncclRecv(from_next.data, count, dt, next, comm, kNoStream), "ncclRecv", comm);
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) return;
  to_next.check(content, "send to next", report);
  to_prev.check(content, "send to prev", report);
  from_prev.check(content, "receive from prev", report);
  from_next.check(content, "receive from next", report);
}

// Every rank sends a distinct message to every rank (itself included) and receives from every rank.
template <class T>
void all_pairs(Ctx& cx, ncclDataType_t dt, std::size_t count, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  const Content<T> content{Inputs{hash_string(name), false}, n, Op::sum};
  cx.slab.reset();
  std::vector<Placed<T>> out, in;
  for (int p = 0; p < n; ++p) {
    out.emplace_back(cx.slab, RegionSpec{count, {input_at(0, count, r, count * static_cast<std::size_t>(p))}, {}},
                     content, static_cast<std::uint64_t>(p));
  }
  for (int p = 0; p < n; ++p) {
    in.emplace_back(cx.slab, RegionSpec{count, {}, {input_at(0, count, p, count * static_cast<std::size_t>(r))}},
                    content, static_cast<std::uint64_t>(p + 1));
  }
  report.expect(ncclGroupStart(), "ncclGroupStart");
  for (int k = 0; k < n; ++k) {  // a different order on each rank
    const int p = (r + k) % n, q = (r + n - k) % n;
    report.expect(ncclSend(out[static_cast<std::size_t>(p)].data, count, dt, p, comm, kNoStream), "ncclSend", comm);
    report.expect(ncclRecv(in[static_cast<std::size_t>(q)].data, count, dt, q, comm, kNoStream), "ncclRecv", comm);
  }
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) return;
  for (int p = 0; p < n; ++p) {
    out[static_cast<std::size_t>(p)].check(content, "send to " + std::to_string(p), report);
    in[static_cast<std::size_t>(p)].check(content, "receive from " + std::to_string(p), report);
  }
}

// Scatter and Gather as nccl-tests' scatter_perf and gather_perf issue them: in one group the root
// sends a part to every rank (itself included) and every rank receives its part from the root; or
// every rank sends its part to the root, which receives from every rank.
template <class T>
void rooted_p2p(Ctx& cx, ncclDataType_t dt, std::size_t count, int root, bool scatter, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  const Content<T> content{Inputs{hash_string(name), false}, n, Op::sum};
  cx.slab.reset();
  const auto at = [&](int src, int dst) { return count * static_cast<std::size_t>(src * n + dst); };
  std::vector<Placed<T>> out, in;
  std::vector<int> to, from;
  for (int p = 0; p < n; ++p) {
    if (scatter ? r == root : p == root) to.push_back(p);
    if (scatter ? p == root : r == root) from.push_back(p);
  }
  for (int p : to) out.emplace_back(cx.slab, RegionSpec{count, {input_at(0, count, r, at(r, p))}, {}}, content, 0);
  for (int p : from) in.emplace_back(cx.slab, RegionSpec{count, {}, {input_at(0, count, p, at(p, r))}}, content, 1);
  report.expect(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t i = 0; i < to.size(); ++i)
    report.expect(ncclSend(out[i].data, count, dt, to[i], comm, kNoStream), "ncclSend", comm);
  for (std::size_t i = 0; i < from.size(); ++i)
    report.expect(ncclRecv(in[i].data, count, dt, from[i], comm, kNoStream), "ncclRecv", comm);
  if (!report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) return;
  for (std::size_t i = 0; i < to.size(); ++i) out[i].check(content, "send to " + std::to_string(to[i]), report);
  for (std::size_t i = 0; i < from.size(); ++i) in[i].check(content, "receive from " + std::to_string(from[i]), report);
}

// Outside any group: ranks 2k and 2k+1 exchange a message, the even one sending first. With an odd
// number of ranks the last rank sits out.
template <class T>
void blocking_pairs(Ctx& cx, ncclDataType_t dt, std::size_t count, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  const int partner = r ^ 1;
  if (partner >= n) return;
  const Content<T> content{Inputs{hash_string(name), false}, n, Op::sum};
  cx.slab.reset();
  const Placed<T> out(cx.slab, {count, {input_at(0, count, r, 0)}, {}}, content, 0);
  const Placed<T> in(cx.slab, {count, {}, {input_at(0, count, partner, 0)}}, content, 1);
  auto send = [&] { return report.expect(ncclSend(out.data, count, dt, partner, comm, kNoStream), "ncclSend", comm); };
  auto recv = [&] { return report.expect(ncclRecv(in.data, count, dt, partner, comm, kNoStream), "ncclRecv", comm); };
  if (r % 2 == 0 ? send() && recv() : recv() && send()) {
    out.check(content, "send", report);
    in.check(content, "receive", report);
  }
}

// A chain of separate, blocking Send/Recv calls (test/common/chains.h) as this rank's part of it: every
// message carries its own content, every receive buffer starts as poison, and each is checked after
// the whole chain (a send's buffer is left alone until then).
void run_chain(Ctx& cx, const chains::Chain& chain) {
  const int r = cx.r();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  if (r >= static_cast<int>(chain.size())) return;
  const auto& ops = chain[static_cast<std::size_t>(r)];
  std::vector<std::vector<std::uint32_t>> buffers;
  for (const chains::P2p& op : ops) {
    std::vector<std::uint32_t> b(op.count, 0xA5A5A5A5u);
    if (op.send)
      for (std::size_t i = 0; i < op.count; ++i) b[i] = chains::element(op.id, i);
    buffers.push_back(std::move(b));
  }
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const chains::P2p& op = ops[k];
    const std::string what = std::string(op.send ? "ncclSend to " : "ncclRecv from ") + std::to_string(op.peer) +
                             " (message " + std::to_string(op.id) + ", call " + std::to_string(k) + ")";
    const ncclResult_t rc = op.send ? ncclSend(buffers[k].data(), op.count, ncclInt32, op.peer, comm, kNoStream)
                                    : ncclRecv(buffers[k].data(), op.count, ncclInt32, op.peer, comm, kNoStream);
    if (!report.expect(rc, what, comm)) return;
  }
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].send) continue;
    for (std::size_t i = 0; i < ops[k].count; ++i)
      if (buffers[k][i] != chains::element(ops[k].id, i)) {
        report.fail("message " + std::to_string(ops[k].id) + " from " + std::to_string(ops[k].peer) + ": element " +
                    std::to_string(i) + " is " + std::to_string(buffers[k][i]) + ", expected " +
                    std::to_string(chains::element(ops[k].id, i)));
        break;
      }
  }
}

// ---- Several communicators ------------------------------------------------------------------------

// One collective on `comm`, as rank `rank` of `nranks`: prepared, issued outside any group, checked.
template <class T>
void one_call(Ctx& cx, ncclComm_t comm, int rank, int nranks, Coll coll, ncclDataType_t dt, std::size_t count,
              int root, bool in_place, Op op, const std::string& label) {
  Reporter& report = cx.report();
  const Content<T> content{Inputs{hash_string(label), false}, nranks, op};
  cx.slab.reset();
  const Staged<T> call(cx.slab, coll, rank, nranks, count, root, in_place, content, hash_string(label));
  const ncclResult_t rc = issue(coll, call.send, call.recv, count, dt, builtin(op), root, comm, rank, nranks);
  if (report.expect(rc, label, comm)) call.check(report, label);
}

bool check_shape(Reporter& report, ncclComm_t comm, int want_count, int want_rank, const std::string& what) {
  int count = -1, rank = -1;
  bool ok = report.expect(ncclCommCount(comm, &count), "ncclCommCount", comm);
  ok = report.expect(ncclCommUserRank(comm, &rank), "ncclCommUserRank", comm) && ok;
  if (count != want_count || rank != want_rank) {
    report.fail(what + ": rank " + std::to_string(rank) + " of " + std::to_string(count) + ", expected rank " +
                std::to_string(want_rank) + " of " + std::to_string(want_count));
    return false;
  }
  return ok;
}

// Color rank % 2, key -rank (so each part orders its ranks backwards); the last rank (of two or
// more) passes NCCL_SPLIT_NOCOLOR and gets no communicator. Each part runs an AllReduce whose
// float sum depends on the order of its ranks, and a Broadcast; then the parent runs one too.
void split_by_parity(Ctx& cx, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  const bool left_out = n >= 2 && r == n - 1;
  const int color = left_out ? NCCL_SPLIT_NOCOLOR : r % 2;
  ncclComm_t part = reinterpret_cast<ncclComm_t>(&cx);  // must be overwritten
  if (!report.expect(ncclCommSplit(cx.env.comm, color, -r, &part, nullptr), "ncclCommSplit", cx.env.comm)) return;
  if (left_out) {
    if (part != nullptr) report.fail("NCCL_SPLIT_NOCOLOR gave a communicator");
  } else if (part == nullptr) {
    report.fail("ncclCommSplit gave no communicator");
  } else {
    std::vector<int> members;  // by key -rank: highest rank first
    for (int k = n - 1; k >= 0; --k) {
      if (k % 2 == color && !(n >= 2 && k == n - 1)) members.push_back(k);
    }
    const int size = static_cast<int>(members.size());
    const int rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
    if (check_shape(report, part, size, rank, "split part")) {
      const std::string tag = name + "/color=" + std::to_string(color);
      one_call<Float32Type>(cx, part, rank, size, Coll::AllReduce, ncclFloat32, 1000, 0, false, Op::sum,
                            tag + " AllReduce");
      one_call<Bf16>(cx, part, rank, size, Coll::Broadcast, ncclBfloat16, 65537, size - 1, false, Op::sum,
                     tag + " Broadcast");
    }
    report.expect(ncclCommDestroy(part), "ncclCommDestroy (split part)");
  }
  one_call<Int64>(cx, cx.env.comm, r, n, Coll::AllReduce, ncclInt64, 777, 0, true, Op::sum, name + " parent AllReduce");
}

// Two splits of the parent inside one group: they run at ncclGroupEnd, and every rank's first
// split pairs with the others' first (colour rank % 2, key rank), its second with their second
// (one colour, key -rank: all ranks in reverse), as when called outside a group. Several rounds:
// splits run at once would pair differently from round to round.
void two_splits_in_a_group(Ctx& cx, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm;
  for (int round = 0; round < 5; ++round) {
    const std::string what = name + " round " + std::to_string(round);
    ncclComm_t parity = nullptr, reversed = nullptr;
    report.expect(ncclGroupStart(), "ncclGroupStart");
    report.expect(ncclCommSplit(comm, r % 2, r, &parity, nullptr), "ncclCommSplit (parity) in a group", comm);
    report.expect(ncclCommSplit(comm, 7, -r, &reversed, nullptr), "ncclCommSplit (reversed) in a group", comm);
    if (report.expect(ncclGroupEnd(), "ncclGroupEnd after two splits", comm)) {
      const int psize = (n - r % 2 + 1) / 2, prank = r / 2, rrank = n - 1 - r;
      if (!parity || !reversed) {
        report.fail(what + ": a split gave no communicator");
      } else if (check_shape(report, parity, psize, prank, what + ": parity split") &&
                 check_shape(report, reversed, n, rrank, what + ": reversed split") && round % 2 == 0) {
        one_call<Float32Type>(cx, parity, prank, psize, Coll::AllReduce, ncclFloat32, 1000, 0, false, Op::sum,
                              what + " parity AllReduce");
        one_call<Int32>(cx, reversed, rrank, n, Coll::AllGather, ncclInt32, 513, 0, false, Op::sum,
                        what + " reversed AllGather");
      }
    }
    if (parity) report.expect(ncclCommDestroy(parity), "ncclCommDestroy (parity)");
    if (reversed) report.expect(ncclCommDestroy(reversed), "ncclCommDestroy (reversed)");
  }
}

// Two more communicators over the same ranks, one in the same order, one reversed, used in turn
// with the parent and then all three in one group.
void interleaved_splits(Ctx& cx, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm, same = nullptr, reversed = nullptr;
  bool ok = report.expect(ncclCommSplit(comm, 0, r, &same, nullptr), "ncclCommSplit (same order)", comm);
  ok = report.expect(ncclCommSplit(comm, 5, n - 1 - r, &reversed, nullptr), "ncclCommSplit (reversed)", comm) && ok;
  if (!ok || !same || !reversed) {
    if (ok) report.fail("ncclCommSplit gave no communicator");
    return;
  }
  const int rr = n - 1 - r;
  if (check_shape(report, same, n, r, "same-order split") && check_shape(report, reversed, n, rr, "reversed split")) {
    one_call<Float32Type>(cx, comm, r, n, Coll::AllReduce, ncclFloat32, 1000, 0, false, Op::sum, name + " 1 parent");
    one_call<Int32>(cx, same, r, n, Coll::AllGather, ncclInt32, 513, 0, false, Op::sum, name + " 2 same");
    one_call<Float32Type>(cx, reversed, rr, n, Coll::AllReduce, ncclFloat32, 1000, 0, false, Op::sum,
                          name + " 3 reversed");
    one_call<Half>(cx, same, r, n, Coll::ReduceScatter, ncclFloat16, 999, 0, true, Op::sum, name + " 4 same");
    one_call<Bf16>(cx, reversed, rr, n, Coll::Broadcast, ncclBfloat16, 4097, 0, false, Op::sum, name + " 5 reversed");
    one_call<Float64Type>(cx, comm, r, n, Coll::Reduce, ncclFloat64, 100, n - 1, false, Op::max, name + " 6 parent");

    // One group over the three communicators.
    using T = Float32Type;
    const Content<T> content{Inputs{hash_string(name + " group"), false}, n, Op::sum};
    cx.slab.reset();
    const Staged<T> on_parent(cx.slab, Coll::AllReduce, r, n, 3000, 0, false, content, 0, 0);
    const Staged<T> on_reversed(cx.slab, Coll::AllReduce, rr, n, 3000, 0, false, content, 1, 1 << 20);
    const Staged<T> on_same(cx.slab, Coll::AllGather, r, n, 3000, 0, true, content, 2, 2 << 20);
    report.expect(ncclGroupStart(), "ncclGroupStart");
    report.expect(ncclAllReduce(on_parent.send, on_parent.recv, 3000, ncclFloat32, ncclSum, comm, kNoStream),
                  "ncclAllReduce (parent)", comm);
    report.expect(ncclAllReduce(on_reversed.send, on_reversed.recv, 3000, ncclFloat32, ncclSum, reversed, kNoStream),
                  "ncclAllReduce (reversed)", reversed);
    report.expect(ncclAllGather(on_same.send, on_same.recv, 3000, ncclFloat32, same, kNoStream),
                  "ncclAllGather (same)", same);
    if (report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) {
      on_parent.check(report, "grouped AllReduce on the parent");
      on_reversed.check(report, "grouped AllReduce on the reversed split");
      on_same.check(report, "grouped AllGather on the same-order split");
    }
  }
  report.expect(ncclCommDestroy(same), "ncclCommDestroy (same order)");
  report.expect(ncclCommDestroy(reversed), "ncclCommDestroy (reversed)");
}

// A second communicator from its own unique id, used in turn with the first and in one group.
void second_unique_id(Ctx& cx, const std::string& name) {
  const int r = cx.r(), n = cx.n();
  Reporter& report = cx.report();
  ncclComm_t comm = cx.env.comm, other = nullptr;
  if (!report.expect(ncclCommInitRank(&other, n, cx.env.ids.at(0), r), "ncclCommInitRank (second id)")) return;
  if (check_shape(report, other, n, r, "second communicator")) {
    one_call<Float32Type>(cx, other, r, n, Coll::AllReduce, ncclFloat32, 2000, 0, false, Op::sum, name + " 1 other");
    one_call<Float32Type>(cx, comm, r, n, Coll::AllReduce, ncclFloat32, 2000, 0, false, Op::sum, name + " 2 first");
    one_call<Uint8>(cx, other, r, n, Coll::AllGather, ncclUint8, 1001, 0, true, Op::sum, name + " 3 other");
    one_call<Int8>(cx, comm, r, n, Coll::Bcast, ncclInt8, 1001, n / 2, true, Op::sum, name + " 4 first");

    using T = Int32;
    const Content<T> content{Inputs{hash_string(name + " group"), false}, n, Op::sum};
    cx.slab.reset();
    const Staged<T> on_first(cx.slab, Coll::AllReduce, r, n, 4000, 0, true, content, 0, 0);
    const Staged<T> on_other(cx.slab, Coll::AllReduce, r, n, 4000, 0, true, content, 1, 1 << 20);
    report.expect(ncclGroupStart(), "ncclGroupStart");
    report.expect(ncclAllReduce(on_first.send, on_first.recv, 4000, ncclInt32, ncclSum, comm, kNoStream),
                  "ncclAllReduce (first)", comm);
    report.expect(ncclAllReduce(on_other.send, on_other.recv, 4000, ncclInt32, ncclSum, other, kNoStream),
                  "ncclAllReduce (other)", other);
    if (report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) {
      on_first.check(report, "grouped AllReduce on the first");
      on_other.check(report, "grouped AllReduce on the other");
    }
  }
  report.expect(ncclCommDestroy(other), "ncclCommDestroy (second id)");
}

void run_all(RankEnv& env) {
  Slab slab(kSlabBytes);
  Ctx cx{env, slab};
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t ran = 0;
  auto typed = [&](const std::string& name, ncclDataType_t dt, auto&& body) {
    ran += run_case(env.report, name, [&] { with_type(dt, [&]<class T>() { body.template operator()<T>(); }); });
  };
  for (ncclDataType_t dt : kAllTypes) {
    const std::string t = type_name(dt);
    typed("Group/mixed/" + t, dt, [&]<class T>() { mixed_group<T>(cx, dt, "Group/mixed/" + t); });
    typed("Group/collectives/" + t, dt, [&]<class T>() { collectives_group<T>(cx, dt, "Group/collectives/" + t); });
  }
  ran += run_case(env.report, "Group/nested", [&] { nested_groups(cx, "Group/nested"); });
  for (ncclDataType_t dt : {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64, ncclFloat8e5m2}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}}) {
      const std::string suffix = std::string("/") + type_name(dt) + "/count=" + std::to_string(count);
      typed("SendRecv/ring_both_ways" + suffix, dt,
            [&]<class T>() { ring_both_ways<T>(cx, dt, count, "SendRecv/ring_both_ways" + suffix); });
      typed("SendRecv/all_pairs" + suffix, dt,
            [&]<class T>() { all_pairs<T>(cx, dt, count, "SendRecv/all_pairs" + suffix); });
      typed("SendRecv/blocking_pairs" + suffix, dt,
            [&]<class T>() { blocking_pairs<T>(cx, dt, count, "SendRecv/blocking_pairs" + suffix); });
    }
  }
  for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{1000}, std::size_t{65537}}) {
    for (bool scatter : {true, false}) {
      const std::string name = std::string("SendRecv/") + (scatter ? "scatter" : "gather") + "/count=" + std::to_string(count);
      typed(name, ncclInt8, [&]<class T>() { rooted_p2p<T>(cx, ncclInt8, count, 0, scatter, name); });
      typed(name + "/root=last", ncclFloat32,
            [&]<class T>() { rooted_p2p<T>(cx, ncclFloat32, count, cx.n() - 1, scatter, name + "/root=last"); });
    }
  }
  if (cx.n() >= 4) ran += run_case(env.report, "Chain/readme", [&] { run_chain(cx, chains::readme_chain(cx.n())); });
  if (cx.n() >= 3)
    ran += run_case(env.report, "Chain/two_buffered", [&] { run_chain(cx, chains::two_buffered_chain(cx.n())); });
  if (cx.n() >= 2) ran += run_case(env.report, "Chain/deep", [&] { run_chain(cx, chains::deep_chain(cx.n())); });
  // Seeds whose chains need buffering, the first few from a fixed walk (the same on every rank).
  for (std::uint64_t seed = 1, found = 0; cx.n() >= 2 && found < 6 && seed < 1000; ++seed) {
    const chains::Chain chain = chains::random_chain(seed, cx.n());
    if (!chains::needs_buffering(chain)) continue;
    ++found;
    ran += run_case(env.report, "Chain/random/seed=" + std::to_string(seed), [&] { run_chain(cx, chain); });
  }
  ran += run_case(env.report, "Split/parity", [&] { split_by_parity(cx, "Split/parity"); });
  ran += run_case(env.report, "Split/interleaved", [&] { interleaved_splits(cx, "Split/interleaved"); });
  ran += run_case(env.report, "Split/two_in_a_group", [&] { two_splits_in_a_group(cx, "Split/two_in_a_group"); });
  ran += run_case(env.report, "MultiComm/second_id", [&] { second_unique_id(cx, "MultiComm/second_id"); });
  if (env.rank == 0 && !env.options.list) {
    std::printf("[%d ranks] %llu cases in %.1f s\n", env.nranks, static_cast<unsigned long long>(ran),
                seconds_since(t0));
  }
}

}  // namespace
}  // namespace e2e

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  const auto started = std::chrono::steady_clock::now();
  const e2e::Options options = e2e::parse_options(argc, argv);
  const e2e::Totals totals = e2e::run_ranks(options, options.nranks, /*join=*/true, /*extra_ids=*/1, e2e::run_all);
  return e2e::finish(options, totals, started);
}
