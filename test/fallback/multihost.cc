// The hand-over to the real NCCL, with ranks as processes that pretend to live on several hosts
// (PURLIN_HOST_ID per rank) and the fake NCCL of fake_nccl.cc standing in for the real one: every
// collective is checked bit for bit against the e2e host reference, and the fake's journal shows
// which route it took (Purlin alone, NCCL whole, or Purlin within hosts and NCCL on the rails).
// Suspend and resume go through every part of the communicator.
//
//   fallback_multihost --scenario NAME --fake PATH --fake-old PATH [--filter PATTERN]
//
// The parent makes the unique ids and starts one process per rank with its own environment (the
// library reads its configuration once per process, so each rank is a fresh exec of this binary).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <nccl.h>
#include <netinet/in.h>
#include <purlin/purlin.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "buffers.h"
#include "harness.h"
#include "plans.h"
#include "reference.h"
#include "unique_id.h"
#include "test/common/loopback.h"
#include "test/common/ranks.h"

// NCCL's team queries (nccl_device/core.h, whose headers need CUDA's), restated.
struct Team {
  int nRanks, rank, stride;
};
extern "C" Team ncclTeamWorld(ncclComm_t comm);
extern "C" Team ncclTeamLsa(ncclComm_t comm);
extern "C" Team ncclTeamRail(ncclComm_t comm);
extern "C" int ncclTeamRankToWorld(ncclComm_t comm, Team team, int rank);
extern "C" int ncclTeamRankToLsa(ncclComm_t comm, Team team, int rank);
// NCCL 2.29's suspend and resume (nccl.h of the CUDA toolkit may be older); 1 is NCCL_SUSPEND_MEM.
extern "C" ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
extern "C" ncclResult_t ncclCommResume(ncclComm_t comm);

namespace {

using namespace e2e;

// fake: PURLIN_NCCL_LIBRARY names the fake; wheel: it is unset, and the fake sits where the
// nvidia-nccl wheel puts NCCL beside a loaded Python package (a stand-in for torch's libraries).
enum class Lib { fake, fake_old, missing, self, wheel };

struct Scenario {
  const char* name;
  std::vector<const char*> hosts;      // PURLIN_HOST_ID per rank; its size is the rank count
  std::vector<const char*> fallback;   // PURLIN_FALLBACK per rank (empty: unset everywhere)
  Lib lib;
  const char* init_error = nullptr;    // init must fail on every rank with this in the last error
  bool comm_id = false;                // NCCL_COMM_ID set for every rank
  std::vector<const char*> slots = {};  // PURLIN_SLOTS per rank (empty: unset everywhere)
};

const Scenario kScenarios[] = {
    // Two hosts, two ranks each, interleaved: AllReduce and Broadcast hierarchical.
    {"hosts2x2", {"hostA", "hostB", "hostA", "hostB"}, {}, Lib::fake},
    // The same in blocks, with an NCCL that predates ncclAlltoAll, ncclGather and ncclScatter.
    {"hosts2x2-old", {"hostA", "hostA", "hostB", "hostB"}, {}, Lib::fake_old},
    // One rank per host: NCCL serves every collective whole.
    {"hosts2x1", {"hostA", "hostB"}, {}, Lib::fake},
    // Two hosts holding different numbers of ranks: no rails.
    {"uneven", {"hostA", "hostA", "hostB"}, {}, Lib::fake},
    // One host, some operations forwarded.
    {"forced", {"one", "one", "one"}, {"allreduce,send,allgatherv", "allreduce,send,allgatherv", "allreduce,send,allgatherv"},
     Lib::fake},
    // NCCL found by Purlin's own search, as the wheel beside torch.
    {"wheel", {"hostA", "hostB"}, {}, Lib::wheel},
    // One host, every operation forwarded.
    {"forced-all", {"one", "one"}, {"all", "all"}, Lib::fake},
    // One host, nothing set but the library: Purlin serves everything and never loads it.
    {"plain", {"one", "one"}, {}, Lib::fake},
    // Failures at init, on every rank.
    {"no-nccl", {"hostA", "hostB"}, {}, Lib::missing, "PURLIN_NCCL_LIBRARY"},
    {"self", {"hostA", "hostB"}, {}, Lib::self, "is this library"},
    {"mismatch", {"one", "one"}, {"allreduce", "none"}, Lib::fake, "PURLIN_FALLBACK differs between ranks"},
    // The real NCCL would read NCCL_COMM_ID too and serve its own rendezvous there.
    {"comm-id", {"hostA", "hostB"}, {}, Lib::fake, "NCCL_COMM_ID is set", true},
    // One host, the ranks' policies differ (PURLIN_SLOTS): they would read each other's chunks from
    // the wrong slots.
    {"policy-mismatch", {"one", "one", "one"}, {}, Lib::fake, "the ranks' policies differ", false, {"8", "8", "2"}},
};

const Scenario* find(const std::string& name) {
  for (const Scenario& s : kScenarios)
    if (name == s.name) return &s;
  return nullptr;
}

// ---- What the test expects ------------------------------------------------------------------------

// The hosts of the ranks, numbered by first appearance (as Purlin numbers them).
struct Layout {
  std::vector<int> host_of;
  std::vector<std::vector<int>> members;

