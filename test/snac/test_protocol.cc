// SNAC's protocol on the host Atom, every rank a thread of this process. Windows live on the heap;
// each call runs the way the host executor runs it (the rank's roles on their own threads, end_call
// once they all finished), ranks run their calls back to back with no barrier
// between calls, and every output is compared with what the declaration's implied movement
// (collectives/movement.h) gives when it is applied to the actual inputs.
//
// The protocol settings are small on purpose: lanes wrap their rings many times, consecutive calls
// alternate the staging halves, and messages on both sides of latency_max take the latency and the
// throughput path, within one call where sizes differ per pair. Roots change from call to call and
// every third call runs in place. Every other reducing call is a PreMulSum with a random scalar of
// its own on every rank (held by value on even ranks and read through a pointer on odd ones),
// checked against each rank's input times its own scalar, rounded to the element type, then summed
// in rank order. The last tests end waits on a rank that never runs, by abort and by timeout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "atom/host/host_atom.h"
#include "collectives/all_gather.h"
#include "collectives/all_reduce.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/geometry.h"
#include "collectives/movement.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/scatter.h"
#include "collectives/send_recv.h"
#include "core/types.h"
#include "snac/call.h"
#include "snac/protocol/call.h"
#include "snac/window.h"
#include "test/catch.h"

namespace {

using namespace purlin;
using namespace purlin::snac;
using coll::Move;
using coll::Shape;
using coll::Span;
using u64 = std::uint64_t;
using Rng = std::mt19937_64;
using Clock = std::chrono::steady_clock;

constexpr unsigned char kPoison = 0xA5;
constexpr std::size_t kGuard = 64;  // poisoned bytes past every output's extent
constexpr u64 kShardAlignBytes = 256;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- settings -----------------------------------------------------------------------------------

struct Settings {
  u64 staging_half;
  u64 chunk_cap;
  int slots;
  u64 latency_max;
  // Run the roles of a call whose messages all take the latency path one after the other on one
  // thread, as the host executor does; false runs them on their own threads regardless.
  bool inline_latency = true;
};

// Small enough that every lane wraps its ring; latency_max 0 forces the throughput path, 1024 sends
// the small and medium sizes below through the latency path; one slot makes every chunk wait for
// the ack of the one before.
const Settings kSettings[] = {
    {4 << 10, 256, 2, 0, true},
    {16 << 10, 512, 3, 64, true},
    {64 << 10, 1024, 4, 1024, true},
    {8 << 10, 768, 2, 1024, false},
    {4 << 10, 512, 1, 200, false},
};

// The smallest staging half in which a composition on n ranks (two phases of n lanes each) still
// gets chunks of 256 bytes in every slot of its ring (below it lanes_of rounds the chunk down to 0).
u64 staging_for(int n, const Settings& s) {
  const u64 need = 2ull * static_cast<u64>(n) * 256ull * static_cast<u64>(s.slots);
  return std::max<u64>(s.staging_half, need);
}

std::string text(const Settings& s, int n) {
  std::ostringstream o;
  o << "staging_half " << staging_for(n, s) << " chunk_cap " << s.chunk_cap << " slots " << s.slots
    << " latency_max " << s.latency_max << (s.inline_latency ? " (latency calls inline)" : " (roles always threaded)");
  return o.str();
}

// ---- a declaration, erased ----------------------------------------------------------------------

using Atom = atom::HostAtom;

struct Plan {
  const char* name;
  int roles;
  bool composed;
  bool rooted;
  bool reduces;
  coll::Layout input, output;
  Status (*role)(Atom&, const Context&, const Call&, Role);
  bool (*all_latency)(const Context&, const Call&);
  Lanes (*lanes)(const Context&);
  coll::Movement (*movement)(int, std::span<const Shape>, int);
};

template <class D>
Plan plan_of(const char* name) {
  return Plan{name,
              role_count<D>(),
              D::composed,
              coll::rooted<D>(),
              D::consume == coll::Consume::reduce,
              D::input,
              D::output,
              [](Atom& a, const Context& ctx, const Call& call, Role r) { return run_role<D>(a, ctx, call, r); },
              [](const Context& ctx, const Call& call) { return all_latency<D>(ctx, call); },
              [](const Context& ctx) { return lanes_of<D>(ctx); },
              [](int n, std::span<const Shape> shapes, int root) { return coll::movement<D>(n, shapes, root); }};
}

// ---- the ranks' memory --------------------------------------------------------------------------

struct HeapBlock {
  void operator()(void* p) const { std::free(p); }
};

// n windows on zeroed, 64-byte aligned heap memory, and each rank's state, scratch and Context.
struct World {
  int n;
  Settings settings;
  WindowGeometry geo;
  std::vector<std::unique_ptr<void, HeapBlock>> memory;
  std::vector<Window> windows;
  std::vector<LocalState> states;
  std::vector<std::vector<char>> scratch;
  std::vector<Context> ctx;
  std::atomic<bool> abort{false};
  double timeout_s = 30.0;

