// Zero-staging's protocol (snac/protocol/zero_staging.h) on the host Atom: every rank a thread of
// this process with its buffers on the heap (so every rank can reach every other's, as the GPU
// datapath maps them), every CTA a thread of its rank. Ranks run a sequence of calls back to back
// with no barrier between them: collectives (rooted ones at changing roots, their unused sides
// null), sizes (odd byte counts and a tail shorter than a share included), CTA counts, in-place
// buffers and the way bytes move (shares, fans, or the copy engines' whole copies) change from call
// to call, and every output is compared with a reference computed here from the inputs, element by
// element in rank order.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <type_traits>
#include <chrono>
#include <vector>

#include "atom/host/host_atom.h"
#include "collectives/geometry.h"
#include "core/types.h"
#include "snac/protocol/zero_staging.h"
#include "test/catch.h"

namespace {

using namespace purlin;
using namespace purlin::snac;
using u64 = std::uint64_t;
using Kind = ZeroStagingKind;

// How a case moves its bytes: the host Atom a share at a time, FanAtom whole shares into several
// destinations at once, or (collectives that only copy) one thread per rank making the protocol's
// whole copies between the barriers, as the copy engines do.
enum class Mode { plain, fans, copies };

struct Case {
  Kind kind;
  DataType type;
  RedOpKind op;
  u64 count;  // AllReduce, Broadcast, Reduce: elements of the buffer; others: of one block
  int ctas;
  bool in_place;
  Mode mode;
  int root;
  bool mixed = false;  // AlltoAll in place: every third rank (from rank 2) out of place
};

// The host Atom with the fans of an Atom that stores a share into every destination in one pass
// (snac::ZeroStagingFans), so the protocol's fanned branches run here too; the fold is the host
// Atom's, into the first destination, the others copies of it.
class FanAtom : public atom::HostAtom {
 public:
  using HostAtom::HostAtom;
  void reduce_fan(char* const* dsts, const char* const* srcs, int n, std::uint64_t bytes) const {
    reduce(dsts[0], srcs, n, bytes);
    for (int d = 1; d < n; ++d) copy(dsts[d], dsts[0], bytes);
  }
  void copy_fan(char* const* dsts, int n, const char* src, std::uint64_t bytes) const {
    for (int d = 0; d < n; ++d) copy(dsts[d], src, bytes);
  }
};
static_assert(ZeroStagingFans<FanAtom> && !ZeroStagingFans<atom::HostAtom>);

template <class T>
T combine(RedOpKind op, T a, T b) {
  switch (op) {
    case RedOpKind::max: return b > a ? b : a;
    case RedOpKind::min: return b < a ? b : a;
    default:
      if constexpr (std::is_integral_v<T>) {  // sum wraps
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      } else {
        return a + b;
      }
  }
}

template <class T>
void fill(std::vector<char>& buf, std::mt19937_64& rng) {
  T* p = reinterpret_cast<T*>(buf.data());
  for (u64 i = 0; i < buf.size() / sizeof(T); ++i) {
    if constexpr (std::is_floating_point_v<T>) p[i] = static_cast<T>(std::uniform_real_distribution<double>(-1, 1)(rng)) / T(3);
    else p[i] = static_cast<T>(rng());
  }
}

// The reduction of element i over ranks, in rank order, in T (float: float, as the Atom folds it).
template <class T>
T fold(RedOpKind op, const std::vector<std::vector<char>>& in, u64 offset_elems, u64 i) {
  T acc;
  std::memcpy(&acc, in[0].data() + (offset_elems + i) * sizeof(T), sizeof(T));
  for (std::size_t r = 1; r < in.size(); ++r) {
    T x;
    std::memcpy(&x, in[r].data() + (offset_elems + i) * sizeof(T), sizeof(T));
    acc = combine(op, acc, x);
  }
  return acc;
}

// One rank's buffers of a case: which sides the collective uses there, their sizes, and where the
// input lies in the output (or the output in the input) when the rank runs in place.
struct Sides {
  bool in_used = true, out_used = true;
  u64 in_bytes = 0, out_bytes = 0;
  bool can_in_place = false;
  bool in_inside_out = true;  // in place: the input is part of the output (else the output of the input)
  u64 at = 0;                 // ... at this offset
};

Sides sides_of(Kind k, u64 b, int n, int r, int root) {
  const u64 nb = b * static_cast<u64>(n), rb = static_cast<u64>(r) * b;
  Sides s;
  switch (k) {
    case Kind::all_reduce: s = Sides{true, true, b, b, true, true, 0}; break;
    case Kind::all_gather: s = Sides{true, true, b, nb, true, true, rb}; break;
    case Kind::reduce_scatter: s = Sides{true, true, nb, b, true, false, rb}; break;
    case Kind::all_to_all: s = Sides{true, true, nb, nb, true, true, 0}; break;
    case Kind::broadcast: s = Sides{r == root, true, b, b, r == root, true, 0}; break;
    case Kind::reduce: s = Sides{true, r == root, b, b, r == root, true, 0}; break;
    case Kind::gather: s = Sides{true, r == root, b, nb, r == root, true, rb}; break;
    case Kind::scatter: s = Sides{r == root, true, nb, b, r == root, false, rb}; break;
  }
  return s;
}

template <class T>
void run_case(const Case& cs, int n, std::vector<std::vector<u64>>& words, std::vector<std::vector<u64>>& calls,
              std::mt19937_64& rng) {
  const u64 elem = sizeof(T), b = cs.count * elem;
  std::vector<std::vector<char>> own_in(n), own_out(n), before(n);
  std::vector<const char*> ins(n, nullptr);
  std::vector<char*> outs(n, nullptr);
  std::vector<u64*> word_ptrs(n);
  for (int r = 0; r < n; ++r) {
    const Sides sd = sides_of(cs.kind, b, n, r, cs.root);
    const bool in_place = cs.in_place && sd.can_in_place && !(cs.mixed && r % 3 == 2);
    if (in_place) {
      // One buffer holds both sides: random, the input part of it as it was kept for the reference.
      std::vector<char>& whole = sd.in_inside_out ? own_out[r] : own_in[r];
      whole.assign(sd.in_inside_out ? sd.out_bytes : sd.in_bytes, 0);
      fill<T>(whole, rng);
      if (sd.in_inside_out) {
        outs[r] = whole.data();
        ins[r] = whole.data() + sd.at;
      } else {
        ins[r] = whole.data();
        outs[r] = whole.data() + sd.at;
      }
    } else {
      if (sd.in_used) {
        own_in[r].assign(sd.in_bytes, 0);
        fill<T>(own_in[r], rng);
        ins[r] = own_in[r].data();
      }
      if (sd.out_used) {
        own_out[r].assign(sd.out_bytes, static_cast<char>(0x5a));  // poisoned
        outs[r] = own_out[r].data();
      }
    }
    if (sd.in_used) before[r].assign(ins[r], ins[r] + sd.in_bytes);
    word_ptrs[r] = words[r].data();
  }

  const bool pairs = cs.kind == Kind::all_to_all && zero_staging_in_pairs(ins.data(), outs.data(), n);
  REQUIRE(pairs == (cs.kind == Kind::all_to_all && cs.in_place));
  REQUIRE(!(pairs && cs.mode == Mode::copies));  // the copy engines cannot swap

  std::atomic<bool> abort{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  const int ctas = cs.mode == Mode::copies ? 1 : cs.ctas;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < ctas; ++c) {
      threads.emplace_back([&, r, c] {
        ZeroStagingCall z;
        z.kind = cs.kind;
        z.rank = r;
        z.nranks = n;
        z.root = cs.root;
        z.bytes = b;
        z.elem = elem;
        z.align_elems = coll::shard_align_elems(elem);
        z.in = ins.data();
        z.out = outs.data();
        z.words = word_ptrs.data();
        z.call = ++calls[r][c];
        z.tag = 7;
        z.pairs = pairs;
        ReduceOp op{};
        op.kind = cs.op;
        op.nranks = n;
        const atom::WaitGuard guard{&abort, nullptr, 30.0, nullptr};
        Status s = Status::ok;
        switch (cs.mode) {
          case Mode::plain: s = zero_staging_call(atom::HostAtom(cs.type, op, guard), z, c, ctas); break;
          case Mode::fans: s = zero_staging_call(FanAtom(cs.type, op, guard), z, c, ctas); break;
          case Mode::copies: {
            const atom::HostAtom atom(cs.type, op, guard);
            s = zero_staging_barrier(atom, z, c, 2 * z.call - 1);
            if (s == Status::ok)
              zero_staging_copies(z, [](char* dst, const char* src, u64 bytes) { std::memcpy(dst, src, bytes); });
            if (s == Status::ok) s = zero_staging_barrier(atom, z, c, 2 * z.call);
            break;
          }
        }
        if (s != Status::ok) failures.fetch_add(1);
      });
    }
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures.load() == 0);