  explicit Layout(const std::vector<std::string>& ids) {
    std::vector<std::string> seen;
    for (std::size_t r = 0; r < ids.size(); ++r) {
      auto it = std::find(seen.begin(), seen.end(), ids[r]);
      if (it == seen.end()) {
        seen.push_back(ids[r]);
        members.emplace_back();
        it = seen.end() - 1;
      }
      const int h = static_cast<int>(it - seen.begin());
      host_of.push_back(h);
      members[h].push_back(static_cast<int>(r));
    }
  }
  int hosts() const { return static_cast<int>(members.size()); }
  int local(int r) const {
    const auto& m = members[host_of[r]];
    return static_cast<int>(std::find(m.begin(), m.end(), r) - m.begin());
  }
  int local_size(int r) const { return static_cast<int>(members[host_of[r]].size()); }
  bool uniform() const {
    for (const auto& m : members)
      if (m.size() != members[0].size()) return false;
    return true;
  }
};

enum class Route { native, whole, hier };

bool forced(const std::string& fallback, const char* name) {
  if (fallback == "all") return true;
  std::string list = "," + fallback + ",";
  return list.find(std::string(",") + name + ",") != std::string::npos;
}

// The route of a collective, restated from the design (README, "Beyond one host").
Route route_of(const Layout& l, const std::string& fallback, Coll coll, Op op) {
  const char* names[] = {"allreduce", "broadcast", "broadcast", "reduce", "allgather", "reducescatter",
                         "alltoall", "gather", "scatter", "send"};
  if (forced(fallback, names[static_cast<int>(coll)])) return Route::whole;
  if (l.hosts() == 1) return Route::native;
  if (coll == Coll::SendRecv) return Route::hier;
  const bool composed = coll == Coll::AllReduce || coll == Coll::Broadcast || coll == Coll::Bcast;
  if (composed && l.uniform() && l.local_size(0) > 1 && !(coll == Coll::AllReduce && op == Op::avg)) return Route::hier;
  return Route::whole;
}

// Shard l of count elements split over L ranks on 256-byte boundaries.
std::size_t shard_count(std::size_t count, int L, int l, std::size_t es) {
  const std::size_t align = std::max<std::size_t>(1, 256 / es);
  std::size_t per = (count + L - 1) / L;
  per = (per + align - 1) / align * align;
  const std::size_t offset = std::min(per * static_cast<std::size_t>(l), count);
  return std::min(per, count - offset);
}

// The fake's journal of this process (empty when the fake was never loaded).
struct Journal {
  std::string path;
  bool loaded() const {
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (h) ::dlclose(h);
    return h != nullptr;
  }
  std::vector<std::string> take() const {
    std::vector<std::string> lines;
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (!h) return lines;
    auto fn = reinterpret_cast<const char* (*)()>(::dlsym(h, "fakeNcclJournalTake"));
    std::string text = fn ? fn() : "";
    ::dlclose(h);
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      lines.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    return lines;
  }
};

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n    " + l;
  return s.empty() ? " (none)" : s;
}

bool has(const std::string& line, const std::string& part) { return line.find(part) != std::string::npos; }

struct Rank {
  const Scenario& sc;
  Layout layout;
  int rank;
  int n;
  std::string fallback;
  bool old_nccl;
  Journal journal;
  Reporter& report;
  Slab& slab;
};

// Checks the journal of one call of `coll` against its route.
void check_journal(Rank& rk, Coll coll, Op op, std::size_t count, std::size_t es, int root,
                   const std::vector<std::string>& lines) {
  const Route route = route_of(rk.layout, rk.fallback, coll, op);
  const std::string all = " nranks=" + std::to_string(rk.n) + " ";
  if (route == Route::native) {
    if (!lines.empty()) rk.report.fail("Purlin should have served this alone; NCCL was asked:" + joined(lines));
    return;
  }
  if (coll == Coll::SendRecv) {
    const int to = (rk.rank + 1) % rk.n, from = (rk.rank + rk.n - 1) % rk.n;
    std::vector<std::string> want;
    if (route == Route::whole || rk.layout.host_of[to] != rk.layout.host_of[rk.rank])
      want.push_back("Send" + all + "rank=" + std::to_string(rk.rank) + " count=" + std::to_string(count * es) +
                     " type=1 op=-1 root=" + std::to_string(to));
    if (route == Route::whole || rk.layout.host_of[from] != rk.layout.host_of[rk.rank])
      want.push_back("Recv" + all + "rank=" + std::to_string(rk.rank) + " count=" + std::to_string(count * es) +
                     " type=1 op=-1 root=" + std::to_string(from));
    if (lines != want) rk.report.fail("NCCL was asked:" + joined(lines) + "\n  expected:" + joined(want));
    return;
  }
  if (route == Route::hier) {
    const Layout& l = rk.layout;
    const std::size_t shard = shard_count(count, l.local_size(rk.rank), l.local(rk.rank), es);
    std::string want = std::string(coll == Coll::AllReduce ? "AllReduce" : "Broadcast") + " nranks=" +
                       std::to_string(l.hosts()) + " rank=" + std::to_string(l.host_of[rk.rank]) +
                       " count=" + std::to_string(shard) + " ";
    if (coll != Coll::AllReduce) want += "type=";
    const bool ok = shard == 0 ? lines.empty() : lines.size() == 1 && has(lines[0], want);
    const bool rooted = coll != Coll::AllReduce;
    const bool root_ok = shard == 0 || !rooted || has(lines[0], "root=" + std::to_string(l.host_of[root]));
    if (!ok || !root_ok)
      rk.report.fail("hierarchical: NCCL was asked:" + joined(lines) + "\n  expected one call: " +
                     (shard ? want : std::string("none (empty shard)")));
    return;
  }
  // Whole: on the communicator of all ranks, by the collective's own name (or, before 2.28, by
  // Sends and Recvs).
  const char* names[] = {"AllReduce", "Broadcast", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                         "AlltoAll", "Gather", "Scatter", "Send"};
  const bool p2p = rk.old_nccl && (coll == Coll::AlltoAll || coll == Coll::Gather || coll == Coll::Scatter);
  bool ok = !lines.empty();
  for (const auto& line : lines) {
    const bool named = p2p ? (line.starts_with("Send ") || line.starts_with("Recv "))
                           : line.starts_with(std::string(names[static_cast<int>(coll)]) + " ") ||
                                 line.starts_with("RedOpCreatePreMulSum ");
    ok = ok && named && has(line, all);
  }
  if (!ok) rk.report.fail(std::string("forwarded whole: NCCL was asked:") + joined(lines));
}