  World(int nranks, const Settings& s) : n(nranks), settings(s) {
    const u64 packets = std::max<u64>((s.latency_max + 7) / 8, 1);
    geo = WindowGeometry::make(n, staging_for(n, s), packets);
    const std::size_t bytes = (geo.total + 63) / 64 * 64;
    for (int r = 0; r < n; ++r) {
      void* p = std::aligned_alloc(64, bytes);
      REQUIRE(p != nullptr);
      std::memset(p, 0, bytes);
      memory.emplace_back(p);
      windows.push_back(Window::at(p, geo));
    }
    states.resize(static_cast<std::size_t>(n));  // value-initialised: every counter at zero
    scratch.resize(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      scratch[r].assign(static_cast<std::size_t>(n + 1) * s.latency_max + 64, 0);
      Context c;
      c.rank = r;
      c.nranks = n;
      c.geo = geo;
      c.win = windows.data();
      c.state = &states[r];
      c.scratch = scratch[r].data();
      c.latency_max = s.latency_max;
      c.chunk_cap = s.chunk_cap;
      c.slots = s.slots;
      ctx.push_back(c);
    }
  }
};

// ---- one call: shapes, buffers, the expected result ---------------------------------------------

struct CallSpec {
  const Plan* plan;
  DataType type;
  int root;  // meaningful where the plan is rooted
  std::vector<Shape> shapes;
  bool in_place = false;  // input and output spans lie in one buffer per rank
  bool premul = false;    // a reduction: PreMulSum with a scalar per rank instead of sum
};

struct RankCall {
  std::vector<char> in, in_before, out, expect;
  std::vector<Part> in_parts, out_parts;
  std::vector<char> scalar;  // PreMulSum: this rank's scalar (the pointer odd ranks pass points here)
  Call call;
};

struct CallData {
  CallSpec spec;
  std::vector<RankCall> ranks;
};

template <class T>
T fold(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

// PreMulSum's contribution: x times the contributing rank's scalar s, rounded to T once (integers
// wrap).
template <class T>
T scaled(T s, T x) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(s) * static_cast<U>(x)));
  } else {
    const volatile T p = s * x;  // rounded on its own, never fused with the sum
    return p;
  }
}

// Applies the moves to the actual inputs: copies overwrite, reduce moves landing on one element fold
// their sources in the order listed, starting from the first (what the output held takes no part).
// With `premul`, a reduce move's source is scaled by its rank's scalar first.
template <class T>
void apply_moves(const std::vector<Move>& moves, std::vector<RankCall>& ranks, bool premul) {
  std::vector<std::vector<char>> folded(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) folded[r].assign(ranks[r].expect.size() / sizeof(T) + 1, 0);
  for (const Move& m : moves) {
    const char* src = ranks[m.src_rank].in.data();
    char* dst = ranks[m.dst_rank].expect.data();
    for (u64 i = 0; i < m.count; ++i) {
      T x, y;
      std::memcpy(&x, src + (m.src_offset + i) * sizeof(T), sizeof(T));
      if (premul && m.reduce) {
        T sc;
        std::memcpy(&sc, ranks[m.src_rank].scalar.data(), sizeof(T));
        x = scaled(sc, x);
      }
      const u64 at = m.dst_offset + i;
      char& seen = folded[m.dst_rank][at];
      if (m.reduce && seen) {
        std::memcpy(&y, dst + at * sizeof(T), sizeof(T));
        x = fold(y, x);
      }
      seen = 1;
      std::memcpy(dst + at * sizeof(T), &x, sizeof(T));
    }
  }
}

// Seeded inputs that are never zero.
void fill_input(DataType type, std::vector<char>& buf, Rng& rng) {
  switch (type) {
    case DataType::uint8:
      for (char& c : buf) c = static_cast<char>(1 + rng() % 255);
      break;
    case DataType::int32:
      for (std::size_t i = 0; i + 4 <= buf.size(); i += 4) {
        std::int32_t v = 0;
        while (v == 0) v = static_cast<std::int32_t>(rng());
        std::memcpy(buf.data() + i, &v, 4);
      }
      break;
    case DataType::f32:
      for (std::size_t i = 0; i + 4 <= buf.size(); i += 4) {
        // Non-zero values of both signs whose rank-ordered sums round.
        float v = std::uniform_real_distribution<float>(0.001f, 100.0f)(rng);
        if (rng() & 1) v = -v;
        std::memcpy(buf.data() + i, &v, 4);
      }
      break;
    default:
      FAIL("the test fills uint8, int32 and f32 only");
  }
}

// A PreMulSum scalar, never zero: any int32 or uint8, an f32 of either sign between 1/4 and 4 with
// a random significand (so that every product rounds).
void fill_scalar(DataType type, std::vector<char>& buf, Rng& rng) {
  buf.assign(size_of(type), 0);
  if (type == DataType::f32) {
    float v = std::ldexp(1.0f + static_cast<float>(rng() % (1u << 23)) * 0x1p-23f, static_cast<int>(rng() % 4) - 2);
    if (rng() & 1) v = -v;
    std::memcpy(buf.data(), &v, 4);
  } else {
    fill_input(type, buf, rng);
  }
}

std::vector<Part> parts_of(char* base, const std::vector<Span>& spans, std::size_t es, int n) {
  if (spans.empty()) return std::vector<Part>(static_cast<std::size_t>(n), Part{nullptr, 0});
  std::vector<Part> parts;
  for (const Span& s : spans) parts.push_back(Part{base ? base + s.offset * es : nullptr, s.count * es});
  return parts;
}

