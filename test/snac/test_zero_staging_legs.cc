// Zero-staged Send/Recv on the host: the board on which the two ends of a message agree without
// waiting for each other (snac/executors/pair_slots.h), the lists by which an owner knows what the
// other end still holds, and the legs protocol (snac/protocol/zero_staging.h) on the host Atom, every
// rank a thread of this process and every CTA a thread of its rank.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "atom/host/host_atom.h"
#include "snac/executors/pair_slots.h"
#include "snac/protocol/zero_staging.h"
#include "test/catch.h"

namespace {

using namespace purlin;
using namespace purlin::snac;
using u64 = std::uint64_t;

// A board in this process's memory, zero-filled, for n ranks.
std::vector<u64> board_for(int n) { return std::vector<u64>(PairSlots::bytes_for(n) / sizeof(u64) + 8, 0); }

void* aligned(std::vector<u64>& b) {
  auto p = reinterpret_cast<std::uintptr_t>(b.data());
  return reinterpret_cast<void*>((p + 63) / 64 * 64);
}

// What the end of message q on `side` of the pair (sender, receiver) offers, recognisably.
u64 stamp(int sender, int receiver, int side, u64 q) {
  return (static_cast<u64>(sender) << 48) ^ (static_cast<u64>(receiver) << 40) ^ (static_cast<u64>(side) << 36) ^ q;
}

}  // namespace

TEST_CASE("exactly one end of each message comes first, and the other reads its offer", "[zero_staging_legs]") {
  // Two ranks send each other many more messages than a ring holds, at racing paces: every message's
  // two ends must agree on who came first, and the second must read the first one's offer.
  for (int trial = 0; trial < 4; ++trial) {
    const int n = 2 + trial % 2;  // 2 or 3 ranks, every rank sending to and receiving from every other
    std::vector<u64> mem = board_for(n);
    const u64 messages = 20 * PairSlots::kDepth + 7;
    // firsts[sender][receiver][q][side]
    std::vector<std::vector<std::uint8_t>> firsts(static_cast<std::size_t>(n * n),
                                                   std::vector<std::uint8_t>(2 * messages, 0));
    std::atomic<int> bad{0};
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        PairSlots slots(aligned(mem), r, n, 30.0);
        std::mt19937_64 rng(0xb0a4d + r * 7 + trial);
        for (u64 q = 0; q < messages; ++q) {
          for (int k = 1; k < n; ++k) {
            for (int side : {1, 0}) {
              const int peer = (r + k) % n;
              const int sender = side == 0 ? r : peer, receiver = side == 0 ? peer : r;
              if (rng() % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
              bool first = false, prepared = false;
              PairOffer other;
              u64 got_q = 0;
              const Status s = slots.meet(
                  peer, side, [&](PairOffer* o, u64 m) { o->ptr = stamp(sender, receiver, side, m); }, {}, &first, &other,
                  &prepared, &got_q);
              if (s != Status::ok || got_q != q) {
                bad.fetch_add(1);
                continue;
              }
              firsts[static_cast<std::size_t>(sender * n + receiver)][2 * q + static_cast<u64>(side)] = first ? 1 : 2;
              if (!first && other.ptr != stamp(sender, receiver, 1 - side, q)) bad.fetch_add(1);
            }
          }
        }
      });
    }
    for (auto& t : ranks) t.join();
    REQUIRE(bad.load() == 0);
    int firsts_seen[2] = {0, 0};
    for (int s = 0; s < n; ++s) {
      for (int d = 0; d < n; ++d) {
        if (s == d) continue;
        const auto& f = firsts[static_cast<std::size_t>(s * n + d)];
        for (u64 q = 0; q < messages; ++q) {
          INFO("sender " << s << " receiver " << d << " message " << q);
          REQUIRE(((f[2 * q] == 1) != (f[2 * q + 1] == 1)));
          ++firsts_seen[f[2 * q] == 1 ? 0 : 1];
        }
      }
    }
    // Both sides came first at times (the race is real, not one end always ahead).
    CHECK(firsts_seen[0] > 0);
    CHECK(firsts_seen[1] > 0);
  }
}

TEST_CASE("an end a ring ahead waits for the other, and fails after its timeout", "[zero_staging_legs]") {
  std::vector<u64> mem = board_for(2);
  PairSlots sender(aligned(mem), 0, 2, 0.2);
  for (u64 q = 0; q < PairSlots::kDepth; ++q) {
    bool first = false, prepared = false;
    PairOffer other;
    REQUIRE(sender.meet(1, 0, [](PairOffer*, u64) {}, {}, &first, &other, &prepared) == Status::ok);
    CHECK(first);
  }
  bool first = false, prepared = false;
  PairOffer other;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(sender.meet(1, 0, [](PairOffer*, u64) {}, {}, &first, &other, &prepared) == Status::remote_error);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= 0.15);
  CHECK_FALSE(prepared);
  // The receiver catches up: the sender's next message then meets at once.
  PairSlots receiver(aligned(mem), 1, 2, 5.0);
  for (u64 q = 0; q < PairSlots::kDepth; ++q) {
    REQUIRE(receiver.meet(0, 1, [](PairOffer*, u64) {}, {}, &first, &other, &prepared) == Status::ok);
    CHECK_FALSE(first);
  }
  REQUIRE(sender.meet(1, 0, [](PairOffer*, u64) {}, {}, &first, &other, &prepared) == Status::ok);
  CHECK(first);
}