// ---- Collectives ----------------------------------------------------------------------------------

// The hierarchical reference: each host folds its ranks in order (narrowed to the element type, as
// Purlin's ReduceScatter stores it), then the hosts' partial results are folded in host order. A
// premulsum contribution is its rank's input times that rank's own scalar, rounded to the element
// type; the hosts' partial results are only added.
template <class T>
void hierarchical_reference(typename T::Storage* out, const Content<T>& c, const Layout& l, std::size_t count) {
  using A = typename T::Acc;
  using S = typename T::Storage;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<S> partial;
    for (const auto& m : l.members) {
      auto x = [&](int k) {
        const A v = T::load(c.inputs.template at<T>(m[k], i));
        return c.op == Op::premulsum ? T::load(T::store(acc_mul(T::load(c.scalar(m[k])), v))) : v;
      };
      A acc = x(0);
      for (std::size_t k = 1; k < m.size(); ++k) {
        const A v = x(static_cast<int>(k));
        switch (c.op) {
          case Op::prod: acc = acc_mul(acc, v); break;
          case Op::max: acc = v > acc ? v : acc; break;
          case Op::min: acc = v < acc ? v : acc; break;
          default: acc = acc_add(acc, v); break;
        }
      }
      partial.push_back(T::store(acc));
    }
    A acc = T::load(partial[0]);
    for (std::size_t h = 1; h < partial.size(); ++h) {
      const A v = T::load(partial[h]);
      switch (c.op) {
        case Op::prod: acc = acc_mul(acc, v); break;
        case Op::max: acc = v > acc ? v : acc; break;
        case Op::min: acc = v < acc ? v : acc; break;
        default: acc = acc_add(acc, v); break;
      }
    }
    out[i] = T::store(acc);
  }
}

template <class T>
void check_hierarchical(Rank& rk, const Staged<T>& call, const Content<T>& content, std::size_t count) {
  using S = typename T::Storage;
  std::vector<S> want(count);
  hierarchical_reference<T>(want.data(), content, rk.layout, count);
  const S* got = static_cast<const S*>(call.recv);
  std::size_t wrong = 0;
  std::string first;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(S)) == 0 || (std::isnan(T::value(want[i])) && std::isnan(T::value(got[i]))))
      continue;
    if (wrong++ < 3)
      first += "\n    element " + std::to_string(i) + ": expected " + describe<T>(want[i]) + ", got " + describe<T>(got[i]);
  }
  if (wrong) rk.report.fail(std::to_string(wrong) + " of " + std::to_string(count) + " elements wrong" + first);
  const auto* bytes = static_cast<const unsigned char*>(call.recv);
  for (std::size_t k = 1; k <= kGuardBytes; ++k)
    if (*(bytes - k) != kPoison || bytes[count * sizeof(S) + k - 1] != kPoison) {
      rk.report.fail("a guard byte around recvbuff was written");
      break;
    }
  if (!call.plan.shared) verify<T>(call.a, call.plan.a, content, "sendbuff", rk.report);
}

template <class T>
void run_coll(Rank& rk, const CollInfo& ci, ncclDataType_t dt, Op op, std::size_t count, int root, bool in_place,
              ncclComm_t comm, const std::string& name) {
  const std::uint64_t seed = hash_string(name);
  const Content<T> content{Inputs{seed, op == Op::prod}, rk.n, op, seed >> 7};
  rk.slab.reset();
  const Staged<T> call(rk.slab, ci.coll, rk.rank, rk.n, count, root, in_place, content, seed >> 20);
  rk.journal.take();
  ncclRedOp_t nop = builtin(op);
  typename T::Storage scalar = content.scalar(rk.rank);  // this rank's own
  if (ci.reduces && op == Op::premulsum &&
      !rk.report.expect(ncclRedOpCreatePreMulSum(&nop, &scalar, dt,
                                                 seed % 2 ? ncclScalarHostImmediate : ncclScalarDevice, comm),
                        "ncclRedOpCreatePreMulSum", comm))
    return;
  const ncclResult_t rc = issue(ci.coll, call.send, call.recv, count, dt, nop, root, comm, rk.rank, rk.n);
  if (ci.reduces && op == Op::premulsum) rk.report.expect(ncclRedOpDestroy(nop, comm), "ncclRedOpDestroy");
  if (!rk.report.expect(rc, std::string("nccl") + ci.name, comm)) return;
  const Route route = route_of(rk.layout, rk.fallback, ci.coll, op);
  if (route == Route::hier && ci.coll == Coll::AllReduce) check_hierarchical<T>(rk, call, content, count);
  else call.check(rk.report, "");
  if (count > 0) check_journal(rk, ci.coll, op, count, sizeof(typename T::Storage), root, rk.journal.take());
}

