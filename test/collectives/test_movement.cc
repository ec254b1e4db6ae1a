// The moves derived from each declaration, checked on symbolic data against the MPI definitions of
// the collectives, which are written out here again without the declarations. Every input element
// is tagged (rank, index); applying the moves gives every output element the ordered list of tags
// folded into it, and that list must be exactly the one the definition names.
#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "collectives/all_gather.h"
#include "collectives/all_reduce.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/declaration.h"
#include "collectives/gather.h"
#include "collectives/geometry.h"
#include "collectives/movement.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/scatter.h"
#include "collectives/send_recv.h"
#include "test/catch.h"

namespace {

using namespace purlin::coll;
using u64 = std::uint64_t;

// ---- symbolic buffers ---------------------------------------------------------------------------

struct Tag {
  int rank;
  u64 index;
  friend bool operator==(const Tag&, const Tag&) = default;
};
using Element = std::vector<Tag>;   // the sources folded into one output element, in order
using Buffer = std::vector<Element>;
using Buffers = std::vector<Buffer>;  // indexed by rank

// What a call must do: how many input elements each rank has, and every rank's output.
struct Expected {
  std::vector<u64> in_size;
  Buffers out;
};

Expected blank(int n) { return {std::vector<u64>(static_cast<std::size_t>(n), 0), Buffers(static_cast<std::size_t>(n))}; }

std::string text(const Element& e) {
  std::string s = "[";
  for (const Tag& t : e) s += " (" + std::to_string(t.rank) + "," + std::to_string(t.index) + ")";
  return s + " ]";
}

std::string text(const Move& m) {
  return std::to_string(m.src_rank) + "@" + std::to_string(m.src_offset) + " -> " + std::to_string(m.dst_rank) + "@" +
         std::to_string(m.dst_offset) + " x" + std::to_string(m.count) + (m.reduce ? " reduce" : " copy");
}

// Applies the moves to output buffers sized as the expected ones. A copy sets an element once; the
// reduce moves onto an element append their sources in the order listed. Returns what went wrong.
std::string apply(const std::vector<Move>& moves, const Expected& want, Buffers& got) {
  const int n = static_cast<int>(want.out.size());
  got.assign(want.out.size(), {});
  for (std::size_t r = 0; r < want.out.size(); ++r) got[r].resize(want.out[r].size());
  std::vector<std::vector<bool>> copied(want.out.size());
  for (std::size_t r = 0; r < want.out.size(); ++r) copied[r].resize(want.out[r].size());

  for (const Move& m : moves) {
    if (m.count == 0) return "a move of zero elements: " + text(m);
    if (m.src_rank < 0 || m.src_rank >= n || m.dst_rank < 0 || m.dst_rank >= n) return "no such rank: " + text(m);
    const auto src = static_cast<std::size_t>(m.src_rank);
    const auto dst = static_cast<std::size_t>(m.dst_rank);
    if (m.src_offset + m.count > want.in_size[src]) return "reads past the input: " + text(m);
    if (m.dst_offset + m.count > got[dst].size()) return "writes past the output: " + text(m);
    for (u64 i = 0; i < m.count; ++i) {
      Element& e = got[dst][m.dst_offset + i];
      const Tag t{m.src_rank, m.src_offset + i};
      if (!e.empty() && (!m.reduce || copied[dst][m.dst_offset + i])) return "writes an element twice: " + text(m);
      e.push_back(t);
      copied[dst][m.dst_offset + i] = !m.reduce;
    }
  }
  return {};
}

std::string compare(const Expected& want, const Buffers& got) {
  for (std::size_t r = 0; r < want.out.size(); ++r) {
    for (std::size_t i = 0; i < want.out[r].size(); ++i) {
      if (got[r][i] != want.out[r][i]) {
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": got " + text(got[r][i]) +
               ", want " + text(want.out[r][i]);
      }
    }
  }
  return {};
}

// Empty when the movement does exactly what is expected; otherwise the first difference.
std::string check(const Movement& m, const Expected& want) {
  if (!m.ok()) return "no movement: " + m.error;
  Buffers got;
  std::string err = apply(m.moves, want, got);
  return err.empty() ? compare(want, got) : err;
}

template <class D>
std::string check_uniform(int n, u64 count, int root, u64 align, const Expected& want) {
  const std::vector<Shape> shapes = uniform_shapes<D>(n, count, root, align);
  return check(movement<D>(n, shapes, root), want);
}

Element fold_over_ranks(int n, u64 index) {
  Element e;
  for (int s = 0; s < n; ++s) e.push_back({s, index});
  return e;
}

// ---- the MPI definitions ------------------------------------------------------------------------
// Counts as NCCL takes them: c per rank or per peer for the plain collectives, the whole buffer C
// for AllReduce, Broadcast and Reduce.

Expected all_gather(int n, u64 c) {
  Expected e = blank(n);
  for (int d = 0; d < n; ++d) {
    e.in_size[d] = c;
    e.out[d].resize(n * c);
    for (int k = 0; k < n; ++k)
      for (u64 i = 0; i < c; ++i) e.out[d][k * c + i] = {{k, i}};
  }
  return e;
}

Expected reduce_scatter(int n, u64 c) {
  Expected e = blank(n);
  for (int d = 0; d < n; ++d) {
    e.in_size[d] = n * c;
    e.out[d].resize(c);
    for (u64 i = 0; i < c; ++i) e.out[d][i] = fold_over_ranks(n, d * c + i);
  }
  return e;
}

Expected all_reduce(int n, u64 count) {
  Expected e = blank(n);
  for (int d = 0; d < n; ++d) {
    e.in_size[d] = count;
    e.out[d].resize(count);
    for (u64 i = 0; i < count; ++i) e.out[d][i] = fold_over_ranks(n, i);
  }
  return e;
}

Expected all_to_all(int n, u64 c) {
  Expected e = blank(n);
  for (int d = 0; d < n; ++d) {
    e.in_size[d] = n * c;
    e.out[d].resize(n * c);
    for (int s = 0; s < n; ++s)
      for (u64 i = 0; i < c; ++i) e.out[d][s * c + i] = {{s, d * c + i}};
  }
  return e;
}

Expected scatter(int n, u64 c, int root) {
  Expected e = blank(n);
  e.in_size[root] = n * c;
  for (int d = 0; d < n; ++d) {
    e.out[d].resize(c);
    for (u64 i = 0; i < c; ++i) e.out[d][i] = {{root, d * c + i}};
  }
  return e;
}

Expected gather(int n, u64 c, int root) {
  Expected e = blank(n);
  for (int s = 0; s < n; ++s) e.in_size[s] = c;
  e.out[root].resize(n * c);
  for (int k = 0; k < n; ++k)
    for (u64 i = 0; i < c; ++i) e.out[root][k * c + i] = {{k, i}};
  return e;
}

Expected broadcast(int n, u64 count, int root) {
  Expected e = blank(n);
  e.in_size[root] = count;
  for (int d = 0; d < n; ++d) {
    e.out[d].resize(count);
    for (u64 i = 0; i < count; ++i) e.out[d][i] = {{root, i}};
  }
  return e;
}

Expected reduce(int n, u64 count, int root) {
  Expected e = blank(n);
  for (int s = 0; s < n; ++s) e.in_size[s] = count;
  e.out[root].resize(count);
  for (u64 i = 0; i < count; ++i) e.out[root][i] = fold_over_ranks(n, i);
  return e;
}

// counts[s] elements from rank s, at out_offsets[d][s] in rank d's output.
Expected all_gather_v(int n, const std::vector<u64>& counts, const std::vector<std::vector<u64>>& out_offsets) {
  Expected e = blank(n);
  for (int d = 0; d < n; ++d) {
    e.in_size[d] = counts[d];
    for (int s = 0; s < n; ++s) {
      if (counts[s] == 0) continue;
      e.out[d].resize(std::max<u64>(e.out[d].size(), out_offsets[d][s] + counts[s]));
      for (u64 i = 0; i < counts[s]; ++i) e.out[d][out_offsets[d][s] + i] = {{s, i}};
    }
  }
  return e;
}

// recvcounts[d] elements reduced into rank d's output at out_offset[d], taken from every rank s at
// in_offsets[s][d].
Expected reduce_scatter_v(int n, const std::vector<u64>& recvcounts, const std::vector<std::vector<u64>>& in_offsets,
                          const std::vector<u64>& out_offset) {
  Expected e = blank(n);
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d)
      if (recvcounts[d] != 0) e.in_size[s] = std::max(e.in_size[s], in_offsets[s][d] + recvcounts[d]);
  for (int d = 0; d < n; ++d) {
    if (recvcounts[d] == 0) continue;
    e.out[d].resize(out_offset[d] + recvcounts[d]);
    for (u64 i = 0; i < recvcounts[d]; ++i) {
      Element& el = e.out[d][out_offset[d] + i];
      for (int s = 0; s < n; ++s) el.push_back({s, in_offsets[s][d] + i});
    }
  }
  return e;
}