TEST_CASE("the owner's and the holder's lists of held allocations agree", "[zero_staging_legs]") {
  std::mt19937_64 rng(0x4e1d);
  PairHeld owner, holder;
  std::vector<u64> recent;  // newest first, by hand
  for (int i = 0; i < 5000; ++i) {
    const u64 id = 1 + rng() % 9;
    const bool want_held = owner.has(id);
    u64 ev_owner = 0, ev_holder = 0;
    CHECK(owner.touch(id, &ev_owner) == want_held);
    CHECK(holder.touch(id, &ev_holder) == want_held);
    CHECK(ev_owner == ev_holder);
    // The reference: the last kHeld distinct ids used.
    bool was = false;
    for (std::size_t k = 0; k < recent.size(); ++k)
      if (recent[k] == id) {
        recent.erase(recent.begin() + static_cast<std::ptrdiff_t>(k));
        was = true;
        break;
      }
    CHECK(was == want_held);
    recent.insert(recent.begin(), id);
    u64 dropped = 0;
    if (recent.size() > PairHeld::kHeld) {
      dropped = recent.back();
      recent.pop_back();
    }
    CHECK(ev_owner == dropped);
    for (u64 k = 1; k <= 9; ++k) {
      bool in = false;
      for (u64 r : recent) in = in || r == k;
      CHECK(owner.has(k) == in);
    }
  }
}