CallData prepare(int n, CallSpec spec, Rng& rng) {
  CallData cd;
  const std::size_t es = size_of(spec.type);
  const coll::Movement mv = spec.plan->movement(n, spec.shapes, spec.plan->rooted ? spec.root : 0);
  INFO(spec.plan->name << ": " << mv.error);
  REQUIRE(mv.ok());
  cd.ranks.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const Shape& sh = spec.shapes[r];
    RankCall& rc = cd.ranks[r];
    if (!spec.in_place) {
      rc.in.assign(coll::extent(sh.in) * es, 0);
      fill_input(spec.type, rc.in, rng);
      rc.in_before = rc.in;
      rc.out.assign(coll::extent(sh.out) * es + kGuard, static_cast<char>(kPoison));
      rc.expect = rc.out;
      rc.in_parts = parts_of(rc.in.data(), sh.in, es, n);
      rc.out_parts = parts_of(rc.out.data(), sh.out, es, n);
    } else {
      // One buffer holds the input and receives the output; rc.in keeps the input as it was, the
      // source of the expected result, and what no move writes keeps its input value.
      rc.in.assign(std::max(coll::extent(sh.in), coll::extent(sh.out)) * es, 0);
      fill_input(spec.type, rc.in, rng);
      rc.in_before = rc.in;
      rc.out = rc.in;
      rc.out.resize(rc.in.size() + kGuard, static_cast<char>(kPoison));
      rc.expect = rc.out;
      rc.in_parts = parts_of(rc.out.data(), sh.in, es, n);
      rc.out_parts = parts_of(rc.out.data(), sh.out, es, n);
    }
    if (sh.out.empty() && spec.plan->rooted) {
      // As the shim describes the output of a rank that is not the root: sizes, no memory.
      rc.out_parts = parts_of(nullptr, spec.shapes[spec.root].out, es, n);
    }
    rc.call.root = spec.plan->rooted ? spec.root : -1;
    rc.call.type = spec.type;
    rc.call.op = ReduceOp{RedOpKind::sum, 0, nullptr, n};
    if (spec.premul) {
      fill_scalar(spec.type, rc.scalar, rng);
      rc.call.op.kind = RedOpKind::premulsum;
      if (r % 2 == 0) {
        std::memcpy(&rc.call.op.scalar_bits, rc.scalar.data(), es);
      } else {
        rc.call.op.scalar_bits = ~std::uint64_t{0};  // must be ignored: the pointer says
        rc.call.op.scalar_ptr = rc.scalar.data();
      }
    }
    rc.call.in = rc.in_parts.data();
    rc.call.out = rc.out_parts.data();
    // As the shim builds composed calls: this rank's intermediate is its own shard.
    rc.call.mid_bytes = sh.mid.empty() ? 0 : sh.mid[0].count * es;
  }
  switch (spec.type) {
    case DataType::uint8: apply_moves<std::uint8_t>(mv.moves, cd.ranks, spec.premul); break;
    case DataType::int32: apply_moves<std::int32_t>(mv.moves, cd.ranks, spec.premul); break;
    case DataType::f32: apply_moves<float>(mv.moves, cd.ranks, spec.premul); break;
    default: FAIL("unexpected element type");
  }
  cd.spec = std::move(spec);
  return cd;
}

// ---- running ranks as threads -------------------------------------------------------------------

struct Failures {
  std::mutex m;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard<std::mutex> g(m);
    list.push_back(std::move(s));
  }
};

const char* role_name(int r) { return r == 0 ? "stage" : r == 1 ? "consume" : "gather"; }

// One rank's calls, back to back, as the host executor runs each: the roles (on
// this thread one after the other when every message takes the latency path, otherwise the stage
// role here and the others on threads of their own), then end_call once all of them finished.
void run_rank(World& w, int rank, std::vector<CallData>& calls, Failures& failures) {
  const Context& ctx = w.ctx[rank];
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const Plan& p = *calls[c].spec.plan;
    const Call& call = calls[c].ranks[rank].call;
    std::atomic<bool> failed{false};
    const atom::WaitGuard guard{&w.abort, &failed, w.timeout_s};
    Atom atom(call.type, call.op, guard);
    auto report = [&](const char* where, Status s) {
      std::ostringstream o;
      o << p.name << " call " << c << " rank " << rank << ": " << where << " returned status " << static_cast<int>(s);
      failures.add(o.str());
      w.abort.store(true);
    };
    Status status[3] = {Status::ok, Status::ok, Status::ok};
    if (w.settings.inline_latency && p.all_latency(ctx, call)) {
      for (int r = 0; r < p.roles; ++r) {
        status[r] = p.role(atom, ctx, call, static_cast<Role>(r));
        if (status[r] != Status::ok) break;
      }
    } else {
      std::vector<std::thread> threads;
      for (int r = 1; r < p.roles; ++r)
        threads.emplace_back([&, r] {
          Atom a(call.type, call.op, guard);
          status[r] = p.role(a, ctx, call, static_cast<Role>(r));
          if (status[r] != Status::ok) failed.store(true);
        });
      status[0] = p.role(atom, ctx, call, Role::stage);
      if (status[0] != Status::ok) failed.store(true);
      for (std::thread& t : threads) t.join();
    }
    for (int r = 0; r < p.roles; ++r)
      if (status[r] != Status::ok) return report(role_name(r), status[r]);
    end_call(atom, ctx);
  }
}

std::string describe(const CallData& cd, int n, const Settings& s, std::size_t index) {
  std::ostringstream o;
  o << cd.spec.plan->name << " n=" << n << " call " << index << (cd.spec.in_place ? " in place" : "") << " type "
    << name_of(cd.spec.type) << (cd.spec.premul ? " premulsum" : "");
  if (cd.spec.plan->rooted) o << " root " << cd.spec.root;
  o << ", " << text(s, n);
  return o.str();
}

std::string sizes_of(const CallData& cd, std::size_t es) {
  std::ostringstream o;
  for (std::size_t r = 0; r < cd.ranks.size(); ++r) {
    const RankCall& rc = cd.ranks[r];
    o << "\n  rank " << r << ": in";
    for (const Span& sp : cd.spec.shapes[r].in) o << ' ' << sp.count * es;
    o << " | mid " << rc.call.mid_bytes << " | out";
    for (const Span& sp : cd.spec.shapes[r].out) o << ' ' << sp.count * es;
  }
  return o.str();
}

// What the calls exercised, counted from their sizes under the world's settings.
struct Coverage {
  u64 calls = 0;
  u64 latency = 0;       // messages on the latency path
  u64 throughput = 0;    // messages on the throughput path
  u64 wrapped = 0;       // throughput messages with more chunks than their ring has slots
  u64 empty = 0;         // empty partitions
  u64 mixed = 0;         // (call, rank) pairs with messages on both paths
  u64 inline_runs = 0;   // (call, rank) pairs whose roles ran one after the other on one thread