  // The reference, from the inputs as they were.
  for (int r = 0; r < n; ++r) {
    if (!outs[r]) continue;
    const char* got = outs[r];
    const u64 rb = static_cast<u64>(r) * b;
    bool same = true;
    u64 bad = 0;
    const auto folds = [&](u64 offset_elems) {
      for (u64 i = 0; i < cs.count && same; ++i) {
        const T want = fold<T>(cs.op, before, offset_elems, i);
        same = std::memcmp(&want, got + i * elem, elem) == 0;
        bad = i;
      }
    };
    const auto blocks = [&](auto&& source) {
      for (int p = 0; p < n && same; ++p) {
        same = std::memcmp(got + p * b, source(p), b) == 0;
        bad = static_cast<u64>(p);
      }
    };
    switch (cs.kind) {
      case Kind::all_reduce:
      case Kind::reduce: folds(0); break;
      case Kind::reduce_scatter: folds(static_cast<u64>(r) * cs.count); break;
      case Kind::all_gather:
      case Kind::gather: blocks([&](int p) { return before[p].data(); }); break;
      case Kind::all_to_all: blocks([&](int p) { return before[p].data() + rb; }); break;
      case Kind::broadcast: same = std::memcmp(got, before[cs.root].data(), b) == 0; break;
      case Kind::scatter: same = std::memcmp(got, before[cs.root].data() + rb, b) == 0; break;
    }
    INFO("kind " << static_cast<int>(cs.kind) << " type " << static_cast<int>(cs.type) << " count " << cs.count
                 << " ctas " << ctas << " in place " << cs.in_place << " mode " << static_cast<int>(cs.mode)
                 << " root " << cs.root << " mixed " << cs.mixed << " rank " << r << " at " << bad);
    REQUIRE(same);
  }
}

