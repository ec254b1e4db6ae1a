// The TCP bootstrap: rendezvous, the mesh and its operations, hostile traffic at the root, abort
// and peer loss. Ranks run as threads of this process. Catch2 assertions are made on the main
// thread only: rank threads record their first failure in a Checker.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "core/config.h"
#include "core/socket.h"
#include "core/topology.h"
#include "test/catch.h"
#include "test/common/loopback.h"
#include "test/common/rank_threads.h"

extern char** environ;

namespace {

using purlin::Bootstrap;
using purlin::Status;
using purlin::UniqueId;
using Clock = std::chrono::steady_clock;
using rank_threads::Checker;

// Seeded, never-zero contents that differ per rank and per use.
std::vector<std::uint8_t> pattern(int rank, std::size_t bytes, std::uint64_t salt) {
  std::vector<std::uint8_t> v(bytes);
  std::uint64_t x = 0x9e3779b97f4a7c15ull * (salt * 131 + static_cast<std::uint64_t>(rank) + 1);
  for (std::size_t i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<std::uint8_t>((x >> 56) | 1);
  }
  return v;
}

std::string str(Status s) { return std::to_string(static_cast<int>(s)); }

// create + all_gather (small, in place, large) + barrier + a send/recv ring in which every rank
// sends before it receives (messages larger than the kernel's socket buffers).
void exercise(const UniqueId& id, int rank, int n, std::uint64_t salt, Checker& c) {
  std::unique_ptr<Bootstrap> b;
  Status s = Bootstrap::create(id, rank, n, nullptr, &b);
  c.expect(s == Status::ok, "create failed: " + str(s));
  if (s != Status::ok) return;
  c.expect(b->rank() == rank && b->nranks() == n, "rank/nranks");

  for (std::size_t bytes : {std::size_t(37), std::size_t(256) << 10}) {
    auto mine = pattern(rank, bytes, salt);
    std::vector<std::uint8_t> all(bytes * n, 0xee);
    c.expect(b->all_gather(mine.data(), bytes, all.data()) == Status::ok, "all_gather");
    for (int q = 0; q < n; ++q) {
      c.expect(std::memcmp(all.data() + q * bytes, pattern(q, bytes, salt).data(), bytes) == 0,
               "all_gather slot " + std::to_string(q) + " of " + std::to_string(bytes) + " bytes");
    }
  }
  {
    const std::size_t bytes = 24;
    std::vector<std::uint8_t> all(bytes * n, 0xee);
    auto mine = pattern(rank, bytes, salt + 1);
    std::memcpy(all.data() + rank * bytes, mine.data(), bytes);
    c.expect(b->all_gather(all.data() + rank * bytes, bytes, all.data()) == Status::ok, "in-place all_gather");
    for (int q = 0; q < n; ++q) {
      c.expect(std::memcmp(all.data() + q * bytes, pattern(q, bytes, salt + 1).data(), bytes) == 0, "in-place slot");
    }
  }
  c.expect(b->barrier() == Status::ok, "barrier");

  const int next = (rank + 1) % n;
  const int prev = (rank + n - 1) % n;
  for (std::size_t bytes : {std::size_t(0), std::size_t(100), std::size_t(4) << 20}) {
    auto out = pattern(rank, bytes, salt + 2);
    c.expect(b->send(next, out.data(), bytes) == Status::ok, "ring send");
    std::vector<std::uint8_t> in(bytes, 0);
    c.expect(b->recv(prev, in.data(), bytes) == Status::ok, "ring recv");
    c.expect(in == pattern(prev, bytes, salt + 2), "ring contents");
  }
  // Checked before the last barrier: once it returns, peers may already be gone.
  c.expect(!b->peer_lost(), "no peer lost");
  c.expect(b->barrier() == Status::ok, "final barrier");
}

// Connects without retrying (the root may have finished); -1 on failure.
int raw_connect(const purlin::net::Address& to) {
  int fd = ::socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, to.sa(), to.len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void raw_send(int fd, const void* data, std::size_t bytes) {
  (void)::send(fd, data, bytes, MSG_NOSIGNAL);
}

// The root hello as core/bootstrap/wire.h lays it out: magic, secret, kind ("ROOT"), rank, nranks,
// address length, then the address.
std::vector<std::uint8_t> root_hello(std::uint64_t secret, std::uint32_t rank, std::uint32_t nranks,
                                     std::uint32_t addr_len_field, std::size_t addr_bytes_sent) {
  std::vector<std::uint8_t> v(32 + addr_bytes_sent, 0);
  std::uint64_t magic = purlin::kUniqueIdMagic;
  std::uint32_t kind = 0x544f4f52;
  std::memcpy(&v[0], &magic, 8);
  std::memcpy(&v[8], &secret, 8);
  std::memcpy(&v[16], &kind, 4);
  std::memcpy(&v[20], &rank, 4);
  std::memcpy(&v[24], &nranks, 4);
  std::memcpy(&v[28], &addr_len_field, 4);
  if (addr_bytes_sent >= sizeof(sockaddr_in)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(9);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::memcpy(&v[32], &a, sizeof(a));
  }
  return v;
}

purlin::net::Address root_of(const UniqueId& id) {
  purlin::net::Address a;
  REQUIRE(purlin::net::Address::from_bytes(id.addr, id.addr_len, &a));
  return a;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TEST_CASE("unique ids carry magic, a fresh secret and a reachable root", "[core][bootstrap]") {
  REQUIRE(purlin::config().comm_id.empty());  // these tests exercise the path without NCCL_COMM_ID
  UniqueId a{}, b{};
  REQUIRE(purlin::make_unique_id(&a) == Status::ok);
  REQUIRE(purlin::make_unique_id(&b) == Status::ok);
  CHECK(a.magic == purlin::kUniqueIdMagic);
  CHECK(a.secret != b.secret);
  CHECK((a.addr_len == sizeof(sockaddr_in) || a.addr_len == sizeof(sockaddr_in6)));
  auto ra = root_of(a);
  auto rb = root_of(b);
  CHECK_FALSE(ra.is_any());
  CHECK(ra.port() != rb.port());
  // Both ids are left unused: their root services end at their deadline or at exit.
}

TEST_CASE("bootstrap: create, all_gather, barrier and a send/recv ring", "[core][bootstrap]") {
  const int n = GENERATE(1, 2, 3, 4, 8);
  CAPTURE(n);
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  Checker c;
  rank_threads::run(n, [&](int r) { exercise(id, r, n, 100 + n, c); });
  INFO(c.first);
  CHECK(c.first.empty());
}

TEST_CASE("bootstrap: two ids in use at once do not mix", "[core][bootstrap]") {
  UniqueId ids[2];
  REQUIRE(purlin::make_unique_id(&ids[0]) == Status::ok);
  REQUIRE(purlin::make_unique_id(&ids[1]) == Status::ok);
  const int sizes[2] = {3, 2};
  Checker c;
  rank_threads::run(sizes[0] + sizes[1], [&](int t) {
    int which = t < sizes[0] ? 0 : 1;
    int rank = which == 0 ? t : t - sizes[0];
    exercise(ids[which], rank, sizes[which], 7 + which * 1000, c);
  });
  INFO(c.first);
  CHECK(c.first.empty());
}

// Every test runs on loopback (loopback::use in the tests' main, NCCL_SOCKET_IFNAME=lo in their
// meson definitions): while ranks are in the rendezvous, this process's listeners (the root
// service's, each rank's, and those of ids left unused before) are all bound to loopback.
TEST_CASE("bootstrap: every listener of a test is on loopback", "[core][bootstrap]") {
  REQUIRE(purlin::config().socket_ifname == "lo");
  const int n = 3;
  std::set<std::string> before;
  for (const loopback::Listener& l : loopback::listeners({::getpid()})) before.insert(l.text);
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  const std::uint16_t root_port = root_of(id).port();
  Checker c;
  std::vector<std::thread> ranks;
  for (int r = 1; r < n; ++r) ranks.emplace_back([&, r] { exercise(id, r, n, 11, c); });
  // Rank 0 comes last: until it arrives the root service and ranks 1..n-1 listen.
  std::vector<loopback::Listener> seen;
  const std::size_t want = n;  // the root service and every rank but rank 0
  std::size_t fresh = 0;
  const auto t0 = Clock::now();
  while (fresh < want && seconds_since(t0) < 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    seen = loopback::listeners({::getpid()});
    fresh = 0;
    for (const loopback::Listener& l : seen) fresh += before.count(l.text) == 0;
  }
  ranks.emplace_back([&] { exercise(id, 0, n, 11, c); });
  for (auto& t : ranks) t.join();
  INFO(c.first);
  CHECK(c.first.empty());
  CHECK(fresh == want);
  bool root_seen = false;
  for (const loopback::Listener& l : seen) {
    INFO("listener " << l.text);
    CHECK(l.on_loopback());
    root_seen = root_seen || l.port() == root_port;
  }
  CHECK(root_seen);
}

TEST_CASE("bootstrap: hostile connections to the root do not disturb the rendezvous", "[core][bootstrap]") {
  const int n = 4;
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  const auto root = root_of(id);
  Checker c;
  auto rank_main = [&](int r) { exercise(id, r, n, 55, c); };

  std::vector<std::thread> ranks;
  for (int r = 0; r < n - 1; ++r) ranks.emplace_back(rank_main, r);

  // Two threads, a few hundred connections of every bad kind; some stay open and silent.
  std::mutex silent_mu;
  std::vector<int> silent;
  std::atomic<int> attempts{0};
  auto flood = [&](int seed) {
    for (int i = 0; i < 150; ++i) {
      int fd = raw_connect(root);
      attempts.fetch_add(1);
      if (fd < 0) continue;
      switch ((i + seed) % 7) {
        case 0:  // empty
          break;
        case 1: {  // 7 bytes
          const char junk[7] = {'G', 'E', 'T', ' ', '/', ' ', 'H'};
          raw_send(fd, junk, sizeof(junk));
          break;
        }
        case 2: {  // wrong secret
          auto h = root_hello(id.secret ^ 0x5a5a, 1, n, sizeof(sockaddr_in), sizeof(sockaddr_in));
          raw_send(fd, h.data(), h.size());
          break;
        }
        case 3: {  // right secret, oversized address length
          auto h = root_hello(id.secret, 1, n, 1u << 30, 64);
          raw_send(fd, h.data(), h.size());
          break;
        }
        case 4: {  // right secret, rank out of range
          auto h = root_hello(id.secret, n + 3, n, sizeof(sockaddr_in), sizeof(sockaddr_in));
          raw_send(fd, h.data(), h.size());
          break;
        }
        case 5: {  // right secret, truncated address, then silence
          auto h = root_hello(id.secret, 2, n, sizeof(sockaddr_in), sizeof(sockaddr_in));
          raw_send(fd, h.data(), h.size() - 5);
          std::lock_guard<std::mutex> lock(silent_mu);
          silent.push_back(fd);
          fd = -1;
          break;
        }
        case 6: {  // connected and silent
          std::lock_guard<std::mutex> lock(silent_mu);
          silent.push_back(fd);
          fd = -1;
          break;
        }
      }
      if (fd >= 0) ::close(fd);
    }
  };
  std::thread f1(flood, 0);
  std::thread f2(flood, 3);
  // Ranks 0..2 have long checked in: claim their ranks again with the right secret.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  int duplicates_sent = 0;
  for (std::uint32_t r = 0; r < n - 1; ++r) {
    int fd = raw_connect(root);
    if (fd < 0) continue;
    auto h = root_hello(id.secret, r, n, sizeof(sockaddr_in), sizeof(sockaddr_in));
    raw_send(fd, h.data(), h.size());
    ::close(fd);
    ++duplicates_sent;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ranks.emplace_back(rank_main, n - 1);
  for (auto& t : ranks) t.join();
  f1.join();
  f2.join();
  for (int fd : silent) ::close(fd);
  CHECK(attempts.load() == 300);
  CHECK(duplicates_sent == n - 1);
  INFO(c.first);
  CHECK(c.first.empty());
}

TEST_CASE("bootstrap: abort() from another thread unblocks a recv", "[core][bootstrap]") {
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  std::unique_ptr<Bootstrap> b[2];
  Status created[2];
  rank_threads::run(2, [&](int r) { created[r] = Bootstrap::create(id, r, 2, nullptr, &b[r]); });
  REQUIRE(created[0] == Status::ok);
  REQUIRE(created[1] == Status::ok);

  Status got = Status::ok;
  Clock::time_point returned;
  std::thread waiter([&] {
    std::uint64_t v = 0;
    got = b[0]->recv(1, &v, sizeof(v));
    returned = Clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto aborted_at = Clock::now();
  b[0]->abort();
  waiter.join();
  CHECK(got == Status::remote_error);
  CHECK(std::chrono::duration<double>(returned - aborted_at).count() < 1.0);
  // Every later operation fails; our own abort is not a lost peer.
  std::uint64_t v = 1;
  CHECK(b[0]->send(1, &v, sizeof(v)) == Status::remote_error);
  CHECK(b[0]->barrier() == Status::remote_error);
  CHECK_FALSE(b[0]->peer_lost());
  // The other rank sees the connection go and fails instead of waiting for its deadline.
  const auto t0 = Clock::now();
  CHECK(b[1]->recv(0, &v, sizeof(v)) == Status::remote_error);
  CHECK(seconds_since(t0) < 1.0);
  CHECK(b[1]->peer_lost());
}

TEST_CASE("bootstrap: the create() abort flag unblocks create and later operations", "[core][bootstrap]") {
  SECTION("during create, while a rank never arrives") {
    UniqueId id{};
    REQUIRE(purlin::make_unique_id(&id) == Status::ok);
    std::atomic<bool> flag{false};
    std::unique_ptr<Bootstrap> b;
    Status got = Status::ok;
    Clock::time_point returned;
    std::thread t([&] {
      got = Bootstrap::create(id, 0, 2, &flag, &b);
      returned = Clock::now();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto set_at = Clock::now();
    flag.store(true);
    t.join();
    CHECK(got == Status::remote_error);
    CHECK(b == nullptr);
    CHECK(std::chrono::duration<double>(returned - set_at).count() < 1.0);
  }
  SECTION("during a recv") {
    UniqueId id{};
    REQUIRE(purlin::make_unique_id(&id) == Status::ok);
    std::atomic<bool> flags[2] = {false, false};
    std::unique_ptr<Bootstrap> b[2];
    Status created[2];
    rank_threads::run(2, [&](int r) { created[r] = Bootstrap::create(id, r, 2, &flags[r], &b[r]); });
    REQUIRE(created[0] == Status::ok);
    REQUIRE(created[1] == Status::ok);
    Status got = Status::ok;
    Clock::time_point returned;
    std::thread t([&] {
      char buf[4];
      got = b[1]->recv(0, buf, sizeof(buf));
      returned = Clock::now();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto set_at = Clock::now();
    flags[1].store(true);
    t.join();
    CHECK(got == Status::remote_error);
    CHECK(std::chrono::duration<double>(returned - set_at).count() < 1.0);
    CHECK(b[1]->barrier() == Status::remote_error);
  }
}

TEST_CASE("bootstrap: a lost peer gives remote_error, the others keep working", "[core][bootstrap]") {
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  std::unique_ptr<Bootstrap> b[3];
  Status created[3];
  rank_threads::run(3, [&](int r) { created[r] = Bootstrap::create(id, r, 3, nullptr, &b[r]); });
  for (Status s : created) REQUIRE(s == Status::ok);

  // Rank 2 sends one message and leaves; the message can still be received.
  const std::uint64_t last_words = 0xfeedface;
  REQUIRE(b[2]->send(0, &last_words, sizeof(last_words)) == Status::ok);

  Status got = Status::ok;
  std::thread waiter([&] {
    std::uint64_t v = 0;
    got = b[0]->recv(1, &v, sizeof(v));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(b[0]->peer_lost());
  const auto t0 = Clock::now();
  b[1].reset();  // rank 1 leaves while rank 0 waits for it
  waiter.join();
  CHECK(got == Status::remote_error);
  CHECK(seconds_since(t0) < 1.0);
  CHECK(b[0]->peer_lost());

  b[2].reset();
  std::uint64_t v = 0;
  CHECK(b[0]->recv(2, &v, sizeof(v)) == Status::ok);
  CHECK(v == last_words);
  CHECK(b[0]->recv(2, &v, sizeof(v)) == Status::remote_error);
  CHECK(b[0]->send(1, &v, sizeof(v)) == Status::remote_error);
  CHECK(b[0]->all_gather(&v, sizeof(v), std::vector<std::uint64_t>(3).data()) == Status::remote_error);
  // Messages to itself still work.
  CHECK(b[0]->send(0, &last_words, sizeof(last_words)) == Status::ok);
  CHECK(b[0]->recv(0, &v, sizeof(v)) == Status::ok);
}

TEST_CASE("bootstrap: sizes are checked and streams stay in step", "[core][bootstrap]") {
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  Checker c;
  rank_threads::run(2, [&](int r) {
    std::unique_ptr<Bootstrap> b;
    c.expect(Bootstrap::create(id, r, 2, nullptr, &b) == Status::ok, "create");
    if (!b) return;
    const int peer = 1 - r;
    // A point-to-point message that overtakes a collective is not taken for its contribution.
    if (r == 0) {
      std::uint32_t m = 77;
      c.expect(b->send(peer, &m, sizeof(m)) == Status::ok, "send before all_gather");
    }
    std::uint64_t mine = 1000 + r, all[2] = {};
    c.expect(b->all_gather(&mine, sizeof(mine), all) == Status::ok, "all_gather after send");
    c.expect(all[0] == 1000 && all[1] == 1001, "all_gather contents");
    if (r == 1) {
      std::uint32_t m = 0;
      c.expect(b->recv(peer, &m, sizeof(m)) == Status::ok && m == 77, "recv after all_gather");
    }
    // A size mismatch is an error that leaves the receive buffer alone and the stream usable.
    if (r == 0) {
      std::uint8_t ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
      std::uint8_t twelve[12] = {12};
      c.expect(b->send(peer, ten, sizeof(ten)) == Status::ok, "send 10");
      c.expect(b->send(peer, twelve, sizeof(twelve)) == Status::ok, "send 12");
    } else {
      std::uint8_t buf[12];
      std::memset(buf, 0xcd, sizeof(buf));
      c.expect(b->recv(peer, buf, sizeof(buf)) == Status::invalid_usage, "recv 12 of 10 must fail");
      c.expect(buf[0] == 0xcd && buf[11] == 0xcd, "buffer untouched on mismatch");
      c.expect(b->recv(peer, buf, sizeof(buf)) == Status::ok && buf[0] == 12, "next message intact");
    }
    // An all_gather whose sizes differ fails on both ranks; the next one works.
    std::vector<std::uint8_t> out(2 * 16, 0);
    std::vector<std::uint8_t> in(16, static_cast<std::uint8_t>(r + 1));
    c.expect(b->all_gather(in.data(), r == 0 ? 8 : 16, out.data()) == Status::invalid_usage, "mismatched all_gather");
    c.expect(b->all_gather(in.data(), 16, out.data()) == Status::ok, "all_gather after mismatch");
    c.expect(out[0] == 1 && out[16] == 2, "contents after mismatch");
    c.expect(b->barrier() == Status::ok, "barrier");
  });
  INFO(c.first);
  CHECK(c.first.empty());
}

TEST_CASE("bootstrap: bad arguments", "[core][bootstrap]") {
  UniqueId id{};
  std::unique_ptr<Bootstrap> b;
  CHECK(Bootstrap::create(id, 0, 1, nullptr, &b) == Status::invalid_argument);  // not an id
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  CHECK(Bootstrap::create(id, 2, 2, nullptr, &b) == Status::invalid_argument);
  CHECK(Bootstrap::create(id, -1, 2, nullptr, &b) == Status::invalid_argument);
  CHECK(Bootstrap::create(id, 0, 0, nullptr, &b) == Status::invalid_argument);
  REQUIRE(Bootstrap::create(id, 0, 1, nullptr, &b) == Status::ok);
  char x = 0;
  CHECK(b->send(1, &x, 1) == Status::invalid_argument);
  CHECK(b->recv(-1, &x, 1) == Status::invalid_argument);
}

TEST_CASE("sockets: NCCL_SOCKET_IFNAME matching and address parsing", "[core][bootstrap]") {
  using purlin::net::interface_selected;
  CHECK(interface_selected("eth", "eth0"));
  CHECK(interface_selected("ib,eth", "eth1"));
  CHECK_FALSE(interface_selected("ib", "eth0"));
  CHECK_FALSE(interface_selected("^docker,lo", "docker0"));
  CHECK(interface_selected("^docker,lo", "eth0"));
  CHECK(interface_selected("=eth0", "eth0"));
  CHECK_FALSE(interface_selected("=eth0", "eth01"));
  CHECK_FALSE(interface_selected("^=eth0", "eth0"));
  CHECK(interface_selected("^=eth0", "eth01"));

  purlin::net::Address a;
  REQUIRE(purlin::net::parse_address("127.0.0.1:1234", &a) == Status::ok);
  CHECK(a.family() == AF_INET);
  CHECK(a.port() == 1234);
  CHECK(a.str() == "127.0.0.1:1234");
  REQUIRE(purlin::net::parse_address("[::1]:99", &a) == Status::ok);
  CHECK(a.family() == AF_INET6);
  CHECK(a.str() == "[::1]:99");
  REQUIRE(purlin::net::parse_address("::1:98", &a) == Status::ok);
  CHECK(a.port() == 98);
  CHECK(purlin::net::parse_address("localhost:80", &a) == Status::ok);
  CHECK(purlin::net::parse_address("127.0.0.1", &a) == Status::invalid_argument);
  CHECK(purlin::net::parse_address("127.0.0.1:", &a) == Status::invalid_argument);
  CHECK(purlin::net::parse_address("127.0.0.1:70000", &a) == Status::invalid_argument);
  CHECK(purlin::net::parse_address("[::1]99", &a) == Status::invalid_argument);

  purlin::net::Address chosen;
  REQUIRE(purlin::net::bootstrap_address(&chosen) == Status::ok);
  CHECK_FALSE(chosen.is_any());
}

TEST_CASE("sockets: IPv6 loopback, deadlines and abort", "[core][bootstrap]") {
  using namespace purlin::net;
  Address v6;
  REQUIRE(parse_address("[::1]:1", &v6) == Status::ok);
  v6.set_port(0);
  Socket listener;
  Address bound;
  if (listen_on(v6, false, &listener, &bound) != Status::ok) {
    WARN("no IPv6 loopback here; skipping the IPv6 part");
    return;
  }
  CHECK(bound.family() == AF_INET6);
  CHECK(bound.port() != 0);
  Socket client;
  REQUIRE(connect_to(bound, deadline_after(5), {}, &client) == Status::ok);
  Socket server;
  for (int i = 0; i < 100 && !server.valid(); ++i) {
    REQUIRE(accept_now(listener, &server, nullptr) == Status::ok);
    if (!server.valid()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(server.valid());
  const auto msg = pattern(0, 1 << 20, 3);
  std::vector<std::uint8_t> got(msg.size());
  Status sent = Status::internal_error;
  std::thread sender([&] { sent = send_all(client, msg.data(), msg.size(), deadline_after(10), {}); });
  Status received = recv_all(server, got.data(), got.size(), deadline_after(10), {});
  sender.join();
  CHECK(sent == Status::ok);
  CHECK(received == Status::ok);
  CHECK(got == msg);

  // Nothing more is coming: a deadline, then an abort flag, end the wait.
  char c = 0;
  auto t0 = Clock::now();
  CHECK(recv_all(server, &c, 1, deadline_after(0.2), {}) == Status::remote_error);
  CHECK(seconds_since(t0) >= 0.15);
  CHECK(seconds_since(t0) < 1.0);
  std::atomic<bool> flag{false};
  std::thread raiser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    flag.store(true);
  });
  t0 = Clock::now();
  Status aborted = recv_all(server, &c, 1, deadline_after(30), AbortFlags(&flag));
  raiser.join();
  CHECK(aborted == Status::remote_error);
  CHECK(seconds_since(t0) < 1.0);
  // A peer that closes gives remote_error, and writing to it raises no SIGPIPE.
  client.close();
  CHECK(recv_all(server, &c, 1, deadline_after(5), {}) == Status::remote_error);
  Status s = Status::ok;
  for (int i = 0; i < 100 && s == Status::ok; ++i) s = send_all(server, msg.data(), 4096, deadline_after(5), {});
  CHECK(s == Status::remote_error);
}

TEST_CASE("topology: host id and name", "[core][topology]") {
  CHECK(purlin::host_id() == purlin::host_id());
  CHECK(purlin::host_id() != 0);
  CHECK_FALSE(purlin::host_name().empty());
}

// Run by the next test in a child process whose environment sets NCCL_COMM_ID and PURLIN_HOST_ID
// (the configuration is read once per process).
TEST_CASE("bootstrap_comm_id_child", "[.]") {
  REQUIRE_FALSE(purlin::config().comm_id.empty());
  CHECK(purlin::host_id() == 0x1234);
  UniqueId a{}, b{};
  REQUIRE(purlin::make_unique_id(&a) == Status::ok);
  REQUIRE(purlin::make_unique_id(&b) == Status::ok);
  CHECK(std::memcmp(&a, &b, sizeof(a)) == 0);  // every process derives the same id
  Checker c;
  rank_threads::run(3, [&](int r) { exercise(a, r, 3, 9, c); });
  INFO(c.first);
  CHECK(c.first.empty());
}

TEST_CASE("bootstrap: NCCL_COMM_ID puts the root in rank 0 at a fixed address", "[core][bootstrap]") {
  // A free port on loopback, released so that rank 0 of the child can bind it.
  std::uint16_t port = 0;
  {
    purlin::net::Address lo;
    REQUIRE(purlin::net::parse_address("127.0.0.1:1", &lo) == Status::ok);
    lo.set_port(0);
    purlin::net::Socket s;
    purlin::net::Address bound;
    REQUIRE(purlin::net::listen_on(lo, true, &s, &bound) == Status::ok);
    port = bound.port();
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("NCCL_COMM_ID=", 0) == 0 || kv.rfind("PURLIN_HOST_ID=", 0) == 0 ||
        kv.rfind("PURLIN_BOOTSTRAP_TIMEOUT=", 0) == 0) {
      continue;
    }
    env_strings.push_back(kv);
  }
  env_strings.push_back("NCCL_COMM_ID=127.0.0.1:" + std::to_string(port));
  env_strings.push_back("PURLIN_HOST_ID=0x1234");
  env_strings.push_back("PURLIN_BOOTSTRAP_TIMEOUT=30");
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string name = "bootstrap_comm_id_child";
  std::vector<char*> argv = {exe.data(), name.data(), nullptr};

  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) == 0);
  int wstatus = 0;
  const auto t0 = Clock::now();
  pid_t done = 0;
  while ((done = waitpid(pid, &wstatus, WNOHANG)) == 0 && seconds_since(t0) < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &wstatus, 0);
    FAIL("the NCCL_COMM_ID child did not finish within 60 s");
  }
  REQUIRE(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
}

TEST_CASE("bootstrap: a farewell tells a departure from a failure", "[core][bootstrap]") {
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  std::unique_ptr<Bootstrap> b[4];
  Status created[4];
  rank_threads::run(4, [&](int r) { created[r] = Bootstrap::create(id, r, 4, nullptr, &b[r]); });
  for (Status s : created) REQUIRE(s == Status::ok);
  CHECK(b[0]->failed_peer() == -1);

  // Rank 1 leaves in good order: rank 0 sees its connection close, and no failure.
  b[1]->leave();
  b[1].reset();
  int seen = -1;
  for (int i = 0; i < 25 && seen < 0; ++i) {
    seen = b[0]->failed_peer();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(seen == -1);
  CHECK(b[0]->peer_lost());

  // Rank 2 goes without a farewell (as a killed process would): rank 0 sees it within moments.
  b[2].reset();
  const auto t1 = Clock::now();
  int failed = -1;
  while ((failed = b[0]->failed_peer()) < 0 && seconds_since(t1) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(failed == 2);
  CHECK(seconds_since(t1) < 1.0);

  // An abort is no orderly departure either, even when leave() follows.
  b[3]->abort();
  b[3]->leave();
  b[3].reset();
  std::uint64_t v = 7;
  CHECK(b[0]->send(0, &v, sizeof(v)) == Status::ok);  // the bootstrap itself goes on
  CHECK(b[0]->recv(0, &v, sizeof(v)) == Status::ok);
  CHECK(b[0]->failed_peer() == 2);  // the lowest failed rank
}

TEST_CASE("bootstrap: set_interrupt ends one operation and leaves the bootstrap usable", "[core][bootstrap]") {
  UniqueId id{};
  REQUIRE(purlin::make_unique_id(&id) == Status::ok);
  std::unique_ptr<Bootstrap> b[2];
  Status created[2];
  rank_threads::run(2, [&](int r) { created[r] = Bootstrap::create(id, r, 2, nullptr, &b[r]); });
  REQUIRE(created[0] == Status::ok);
  REQUIRE(created[1] == Status::ok);

  std::atomic<bool> flag{false};
  b[0]->set_interrupt(&flag);
  Status got = Status::ok;
  Clock::time_point returned;
  std::thread waiter([&] {
    std::uint64_t v = 0;
    got = b[0]->recv(1, &v, sizeof(v));
    returned = Clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto raised_at = Clock::now();
  flag.store(true);
  waiter.join();
  CHECK(got == Status::remote_error);
  CHECK(std::chrono::duration<double>(returned - raised_at).count() < 1.0);
  b[0]->set_interrupt(nullptr);

  const std::uint64_t sent = 0x5eed;
  REQUIRE(b[1]->send(0, &sent, sizeof(sent)) == Status::ok);
  std::uint64_t v = 0;
  CHECK(b[0]->recv(1, &v, sizeof(v)) == Status::ok);
  CHECK(v == sent);
  CHECK(b[0]->failed_peer() == -1);
  CHECK(b[1]->failed_peer() == -1);
}

namespace {

std::uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  if (std::fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

bool recv_exact(int fd, void* data, std::size_t bytes) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

// Plays rank 1 of 2 by hand against a real rank 0, up to the mesh connection, and returns it
// (-1 on failure). With the right secret a hostile peer gets exactly this far.
int join_as_rank1(const UniqueId& id) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(me);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&me), sizeof(me)) != 0 || ::listen(listener, 4) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&me), &len) != 0) {
    ::close(listener);
    return -1;
  }
  int root = raw_connect(root_of(id));
  if (root < 0) {
    ::close(listener);
    return -1;
  }
  auto hello = root_hello(id.secret, 1, 2, sizeof(sockaddr_in), sizeof(sockaddr_in));
  std::memcpy(&hello[32], &me, sizeof(me));
  raw_send(root, hello.data(), hello.size());
  std::uint64_t table_bytes = 0;
  std::vector<std::uint8_t> table(64);
  bool ok = recv_exact(root, &table_bytes, sizeof(table_bytes)) && table_bytes == 64 &&
            recv_exact(root, table.data(), table.size());
  ::close(root);
  ::close(listener);
  if (!ok) return -1;
  std::uint32_t addr_len = 0;
  std::memcpy(&addr_len, &table[0], 4);
  purlin::net::Address rank0;
  if (!purlin::net::Address::from_bytes(&table[4], addr_len, &rank0)) return -1;
  int mesh = -1;
  for (int i = 0; i < 100 && mesh < 0; ++i) {
    mesh = raw_connect(rank0);
    if (mesh < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (mesh < 0) return -1;
  auto mesh_hello = root_hello(id.secret, 1, 2, 0, 0);
  const std::uint32_t kind = 0x4853454d;  // "MESH"
  std::memcpy(&mesh_hello[16], &kind, 4);
  raw_send(mesh, mesh_hello.data(), mesh_hello.size());
  return mesh;
}

}  // namespace

TEST_CASE("bootstrap: a frame's announced length costs memory only as its bytes arrive", "[core][bootstrap]") {
  for (std::uint64_t announced : {std::uint64_t(1) << 34, std::uint64_t(3) << 30}) {
    CAPTURE(announced);
    UniqueId id{};
    REQUIRE(purlin::make_unique_id(&id) == Status::ok);
    std::unique_ptr<Bootstrap> b;
    Status created = Status::internal_error;
    std::thread rank0([&] { created = Bootstrap::create(id, 0, 2, nullptr, &b); });
    const int fd = join_as_rank1(id);
    rank0.join();
    REQUIRE(fd >= 0);
    REQUIRE(created == Status::ok);

    Status got = Status::ok;
    std::thread waiter([&] {
      std::uint64_t v = 0;
      got = b->recv(1, &v, sizeof(v));
    });
    const std::uint64_t before = resident_bytes();
    std::uint8_t header[16] = {};
    const std::uint32_t p2p = 1;
    std::memcpy(&header[0], &p2p, 4);
    std::memcpy(&header[8], &announced, 8);
    raw_send(fd, header, sizeof(header));
    const std::vector<std::uint8_t> some(4096, 0x5a);
    raw_send(fd, some.data(), some.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::uint64_t after = resident_bytes();  // read once: the heap may shrink in between
    const std::uint64_t grown = after > before ? after - before : 0;
    CHECK(grown < (std::uint64_t(64) << 20));
    ::close(fd);
    waiter.join();
    CHECK(got == Status::remote_error);  // the peer left in the middle of the frame
    CHECK(b->failed_peer() == 1);
  }
}