  void add(const Coverage& o) {
    calls += o.calls;
    latency += o.latency;
    throughput += o.throughput;
    wrapped += o.wrapped;
    empty += o.empty;
    mixed += o.mixed;
    inline_runs += o.inline_runs;
  }
};

void count(Coverage& cov, const World& w, const std::vector<CallData>& calls) {
  for (const CallData& cd : calls) {
    ++cov.calls;
    for (int r = 0; r < w.n; ++r) {
      const Context& ctx = w.ctx[r];
      const Call& call = cd.ranks[r].call;
      const Lanes l = cd.spec.plan->lanes(ctx);
      std::vector<u64> sizes;
      const Shape& sh = cd.spec.shapes[r];
      const std::size_t es = size_of(cd.spec.type);
      for (const Span& sp : sh.in) sizes.push_back(sp.count * es);
      for (const Span& sp : sh.out) sizes.push_back(sp.count * es);
      if (cd.spec.plan->composed) sizes.push_back(call.mid_bytes);
      bool lat = false, thr = false;
      for (u64 b : sizes) {
        if (b == 0) {
          ++cov.empty;
        } else if (b <= ctx.latency_max) {
          ++cov.latency;
          lat = true;
        } else {
          ++cov.throughput;
          thr = true;
          if (ceil_div(b, l.chunk) > static_cast<u64>(l.slots)) ++cov.wrapped;
        }
      }
      if (lat && thr) ++cov.mixed;
      if (w.settings.inline_latency && cd.spec.plan->all_latency(ctx, call)) ++cov.inline_runs;
    }
  }
}

// Runs the calls on a fresh world of n ranks and checks every rank's output and input.
Coverage run_and_check(int n, const Settings& s, std::vector<CallData>& calls) {
  World w(n, s);
  Coverage cov;
  count(cov, w, calls);
  // Every declaration the calls use gets chunks of at least 256 bytes and regions inside the half.
  for (const CallData& cd : calls) {
    const Lanes l = cd.spec.plan->lanes(w.ctx[0]);
    INFO(cd.spec.plan->name << " n=" << n << " " << text(s, n) << ": chunk " << l.chunk << " region " << l.region);
    REQUIRE(l.chunk >= 256);
    REQUIRE(l.chunk * static_cast<u64>(l.slots) <= l.region);
  }
  Failures failures;
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) ranks.emplace_back([&, r] { run_rank(w, r, calls, failures); });
  for (std::thread& t : ranks) t.join();
  for (const std::string& f : failures.list) FAIL_CHECK(f << " [" << text(s, n) << "]");
  REQUIRE(failures.list.empty());

  int reported = 0;
  for (std::size_t c = 0; c < calls.size() && reported < 8; ++c) {
    const CallData& cd = calls[c];
    const std::size_t es = size_of(cd.spec.type);
    for (int r = 0; r < n && reported < 8; ++r) {
      const RankCall& rc = cd.ranks[r];
      if (rc.in != rc.in_before) {
        FAIL_CHECK(describe(cd, n, s, c) << ": rank " << r << "'s input changed" << sizes_of(cd, es));
        ++reported;
      }
      if (rc.out == rc.expect) continue;
      std::size_t first = 0, bad = 0;
      for (std::size_t i = rc.out.size(); i-- > 0;)
        if (rc.out[i] != rc.expect[i]) {
          first = i;
          ++bad;
        }
      std::ostringstream where;
      where << "byte " << first;
      const auto& spans = cd.spec.shapes[r].out;
      for (std::size_t k = 0; k < spans.size(); ++k)
        if (first >= spans[k].offset * es && first < spans[k].end() * es)
          where << " (partition " << k << ", its byte " << first - spans[k].offset * es << ")";
      FAIL_CHECK(describe(cd, n, s, c) << ": rank " << r << " output differs in " << bad << " bytes, first at "
                                       << where.str() << ": expected "
                                       << static_cast<int>(static_cast<unsigned char>(rc.expect[first])) << ", got "
                                       << static_cast<int>(static_cast<unsigned char>(rc.out[first]))
                                       << sizes_of(cd, es));
      ++reported;
    }
  }
  return cov;
}

// ---- sizes and shapes ---------------------------------------------------------------------------

// Bytes per pair that fall on both sides of every latency_max in kSettings and span a few rings.
u64 pick_bytes(Rng& rng, int size_class) {
  switch (size_class) {
    case 0: return 1 + rng() % 64;         // latency path wherever it is on
    case 1: return 65 + rng() % 960;       // latency at 1024, a few chunks otherwise
    case 2: return 1025 + rng() % 3072;   // throughput, the ring wraps
    default: return 4097 + rng() % 12288;  // throughput, many turns of the ring
  }
}

// Size classes of consecutive calls: the regimes alternate on every pair across calls.
constexpr int kClassOrder[] = {2, 0, 1, 3, 2, 0, 1, 0, 3, 1};

u64 pick_count(Rng& rng, int call, std::size_t es) {
  const u64 bytes = pick_bytes(rng, kClassOrder[call % 10]);
  return std::max<u64>(1, bytes / es);
}

DataType pick_type(bool reduces, int call) {
  static constexpr DataType kReduce[] = {DataType::int32, DataType::f32, DataType::uint8};
  static constexpr DataType kCopy[] = {DataType::uint8, DataType::int32};
  return reduces ? kReduce[call % 3] : kCopy[call % 2];
}

