// Hostile bootstrap: while the ranks initialise, connections are opened to the root and to every
// rank's listener (found the way a port scanner would, here from /proc): empty ones, 7 bytes, a
// wrong secret, the right secret with a garbage or an oversized length, duplicate ranks, ranks out
// of range, silent ones; each is closed at a random moment.
//
//   junk    no connection knows the secret: init must complete, with correct results
//   secret  connections with the secret too, none claiming a rank still to arrive: init must
//           complete, with correct results
//   hijack  the secret is used to claim the slot of a rank that has not arrived yet: every rank
//           must fail within the timeout with an error (no crash, no hang)
//
// Every listener must be bound to one address, never to a wildcard, and to loopback: like every
// test, this one runs its ranks with NCCL_SOCKET_IFNAME=lo (loopback::use), so that none of the
// connections below leaves the machine. This test writes the bootstrap's wire format itself
// (hello: magic, secret, kind, rank, nranks, address length, address; the unique id: magic,
// secret, address, address length).
//
//   test_hostile [--trials N] [--ranks 4] [--connections 1000] [--seed N] [--only junk,secret,hijack]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support.h"
#include "test/common/loopback.h"

namespace faults {
namespace {

constexpr double kTimeoutS = 15;  // PURLIN_BOOTSTRAP_TIMEOUT and PURLIN_TIMEOUT for the ranks
constexpr int kRank0DelayMs = 500;
constexpr int kMaxRanks = 64;

// ---- the wire format ---------------------------------------------------------------------------

constexpr std::uint64_t kMagic = 0x31304449'4e4c5250ull;
constexpr std::uint32_t kRoot = 0x544f4f52, kMesh = 0x4853454d;

struct Id {
  std::uint64_t secret;
  sockaddr_storage root;
  socklen_t root_len;
};

Id parse_id(const ncclUniqueId& u) {
  Id id{};
  std::memcpy(&id.secret, u.internal + 8, 8);
  std::uint32_t len = 0;
  std::memcpy(&len, u.internal + 44, 4);
  id.root_len = std::min<socklen_t>(len, 28);
  std::memcpy(&id.root, u.internal + 16, id.root_len);
  return id;
}

std::vector<std::uint8_t> hello(std::uint64_t secret, std::uint32_t kind, std::uint32_t rank, std::uint32_t nranks,
                                std::uint32_t addr_len, std::size_t addr_bytes) {
  std::vector<std::uint8_t> v(32 + addr_bytes, 0);
  std::memcpy(&v[0], &kMagic, 8);
  std::memcpy(&v[8], &secret, 8);
  std::memcpy(&v[16], &kind, 4);
  std::memcpy(&v[20], &rank, 4);
  std::memcpy(&v[24], &nranks, 4);
  std::memcpy(&v[28], &addr_len, 4);
  if (addr_bytes >= sizeof(sockaddr_in)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(9);  // discard: nobody listens there
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::memcpy(&v[32], &a, sizeof(a));
  }
  return v;
}

// ---- listeners, as a scanner finds them ------------------------------------------------------------

using loopback::Listener;
using loopback::listeners;

std::string host_of(const std::string& text) { return text.substr(0, text.rfind(':')); }

Listener listener_at(pid_t pid, const sockaddr_storage& addr, socklen_t len) {
  Listener l{pid, addr, len, ""};
  char text[INET6_ADDRSTRLEN] = {};
  unsigned port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    port = ntohs(a->sin6_port);
  }
  l.text = std::string(text) + ":" + std::to_string(port);
  return l;
}

// ---- the attack --------------------------------------------------------------------------------

enum class Mode { junk, secret, hijack };

struct Target {
  sockaddr_storage addr;
  socklen_t len;
  bool root;
  int rank;  // the listener's rank (-1: unknown or the root)
};

int connect_now(const Target& t) {
  int fd = ::socket(t.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&t.addr), t.len) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t elen = sizeof err;
  if (::poll(&p, 1, 200) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_quietly(int fd, const void* data, std::size_t bytes) { (void)::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT); }

class Attacker {
 public:
  Attacker(Mode mode, const Id& id, int nranks, std::uint64_t seed) : mode_(mode), id_(id), n_(nranks), rng_(seed) {}