// One point-to-point message: what rank `from` sends from send_offset lands at `to`'s recv_offset.
struct Message {
  int from;
  int to;
  u64 count;
  u64 send_offset;
  u64 recv_offset;
};

Expected messages(int n, const std::vector<Message>& msgs) {
  Expected e = blank(n);
  for (const Message& m : msgs) {
    if (m.count == 0) continue;
    e.in_size[m.from] = std::max(e.in_size[m.from], m.send_offset + m.count);
    e.out[m.to].resize(std::max<u64>(e.out[m.to].size(), m.recv_offset + m.count));
    for (u64 i = 0; i < m.count; ++i) e.out[m.to][m.recv_offset + i] = {{m.from, m.send_offset + i}};
  }
  return e;
}

// ---- random partitions --------------------------------------------------------------------------

using Rng = std::mt19937_64;

u64 draw(Rng& rng, u64 lo, u64 hi) { return std::uniform_int_distribution<u64>(lo, hi)(rng); }

// Counts with a fair share of zeros.
std::vector<u64> random_counts(Rng& rng, int n) {
  std::vector<u64> counts(static_cast<std::size_t>(n));
  for (u64& c : counts) c = draw(rng, 0, 3) == 0 ? 0 : draw(rng, 1, 40);
  return counts;
}