// Partitions with the given counts, laid out in a random order with small random gaps.
std::vector<Span> scattered_layout(const std::vector<u64>& counts, Rng& rng) {
  std::vector<std::size_t> order(counts.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<Span> spans(counts.size());
  u64 at = rng() % 8;
  for (std::size_t k : order) {
    spans[k] = Span{at, counts[k]};
    at += counts[k] + rng() % 8;
  }
  return spans;
}

// A uniform call of D: the count of one block (plain) or of the whole buffer (composed, cut into
// 256-byte aligned shards as the shim cuts it).
template <class D>
CallSpec uniform_call(const Plan* plan, int n, int call, Rng& rng) {
  const DataType type = pick_type(D::consume == coll::Consume::reduce, call);
  const std::size_t es = size_of(type);
  u64 count = pick_count(rng, call, es);
  if constexpr (D::composed) count = count * static_cast<u64>(n) - rng() % std::max<u64>(count, 1);
  const int root = static_cast<int>(rng() % static_cast<u64>(n));
  const u64 align = D::composed ? std::max<u64>(1, kShardAlignBytes / es) : 1;
  return CallSpec{plan, type, root, coll::uniform_shapes<D>(n, count, root, align)};
}

// Zero with probability 1/zero_in, else a size of the call's class (or of any class, mixed).
u64 v_count(Rng& rng, int call, std::size_t es, int zero_in, bool mixed) {
  if (rng() % static_cast<u64>(zero_in) == 0) return 0;
  const int cls = mixed ? static_cast<int>(rng() % 4) : kClassOrder[call % 10];
  return std::max<u64>(1, pick_bytes(rng, cls) / es);
}

CallSpec all_gather_v(const Plan* plan, int n, int call, Rng& rng) {
  const DataType type = pick_type(false, call);
  const std::size_t es = size_of(type);
  std::vector<u64> counts(static_cast<std::size_t>(n));
  for (u64& c : counts) c = v_count(rng, call, es, 4, true);
  std::vector<Shape> shapes(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    shapes[r].in = {Span{rng() % 8, counts[r]}};
    shapes[r].out = scattered_layout(counts, rng);
  }
  return CallSpec{plan, type, 0, std::move(shapes)};
}

CallSpec reduce_scatter_v(const Plan* plan, int n, int call, Rng& rng) {
  const DataType type = pick_type(true, call);
  const std::size_t es = size_of(type);
  std::vector<u64> counts(static_cast<std::size_t>(n));
  for (u64& c : counts) c = v_count(rng, call, es, 4, true);
  std::vector<Shape> shapes(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    shapes[r].in = scattered_layout(counts, rng);
    shapes[r].out = {Span{rng() % 8, counts[r]}};
  }
  return CallSpec{plan, type, 0, std::move(shapes)};
}

// counts[s][d]: what s sends to d. Each pair is empty with probability 1/zero_in (the diagonal,
// a rank's message to itself, with probability 1/2 when the exchange is sparse).
CallSpec exchange(const Plan* plan, int n, int call, Rng& rng, bool sparse) {
  const DataType type = pick_type(false, call);
  const std::size_t es = size_of(type);
  std::vector<std::vector<u64>> counts(static_cast<std::size_t>(n), std::vector<u64>(static_cast<std::size_t>(n)));
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d) counts[s][d] = v_count(rng, call, es, sparse ? (s == d ? 2 : 1 + n / 2) : 4, true);
  if (sparse)
    for (int s = 0; s < n; ++s)
      for (int d = 0; d < n; ++d)
        if (s != d && rng() % 4 != 0) counts[s][d] = 0;
  std::vector<Shape> shapes(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::vector<u64> from(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s) from[s] = counts[s][r];
    shapes[r].in = scattered_layout(counts[r], rng);
    shapes[r].out = scattered_layout(from, rng);
  }
  return CallSpec{plan, type, 0, std::move(shapes)};
}

// The call run in place, as NCCL defines it: a composition's input and output buffers coincide
// (its shards sit at the same offsets); a packed input is the rank's own partition of a scattered
// output (AllGather, Gather at the root) and a packed output the rank's own partition of a
// scattered input (ReduceScatter, Scatter at the root); a packed input and a packed output (the
// direct forms) sit at the same offsets already. An exchange is not in place in the
// protocol (the executor copies its input first), so it stays as it is.
CallSpec in_place(CallSpec spec) {
  const Plan& p = *spec.plan;
  if (p.output == coll::Layout::transposed) return spec;
  for (std::size_t r = 0; r < spec.shapes.size(); ++r) {
    Shape& sh = spec.shapes[r];
    if (p.composed || sh.in.empty() || sh.out.empty()) continue;
    if (p.input == coll::Layout::packed && p.output == coll::Layout::scattered) sh.in = {sh.out[r]};
    if (p.input == coll::Layout::scattered && p.output == coll::Layout::packed) sh.out = {sh.in[r]};
  }
  spec.in_place = true;
  return spec;
}

using Generator = CallSpec (*)(const Plan*, int, int, Rng&);

template <class D>
Generator uniform_generator() {
  return [](const Plan* p, int n, int call, Rng& rng) { return uniform_call<D>(p, n, call, rng); };
}

struct Declaration {
  Plan plan;
  Generator make;
};