  // Opens `count` connections to `t`, each of a random kind, and schedules its close.
  void attack(const Target& t, int count, std::atomic<bool>& claims_allowed) {
    for (int i = 0; i < count; ++i) {
      const int fd = connect_now(t);
      if (fd < 0) continue;
      ++opened_;
      speak(fd, t, claims_allowed.load());
      const double life = static_cast<double>(rng_() % 800) / 1000.0;
      open_.push_back({fd, now_s() + life});
      close_due();
      // Keep the open connections well under the descriptor limit.
      while (open_.size() > 400) close_one();
    }
  }
  void close_due() {
    const double now = now_s();
    std::erase_if(open_, [&](const Open& o) {
      if (o.until > now) return false;
      ::close(o.fd);
      return true;
    });
  }
  void close_all() {
    for (const Open& o : open_) ::close(o.fd);
    open_.clear();
  }
  int opened() const { return opened_; }
  int hijacks() const { return hijacks_; }

 private:
  struct Open {
    int fd;
    double until;
  };
  void close_one() {
    const std::size_t k = rng_() % open_.size();
    ::close(open_[k].fd);
    open_.erase(open_.begin() + static_cast<long>(k));
  }

  void speak(int fd, const Target& t, bool claims_allowed) {
    const std::uint32_t kind = t.root ? kRoot : kMesh;
    const std::uint32_t n = static_cast<std::uint32_t>(n_);
    const int kinds = mode_ == Mode::junk ? 4 : 9;
    // The first connection to the root comes before any rank: in hijack mode it claims rank 0's
    // slot; in secret mode it claims another rank count (the real ranks must not be refused).
    const bool first_at_root = t.root && opened_ == 1;
    int choice = static_cast<int>(rng_() % kinds);
    if (first_at_root && mode_ == Mode::hijack) choice = 7;
    if (first_at_root && mode_ == Mode::secret) choice = 9;
    switch (choice) {
      case 0:  // empty
        break;
      case 1: {  // 7 bytes
        const char seven[7] = {'G', 'E', 'T', ' ', '/', '\r', '\n'};
        send_quietly(fd, seven, sizeof seven);
        break;
      }
      case 2: {  // wrong secret
        auto h = hello(id_.secret ^ (rng_() | 1), kind, 1, n, t.root ? sizeof(sockaddr_in) : 0, t.root ? sizeof(sockaddr_in) : 0);
        send_quietly(fd, h.data(), h.size());
        break;
      }
      case 3: {  // garbage
        std::vector<std::uint8_t> g(1 + rng_() % 300);
        for (auto& b : g) b = static_cast<std::uint8_t>(rng_());
        send_quietly(fd, g.data(), g.size());
        break;
      }
      case 4: {  // the secret, a garbage address length
        auto h = hello(id_.secret, kind, 1, n, static_cast<std::uint32_t>(rng_()) | 0x1000, 16);
        send_quietly(fd, h.data(), h.size());
        break;
      }
      case 5: {  // the secret, an oversized address length with its bytes
        const std::uint32_t len = 29 + static_cast<std::uint32_t>(rng_() % 2000);
        auto h = hello(id_.secret, kind, 1, n, len, len);
        send_quietly(fd, h.data(), h.size());
        break;
      }
      case 6:    // the secret, a rank out of range or a wrong rank count
      case 9: {  // the secret, a wrong rank count
        const bool count = choice == 9 || rng_() % 2;
        auto h = hello(id_.secret, kind, count ? 1 : n + static_cast<std::uint32_t>(rng_() % 100), count ? n + 5 : n,
                       t.root ? sizeof(sockaddr_in) : 0, t.root ? sizeof(sockaddr_in) : 0);
        send_quietly(fd, h.data(), h.size());
        break;
      }
      case 7: {  // the secret, a duplicate rank
        std::uint32_t rank;
        if (t.root) {
          // Secret mode: only ranks already checked in (rank 0 arrives last). Hijack: rank 0's slot.
          rank = mode_ == Mode::hijack ? 0 : 1 + static_cast<std::uint32_t>(rng_() % (n - 1));
          if (mode_ != Mode::hijack && !claims_allowed) rank = n + 1;
        } else {
          // A listener accepts only higher ranks: claiming its own or a lower one is a duplicate.
          rank = t.rank >= 0 ? static_cast<std::uint32_t>(rng_() % (t.rank + 1)) : n + 1;
          if (mode_ == Mode::hijack) rank = static_cast<std::uint32_t>(t.rank + 1);
        }
        if (mode_ == Mode::hijack) ++hijacks_;
        auto h = hello(id_.secret, kind, rank, n, t.root ? sizeof(sockaddr_in) : 0, t.root ? sizeof(sockaddr_in) : 0);
        send_quietly(fd, h.data(), h.size());
        break;
      }
      case 8: {  // the secret, a truncated hello, then silence
        auto h = hello(id_.secret, kind, 1, n, t.root ? sizeof(sockaddr_in) : 0, t.root ? sizeof(sockaddr_in) : 0);
        send_quietly(fd, h.data(), h.size() - 5);
        break;
      }
    }
  }