// Offsets that place the partitions in a random order with random gaps; empty partitions get
// offsets anywhere, even past the end.
std::vector<u64> random_offsets(Rng& rng, const std::vector<u64>& counts) {
  std::vector<std::size_t> order(counts.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<u64> offsets(counts.size());
  u64 at = draw(rng, 0, 3);
  for (std::size_t k : order) {
    offsets[k] = counts[k] == 0 ? draw(rng, 0, 200) : at;
    at += counts[k] + draw(rng, 0, 3);
  }
  return offsets;
}

// ---- a declaration read at run time, for the generic check ----------------------------------------

struct Decl {
  Consume consume;
  Layout in;
  Layout out;
  Root root;
};

constexpr Decl decl_of(int id) {
  return {Consume(id % 2), Layout(id / 2 % 3), Layout(id / 6 % 3), Root(id / 18 % 3)};
}
constexpr int decl_ids = 2 * 3 * 3 * 3;

// The rules of declaration.h, restated. Declarations it rejects at compile time, for example:
//   Declare<Consume::reduce, Layout::packed, Layout::scattered>     a reduction produces a packed output
//   Declare<Consume::copy, Layout::packed, Layout::packed>          a packed copy output needs a single
//   Declare<Consume::copy, Layout::scattered, Layout::packed>       (root) producer
//   Declare<Consume::copy, Layout::packed, Layout::transposed>      transposed output needs scattered input
//   Declare<Consume::copy, Layout::transposed, Layout::scattered>   an input is packed or scattered
//   Compose<AllGather, AllGather>                                   F's output layout is not G's input layout
//   Compose<AllReduce, AllGather>                                   composes two plain declarations only
//   Compose<ReduceScatter, ReduceScatterV>                          both parts take sizes the same way
// and that movement() rejects:
//   Compose<ReduceScatter, Declare<Consume::reduce, Layout::packed, Layout::packed>>   two reductions
//   Compose<Gather, Declare<Consume::copy, Layout::packed, Layout::scattered>>         produces where F
//                                                                                      did not consume
constexpr bool valid(Decl d) {
  if (d.in == Layout::transposed) return false;
  if (d.consume == Consume::reduce && d.out != Layout::packed) return false;
  if (d.consume == Consume::copy && d.out == Layout::packed && d.root != Root::producer) return false;
  if (d.out == Layout::transposed && d.in != Layout::scattered) return false;
  return true;
}

constexpr bool composable(Decl f, Decl g) {
  return f.out == g.in && (f.consume == Consume::copy || g.consume == Consume::copy) &&
         (f.root != Root::consumer || g.root == Root::producer);
}

template <class D>
constexpr Decl decl_of() {
  return {D::consume, D::input, D::output, D::root};
}

static_assert(valid(decl_of<AllGather>()) && valid(decl_of<ReduceScatter>()) && valid(decl_of<AllToAll>()) &&
              valid(decl_of<Scatter>()) && valid(decl_of<Gather>()) && valid(decl_of<AllGatherV>()) &&
              valid(decl_of<ReduceScatterV>()) && valid(decl_of<AllToAllV>()) && valid(decl_of<AllReduceDirect>()) &&
              valid(decl_of<BroadcastDirect>()) && valid(decl_of<ReduceDirect>()));
static_assert(composable(decl_of<ReduceScatter>(), decl_of<AllGather>()) &&
              composable(decl_of<Scatter>(), decl_of<AllGather>()) &&
              composable(decl_of<ReduceScatter>(), decl_of<Gather>()));
static_assert(!valid({Consume::reduce, Layout::packed, Layout::scattered, Root::none}));
static_assert(!valid({Consume::copy, Layout::scattered, Layout::packed, Root::none}));
static_assert(!valid({Consume::copy, Layout::packed, Layout::packed, Root::consumer}));
static_assert(!composable(decl_of<AllGather>(), decl_of<AllGather>()));
static_assert(!composable({Consume::reduce, Layout::scattered, Layout::packed, Root::none},
                          {Consume::reduce, Layout::packed, Layout::packed, Root::none}));
static_assert(!composable(decl_of<Gather>(), {Consume::copy, Layout::packed, Layout::scattered, Root::none}));

constexpr int valid_count() {
  int k = 0;
  for (int id = 0; id < decl_ids; ++id) k += valid(decl_of(id)) ? 1 : 0;
  return k;
}
constexpr int plain_count = valid_count();
static_assert(plain_count == 17, "6 reductions, 11 copies");

constexpr std::array<int, plain_count> plain_ids = [] {
  std::array<int, plain_count> ids{};
  int k = 0;
  for (int id = 0; id < decl_ids; ++id)
    if (valid(decl_of(id))) ids[static_cast<std::size_t>(k++)] = id;
  return ids;
}();

template <int Id>
using DeclOf = Declare<decl_of(Id).consume, decl_of(Id).in, decl_of(Id).out, decl_of(Id).root>;

// One step of a plain declaration on symbolic buffers, element by element, with blocks of k
// elements. A scattered or transposed buffer holds block j at j * k; a packed buffer at rank r
// holds its block at r * k when sharded (inside a composition), else at 0.
Buffers step(Decl p, int n, int root, u64 k, bool sharded, const Buffers& in) {
  auto produces = [&](int r) { return p.root != Root::producer || r == root; };
  auto consumes = [&](int r) { return p.root != Root::consumer || r == root; };
  auto packed_at = [&](int r) { return sharded ? static_cast<u64>(r) * k : 0; };
  Buffers out(static_cast<std::size_t>(n));
  for (int d = 0; d < n; ++d) {
    if (!consumes(d)) continue;
    out[d].resize(p.out == Layout::packed ? packed_at(d) + k : n * k);
    for (int s = 0; s < n; ++s) {
      if (!produces(s)) continue;
      for (u64 i = 0; i < k; ++i) {
        const Element& from = in[s][(p.in == Layout::packed ? packed_at(s) : d * k) + i];
        Element& to = out[d][(p.out == Layout::packed ? packed_at(d) : s * k) + i];
        if (p.consume == Consume::copy) {
          to = from;
        } else {
          to.insert(to.end(), from.begin(), from.end());
        }
      }
    }
  }
  return out;
}

// Tagged inputs at the producers of p.
Buffers inputs(Decl p, int n, int root, u64 k, bool sharded) {
  Buffers in(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (p.root == Root::producer && r != root) continue;
    in[r].resize(p.in == Layout::packed ? (sharded ? r * k : 0) + k : n * k);
    for (u64 i = 0; i < in[r].size(); ++i) in[r][i] = {{r, i}};
  }
  return in;
}

Expected expect_from(const Buffers& in, Buffers out) {
  Expected e{{}, std::move(out)};
  for (const Buffer& b : in) e.in_size.push_back(b.size());
  return e;
}

// One declaration of the enumeration: its parts, and its movement checked against an expectation.
struct Case {
  Decl first;
  Decl second;  // the same as first for a plain declaration
  bool composed;
  std::string (*check)(int n, u64 count, int root, u64 align, const Expected& want);
};

template <std::size_t... I>
std::vector<Case> plain_cases(std::index_sequence<I...>) {
  return {Case{decl_of(plain_ids[I]), decl_of(plain_ids[I]), false, &check_uniform<DeclOf<plain_ids[I]>>}...};
}

template <std::size_t I>
void add_composition(std::vector<Case>& cases) {
  constexpr int f = plain_ids[I / plain_count];
  constexpr int g = plain_ids[I % plain_count];
  if constexpr (composable(decl_of(f), decl_of(g))) {
    cases.push_back({decl_of(f), decl_of(g), true, &check_uniform<Compose<DeclOf<f>, DeclOf<g>>>});
  }
}

template <std::size_t... I>
std::vector<Case> composed_cases(std::index_sequence<I...>) {
  std::vector<Case> cases;
  (add_composition<I>(cases), ...);
  return cases;
}

std::string text(Decl d) {
  static const char* const consume[] = {"copy", "reduce"};
  static const char* const layout[] = {"packed", "scattered", "transposed"};
  static const char* const root[] = {"", " root=producer", " root=consumer"};
  return std::string(consume[int(d.consume)]) + " " + layout[int(d.in)] + "->" + layout[int(d.out)] + root[int(d.root)];
}

}  // namespace