const std::vector<Declaration>& declarations() {
  static const std::vector<Declaration> all = {
      {plan_of<coll::AllGather>("AllGather"), uniform_generator<coll::AllGather>()},
      {plan_of<coll::ReduceScatter>("ReduceScatter"), uniform_generator<coll::ReduceScatter>()},
      {plan_of<coll::AllReduce>("AllReduce"), uniform_generator<coll::AllReduce>()},
      {plan_of<coll::AllToAll>("AllToAll"), uniform_generator<coll::AllToAll>()},
      {plan_of<coll::Scatter>("Scatter"), uniform_generator<coll::Scatter>()},
      {plan_of<coll::Gather>("Gather"), uniform_generator<coll::Gather>()},
      {plan_of<coll::Broadcast>("Broadcast"), uniform_generator<coll::Broadcast>()},
      {plan_of<coll::Reduce>("Reduce"), uniform_generator<coll::Reduce>()},
      {plan_of<coll::AllReduceDirect>("AllReduceDirect"), uniform_generator<coll::AllReduceDirect>()},
      {plan_of<coll::ReduceDirect>("ReduceDirect"), uniform_generator<coll::ReduceDirect>()},
      {plan_of<coll::AllGatherV>("AllGatherV"), &all_gather_v},
      {plan_of<coll::ReduceScatterV>("ReduceScatterV"), &reduce_scatter_v},
      {plan_of<coll::AllToAllV>("AllToAllV"),
       [](const Plan* p, int n, int call, Rng& rng) { return exchange(p, n, call, rng, false); }},
      {plan_of<coll::SendRecv>("SendRecv"),
       [](const Plan* p, int n, int call, Rng& rng) { return exchange(p, n, call, rng, true); }},
  };
  return all;
}

const Declaration& declaration(const std::string& name) {
  for (const Declaration& d : declarations())
    if (name == d.plan.name) return d;
  FAIL("no declaration " << name);
  return declarations().front();
}

// Inputs, sizes and roots follow from fixed seeds mixed with Catch's --rng-seed (0 by default).
u64 seed_of(u64 base) {
#if defined(PURLIN_CATCH_V3)
  const u64 user = Catch::getSeed();
#else
  const u64 user = Catch::rngSeed();
#endif
  return base ^ (user * 0x9E3779B97F4A7C15ull);
}

// Printed when PURLIN_TEST_COVERAGE is set, for whoever tunes the sizes above.
void print_coverage(const std::string& what, const Coverage& c) {
  if (std::getenv("PURLIN_TEST_COVERAGE") == nullptr) return;
  std::printf("%-16s calls %4llu  messages: latency %5llu throughput %5llu (ring wrapped %5llu) empty %4llu  "
              "mixed %4llu  inline %4llu\n",
              what.c_str(), static_cast<unsigned long long>(c.calls), static_cast<unsigned long long>(c.latency),
              static_cast<unsigned long long>(c.throughput), static_cast<unsigned long long>(c.wrapped),
              static_cast<unsigned long long>(c.empty), static_cast<unsigned long long>(c.mixed),
              static_cast<unsigned long long>(c.inline_runs));
}

constexpr int kCallsPerSequence = 8;

// Every n from 1 to 8 under every setting: a sequence of consecutive calls on one world each.
void check_declaration(const std::string& name) {
  const Declaration& d = declaration(name);
  Coverage total;
  for (int n = 1; n <= 8; ++n) {
    for (std::size_t si = 0; si < std::size(kSettings); ++si) {
      const Settings& s = kSettings[si];
      const u64 seed = seed_of(0x5eed0000u + static_cast<u64>(n) * 131 + si * 7);
      Rng rng(seed);
      std::vector<CallData> calls;
      for (int c = 0; c < kCallsPerSequence; ++c) {
        CallSpec spec = d.make(&d.plan, n, c, rng);
        if (c % 3 == 2) spec = in_place(std::move(spec));
        spec.premul = d.plan.reduces && c % 2 == 1;
        calls.push_back(prepare(n, std::move(spec), rng));
      }
      INFO(name << " n=" << n << " seed " << seed << " " << text(s, n));
      total.add(run_and_check(n, s, calls));
    }
  }
  print_coverage(name, total);
  // The sizes above reach both paths, wrap the rings, and leave partitions empty where sizes vary.
  CHECK(total.latency > 0);
  CHECK(total.throughput > 0);
  CHECK(total.wrapped > 0);
  CHECK(total.inline_runs > 0);
  if (d.plan.composed || name.back() == 'V' || name == "SendRecv") {
    CHECK(total.mixed > 0);
    CHECK(total.empty > 0);
  }
}

// ---- the declarations, one at a time ------------------------------------------------------------

TEST_CASE("AllGather on threads matches its movement", "[snac][protocol]") { check_declaration("AllGather"); }
TEST_CASE("ReduceScatter on threads matches its movement", "[snac][protocol]") { check_declaration("ReduceScatter"); }
TEST_CASE("AllReduce on threads matches its movement", "[snac][protocol]") { check_declaration("AllReduce"); }
TEST_CASE("AllToAll on threads matches its movement", "[snac][protocol]") { check_declaration("AllToAll"); }
TEST_CASE("Scatter on threads matches its movement", "[snac][protocol][root]") { check_declaration("Scatter"); }
TEST_CASE("Gather on threads matches its movement", "[snac][protocol][root]") { check_declaration("Gather"); }
TEST_CASE("Broadcast on threads matches its movement", "[snac][protocol][root]") { check_declaration("Broadcast"); }
TEST_CASE("Reduce on threads matches its movement", "[snac][protocol][root]") { check_declaration("Reduce"); }
TEST_CASE("AllReduceDirect on threads matches its movement", "[snac][protocol][direct]") {
  check_declaration("AllReduceDirect");
}
TEST_CASE("ReduceDirect on threads matches its movement", "[snac][protocol][direct][root]") {
  check_declaration("ReduceDirect");
}
TEST_CASE("AllGatherV on threads matches its movement", "[snac][protocol][v]") { check_declaration("AllGatherV"); }
TEST_CASE("ReduceScatterV on threads matches its movement", "[snac][protocol][v]") {
  check_declaration("ReduceScatterV");
}
TEST_CASE("AllToAllV on threads matches its movement", "[snac][protocol][v]") { check_declaration("AllToAllV"); }
TEST_CASE("SendRecv groups on threads match their movement", "[snac][protocol][v]") { check_declaration("SendRecv"); }