void collectives(Rank& rk, ncclComm_t comm) {
  const std::size_t counts[] = {1, 7, 1000, 65537};
  for (const CollInfo& ci : kColls) {
    // Every type and operator where the hierarchy reduces; a spread of types elsewhere.
    std::vector<ncclDataType_t> types = {ncclInt32, ncclFloat16, ncclBfloat16, ncclFloat8e5m2, ncclFloat64};
    if (ci.coll == Coll::AllReduce) types.assign(std::begin(kAllTypes), std::end(kAllTypes));
    const std::vector<Op> ops = ci.reduces ? std::vector<Op>(std::begin(kAllOps), std::end(kAllOps)) : std::vector<Op>{Op::sum};
    std::vector<bool> forms;
    if (ci.out_of_place) forms.push_back(false);
    if (ci.in_place) forms.push_back(true);
    for (ncclDataType_t dt : types)
      for (Op op : ops)
        for (std::size_t count : counts)
          for (bool in_place : forms)
            for (int root : ci.rooted ? std::vector<int>{0, rk.n - 1} : std::vector<int>{0}) {
              std::string name = std::string(ci.name) + "/" + type_name(dt);
              if (ci.reduces) name += std::string("/") + op_name(op);
              name += "/count=" + std::to_string(count) + (in_place ? "/inplace" : "/outofplace");
              if (ci.rooted) name += "/root=" + std::to_string(root);
              run_case(rk.report, name, [&] {
                with_type(dt, [&]<class T>() { run_coll<T>(rk, ci, dt, op, count, root, in_place, comm, name); });
              });
            }
  }
}

// ---- Groups, V collectives, communicators ---------------------------------------------------------