// ---- tests --------------------------------------------------------------------------------------

TEST_CASE("uniform_split cuts a count into contiguous aligned shards", "[collectives][geometry]") {
  for (u64 count : {u64{0}, u64{1}, u64{2}, u64{7}, u64{8}, u64{9}, u64{1000}, u64{1001}, u64{4096}, u64{65537}})
    for (int n = 1; n <= 9; ++n)
      for (u64 align : {u64{1}, u64{2}, u64{3}, u64{4}, u64{16}, u64{128}}) {
        INFO("count " << count << " n " << n << " align " << align);
        u64 at = 0;
        bool short_seen = false;
        const u64 per = ((count + n - 1) / n + align - 1) / align * align;
        for (int k = 0; k < n; ++k) {
          const Span s = uniform_split(count, n, k, align);
          REQUIRE(s.offset == at);  // contiguous, in order
          REQUIRE((s.offset % align == 0 || s.offset == count));
          if (short_seen) REQUIRE(s.count == 0);  // after a short shard, only empty ones
          else REQUIRE((s.count == per || s.end() == count));
          short_seen = short_seen || s.count < per;
          at = s.end();
        }
        REQUIRE(at == count);                       // covers [0, count) exactly
      }

  CHECK(uniform_split(10, 4, 0, 1) == Span{0, 3});
  CHECK(uniform_split(10, 4, 3, 1) == Span{9, 1});
  CHECK(uniform_split(10, 4, 2, 4) == Span{8, 2});
  CHECK(uniform_split(10, 4, 3, 4) == Span{10, 0});
  CHECK(uniform_split(1, 8, 0, 1) == Span{0, 1});
  CHECK(uniform_split(1, 8, 7, 1) == Span{1, 0});
  CHECK(uniform_split(0, 3, 1, 64) == Span{0, 0});
  CHECK(uniform_split(5, 2, 1, 0) == Span{3, 2});  // an alignment of 0 counts as 1
  CHECK(uniform_split(~u64{0}, 2, 1, 1) == Span{u64{1} << 63, (u64{1} << 63) - 1});
  static_assert(uniform_split(100, 3, 2, 8) == Span{80, 20});
}