// A communicator runs different collectives back to back: the per-pair sequences, lane bases and
// staging halves carry over from one declaration to the next, whose lanes divide the half
// differently.
TEST_CASE("mixed declarations back to back on one world", "[snac][protocol][mixed]") {
  const int ns[] = {2, 3, 5, 8};
  Coverage total;
  for (int n : ns) {
    for (std::size_t si = 0; si < std::size(kSettings); ++si) {
      const Settings& s = kSettings[si];
      const u64 seed = seed_of(0x3a11ed00u + static_cast<u64>(n) * 17 + si);
      Rng rng(seed);
      std::vector<CallData> calls;
      const auto& all = declarations();
      for (int c = 0; c < 24; ++c) {
        const Declaration& d = all[rng() % all.size()];
        CallSpec spec = d.make(&d.plan, n, static_cast<int>(rng() % 10), rng);
        if (rng() % 4 == 0) spec = in_place(std::move(spec));
        spec.premul = d.plan.reduces && rng() % 2 == 0;
        calls.push_back(prepare(n, std::move(spec), rng));
      }
      INFO("n=" << n << " seed " << seed << " " << text(s, n));
      total.add(run_and_check(n, s, calls));
    }
  }
  print_coverage("mixed", total);
  CHECK(total.mixed > 0);
}

// ---- ways out of a wait -------------------------------------------------------------------------

struct RoleEnd {
  Status status = Status::ok;
  Clock::time_point at{};
  bool done = false;
};

// Ranks 0 and 1 of three run one AllReduce whose every lane needs more chunks than its ring holds,
// so that every role ends up waiting on rank 2, which never runs. Returns when `stop` has been
// called and every role has returned.
struct StuckCall {
  static constexpr int kRanks = 3;
  World w;
  atom::WaitGuard guard[2];
  std::atomic<bool> failed[2] = {false, false};
  std::vector<CallData> calls;
  RoleEnd ends[2][3];
  std::mutex m;
  std::vector<std::thread> threads;

  StuckCall(double timeout_s) : w(kRanks, Settings{16 << 10, 256, 2, 0, true}) {
    Rng rng(7);
    static const Plan plan_storage = plan_of<coll::AllReduce>("AllReduce");
    const Plan* plan = &plan_storage;
    // 2 KiB shards of int32: 8 chunks of 256 bytes per lane, rings of 2.
    CallSpec spec{plan, DataType::int32, 0, coll::uniform_shapes<coll::AllReduce>(kRanks, 3 * 512, 0, 64)};
    calls.push_back(prepare(kRanks, std::move(spec), rng));
    for (int r = 0; r < 2; ++r) guard[r] = atom::WaitGuard{&w.abort, &failed[r], timeout_s};
  }

  void start() {
    for (int r = 0; r < 2; ++r) {
      for (int role = 0; role < 3; ++role)
        threads.emplace_back([this, r, role] {
          const Call& call = calls[0].ranks[r].call;
          Atom a(call.type, call.op, guard[r]);
          const Status s = calls[0].spec.plan->role(a, w.ctx[r], call, static_cast<Role>(role));
          if (s != Status::ok) failed[r].store(true);
          std::lock_guard<std::mutex> g(m);
          ends[r][role] = RoleEnd{s, Clock::now(), true};
        });
    }
  }

  int finished() {
    std::lock_guard<std::mutex> g(m);
    int k = 0;
    for (auto& rank : ends)
      for (RoleEnd& e : rank) k += e.done ? 1 : 0;
    return k;
  }

  void join() {
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
};

TEST_CASE("aborting ends every role's wait within a second", "[snac][protocol][abort]") {
  StuckCall stuck(300.0);
  stuck.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(stuck.finished() == 0);  // all six roles wait on rank 2
  const auto t0 = Clock::now();
  stuck.w.abort.store(true);
  stuck.join();
  for (int r = 0; r < 2; ++r)
    for (int role = 0; role < 3; ++role) {
      INFO("rank " << r << " role " << role_name(role));
      const RoleEnd& e = stuck.ends[r][role];
      CHECK(e.status != Status::ok);
      CHECK(std::chrono::duration<double>(e.at - t0).count() < 1.0);
    }
}

TEST_CASE("the timeout ends a wait on a rank that never answers", "[snac][protocol][abort]") {
  const double timeout_s = 0.3;
  StuckCall stuck(timeout_s);
  const auto t0 = Clock::now();
  stuck.start();
  stuck.join();
  const double elapsed = seconds_since(t0);
  CHECK(elapsed >= timeout_s);
  CHECK(elapsed < timeout_s + 1.5);
  CHECK_FALSE(stuck.w.abort.load());
  for (int r = 0; r < 2; ++r)
    for (int role = 0; role < 3; ++role) {
      INFO("rank " << r << " role " << role_name(role));
      CHECK(stuck.ends[r][role].status != Status::ok);
    }
}

TEST_CASE("HostAtom::wait returns once the flag reaches the value, and fails at the deadline",
          "[snac][protocol][abort]") {
  std::atomic<bool> abort{false}, failed{false};
  Atom atom(DataType::uint8, ReduceOp{}, atom::WaitGuard{&abort, &failed, 0.2});
  alignas(8) std::uint64_t flag = 0;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    atom.signal(&flag, atom::flag_word(3));
  });
  CHECK(atom.wait(&flag, atom::flag_word(3)) == Status::ok);
  CHECK(atom.wait(&flag, atom::flag_word(2)) == Status::ok);  // a later message counts as arrived
  setter.join();
  CHECK_FALSE(failed.load());
  const auto t0 = Clock::now();
  CHECK(atom.wait(&flag, atom::flag_word(4)) == Status::remote_error);
  const double waited = seconds_since(t0);
  CHECK(waited >= 0.2);
  CHECK(waited < 1.2);
  CHECK(failed.load());  // siblings of the failed wait stop too
}

}  // namespace