  Mode mode_;
  Id id_;
  int n_;
  std::mt19937_64 rng_;
  std::deque<Open> open_;
  int opened_ = 0;
  int hijacks_ = 0;
};

// ---- trials ----------------------------------------------------------------------------------------

struct Board {
  std::atomic<int> calling{0};  // ranks that are about to call ncclCommInitRank
  std::atomic<int> ok[kMaxRanks];
  std::atomic<int> code[kMaxRanks];
  std::atomic<double> took[kMaxRanks];
};

int rank_main(const Options& o, const ncclUniqueId& id, int rank, Board* board, std::uint64_t salt) {
  Report report("hostile rank " + std::to_string(rank));
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(kRank0DelayMs));
  board->calling.fetch_add(1);
  ncclComm_t comm = nullptr;
  const double t0 = now_s();
  ncclResult_t r = ncclCommInitRank(&comm, o.ranks, id, rank);
  if (r == ncclSuccess) {
    r = checked_allreduce(o.gpu, comm, nullptr, rank, o.ranks, 2000, salt, report, "AllReduce after a hostile init",
                          false);
    if (r == ncclSuccess) report.expect(ncclCommDestroy(comm), ncclSuccess, "ncclCommDestroy");
    else report.expect(ncclCommAbort(comm), ncclSuccess, "ncclCommAbort");
  } else {
    const char* last = ncclGetLastError(nullptr);
    report.check(last && *last, "ncclGetLastError is empty after a failed init");
    std::printf("  rank %d: init failed after %.1f s with %s: %s\n", rank, now_s() - t0, name_of(r), last ? last : "");
  }
  board->took[rank].store(now_s() - t0);
  board->code[rank].store(r);
  board->ok[rank].store(r == ncclSuccess);
  return report.exit_code();
}

const char* mode_name(Mode m) { return m == Mode::junk ? "junk" : m == Mode::secret ? "secret" : "hijack"; }