TEST_CASE("uniform shapes follow NCCL's counts", "[collectives][geometry]") {
  const Shape ag = uniform_shape<AllGather>(4, 2, 3);
  CHECK(ag.in == std::vector<Span>{{0, 3}});
  CHECK(ag.out == std::vector<Span>{{0, 3}, {3, 3}, {6, 3}, {9, 3}});
  CHECK(ag.mid.empty());

  const Shape rs = uniform_shape<ReduceScatter>(3, 0, 5);
  CHECK(rs.in == std::vector<Span>{{0, 5}, {5, 5}, {10, 5}});
  CHECK(rs.out == std::vector<Span>{{0, 5}});

  CHECK(uniform_shape<Scatter>(4, 1, 2, 3).in.empty());
  CHECK(uniform_shape<Scatter>(4, 3, 2, 3).in.size() == 4);
  CHECK(uniform_shape<Gather>(4, 1, 2, 3).out.empty());
  CHECK(uniform_shape<Gather>(4, 3, 2, 3).out.size() == 4);

  // AllReduce of 10 on 4 ranks, 4-element aligned shards: rank 1 reduces shard 1 in place.
  const Shape ar = uniform_shape<AllReduce>(4, 1, 10, 0, 4);
  const std::vector<Span> shards{{0, 4}, {4, 4}, {8, 2}, {10, 0}};
  CHECK(ar.in == shards);
  CHECK(ar.mid == std::vector<Span>{{4, 4}});
  CHECK(ar.out == shards);
  CHECK(extent(ar.out) == 10);

  CHECK(uniform_shape<Broadcast>(3, 1, 9, 0).in.empty());
  CHECK(uniform_shape<Broadcast>(3, 0, 9, 0).in.size() == 3);
  CHECK(uniform_shape<Reduce>(3, 1, 9, 2).out.empty());
  CHECK(uniform_shape<Reduce>(3, 1, 9, 2).mid == std::vector<Span>{{3, 3}});

  const std::vector<u64> counts{2, 0, 5};
  const std::vector<u64> offsets{9, 4, 0};
  CHECK(partitions(counts, offsets) == std::vector<Span>{{9, 2}, {4, 0}, {0, 5}});
  CHECK(contiguous(counts) == std::vector<Span>{{0, 2}, {2, 0}, {2, 5}});
  CHECK(extent(partitions(counts, std::vector<u64>{9, 40, 0})) == 11);  // empty partitions take no room

  static_assert(rooted<Broadcast>() && rooted<Reduce>() && rooted<Scatter>() && !rooted<AllReduce>());
  static_assert(produces<Broadcast>(0, 0) && !produces<Broadcast>(1, 0) && consumes<Broadcast>(1, 0));
  static_assert(produces<Reduce>(1, 0) && !consumes<Reduce>(1, 0) && consumes<Reduce>(0, 0));
}