// ---- mismatched calls ---------------------------------------------------------------------------

// Runs one call per rank, each rank with its own CallData (the ranks disagree), as the host
// executor does: roles on their own threads, and a rank whose call finds a mismatch raises the fault
// in its peers' windows. Returns each rank's status and when it ended.
struct MismatchRun {
  std::vector<Status> status;
  std::vector<double> seconds;
};

MismatchRun run_mismatched(World& w, const Plan& plan, std::vector<CallData>& per_rank) {
  MismatchRun out;
  out.status.assign(static_cast<std::size_t>(w.n), Status::ok);
  out.seconds.assign(static_cast<std::size_t>(w.n), 0.0);
  const auto t0 = Clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < w.n; ++r)
    ranks.emplace_back([&, r] {
      const Context& ctx = w.ctx[r];
      const Call& call = per_rank[r].ranks[r].call;
      std::atomic<bool> failed{false};
      const atom::WaitGuard guard{&w.abort, &failed, w.timeout_s, w.windows[r].fault};
      Atom atom(call.type, call.op, guard);
      Status result = Status::ok;
      {
        Status status[3] = {Status::ok, Status::ok, Status::ok};
        std::vector<std::thread> roles;
        for (int role = 1; role < plan.roles; ++role)
          roles.emplace_back([&, role] {
            Atom a(call.type, call.op, guard);
            status[role] = plan.role(a, ctx, call, static_cast<Role>(role));
            if (status[role] != Status::ok) failed.store(true);
          });
        status[0] = plan.role(atom, ctx, call, Role::stage);
        if (status[0] != Status::ok) failed.store(true);
        for (std::thread& t : roles) t.join();
        for (Status s : status)
          if (s == Status::invalid_usage || (s != Status::ok && result == Status::ok)) result = s;
      }
      if (result == Status::invalid_usage) raise_fault(atom, ctx, w.windows.data(), result);
      out.status[r] = result;
      out.seconds[r] = seconds_since(t0);
    });
  for (std::thread& t : ranks) t.join();
  return out;
}

TEST_CASE("ranks whose calls differ stop with invalid_usage at once, on both paths", "[snac][protocol][mismatch]") {
  // latency_max 1024: 256-byte messages take packets, 16 KiB ones are staged in 512-byte chunks.
  const Settings s{16 << 10, 512, 2, 1024, false};
  static const Plan all_reduce = plan_of<coll::AllReduce>("AllReduce");
  static const Plan all_gather = plan_of<coll::AllGather>("AllGather");
  static const Plan broadcast = plan_of<coll::Broadcast>("Broadcast");
  struct Case {
    const char* what;
    const Plan* plan;
    DataType type0, type1;  // rank 0's, the others'
    u64 count0, count1;     // elements per rank (per shard for AllReduce)
    bool premul0 = false;   // rank 0 calls PreMulSum, the others sum
  };
  const Case cases[] = {
      {"AllReduce, counts differ, both on packets", &all_reduce, DataType::int32, DataType::int32, 48, 64},
      {"AllReduce, packets against staged", &all_reduce, DataType::int32, DataType::int32, 64, 4096},
      {"AllReduce, staged, counts differ", &all_reduce, DataType::int32, DataType::int32, 4096, 3000},
      {"AllReduce, same bytes, other type", &all_reduce, DataType::f32, DataType::int32, 2048, 2048},
      {"AllReduce, PreMulSum against sum, packets", &all_reduce, DataType::f32, DataType::f32, 64, 64, true},
      {"AllReduce, PreMulSum against sum, staged", &all_reduce, DataType::f32, DataType::f32, 4096, 4096, true},
      {"AllGather, packets against staged", &all_gather, DataType::uint8, DataType::uint8, 4096, 200},
      {"AllGather, same bytes, other type", &all_gather, DataType::int32, DataType::f32, 100, 100},
      {"Broadcast, counts differ", &broadcast, DataType::uint8, DataType::uint8, 9000, 7000},
  };
  constexpr int n = 3;
  for (const Case& c : cases) {
    INFO(c.what);
    World w(n, s);
    w.timeout_s = 30;
    Rng rng(11);
    auto shapes_for = [&](u64 count) {
      if (c.plan == &all_reduce) return coll::uniform_shapes<coll::AllReduce>(n, count * n, 0, 64);
      if (c.plan == &all_gather) return coll::uniform_shapes<coll::AllGather>(n, count, 0, 64);
      return coll::uniform_shapes<coll::Broadcast>(n, count, 0, 64);
    };
    std::vector<CallData> per_rank;
    per_rank.push_back(prepare(n, CallSpec{c.plan, c.type0, 0, shapes_for(c.count0), false, c.premul0}, rng));
    for (int r = 1; r < n; ++r) per_rank.push_back(prepare(n, CallSpec{c.plan, c.type1, 0, shapes_for(c.count1)}, rng));
    const MismatchRun run = run_mismatched(w, *c.plan, per_rank);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << " status " << static_cast<int>(run.status[r]) << " after " << run.seconds[r] << " s");
      // The Broadcast root consumes nothing: its call may end before anyone notices.
      if (c.plan == &broadcast && r == 0) CHECK((run.status[r] == Status::ok || run.status[r] == Status::invalid_usage));
      else CHECK(run.status[r] == Status::invalid_usage);
      CHECK(run.seconds[r] < 5.0);  // found by the tags, not by the 30 s timeout
    }
    // The fault stays raised: every rank's window says so.
    for (int r = 1; r < n; ++r) CHECK(*w.windows[r].fault == static_cast<u64>(Status::invalid_usage));
  }
}