void run(const Case& cs, int n, std::vector<std::vector<u64>>& words, std::vector<std::vector<u64>>& calls,
         std::mt19937_64& rng) {
  switch (cs.type) {
    case DataType::int32: return run_case<std::int32_t>(cs, n, words, calls, rng);
    case DataType::uint8: return run_case<std::uint8_t>(cs, n, words, calls, rng);
    case DataType::f32: return run_case<float>(cs, n, words, calls, rng);
    case DataType::f64: return run_case<double>(cs, n, words, calls, rng);
    default: FAIL("type not covered here");
  }
}

}  // namespace

TEST_CASE("zero-staging calls in sequence give every collective's output", "[zero_staging]") {
  for (int n : {2, 3, 4, 8}) {
    std::mt19937_64 rng(0x5eed + n);
    std::vector<std::vector<u64>> words(n, std::vector<u64>(kZeroStagingWords, 0));
    std::vector<std::vector<u64>> calls(n, std::vector<u64>(kZeroStagingMaxCtas, 0));
    const Kind kinds[] = {Kind::all_reduce, Kind::all_gather, Kind::reduce_scatter, Kind::all_to_all,
                          Kind::broadcast,  Kind::reduce,     Kind::gather,         Kind::scatter};
    const DataType types[] = {DataType::f32, DataType::int32, DataType::uint8, DataType::f64};
    const RedOpKind ops[] = {RedOpKind::sum, RedOpKind::max, RedOpKind::min};
    // Counts around the CTAs' shares and the Atom's steps: empty shares, odd tails, several steps
    // (the last: shares of several kZeroStagingStep steps where the CTAs are few or elements wide).
    const u64 counts[] = {1, 3, 17, 1000, 4099, 70001, 300007};
    int i = 0;
    for (u64 count : counts) {
      for (Kind k : kinds) {
        const DataType t = types[i % 4];
        const RedOpKind op = t == DataType::uint8 || t == DataType::int32 ? RedOpKind::sum : ops[i % 3];
        const int ctas = 1 + (i * 5) % 7;
        const bool in_place = i % 3 == 1;
        // The modes take turns over the same words; the copies' only for collectives that only copy.
        Mode mode = (i / 4) % 2 == 0 ? Mode::fans : Mode::plain;
        if (zero_staging_copies_only(k) && i % 3 == 2) mode = Mode::copies;
        const int root = (i * 3) % n;
        run(Case{k, t, op, count, ctas, in_place, mode, root}, n, words, calls, rng);
        ++i;
      }
    }
  }
}