TEST_CASE("uniform collectives move data as MPI defines them", "[collectives][movement]") {
  const std::vector<u64> counts{0, 1, 2, 7, 13, 1000, 1001};
  for (int n = 1; n <= 8; ++n)
    for (u64 c : counts) {
      INFO("n " << n << " count " << c);
      REQUIRE(check_uniform<AllGather>(n, c, 0, 1, all_gather(n, c)) == "");
      REQUIRE(check_uniform<ReduceScatter>(n, c, 0, 1, reduce_scatter(n, c)) == "");
      REQUIRE(check_uniform<AllToAll>(n, c, 0, 1, all_to_all(n, c)) == "");
      for (u64 align : {u64{1}, u64{4}, u64{64}}) {
        INFO("align " << align);
        REQUIRE(check_uniform<AllReduce>(n, c, 0, align, all_reduce(n, c)) == "");
      }
      REQUIRE(check_uniform<AllReduceDirect>(n, c, 0, 1, all_reduce(n, c)) == "");
      for (int root = 0; root < n; ++root) {
        INFO("root " << root);
        REQUIRE(check_uniform<Scatter>(n, c, root, 1, scatter(n, c, root)) == "");
        REQUIRE(check_uniform<Gather>(n, c, root, 1, gather(n, c, root)) == "");
        for (u64 align : {u64{1}, u64{4}, u64{64}}) {
          INFO("align " << align);
          REQUIRE(check_uniform<Broadcast>(n, c, root, align, broadcast(n, c, root)) == "");
          REQUIRE(check_uniform<Reduce>(n, c, root, align, reduce(n, c, root)) == "");
        }
        REQUIRE(check_uniform<BroadcastDirect>(n, c, root, 1, broadcast(n, c, root)) == "");
        REQUIRE(check_uniform<ReduceDirect>(n, c, root, 1, reduce(n, c, root)) == "");
      }
    }
}