namespace {

// One round: message (s, d) of `bytes[s][d]` bytes where nonzero. Each rank meets its messages' other
// ends on the board (receives first, as the executor does), the end that came first deciding at
// random whether the message goes in place; the legs then run on the host Atom in `shares` shares, a
// CTA thread per share (one where the rank only waits) or, at random where the rank moves, in the
// copy engines' two phases (*phased counts those), and the staged ones are copied here afterwards.
void run_round(int n, int shares, const std::vector<std::vector<u64>>& bytes, std::vector<PairSlots>& slots,
               std::vector<std::vector<u64>>& words, std::vector<std::vector<u64>>& counters, std::mt19937_64& rng,
               std::atomic<int>& phased) {
  // Rank s's message to d lies at in[s] + d * kSlot; rank d receives it at out[d] + s * kSlot.
  constexpr u64 kSlot = 9000;
  std::vector<std::vector<char>> in(static_cast<std::size_t>(n), std::vector<char>(kSlot * static_cast<u64>(n)));
  std::vector<std::vector<char>> out(static_cast<std::size_t>(n), std::vector<char>(kSlot * static_cast<u64>(n), '\x5a'));
  for (auto& b : in)
    for (char& c : b) c = static_cast<char>(rng());
  std::vector<u64*> word_ptrs;
  for (auto& w : words) word_ptrs.push_back(w.data());
  std::vector<u64> seeds(static_cast<std::size_t>(n));
  for (u64& s : seeds) s = rng();
  std::atomic<int> failures{0};
  std::vector<std::vector<std::uint8_t>> staged(static_cast<std::size_t>(n), std::vector<std::uint8_t>(2 * static_cast<std::size_t>(n), 0));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      std::mt19937_64 mine(seeds[static_cast<std::size_t>(r)]);
      std::vector<ZeroStagingLeg> legs;
      for (int side : {1, 0}) {
        for (int k = 1; k < n; ++k) {
          const int p = (r + k) % n;
          const int s = side == 0 ? r : p, d = side == 0 ? p : r;
          const u64 b = bytes[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)];
          if (!b) continue;
          char* buf = side == 0 ? in[static_cast<std::size_t>(r)].data() + static_cast<u64>(p) * kSlot
                                : out[static_cast<std::size_t>(r)].data() + static_cast<u64>(p) * kSlot;
          const bool in_place = mine() % 4 != 0;
          bool first = false, prepared = false;
          PairOffer other;
          const Status st = slots[static_cast<std::size_t>(r)].meet(
              p, side,
              [&](PairOffer* o, u64) {
                o->bytes = b;
                o->ptr = reinterpret_cast<u64>(buf);
                o->direct = in_place ? 1 : 0;
              },
              {}, &first, &other, &prepared);
          if (st != Status::ok) {
            failures.fetch_add(1);
            continue;
          }
          const bool direct = first ? in_place : other.direct != 0;
          if (!direct) {
            staged[static_cast<std::size_t>(r)][static_cast<std::size_t>(2 * p + side)] = 1;
            continue;
          }
          ZeroStagingLeg l;
          l.peer = static_cast<std::uint8_t>(p);
          l.side = static_cast<std::uint8_t>(side);
          l.bytes = b;
          l.tag = static_cast<std::uint16_t>(b);
          l.role = first ? LegRole::wait : LegRole::move;
          char* theirs = first ? nullptr : reinterpret_cast<char*>(static_cast<std::uintptr_t>(other.ptr));
          l.dst = side == 0 ? theirs : buf;
          l.src = side == 0 ? buf : theirs;
          legs.push_back(l);
        }
      }
      // A CTA per share where this rank moves a message, else one (as the kernel launches); or, as
      // where the copy engines move, one CTA's arrival, the moved messages copied whole, one CTA's
      // end. The ends choose apart from each other.
      bool moves = false;
      for (const ZeroStagingLeg& l : legs) moves = moves || l.role == LegRole::move;
      const auto cta = [&](int c, ZeroStagingPhase phase) {
        ZeroStagingLegs z;
        z.rank = r;
        z.count = static_cast<int>(legs.size());
        z.shares = shares;
        z.phase = phase;
        z.legs = legs.data();
        z.words = word_ptrs.data();
        z.counters = counters[static_cast<std::size_t>(r)].data();
        std::atomic<bool> abort{false};
        const atom::HostAtom atom(DataType::uint8, ReduceOp{}, atom::WaitGuard{&abort, nullptr, 30.0, nullptr});
        if (zero_staging_legs_call(atom, z, c) != Status::ok) failures.fetch_add(1);
      };
      if (moves && mine() % 2 == 0) {
        cta(0, ZeroStagingPhase::arrive);
        for (const ZeroStagingLeg& l : legs)
          if (l.role == LegRole::move) std::memcpy(l.dst, l.src, l.bytes);
        cta(0, ZeroStagingPhase::leave);
        phased.fetch_add(1);
      } else {
        std::vector<std::thread> ctas_threads;
        for (int c = 0; c < (moves ? shares : 1); ++c) ctas_threads.emplace_back([&, c] { cta(c, ZeroStagingPhase::whole); });
        for (auto& t : ctas_threads) t.join();
      }
    });
  }
  for (auto& t : ranks) t.join();
  REQUIRE(failures.load() == 0);
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      const u64 b = bytes[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)];
      if (!b) continue;
      const bool at_sender = staged[static_cast<std::size_t>(s)][static_cast<std::size_t>(2 * d + 0)];
      const bool at_receiver = staged[static_cast<std::size_t>(d)][static_cast<std::size_t>(2 * s + 1)];
      INFO("sender " << s << " receiver " << d << " bytes " << b);
      REQUIRE(at_sender == at_receiver);
      const char* src = in[static_cast<std::size_t>(s)].data() + static_cast<u64>(d) * kSlot;
      char* dst = out[static_cast<std::size_t>(d)].data() + static_cast<u64>(s) * kSlot;
      if (at_sender) std::memcpy(dst, src, b);  // the staged path's part, done here
      REQUIRE(std::memcmp(dst, src, b) == 0);
      REQUIRE(dst[b] == '\x5a');  // nothing past the message
    }
  }
}

}  // namespace

TEST_CASE("rounds of messages in place give every receiver its message", "[zero_staging_legs]") {
  for (int n : {2, 3, 5}) {
    std::mt19937_64 rng(0x1e65 + n);
    std::vector<u64> mem = board_for(n);
    std::vector<PairSlots> slots;
    for (int r = 0; r < n; ++r) slots.emplace_back(aligned(mem), r, n, 30.0);
    std::vector<std::vector<u64>> words(static_cast<std::size_t>(n), std::vector<u64>(kZeroStagingLegWords, 0));
    std::vector<std::vector<u64>> counters(static_cast<std::size_t>(n), std::vector<u64>(kZeroStagingLegCounters, 0));
    // The shares stay the same within a communicator (the policy's), so they are fixed per n here.
    const int shares = 1 + n % 3;
    std::atomic<int> phased{0};
    for (int round = 0; round < 60; ++round) {
      std::vector<std::vector<u64>> bytes(static_cast<std::size_t>(n), std::vector<u64>(static_cast<std::size_t>(n), 0));
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d)
          if (s != d && rng() % 3 != 0) bytes[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)] = 1 + rng() % 8999;
      run_round(n, shares, bytes, slots, words, counters, rng, phased);
    }
    CHECK(phased.load() > 10);  // the copy engines' form ran beside the CTAs' often
  }
}