// Two AllReduces and the Send/Recv ring in one group.
void grouped(Rank& rk, ncclComm_t comm) {
  using T = Float32Type;
  const std::size_t count = 3000;
  const Content<T> a{Inputs{11, false}, rk.n, Op::sum};
  const Content<T> b{Inputs{12, false}, rk.n, Op::max};
  const Content<T> c{Inputs{13, false}, rk.n, Op::sum};
  rk.slab.reset();
  const Staged<T> x(rk.slab, Coll::AllReduce, rk.rank, rk.n, count, 0, false, a, 1);
  const Staged<T> y(rk.slab, Coll::AllReduce, rk.rank, rk.n, count, 0, true, b, 2);
  const Staged<T> z(rk.slab, Coll::SendRecv, rk.rank, rk.n, count, 0, false, c, 3);
  rk.journal.take();
  rk.report.expect(ncclGroupStart(), "ncclGroupStart");
  rk.report.expect(ncclAllReduce(x.send, x.recv, count, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce", comm);
  rk.report.expect(ncclAllReduce(y.send, y.recv, count, ncclFloat32, ncclMax, comm, nullptr), "ncclAllReduce", comm);
  rk.report.expect(ncclSend(z.send, count, ncclFloat32, (rk.rank + 1) % rk.n, comm, nullptr), "ncclSend", comm);
  rk.report.expect(ncclRecv(z.recv, count, ncclFloat32, (rk.rank + rk.n - 1) % rk.n, comm, nullptr), "ncclRecv", comm);
  if (!rk.report.expect(ncclGroupEnd(), "ncclGroupEnd", comm)) return;
  if (route_of(rk.layout, rk.fallback, Coll::AllReduce, Op::sum) == Route::hier) check_hierarchical<T>(rk, x, a, count);
  else x.check(rk.report, "first AllReduce");
  y.check(rk.report, "second AllReduce");  // max: the same in any order
  z.check(rk.report, "Send/Recv ring");
}

// Purlin's V collectives (include/purlin/purlin.h) with uneven counts, a zero among them.
void v_collectives(Rank& rk, ncclComm_t comm) {
  const int n = rk.n, me = rk.rank;
  auto value = [](int rank, std::size_t i) { return static_cast<std::int32_t>((rank + 1) * 1000003 + i * 7919 + 1); };
  auto counts_of = [&](int round) {
    std::vector<std::vector<std::size_t>> c(n, std::vector<std::size_t>(n));
    for (int s = 0; s < n; ++s)
      for (int d = 0; d < n; ++d) c[s][d] = (s * 7 + d * 3 + round) % 5 == 0 ? 0 : 100 + (s * 131 + d * 17 + round) % 900;
    return c;
  };
  for (int round = 0; round < 3; ++round) {
    const auto c = counts_of(round);
    // AllGatherV: rank s contributes c[s][0] elements, landing at gapped displacements.
    std::vector<std::size_t> gc(n), gd(n);
    std::size_t total = 0;
    for (int s = 0; s < n; ++s) gc[s] = c[s][0], gd[s] = total, total += gc[s] + 2;
    std::vector<std::int32_t> gin(gc[me] + 1), gout(total + 1, -7);
    for (std::size_t i = 0; i < gin.size(); ++i) gin[i] = value(me, i);
    run_case(rk.report, "AllGatherV/round=" + std::to_string(round), [&] {
      rk.journal.take();
      if (!rk.report.expect(ncclPurlinAllGatherV(gin.data(), gc[me], gout.data(), gc.data(), gd.data(), ncclInt32, comm,
                                                 nullptr), "ncclPurlinAllGatherV", comm))
        return;
      for (int s = 0; s < n; ++s)
        for (std::size_t i = 0; i < gc[s]; ++i)
          if (gout[gd[s] + i] != value(s, i)) {
            rk.report.fail("AllGatherV: element " + std::to_string(i) + " from rank " + std::to_string(s) + " wrong");
            return;
          }
      for (int s = 0; s < n; ++s)
        if (gout[gd[s] + gc[s]] != -7) rk.report.fail("AllGatherV wrote into a gap");
      const auto lines = rk.journal.take();
      const bool whole = forced(rk.fallback, "allgatherv") || rk.layout.hosts() > 1;
      bool ok = whole ? !lines.empty() : lines.empty();
      for (const auto& l : lines) ok = ok && l.starts_with("Broadcast nranks=" + std::to_string(n) + " ");
      if (!ok) rk.report.fail("AllGatherV: NCCL was asked:" + joined(lines));
    });
    // ReduceScatterV: partition d has c[0][d] elements, sum of every rank's.
    std::vector<std::size_t> rc(n), rd(n);
    total = 0;
    for (int d = 0; d < n; ++d) rc[d] = c[0][d], rd[d] = total, total += rc[d] + 3;
    std::vector<std::int32_t> rin(total), rout(rc[me] + 1, -7);
    for (std::size_t i = 0; i < rin.size(); ++i) rin[i] = value(me, i);
    run_case(rk.report, "ReduceScatterV/round=" + std::to_string(round), [&] {
      rk.journal.take();
      if (!rk.report.expect(ncclPurlinReduceScatterV(rin.data(), rc.data(), rd.data(), rout.data(), ncclInt32, ncclSum,
                                                     comm, nullptr), "ncclPurlinReduceScatterV", comm))
        return;
      for (std::size_t i = 0; i < rc[me]; ++i) {
        std::int32_t want = 0;
        for (int s = 0; s < n; ++s) want = static_cast<std::int32_t>(static_cast<std::uint32_t>(want) + value(s, rd[me] + i));
        if (rout[i] != want) {
          rk.report.fail("ReduceScatterV: element " + std::to_string(i) + " wrong");
          return;
        }
      }
      if (rout[rc[me]] != -7) rk.report.fail("ReduceScatterV wrote past its partition");
      const auto lines = rk.journal.take();
      const bool whole = forced(rk.fallback, "reducescatterv") || rk.layout.hosts() > 1;
      bool ok = whole ? !lines.empty() : lines.empty();
      for (const auto& l : lines) ok = ok && l.starts_with("Reduce nranks=" + std::to_string(n) + " ");
      if (!ok) rk.report.fail("ReduceScatterV: NCCL was asked:" + joined(lines));
    });
    // AlltoAllV: c[s][d] elements from s to d.
    std::vector<std::size_t> sc(n), sd(n), ac(n), ad(n);
    std::size_t so = 0, ro = 0;
    for (int k = 0; k < n; ++k) {
      sc[k] = c[me][k], sd[k] = so, so += sc[k] + 1;
      ac[k] = c[k][me], ad[k] = ro, ro += ac[k] + 1;
    }
    std::vector<std::int32_t> ain(so), aout(ro, -7);
    for (std::size_t i = 0; i < ain.size(); ++i) ain[i] = value(me, i);
    run_case(rk.report, "AlltoAllV/round=" + std::to_string(round), [&] {
      rk.journal.take();
      if (!rk.report.expect(ncclPurlinAlltoAllV(ain.data(), sc.data(), sd.data(), aout.data(), ac.data(), ad.data(),
                                                ncclInt32, comm, nullptr), "ncclPurlinAlltoAllV", comm))
        return;
      for (int s = 0; s < n; ++s) {
        std::size_t theirs = 0;  // rank s's displacement for me
        for (int k = 0; k < me; ++k) theirs += c[s][k] + 1;
        for (std::size_t i = 0; i < ac[s]; ++i)
          if (aout[ad[s] + i] != value(s, theirs + i)) {
            rk.report.fail("AlltoAllV: element " + std::to_string(i) + " from rank " + std::to_string(s) + " wrong");
            return;
          }
      }
      const auto lines = rk.journal.take();
      const bool whole = forced(rk.fallback, "alltoallv") || rk.layout.hosts() > 1;
      bool ok = whole ? !lines.empty() : lines.empty();
      for (const auto& l : lines) ok = ok && (l.starts_with("Send ") || l.starts_with("Recv "));
      if (!ok) rk.report.fail("AlltoAllV: NCCL was asked:" + joined(lines));
    });
  }
}

// An AllReduce on a communicator whose ranks are `members` of the world (this rank at `me`), with
// the route the layout of those members implies.
void allreduce_on(Rank& rk, ncclComm_t comm, const std::vector<int>& members, int me, const std::string& label) {
  using T = Int64;
  std::vector<std::string> ids;
  for (int r : members) ids.push_back(rk.sc.hosts[r]);
  Rank sub{rk.sc, Layout(ids), me, static_cast<int>(members.size()), rk.fallback, rk.old_nccl, rk.journal, rk.report,
           rk.slab};
  const std::size_t count = 777;
  const Content<T> content{Inputs{hash_string(label), false}, sub.n, Op::sum};
  rk.slab.reset();
  const Staged<T> call(rk.slab, Coll::AllReduce, me, sub.n, count, 0, false, content, 5);
  rk.journal.take();
  ncclResult_t rc = ncclAllReduce(call.send, call.recv, count, ncclInt64, ncclSum, comm, nullptr);
  // A non-blocking communicator answers in progress; its state settles when the work is done.
  const auto start = std::chrono::steady_clock::now();
  while (rc == ncclInProgress && seconds_since(start) < 120) {
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress) rc = state;
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!rk.report.expect(rc, label, comm)) return;
  call.check(rk.report, label);
  check_journal(sub, Coll::AllReduce, Op::sum, count, sizeof(std::int64_t), 0, rk.journal.take());
}

// NCCL's teams on a communicator whose rank r is on host host_of[r], `me` being this rank: LSA teams
// are `size` consecutive ranks of one host, where size is the greatest common divisor of the lengths
// of the runs of consecutive ranks on one host; a rail is the ranks at one place of every LSA team.
void teams(Rank& rk, ncclComm_t comm, const std::vector<int>& host_of, int me) {
  const int n = static_cast<int>(host_of.size());
  int size = 0, run = 0;
  for (int r = 0; r < n; ++r) {
    if (r > 0 && host_of[r] != host_of[r - 1]) size = std::gcd(size, std::exchange(run, 0));
    ++run;
  }
  size = std::gcd(size, run);
  const auto same = [](Team t, int nranks, int rank, int stride) {
    return t.nRanks == nranks && t.rank == rank && t.stride == stride;
  };
  const auto said = [](Team t) {
    return "{" + std::to_string(t.nRanks) + ", " + std::to_string(t.rank) + ", " + std::to_string(t.stride) + "}";
  };
  const Team world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
  if (!same(world, n, me, 1)) rk.report.fail("ncclTeamWorld answered " + said(world));
  if (!same(lsa, size, me % size, 1))
    rk.report.fail("ncclTeamLsa answered " + said(lsa) + "; expected {" + std::to_string(size) + ", " +
                   std::to_string(me % size) + ", 1}");
  if (!same(rail, n / size, me / size, size)) rk.report.fail("ncclTeamRail answered " + said(rail));
  for (int k = 0; k < lsa.nRanks && lsa.nRanks == size; ++k) {
    const int w = ncclTeamRankToWorld(comm, lsa, k);
    if (w != me - me % size + k || w < 0 || w >= n || host_of[w] != host_of[me])
      rk.report.fail("LSA rank " + std::to_string(k) + " is world rank " + std::to_string(w) + ", not on this host");
    if (ncclTeamRankToLsa(comm, lsa, k) != k) rk.report.fail("ncclTeamRankToLsa of LSA rank " + std::to_string(k));
  }
  for (int k = 0; k < rail.nRanks && rail.nRanks == n / size; ++k)
    if (ncclTeamRankToWorld(comm, rail, k) != me % size + k * size)
      rk.report.fail("rail rank " + std::to_string(k) + " is world rank " +
                     std::to_string(ncclTeamRankToWorld(comm, rail, k)));
}

// ncclCommSplit of the world in two ways, each child checked with its own layout.
void splits(Rank& rk, ncclComm_t comm) {
  for (int way = 0; way < 2; ++way) {
    auto color_of = [&](int r) { return way == 0 ? r % 2 : r < rk.n / 2 ? 0 : 1; };
    const std::string label = std::string("Split/") + (way == 0 ? "parity" : "halves");
    run_case(rk.report, label, [&] {
      ncclComm_t child = nullptr;
      if (!rk.report.expect(ncclCommSplit(comm, color_of(rk.rank), rk.rank, &child, nullptr), "ncclCommSplit", comm))
        return;
      std::vector<int> members;
      int me = 0;
      for (int r = 0; r < rk.n; ++r)
        if (color_of(r) == color_of(rk.rank)) {
          if (r == rk.rank) me = static_cast<int>(members.size());
          members.push_back(r);
        }
      allreduce_on(rk, child, members, me, label + " AllReduce");
      std::vector<int> hosts;
      for (int r : members) hosts.push_back(rk.layout.host_of[r]);
      teams(rk, child, hosts, me);
      rk.report.expect(ncclCommDestroy(child), "ncclCommDestroy(child)");
    });
  }
}

// A non-blocking init (the hand-over then happens on Purlin's init thread), used, then aborted.
// ncclCommSuspend and ncclCommResume reach Purlin's part and then every real NCCL communicator (the
// fake records each call); an NCCL without them (the old fake, as NCCL before 2.29) makes the
// communicator refuse, and it stays usable.
void suspend_resume(Rank& rk, ncclComm_t comm) {
  run_case(rk.report, "Suspend/resume", [&] {
    const bool nccl = rk.journal.loaded() && (rk.layout.hosts() > 1 || !rk.fallback.empty());
    auto count = [](const std::vector<std::string>& lines, const char* what) {
      return std::count_if(lines.begin(), lines.end(), [what](const std::string& l) { return l.starts_with(what); });
    };
    rk.journal.take();
    const ncclResult_t rc = ncclCommSuspend(comm, 1);
    if (nccl && rk.old_nccl) {
      rk.report.expect(rc, "ncclCommSuspend over an NCCL without it", comm, ncclInvalidUsage);
    } else if (rk.report.expect(rc, "ncclCommSuspend", comm)) {
      const auto suspended = count(rk.journal.take(), "CommSuspend ");
      if (nccl && suspended == 0) rk.report.fail("ncclCommSuspend suspended no NCCL communicator");
      if (!rk.report.expect(ncclCommResume(comm), "ncclCommResume", comm)) return;
      const auto resumed = count(rk.journal.take(), "CommResume ");
      if (resumed != suspended)
        rk.report.fail(std::to_string(suspended) + " NCCL communicators suspended, " + std::to_string(resumed) + " resumed");
    }
    std::vector<int> everyone(rk.n);
    for (int r = 0; r < rk.n; ++r) everyone[r] = r;
    allreduce_on(rk, comm, everyone, rk.rank, "AllReduce after ncclCommSuspend");
  });
}

void nonblocking(Rank& rk, const ncclUniqueId& id) {
  run_case(rk.report, "NonBlocking/init-use-abort", [&] {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, rk.n, id, rk.rank, &config);
    if (rc != ncclInProgress && !rk.report.expect(rc, "ncclCommInitRankConfig")) return;
    ncclResult_t state = ncclInProgress;
    const auto start = std::chrono::steady_clock::now();
    while (state == ncclInProgress && seconds_since(start) < 120) {
      if (!rk.report.expect(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!rk.report.expect(state, "non-blocking init", comm)) return;
    std::vector<int> everyone(rk.n);
    for (int r = 0; r < rk.n; ++r) everyone[r] = r;
    allreduce_on(rk, comm, everyone, rk.rank, "NonBlocking AllReduce");
    const bool nccl = rk.journal.loaded() && (rk.layout.hosts() > 1 || !rk.fallback.empty());
    rk.journal.take();
    rk.report.expect(ncclCommAbort(comm), "ncclCommAbort");
    const auto lines = rk.journal.take();
    const bool aborted = std::any_of(lines.begin(), lines.end(), [](const std::string& l) { return l.starts_with("CommAbort "); });
    if (nccl && !aborted) rk.report.fail("ncclCommAbort did not abort the NCCL communicators:" + joined(lines));
  });
}

// ---- Processes ------------------------------------------------------------------------------------

std::string own_library() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || !info.dli_fname) return {};
  return info.dli_fname;
}