TEST_CASE("reductions fold their sources in rank order, one move per source", "[collectives][movement]") {
  const int n = 4;
  const Movement rs = movement<ReduceScatter>(n, uniform_shapes<ReduceScatter>(n, 2), 0);
  REQUIRE(rs.ok());
  REQUIRE(rs.moves.size() == 16);
  for (std::size_t i = 0; i < rs.moves.size(); ++i) {
    CHECK(rs.moves[i].reduce);
    CHECK(rs.moves[i].dst_rank == static_cast<int>(i) / n);
    CHECK(rs.moves[i].src_rank == static_cast<int>(i) % n);
  }
  const Movement ag = movement<AllGather>(n, uniform_shapes<AllGather>(n, 2), 0);
  REQUIRE(ag.ok());
  for (const Move& m : ag.moves) CHECK_FALSE(m.reduce);

  // AllReduce flattens to n reduce moves per shard per destination: n * n * n with non-empty shards.
  const Movement ar = movement<AllReduce>(n, uniform_shapes<AllReduce>(n, 8), 0);
  REQUIRE(ar.ok());
  CHECK(ar.moves.size() == 64);
  for (const Move& m : ar.moves) CHECK(m.reduce);
}

TEST_CASE("V collectives move data as MPI defines them", "[collectives][movement]") {
  Rng rng(20261129);
  for (int n = 1; n <= 8; ++n)
    for (int trial = 0; trial < 20; ++trial) {
      INFO("n " << n << " trial " << trial);

      // AllGatherV: rank s contributes counts[s]; each rank places them at its own offsets.
      {
        const std::vector<u64> counts = random_counts(rng, n);
        std::vector<std::vector<u64>> out_offsets;
        std::vector<Shape> shapes(static_cast<std::size_t>(n));
        for (int d = 0; d < n; ++d) {
          out_offsets.push_back(random_offsets(rng, counts));
          shapes[d].in = {Span{0, counts[d]}};
          shapes[d].out = partitions(counts, out_offsets[d]);
        }
        REQUIRE(check(movement<AllGatherV>(n, shapes), all_gather_v(n, counts, out_offsets)) == "");
      }

      // ReduceScatterV: rank d receives recvcounts[d] at a random offset; every rank's input
      // partitions lie in their own order.
      {
        const std::vector<u64> recvcounts = random_counts(rng, n);
        std::vector<std::vector<u64>> in_offsets;
        std::vector<u64> out_offset;
        std::vector<Shape> shapes(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
          in_offsets.push_back(random_offsets(rng, recvcounts));
          out_offset.push_back(draw(rng, 0, 5));
          shapes[r].in = partitions(recvcounts, in_offsets[r]);
          shapes[r].out = {Span{out_offset[r], recvcounts[r]}};
        }
        REQUIRE(check(movement<ReduceScatterV>(n, shapes), reduce_scatter_v(n, recvcounts, in_offsets, out_offset)) ==
                "");
      }

      // AllToAllV: sendcounts[s][d], placed at random on both sides.
      {
        std::vector<std::vector<u64>> sendcounts, recvcounts(n, std::vector<u64>(n));
        for (int s = 0; s < n; ++s) sendcounts.push_back(random_counts(rng, n));
        for (int s = 0; s < n; ++s)
          for (int d = 0; d < n; ++d) recvcounts[d][s] = sendcounts[s][d];
        std::vector<Shape> shapes(static_cast<std::size_t>(n));
        std::vector<Message> msgs;
        std::vector<std::vector<u64>> send_offsets, recv_offsets;
        for (int r = 0; r < n; ++r) {
          send_offsets.push_back(random_offsets(rng, sendcounts[r]));
          recv_offsets.push_back(random_offsets(rng, recvcounts[r]));
          shapes[r].in = partitions(sendcounts[r], send_offsets[r]);
          shapes[r].out = partitions(recvcounts[r], recv_offsets[r]);
        }
        for (int s = 0; s < n; ++s)
          for (int d = 0; d < n; ++d) msgs.push_back({s, d, sendcounts[s][d], send_offsets[s][d], recv_offsets[d][s]});
        REQUIRE(check(movement<AllToAllV>(n, shapes), messages(n, msgs)) == "");
      }
    }
}

