// The shared-memory all-gather (core/shm_gather.h): thousands of lockstep rounds whose records
// differ per rank and round, with ranks that run ahead and fall behind at random, so that a rank
// writes a slot while a slower peer still reads the other; a rank that stops taking part ends its
// peers' waits at the timeout, and a stop request ends them at once. Ranks are threads.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "core/shm_gather.h"
#include "test/catch.h"
#include "test/common/loopback.h"
#include "test/common/rank_threads.h"

namespace {

using purlin::Bootstrap;
using purlin::ShmGather;
using purlin::Status;
using purlin::UniqueId;
using Clock = std::chrono::steady_clock;
using rank_threads::Checker;

// Rank r's record of round k: 40 bytes, none of them zero, different for every (r, k).
constexpr std::size_t kRecord = 40;
void record(int r, std::uint64_t k, unsigned char* out) {
  std::uint64_t x = 0x9e3779b97f4a7c15ull * (k * 1315423911ull + static_cast<std::uint64_t>(r) + 1);
  for (std::size_t i = 0; i < kRecord; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<unsigned char>((x >> 56) | 1);
  }
}

// Creates the bootstrap and the gather of rank r on `id`; null on failure (recorded in c).
std::unique_ptr<ShmGather> setup(const UniqueId& id, int r, int n, double timeout_s, Checker& c,
                                 std::unique_ptr<Bootstrap>* boot) {
  c.expect(Bootstrap::create(id, r, n, nullptr, boot) == Status::ok, "bootstrap");
  if (!*boot) return nullptr;
  std::unique_ptr<ShmGather> g;
  c.expect(ShmGather::create(**boot, kRecord, timeout_s, &g) == Status::ok, "create");
  return g;
}

// Checks that all[] holds every rank's record of round k; `where` names the round in the message.
void expect_records(Checker& c, int r, int n, std::uint64_t k, const std::vector<unsigned char>& all,
                    const std::string& where) {
  std::vector<unsigned char> want(kRecord);
  for (int p = 0; p < n; ++p) {
    record(p, k, want.data());
    c.expect(std::memcmp(all.data() + p * kRecord, want.data(), kRecord) == 0,
             "rank " + std::to_string(r) + " " + where + ": rank " + std::to_string(p) + "'s record differs");
  }
}

}  // namespace