int child(const Scenario& sc, int rank, const std::vector<ncclUniqueId>& ids, const std::string& library,
          const Options& options) {
  const int n = static_cast<int>(sc.hosts.size());
  Reporter report(options, rank, n, nullptr);
  if (sc.lib == Lib::wheel) {
    // What torch's libraries are to a real job: a loaded object in a Python packages directory.
    const std::string site = library.substr(0, library.find("/nvidia/nccl/lib/"));
    if (!::dlopen((site + "/torch/lib/libtorch_stub.so").c_str(), RTLD_NOW | RTLD_LOCAL)) {
      report.fail(std::string("loading the stand-in for torch: ") + ::dlerror());
      return 1;
    }
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&comm, n, ids[0], rank);
  if (sc.init_error) {
    run_case(report, std::string("Init/fails/") + sc.name, [&] {
      const std::string last = ncclGetLastError(nullptr);
      if (rc == ncclSuccess) report.fail("ncclCommInitRank succeeded; it should fail with: " + std::string(sc.init_error));
      else if (last.find(sc.init_error) == std::string::npos)
        report.fail("ncclCommInitRank failed with \"" + last + "\", which does not say \"" + sc.init_error + "\"");
      if (rc == ncclSuccess) ncclCommDestroy(comm);
    });
  } else if (report.expect(rc, "ncclCommInitRank")) {
    std::vector<std::string> hosts(sc.hosts.begin(), sc.hosts.end());
    Slab slab(Slab::room({std::size_t{65537} * 8 * 4, std::size_t{65537} * 8 * 4}));
    Rank rk{sc, Layout(hosts), rank, n, sc.fallback.empty() ? std::string() : sc.fallback[rank],
            sc.lib == Lib::fake_old, Journal{library}, report, slab};
    collectives(rk, comm);
    run_case(report, "Teams/world", [&] { teams(rk, comm, rk.layout.host_of, rank); });
    run_case(report, "Grouped/two-allreduce-and-ring", [&] { grouped(rk, comm); });
    v_collectives(rk, comm);
    if (n >= 3) splits(rk, comm);
    suspend_resume(rk, comm);
    nonblocking(rk, ids[1]);
    if (std::string(sc.name) == "plain")
      run_case(report, "Plain/never-loaded", [&] {
        if (rk.journal.loaded()) report.fail("the NCCL library was loaded though Purlin served everything");
      });
    report.expect(ncclCommDestroy(comm), "ncclCommDestroy");
  }
  std::printf("[rank %d] %llu passed, %llu failed\n", rank, static_cast<unsigned long long>(report.passed()),
              static_cast<unsigned long long>(report.failed()));
  return report.failed() == 0 && report.passed() > 0 ? 0 : 1;
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s --scenario NAME --fake PATH --fake-old PATH [--filter PATTERN]\nscenarios:", argv0);
  for (const Scenario& s : kScenarios) std::fprintf(stderr, " %s", s.name);
  std::fprintf(stderr, "\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  // Seven flags read by hand, most of them the ones this binary passes to its own children: not
  // worth a parser library as a dependency of the test binaries.
  std::string scenario, fake, fake_old, filter, child_rank, child_ids, wheel_root;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0]);
      return argv[++i];
    };
    if (a == "--scenario") scenario = next();
    else if (a == "--fake") fake = next();
    else if (a == "--fake-old") fake_old = next();
    else if (a == "--filter") filter = next();
    else if (a == "--child-rank") child_rank = next();
    else if (a == "--child-ids") child_ids = next();
    else if (a == "--wheel-root") wheel_root = next();
    else usage(argv[0]);
  }
  const Scenario* sc = find(scenario);
  if (!sc || fake.empty() || fake_old.empty()) usage(argv[0]);
  if (sc->lib == Lib::wheel && child_rank.empty()) {
    char dir[] = "/tmp/purlin-wheel-XXXXXX";
    if (!::mkdtemp(dir)) {
      std::perror("mkdtemp");
      return 1;
    }
    wheel_root = dir;
    std::error_code e;
    const std::filesystem::path site = wheel_root + "/site-packages";
    std::filesystem::create_directories(site / "nvidia/nccl/lib", e);
    std::filesystem::create_directories(site / "torch/lib", e);
    std::filesystem::copy_file(fake, site / "nvidia/nccl/lib/libnccl.so.2", e);
    std::filesystem::copy_file(fake_old, site / "torch/lib/libtorch_stub.so", e);
    if (e) {
      std::fprintf(stderr, "preparing %s: %s\n", dir, e.message().c_str());
      return 1;
    }
  }
  Options options;
  options.nranks = static_cast<int>(sc->hosts.size());
  if (!filter.empty()) options.filters.push_back(filter);
  std::string library = sc->lib == Lib::fake ? fake : sc->lib == Lib::fake_old ? fake_old
                        : sc->lib == Lib::self ? own_library() : "/nonexistent/libnccl.so.2";
  if (sc->lib == Lib::wheel) library = wheel_root + "/site-packages/nvidia/nccl/lib/libnccl.so.2";

  if (!child_rank.empty()) {
    std::vector<ncclUniqueId> ids;
    for (std::size_t at = 0; at + 256 <= child_ids.size(); at += 256) ids.push_back(id_of(child_ids.substr(at, 256)));
    return child(*sc, std::atoi(child_rank.c_str()), ids, library, options);
  }

  const auto started = std::chrono::steady_clock::now();
  if (sc->comm_id) {
    // A free port on the loopback interface for the bootstrap's rendezvous.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("finding a free port");
      return 1;
    }
    ::close(fd);
    ::setenv("NCCL_COMM_ID", ("127.0.0.1:" + std::to_string(ntohs(addr.sin_port))).c_str(), 1);
  }
  std::string hex;
  for (int k = 0; k < 2; ++k) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
      std::fprintf(stderr, "FAIL ncclGetUniqueId\n");
      return 1;
    }
    hex += hex_of(id);
  }
  const int n = options.nranks;
  ranks::Group group;
  for (int r = 0; r < n; ++r) {
    const bool spawned = group.spawn([&](int rank) {
      ::setenv("PURLIN_HOST_ID", sc->hosts[rank], 1);
      if (sc->lib == Lib::wheel) ::unsetenv("PURLIN_NCCL_LIBRARY");
      else ::setenv("PURLIN_NCCL_LIBRARY", library.c_str(), 1);
      ::setenv("PURLIN_DATAPATH", "host", 1);
      if (!sc->fallback.empty()) ::setenv("PURLIN_FALLBACK", sc->fallback[rank], 1);
      else ::unsetenv("PURLIN_FALLBACK");
      if (!sc->slots.empty()) ::setenv("PURLIN_SLOTS", sc->slots[rank], 1);
      const std::string rank_text = std::to_string(rank);
      std::vector<const char*> args = {argv[0], "--scenario", sc->name, "--fake", fake.c_str(), "--fake-old",
                                       fake_old.c_str(), "--child-rank", rank_text.c_str(), "--child-ids", hex.c_str()};
      if (!filter.empty()) args.insert(args.end(), {"--filter", filter.c_str()});
      if (!wheel_root.empty()) args.insert(args.end(), {"--wheel-root", wheel_root.c_str()});
      args.push_back(nullptr);
      ::execv("/proc/self/exe", const_cast<char* const*>(args.data()));
      std::perror("execv");
      return 3;
    });
    if (!spawned) return 1;
  }
  int failures = 0;
  constexpr double kLimit_s = 600;
  ranks::Wait watch;
  watch.deadline = started + ranks::seconds(kLimit_s);
  watch.on_end = [&](int r, const ranks::Outcome& o) {
    if (o.ok()) return;
    std::fprintf(stderr, "FAIL rank %d %s %d\n", r, o.exited() ? "exited with" : "died by signal",
                 o.exited() ? o.exit_code() : o.signal());
    ++failures;
  };
  watch.on_stop = [&](ranks::Stop) {
    std::fprintf(stderr, "FAIL time limit of %.0f s reached; killing the ranks\n", kLimit_s);
  };
  if (group.wait(watch) != ranks::Stop::none) return 1;
  if (!wheel_root.empty()) {
    std::error_code e;
    std::filesystem::remove_all(wheel_root, e);
  }
  std::printf("%s: %d ranks, %s in %.1f s\n", sc->name, n, failures ? "FAILED" : "all passed", seconds_since(started));
  return failures ? 1 : 0;
}