TEST_CASE("a group of Send/Recv moves each message once", "[collectives][movement]") {
  Rng rng(7);
  for (int n = 1; n <= 8; ++n)
    for (int trial = 0; trial < 30; ++trial) {
      INFO("n " << n << " trial " << trial);
      // Random pairs, self-sends included; every other partition is empty.
      std::vector<Message> msgs;
      std::vector<std::vector<u64>> send(n, std::vector<u64>(n)), recv(n, std::vector<u64>(n));
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d)
          if (draw(rng, 0, 3) == 0 || (s == d && trial % 2 == 0)) {
            send[s][d] = recv[d][s] = draw(rng, 0, 50);
            msgs.push_back({s, d, send[s][d], 0, 0});
          }
      std::vector<std::vector<u64>> send_at, recv_at;
      for (int r = 0; r < n; ++r) {
        send_at.push_back(random_offsets(rng, send[r]));
        recv_at.push_back(random_offsets(rng, recv[r]));
      }
      std::vector<Shape> shapes(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) {
        shapes[r].in = partitions(send[r], send_at[r]);
        shapes[r].out = partitions(recv[r], recv_at[r]);
      }
      for (Message& m : msgs) {
        m.send_offset = send_at[m.from][m.to];
        m.recv_offset = recv_at[m.to][m.from];
      }
      const Movement mv = movement<SendRecv>(n, shapes);
      REQUIRE(check(mv, messages(n, msgs)) == "");
      std::size_t nonempty = 0;
      for (const Message& m : msgs) nonempty += m.count != 0 ? 1 : 0;
      CHECK(mv.moves.size() == nonempty);  // exactly one move per non-empty message
    }
}

TEST_CASE("every valid declaration moves data as its layouts say", "[collectives][movement]") {
  const std::vector<Case> cases = plain_cases(std::make_index_sequence<plain_count>{});
  REQUIRE(cases.size() == 17);
  for (const Case& c : cases)
    for (int n = 1; n <= 8; ++n)
      for (int root = 0; root < n; ++root)
        for (u64 k : {u64{0}, u64{1}, u64{5}}) {
          const Buffers in = inputs(c.first, n, root, k, false);
          const Expected want = expect_from(in, step(c.first, n, root, k, false, in));
          INFO(text(c.first) << " n " << n << " root " << root << " count " << k);
          REQUIRE(c.check(n, k, root, 1, want) == "");
        }
}

TEST_CASE("every valid composition moves data as its parts say", "[collectives][movement]") {
  const std::vector<Case> cases = composed_cases(std::make_index_sequence<plain_count * plain_count>{});
  REQUIRE(cases.size() == 82);  // 116 pairs whose layouts meet, less 18 double reductions and 16 root mismatches
  for (const Case& c : cases)
    for (int n = 1; n <= 8; ++n)
      for (int root = 0; root < n; ++root)
        for (u64 k : {u64{0}, u64{1}, u64{3}}) {
          // Shards of equal size (count = n * k), so that every composition's sizes agree.
          const Buffers in = inputs(c.first, n, root, k, true);
          const Expected want =
              expect_from(in, step(c.second, n, root, k, true, step(c.first, n, root, k, true, in)));
          INFO(text(c.first) << " then " << text(c.second) << " n " << n << " root " << root << " shard " << k);
          REQUIRE(c.check(n, n * k, root, 1, want) == "");
        }
}

TEST_CASE("movement says why shapes do not fit", "[collectives][movement]") {
  const int n = 3;
  std::vector<Shape> shapes = uniform_shapes<AllToAll>(n, 4);
  REQUIRE(movement<AllToAll>(n, shapes).ok());

  shapes[1].out[2].count = 3;  // rank 2 sends 4 elements that rank 1 has room for 3 of
  Movement m = movement<AllToAll>(n, shapes);
  CHECK_FALSE(m.ok());
  CHECK(m.moves.empty());
  CHECK(m.error == "rank 2 contributes 4 elements for rank 1, whose partition holds 3");

  shapes = uniform_shapes<AllToAll>(n, 4);
  shapes[0].in.pop_back();
  CHECK(movement<AllToAll>(n, shapes).error == "rank 0: the input has 2 partitions, the layout needs 3");

  CHECK_FALSE(movement<AllToAll>(n, uniform_shapes<AllToAll>(2, 4)).ok());
  CHECK(movement<Broadcast>(n, uniform_shapes<Broadcast>(n, 9, 0), 3).error == "root 3 is not a rank (nranks 3)");
  CHECK(movement<AllGather>(n, uniform_shapes<AllGather>(n, 9), 7).ok());  // no root to check

  // An intermediate that does not match the shard it is reduced from.
  std::vector<Shape> bad = uniform_shapes<AllReduce>(n, 10);
  bad[2].mid[0].count += 1;
  CHECK_FALSE(movement<AllReduce>(n, bad).ok());
}