TEST_CASE("shm_gather: every rank reads every rank's record of every round", "[core][shm_gather]") {
  loopback::use();
  for (int n : {1, 2, 5}) {
    UniqueId id;
    REQUIRE(purlin::make_unique_id(&id) == Status::ok);
    Checker c;
    const std::uint64_t rounds = 3000;
    rank_threads::run(n, [&](int r) {
      std::unique_ptr<Bootstrap> boot;
      std::unique_ptr<ShmGather> g = setup(id, r, n, 30, c, &boot);
      if (!g) return;
      std::mt19937 rng(static_cast<unsigned>(r * 7919 + n));
      std::vector<unsigned char> mine(kRecord), all(kRecord * n);
      for (std::uint64_t k = 0; k < rounds; ++k) {
        // Now and then a rank lingers, so that its peers run ahead into the round's other slot.
        if (rng() % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        record(r, k, mine.data());
        std::memset(all.data(), 0, all.size());
        if (g->all_gather(mine.data(), all.data(), {}) != Status::ok) {
          c.expect(false, "round " + std::to_string(k) + " failed on rank " + std::to_string(r));
          return;
        }
        expect_records(c, r, n, k, all, "round " + std::to_string(k));
      }
      c.expect(g->rounds() == rounds, "round count");
    });
    INFO("n = " << n << ": " << c.first);
    CHECK(c.first.empty());
  }
}

TEST_CASE("shm_gather: a rank that stops taking part ends its peers' round at the timeout", "[core][shm_gather]") {
  loopback::use();
  const int n = 3;
  UniqueId id;
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  Checker c;
  std::vector<double> waited(n, 0);
  std::vector<Status> second(n, Status::ok);
  std::atomic<int> left{0};
  rank_threads::run(n, [&](int r) {
    std::unique_ptr<Bootstrap> boot;
    std::unique_ptr<ShmGather> g = setup(id, r, n, 0.5, c, &boot);
    if (!g) return;
    std::vector<unsigned char> mine(kRecord), all(kRecord * n);
    record(r, 0, mine.data());
    c.expect(g->all_gather(mine.data(), all.data(), {}) == Status::ok, "first round");
    if (r == n - 1) {
      // Leaves after one round; the bootstrap stays up until the others are done.
      left.fetch_add(1);
      while (left.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    const Clock::time_point t0 = Clock::now();
    const Status s = g->all_gather(mine.data(), all.data(), {});
    waited[r] = std::chrono::duration<double>(Clock::now() - t0).count();
    c.expect(s == Status::remote_error, "the round without rank 2 answers remote_error");
    // The ranks no longer count rounds alike: the next round fails at once.
    const Clock::time_point t1 = Clock::now();
    second[r] = g->all_gather(mine.data(), all.data(), {});
    c.expect(std::chrono::duration<double>(Clock::now() - t1).count() < 0.1, "a broken gather fails at once");
    left.fetch_add(1);
    while (left.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  INFO(c.first);
  CHECK(c.first.empty());
  for (int r = 0; r < n - 1; ++r) {
    CHECK(waited[r] >= 0.45);
    CHECK(waited[r] < 5.0);
    CHECK(second[r] != Status::ok);
  }
}

TEST_CASE("shm_gather: a stop request ends a waiting round", "[core][shm_gather]") {
  loopback::use();
  const int n = 2;
  UniqueId id;
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  Checker c;
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  double waited = 0;
  rank_threads::run(n, [&](int r) {
    std::unique_ptr<Bootstrap> boot;
    std::unique_ptr<ShmGather> g = setup(id, r, n, 60, c, &boot);
    if (!g) return;
    if (r == 0) {
      std::vector<unsigned char> mine(kRecord, 1), all(kRecord * n);
      const Clock::time_point t0 = Clock::now();
      c.expect(g->all_gather(mine.data(), all.data(), [&] { return stop.load(); }) == Status::remote_error,
               "a stopped round answers remote_error");
      waited = std::chrono::duration<double>(Clock::now() - t0).count();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      stop.store(true);
    }
    done.fetch_add(1);
    while (done.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  INFO(c.first);
  CHECK(c.first.empty());
  CHECK(waited >= 0.15);
  CHECK(waited < 5.0);
}

TEST_CASE("shm_gather: calls the ranks run alike, some in rounds and some passed, never fail", "[core][shm_gather]") {
  loopback::use();
  const int n = 4;
  const std::uint64_t calls = 3000;
  UniqueId id;
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  Checker c;
  rank_threads::run(n, [&](int r) {
    std::unique_ptr<Bootstrap> boot;
    std::unique_ptr<ShmGather> g = setup(id, r, n, 30, c, &boot);
    if (!g) return;
    std::mt19937 alike(12345);  // which calls meet: the same on every rank
    std::mt19937 rng(static_cast<unsigned>(r * 104729 + 3));
    std::vector<unsigned char> mine(kRecord), all(kRecord * n);
    std::uint64_t rounds = 0;
    for (std::uint64_t call = 1; call <= calls; ++call) {
      // Ranks linger at random, so that a peer passes calls and posts the next round while this rank
      // still waits in an earlier one.
      if (rng() % 89 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      if (alike() % 5 < 2) {
        g->pass(call);
        continue;
      }
      record(r, rounds, mine.data());
      const Status s = g->all_gather(mine.data(), all.data(), {}, call);
      if (s != Status::ok) {
        c.expect(false, "call " + std::to_string(call) + " failed on rank " + std::to_string(r));
        return;
      }
      expect_records(c, r, n, rounds, all, "call " + std::to_string(call));
      ++rounds;
    }
    c.expect(g->rounds() == rounds, "round count");
  });
  INFO(c.first);
  CHECK(c.first.empty());
}

TEST_CASE("shm_gather: a round whose call a peer ran another way fails at once with invalid_usage",
          "[core][shm_gather]") {
  loopback::use();
  const int n = 3;
  UniqueId id;
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  Checker c;
  std::vector<double> waited(n, 0);
  std::vector<Status> got(n, Status::ok);
  std::vector<std::string> why(n);
  std::atomic<int> done{0};
  rank_threads::run(n, [&](int r) {
    std::unique_ptr<Bootstrap> boot;
    // A timeout far beyond the limit below: only the passed call can end the round in time.
    std::unique_ptr<ShmGather> g = setup(id, r, n, 30, c, &boot);
    if (!g) return;
    std::vector<unsigned char> mine(kRecord), all(kRecord * n);
    for (std::uint64_t call = 1; call <= 2; ++call) {
      record(r, call, mine.data());
      c.expect(g->all_gather(mine.data(), all.data(), {}, call) == Status::ok, "the calls before the mismatch");
    }
    const Clock::time_point t0 = Clock::now();
    if (r == 0) {
      // Rank 0 runs call 3 without a round, as though its arguments took another path, and meets
      // its peers at call 4: their records name call 3.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      g->pass(3);
      got[r] = g->all_gather(mine.data(), all.data(), {}, 4);
    } else {
      got[r] = g->all_gather(mine.data(), all.data(), {}, 3);
    }
    waited[r] = std::chrono::duration<double>(Clock::now() - t0).count();
    why[r] = purlin::last_error();
    c.expect(g->all_gather(mine.data(), all.data(), {}, 5) != Status::ok, "a failed gather fails again");
    done.fetch_add(1);
    while (done.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  INFO(c.first);
  CHECK(c.first.empty());
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(got[r] == Status::invalid_usage);
    CHECK(waited[r] < 2.0);
    CHECK(why[r].find("different arguments") != std::string::npos);
  }
}