bool trial(const Options& o, Mode mode, int t, std::mt19937_64& rng) {
  Report report(std::string("hostile ") + mode_name(mode) + " trial " + std::to_string(t));
  ncclUniqueId uid;
  if (!report.expect(ncclGetUniqueId(&uid), ncclSuccess, "ncclGetUniqueId")) return false;
  const Id id = parse_id(uid);
  auto* board = shared_object<Board>();
  const std::uint64_t salt = rng();
  ranks::Group group(o.ranks, [&](int r) { return rank_main(o, uid, r, board, salt); });
  std::vector<pid_t> pids;
  for (const ranks::Outcome& r : group.outcomes()) pids.push_back(r.pid);

  // Two attackers: one on the root, one on the listeners as they appear.
  Attacker at_root(mode, id, o.ranks, rng()), at_ranks(mode, id, o.ranks, rng());
  std::atomic<bool> claims_allowed{false};
  std::atomic<bool> stop{false};
  std::set<std::string> attacked;
  std::vector<Listener> seen;
  std::mutex seen_mu;
  std::thread root_thread([&] {
    Target root{id.root, id.root_len, true, -1};
    at_root.attack(root, o.connections, claims_allowed);
    while (!stop.load()) {
      at_root.close_due();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    at_root.close_all();
  });
  std::thread rank_thread([&] {
    std::map<pid_t, int> rank_of;
    for (int r = 0; r < o.ranks; ++r) rank_of[pids[r]] = r;
    while (!stop.load()) {
      for (const Listener& l : listeners(pids)) {
        {
          std::lock_guard<std::mutex> g(seen_mu);
          seen.push_back(l);
        }
        if (!attacked.insert(l.text).second) continue;
        Target tg{l.addr, l.len, false, rank_of[l.pid]};
        at_ranks.attack(tg, o.connections, claims_allowed);
      }
      at_ranks.close_due();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    at_ranks.close_all();
  });
  // Claims of checked-in ranks wait until ranks 1.. have surely checked in (rank 0 comes later).
  const double start = now_s();
  while (board->calling.load() < o.ranks - 1 && now_s() - start < 30) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(kRank0DelayMs / 2));
  claims_allowed.store(true);

  const bool by_themselves = group.wait(ranks::Clock::now() + ranks::seconds(2 * kTimeoutS + 30)) == ranks::Stop::none;
  stop.store(true);
  root_thread.join();
  rank_thread.join();
  report.check(by_themselves, "ranks still running long after the timeout");

  int ok = 0;
  for (int r = 0; r < o.ranks; ++r) {
    report.check(group[r].ok(), "rank " + std::to_string(r) + ": " + ranks::describe(group[r]));
    ok += board->ok[r].load();
  }
  // Root listener (this process) and every rank's: one address on loopback, never a wildcard.
  std::set<std::string> hosts;
  std::lock_guard<std::mutex> g(seen_mu);
  seen.push_back(listener_at(::getpid(), id.root, id.root_len));
  for (const Listener& l : seen) {
    report.check(!l.wildcard(), "a listener is bound to a wildcard address: " + l.text);
    report.check(l.on_loopback(), "with NCCL_SOCKET_IFNAME=lo a listener is on " + l.text);
    hosts.insert(host_of(l.text));
  }
  report.check(hosts.size() <= 1, "the listeners are bound to " + std::to_string(hosts.size()) + " addresses");
  report.check(attacked.size() >= static_cast<std::size_t>(o.ranks - 1),
               "only " + std::to_string(attacked.size()) + " rank listeners were found to attack");

  std::string outcome;
  if (ok == o.ranks) {
    outcome = "init completed";
    report.check(mode != Mode::hijack, "init completed although rank 0's slot was claimed with the secret");
  } else {
    outcome = "every rank failed";
    report.check(ok == 0, std::to_string(ok) + " of " + std::to_string(o.ranks) + " ranks completed: all or none must");
    report.check(mode == Mode::hijack, "init failed under connections that claim no rank still to arrive");
    double slowest = 0;
    for (int r = 0; r < o.ranks; ++r) {
      slowest = std::max(slowest, board->took[r].load());
      const ncclResult_t code = static_cast<ncclResult_t>(board->code[r].load());
      report.check(code == ncclRemoteError || code == ncclSystemError || code == ncclInvalidUsage,
                   "rank " + std::to_string(r) + " failed with " + name_of(code));
    }
    report.check(slowest <= 2 * kTimeoutS + 5, "a rank failed only after " + std::to_string(slowest) + " s");
    outcome += " (slowest after " + std::to_string(static_cast<int>(slowest)) + " s)";
  }
  std::printf("%s trial %d: %d connections to the root, %d to %zu listeners: %s%s\n", mode_name(mode), t,
              at_root.opened(), at_ranks.opened(), attacked.size(), outcome.c_str(),
              report.failures() ? ": FAILED" : "");
  return report.failures() == 0;
}

}  // namespace
}  // namespace faults

int main(int argc, char** argv) {
  using namespace faults;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  ::setenv("PURLIN_BOOTSTRAP_TIMEOUT", std::to_string(kTimeoutS).c_str(), 1);
  ::setenv("PURLIN_TIMEOUT", std::to_string(kTimeoutS).c_str(), 1);
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 65536);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  Options defaults;
  defaults.trials = 1;
  defaults.connections = 200;
  const Options o = parse_options(argc, argv, defaults);
  if (o.gpu) {
    std::printf("SKIP: the bootstrap is the same for every datapath; this test runs on the host one\n");
    return kSkipped;
  }
  select_datapath(o);
  std::printf("hostile bootstrap: %d trials per mode, %d ranks, %d connections per target, NCCL_SOCKET_IFNAME=%s, "
              "seed %llu\n",
              o.trials, o.ranks, o.connections, std::getenv("NCCL_SOCKET_IFNAME"),
              static_cast<unsigned long long>(o.seed));
  std::mt19937_64 rng(o.seed);
  int failed = 0, ran = 0;
  const double started = now_s();
  for (Mode m : {Mode::junk, Mode::secret, Mode::hijack}) {
    if (!selected(o, mode_name(m))) continue;
    const int trials = m == Mode::hijack ? (o.trials + 1) / 2 : o.trials;  // each takes the timeout
    for (int t = 0; t < trials; ++t, ++ran)
      if (!trial(o, m, t, rng)) ++failed;
  }
  std::printf("hostile bootstrap: %d of %d trials passed in %.1f s\n", ran - failed, ran, now_s() - started);
  return failed == 0 ? 0 : 1;
}
