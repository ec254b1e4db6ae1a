// Zero-staging's protocol (snac/protocol/zero_staging.h) on the host Atom: every rank a thread of
// this process with its buffers on the heap (so every rank can reach every other's, as the GPU
// datapath maps them), every CTA a thread of its rank. Ranks run a sequence of calls back to back
// with no barrier between them: collectives, sizes (odd byte counts and a tail shorter than a share
// included), CTA counts and in-place buffers change from call to call, and every output is compared
// with a reference computed here from the inputs, element by element in rank order.
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

struct Case {
  Kind kind;
  DataType type;
  RedOpKind op;
  u64 count;  // AllReduce: elements of the buffer; others: of one block
  int ctas;
  bool in_place;
  bool fans;  // run on FanAtom: whole shares into several destinations at once
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

template <class T>
void run_case(const Case& cs, int n, std::vector<std::vector<u64>>& words, std::vector<std::vector<u64>>& calls,
              std::mt19937_64& rng) {
  const u64 elem = sizeof(T), b = cs.count * elem;
  u64 in_bytes = 0, out_bytes = 0;
  switch (cs.kind) {
    case Kind::all_reduce: in_bytes = out_bytes = b; break;
    case Kind::all_gather: in_bytes = b, out_bytes = b * n; break;
    case Kind::reduce_scatter: in_bytes = b * n, out_bytes = b; break;
    case Kind::all_to_all: in_bytes = out_bytes = b * n; break;
  }
  std::vector<std::vector<char>> in(n), out(n), before(n);
  for (int r = 0; r < n; ++r) {
    out[r].assign(out_bytes, static_cast<char>(0x5a));  // poisoned
    if (cs.in_place) {
      // AllReduce: the same buffer; AllGather: this rank's block of the output; ReduceScatter: the
      // output is this rank's block of the input.
      if (cs.kind == Kind::reduce_scatter) out[r].assign(in_bytes, 0);
      fill<T>(out[r], rng);
      before[r] = out[r];
    } else {
      in[r].assign(in_bytes, 0);
      fill<T>(in[r], rng);
      before[r] = in[r];
    }
  }
  std::vector<const char*> ins(n);
  std::vector<char*> outs(n), fold_outs(n);
  std::vector<u64*> word_ptrs(n);
  for (int r = 0; r < n; ++r) {
    const u64 rb = static_cast<u64>(r) * b;
    if (!cs.in_place) ins[r] = in[r].data();
    else if (cs.kind == Kind::all_gather) ins[r] = out[r].data() + rb;
    else ins[r] = out[r].data();
    outs[r] = cs.kind == Kind::reduce_scatter && cs.in_place ? out[r].data() + rb : out[r].data();
    word_ptrs[r] = words[r].data();
  }
  if (cs.in_place && cs.kind == Kind::all_gather)
    for (int r = 0; r < n; ++r) before[r].assign(out[r].begin() + r * b, out[r].begin() + (r + 1) * b);

  std::atomic<bool> abort{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < cs.ctas; ++c) {
      threads.emplace_back([&, r, c] {
        ZeroStagingCall z;
        z.kind = cs.kind;
        z.rank = r;
        z.nranks = n;
        z.bytes = b;
        z.elem = elem;
        z.align_elems = coll::shard_align_elems(elem);
        z.in = ins.data();
        z.out = outs.data();
        z.words = word_ptrs.data();
        z.call = ++calls[r][c];
        z.tag = 7;
        ReduceOp op{};
        op.kind = cs.op;
        op.nranks = n;
        const atom::WaitGuard guard{&abort, nullptr, 30.0, nullptr};
        const Status s = cs.fans ? zero_staging_call(FanAtom(cs.type, op, guard), z, c, cs.ctas)
                                 : zero_staging_call(atom::HostAtom(cs.type, op, guard), z, c, cs.ctas);
        if (s != Status::ok) failures.fetch_add(1);
      });
    }
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures.load() == 0);

  // The reference, from the inputs as they were.
  for (int r = 0; r < n; ++r) {
    const char* got = outs[r];
    bool same = true;
    u64 bad = 0;
    switch (cs.kind) {
      case Kind::all_reduce:
        for (u64 i = 0; i < cs.count && same; ++i) {
          const T want = fold<T>(cs.op, before, 0, i);
          same = std::memcmp(&want, got + i * elem, elem) == 0;
          bad = i;
        }
        break;
      case Kind::reduce_scatter:
        for (u64 i = 0; i < cs.count && same; ++i) {
          const T want = fold<T>(cs.op, before, static_cast<u64>(r) * cs.count, i);
          same = std::memcmp(&want, got + i * elem, elem) == 0;
          bad = i;
        }
        break;
      case Kind::all_gather:
        for (int p = 0; p < n && same; ++p) {
          same = std::memcmp(got + p * b, before[p].data(), b) == 0;
          bad = static_cast<u64>(p);
        }
        break;
      case Kind::all_to_all:
        for (int p = 0; p < n && same; ++p) {
          same = std::memcmp(got + p * b, before[p].data() + r * b, b) == 0;
          bad = static_cast<u64>(p);
        }
        break;
    }
    INFO("kind " << static_cast<int>(cs.kind) << " type " << static_cast<int>(cs.type) << " count " << cs.count
                 << " ctas " << cs.ctas << " in place " << cs.in_place << " fans " << cs.fans << " rank " << r
                 << " at " << bad);
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
    const Kind kinds[] = {Kind::all_reduce, Kind::all_gather, Kind::reduce_scatter, Kind::all_to_all};
    const DataType types[] = {DataType::f32, DataType::int32, DataType::uint8, DataType::f64};
    const RedOpKind ops[] = {RedOpKind::sum, RedOpKind::max, RedOpKind::min};
    // Counts around the CTAs' shares and the Atom's steps: empty shares, odd tails, several steps.
    const u64 counts[] = {1, 3, 17, 1000, 4099, 70001};
    int i = 0;
    for (u64 count : counts) {
      for (Kind k : kinds) {
        const DataType t = types[i % 4];
        const RedOpKind op = t == DataType::uint8 || t == DataType::int32 ? RedOpKind::sum : ops[i % 3];
        const int ctas = 1 + (i * 5) % 7;
        const bool in_place = (i % 3 == 1) && k != Kind::all_to_all;
        // Calls of the plain and the fanning Atom alternate, in both orders, over the same words.
        const bool fans = (i / 4) % 2 == 0;
        run(Case{k, t, op, count, ctas, in_place, fans}, n, words, calls, rng);
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