TEST_CASE("AlltoAll in place moves in pairs, on every rank or on some", "[zero_staging]") {
  for (int n : {2, 3, 5, 8}) {
    std::mt19937_64 rng(0xa2a + n);
    std::vector<std::vector<u64>> words(n, std::vector<u64>(kZeroStagingWords, 0));
    std::vector<std::vector<u64>> calls(n, std::vector<u64>(kZeroStagingMaxCtas, 0));
    const DataType types[] = {DataType::uint8, DataType::f32, DataType::int32, DataType::f64};
    // Blocks shorter than a half's 16 bytes, odd, and several steps long, alternating with
    // out-of-place calls on the same words.
    const u64 counts[] = {1, 7, 33, 1000, 20001};
    int i = 0;
    for (u64 count : counts) {
      for (int variant = 0; variant < 3; ++variant) {
        const DataType t = types[i % 4];
        const Mode mode = i % 2 == 0 ? Mode::fans : Mode::plain;
        const bool in_place = variant != 2;
        run(Case{Kind::all_to_all, t, RedOpKind::sum, count, 1 + i % 5, in_place, mode, 0, variant == 1}, n, words,
            calls, rng);
        ++i;
      }
    }
  }
}

TEST_CASE("a zero-staging barrier ends on abort when a peer never arrives", "[zero_staging]") {
  const int n = 2;
  std::vector<std::vector<u64>> words(n, std::vector<u64>(kZeroStagingWords, 0));
  std::vector<u64*> word_ptrs{words[0].data(), words[1].data()};
  std::vector<char> a(64), b(64);
  const char* ins[] = {a.data(), b.data()};
  char* outs[] = {a.data(), b.data()};
  ZeroStagingCall z;
  z.kind = Kind::all_gather;
  z.rank = 0;
  z.nranks = n;
  z.bytes = 32;
  z.in = ins;
  z.out = outs;
  z.words = word_ptrs.data();
  std::atomic<bool> abort{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    abort.store(true);
  });
  atom::HostAtom atom(DataType::uint8, ReduceOp{}, atom::WaitGuard{&abort, nullptr, 30.0, nullptr});
  const Status s = zero_staging_call(atom, z, 0, 1);
  stopper.join();
  CHECK(s != Status::ok);
}
