// The bootstrap: a root service per unique id, the rendezvous, and a full TCP mesh.
//
// Contract for callers:
//  - One operation (all_gather, barrier, send, recv) at a time per Bootstrap. abort(),
//    peer_lost() and failed_peer() may be called from any thread meanwhile; destruction must not
//    overlap any of them.
//  - create() is bounded by PURLIN_BOOTSTRAP_TIMEOUT, every later operation by PURLIN_TIMEOUT
//    (zero or less: no limit). All waits poll the create() abort flag and abort() at least every
//    net::kPollSliceMs; the flag given to create() must outlive the Bootstrap.
//  - send() returns once the message is in the kernel's hands; it never waits for a matching
//    recv(). Every wait also drains incoming traffic into per-peer queues, so no pattern of
//    blocking sends (a ring where everyone sends first, large all_gathers) can deadlock.
//  - A peer whose connection closes is lost: operations that need it fail with remote_error, and
//    messages it sent before leaving can still be received. Operations that do not involve it
//    go on working.
//  - A size mismatch (recv, all_gather) fails with invalid_usage without touching the caller's
//    buffer beyond its size; the message is consumed, so the streams stay in step.
//  - A frame's memory grows with the bytes that actually arrive, so a garbage length in a header
//    costs nothing until the sender really sends that much (and at most kMaxFrameBytes).
//  - leave() sends a farewell frame; a peer whose connection closes after one left in good order,
//    one whose connection closes without it failed (failed_peer()).
#include "core/bootstrap.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "core/socket.h"

namespace purlin {

namespace {

using net::AbortFlags;
using net::Address;
using net::Clock;
using net::Deadline;
using net::Io;
using net::Socket;

constexpr unsigned kLog = log::kInit | log::kNet;

// ---- wire formats (host byte order: every rank of a job shares one architecture) ---------------

// Every connection, to the root or within the mesh, opens with a Hello followed by `addr_len`
// bytes of the sender's listening address (root hellos only; mesh hellos carry none).
enum : std::uint32_t {
  kHelloRoot = 0x544f4f52,  // "ROOT"
  kHelloMesh = 0x4853454d,  // "MESH"
};
struct Hello {
  std::uint64_t magic;   // kUniqueIdMagic
  std::uint64_t secret;  // the id's secret
  std::uint32_t kind;    // kHelloRoot or kHelloMesh
  std::uint32_t rank;
  std::uint32_t nranks;
  std::uint32_t addr_len;
};
static_assert(sizeof(Hello) == 32);

// One entry of the root's answer, which is a uint64 byte count followed by nranks entries.
struct WireAddr {
  std::uint32_t len;
  std::uint8_t bytes[Address::kMaxBytes];
};
static_assert(sizeof(WireAddr) == 32);

// Mesh traffic: frames of a header and `len` payload bytes. Point-to-point and collective frames
// queue separately, so a send that overtakes a collective on the same connection is never
// mistaken for the collective's contribution.
enum : std::uint32_t { kFrameP2p = 1, kFrameColl = 2, kFrameFarewell = 3 };
struct FrameHeader {
  std::uint32_t kind;
  std::uint32_t seq;  // collectives: the call's index, to catch ranks out of step
  std::uint64_t len;
};
static_assert(sizeof(FrameHeader) == 16);

constexpr std::uint32_t kMaxRanks = 1u << 20;
// The largest frame a peer may send; a longer header is taken for corruption.
constexpr std::uint64_t kMaxFrameBytes = std::uint64_t(1) << 32;
// A frame's buffer grows by at most this much ahead of the bytes received.
constexpr std::size_t kFrameGrowBytes = std::size_t(1) << 20;
// A connection must deliver its whole hello this soon after it is accepted.
constexpr double kHelloWindowS = 10.0;
// Connections waiting for their hello; beyond this the oldest is dropped to make room.
constexpr std::size_t kMaxPendingHellos = 512;
// leave() waits at most this long for room to send its farewells.
constexpr double kFarewellWaitS = 0.2;

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// ---- accepting hellos --------------------------------------------------------------------------

// Accepts connections on a listener and reads each one's hello, many at a time, so that no
// connection (silent, slow, truncated or hostile) holds up another. A hello with the right magic,
// secret, kind and a sane address length goes to `admit`, which takes the socket or rejects it
// with a reason; everything else is dropped and logged at INFO.
class HelloGate {
 public:
  using Admit = std::function<bool(const Hello&, const std::uint8_t* addr, Socket&, std::string* why)>;
  enum class End { done, aborted, timed_out, failed };

  HelloGate(const Socket& listener, std::uint64_t secret, std::uint32_t kind, std::string who)
      : listener_(listener), secret_(secret), kind_(kind), who_(std::move(who)) {}

  End run(Deadline deadline, AbortFlags abort, const Admit& admit, const std::function<bool()>& done);

 private:
  struct Pending {
    Socket sock;
    Address from;
    std::uint8_t buf[sizeof(Hello) + Address::kMaxBytes];
    std::size_t got = 0;
    Deadline until;
  };
  // Reads what is available; returns true when the connection is finished with (admitted or
  // dropped) and can leave the pending list.
  bool advance(Pending& p, const Admit& admit);
  void drop(Pending& p, const std::string& why);

  const Socket& listener_;
  std::uint64_t secret_;
  std::uint32_t kind_;
  std::string who_;
  std::vector<Pending> pending_;
};

void HelloGate::drop(Pending& p, const std::string& why) {
  log::info(kLog, "{}: dropped connection from {}: {}", who_, p.from.str(), why);
  p.sock.close();
}

bool HelloGate::advance(Pending& p, const Admit& admit) {
  for (;;) {
    std::size_t need = sizeof(Hello);
    Hello h{};
    if (p.got >= sizeof(Hello)) {
      std::memcpy(&h, p.buf, sizeof(h));
      need += h.addr_len;  // checked below before it was allowed to grow `need`
    }
    if (p.got == need) {
      std::string why;
      if (admit(h, p.buf + sizeof(Hello), p.sock, &why)) return true;
      drop(p, why);
      return true;
    }
    std::size_t n = 0;
    Io io = net::recv_some(p.sock.fd(), p.buf + p.got, need - p.got, &n);
    if (io == Io::would_block) return false;
    if (io == Io::closed) {
      drop(p, p.got ? fmt::format("closed after {} bytes of a hello", p.got) : "closed without a hello");
      return true;
    }
    if (io == Io::error) {
      drop(p, fmt::format("recv failed: {}", std::strerror(errno)));
      return true;
    }
    p.got += n;
    if (p.got == sizeof(Hello)) {
      std::memcpy(&h, p.buf, sizeof(h));
      if (h.magic != kUniqueIdMagic) { drop(p, "bad magic"); return true; }
      if (h.secret != secret_) { drop(p, "wrong secret"); return true; }
      if (h.kind != kind_) { drop(p, "wrong kind of hello"); return true; }
      std::uint32_t max_addr = kind_ == kHelloRoot ? Address::kMaxBytes : 0;
      if (h.addr_len > max_addr) { drop(p, fmt::format("address length {} too large", h.addr_len)); return true; }
    }
  }
}

HelloGate::End HelloGate::run(Deadline deadline, AbortFlags abort, const Admit& admit,
                              const std::function<bool()>& done) {
  std::vector<pollfd> fds;
  auto clear = [this](const char* why) {
    for (Pending& p : pending_) {
      if (why) drop(p, why);
    }
    pending_.clear();
  };
  while (!done()) {
    // Quietly: at process exit the logger may be gone.
    if (abort.raised()) { clear(nullptr); return End::aborted; }
    Deadline now = Clock::now();
    if (now >= deadline) { clear("timed out"); return End::timed_out; }

    // Expired hellos first, so a stream of silent connections cannot pile up.
    std::erase_if(pending_, [&](Pending& p) {
      if (now < p.until) return false;
      drop(p, fmt::format("no complete hello within {} s", kHelloWindowS));
      return true;
    });

    fds.assign(1, pollfd{listener_.fd(), POLLIN, 0});
    for (const Pending& p : pending_) fds.push_back(pollfd{p.sock.fd(), POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), net::slice_ms(deadline));
    if (rc < 0 && errno != EINTR) {
      log::warn("{}: poll failed: {}", who_, std::strerror(errno));
      clear("poll failed");
      return End::failed;
    }
    if (rc <= 0) continue;

    std::size_t polled = fds.size() - 1;
    for (std::size_t i = 0; i < polled; ++i) {
      if (fds[i + 1].revents == 0) continue;
      if (advance(pending_[i], admit)) pending_[i].sock.close();
    }
    std::erase_if(pending_, [](const Pending& p) { return !p.sock.valid(); });
    if (done()) break;

    if (fds[0].revents & (POLLERR | POLLNVAL)) {
      log::warn("{}: listening socket failed", who_);
      clear("listener failed");
      return End::failed;
    }
    // Take every connection already queued, bounded so one iteration stays short.
    for (int k = 0; k < 256 && (fds[0].revents & POLLIN); ++k) {
      Pending p;
      Status s = net::accept_now(listener_, &p.sock, &p.from);
      if (failed(s)) {
        // Out of descriptors (EMFILE/ENFILE) most likely: make room by shedding the oldest.
        if (pending_.empty()) break;
        drop(pending_.front(), "dropped to make room");
        pending_.erase(pending_.begin());
        continue;
      }
      if (!p.sock.valid()) break;
      if (pending_.size() >= kMaxPendingHellos) {
        drop(pending_.front(), "too many connections waiting for a hello");
        pending_.erase(pending_.begin());
      }
      p.until = std::min(deadline, net::deadline_after(kHelloWindowS));
      // The hello usually arrives with the connection; read it now rather than after a poll.
      if (advance(p, admit)) continue;
      pending_.push_back(std::move(p));
      if (done()) break;
    }
  }
  clear("rendezvous complete");
  return End::done;
}

// ---- the root service --------------------------------------------------------------------------

// Collects one hello per rank and answers each rank with the table of listening addresses.
// Owns everything it touches, so it can outlive the call that started it.
//
// Hellos are grouped by the rank count they claim, and the first group to be complete is answered:
// a hello that knows the secret but claims another count (stray or hostile) cannot make the real
// ranks' hellos look wrong. Only a claim of a real rank's slot, made before that rank arrives, can
// spoil a rendezvous; every rank then fails.
struct RootService {
  Socket listener;
  Address address;
  std::uint64_t secret = 0;
  std::uint32_t nranks = 0;  // 0: any count; the first complete group decides
  Deadline deadline;

  void run(const std::atomic<bool>* stop);
};

// Rank counts claimed at once, and hellos held, beyond which hellos are refused.
constexpr std::size_t kMaxRankCounts = 16;
constexpr std::size_t kMaxCheckedIn = std::size_t(1) << 16;

void RootService::run(const std::atomic<bool>* stop) {
  const std::string who = fmt::format("Bootstrap root {}", address.str());
  struct Member {
    Socket sock;
    WireAddr addr{};
  };
  std::map<std::uint32_t, std::map<std::uint32_t, Member>> groups;  // by rank count, then by rank
  std::size_t checked_in = 0;
  std::uint32_t complete = 0;  // the rank count of the first complete group
  auto admit = [&](const Hello& h, const std::uint8_t* addr, Socket& s, std::string* why) {
    if (h.nranks == 0 || h.nranks > kMaxRanks) { *why = fmt::format("bad rank count {}", h.nranks); return false; }
    if (h.rank >= h.nranks) { *why = fmt::format("rank {} out of range (nranks {})", h.rank, h.nranks); return false; }
    if (nranks && h.nranks != nranks) {
      *why = fmt::format("rank {} says nranks {}, the id was made for {}", h.rank, h.nranks, nranks);
      return false;
    }
    Address listen;
    if (!Address::from_bytes(addr, h.addr_len, &listen)) { *why = "bad listening address"; return false; }
    auto group = groups.find(h.nranks);
    if (group == groups.end()) {
      if (groups.size() >= kMaxRankCounts) { *why = fmt::format("too many rank counts claimed ({})", groups.size()); return false; }
      group = groups.emplace(h.nranks, std::map<std::uint32_t, Member>{}).first;
    }
    if (group->second.count(h.rank)) { *why = fmt::format("duplicate rank {} (nranks {})", h.rank, h.nranks); return false; }
    if (checked_in >= kMaxCheckedIn) { *why = "too many hellos held"; return false; }
    Member m;
    m.sock = std::move(s);
    m.addr.len = h.addr_len;
    std::memcpy(m.addr.bytes, addr, h.addr_len);
    group->second.emplace(h.rank, std::move(m));
    ++checked_in;
    if (group->second.size() == h.nranks) complete = h.nranks;
    log::trace(kLog, "{}: rank {} of {} checked in from {}", who, h.rank, h.nranks, listen.str());
    return true;
  };
  HelloGate gate(listener, secret, kHelloRoot, who);
  HelloGate::End end = gate.run(deadline, AbortFlags(stop), admit, [&] { return complete != 0; });
  listener.close();
  if (end != HelloGate::End::done) {
    // At process exit (stop raised) nothing is logged: the logger may already be gone.
    if (end == HelloGate::End::timed_out) {
      if (groups.size() == 1) {
        log::info(kLog, "{}: {} of {} ranks arrived before the deadline; giving up", who,
                  groups.begin()->second.size(), groups.begin()->first);
      } else {
        log::info(kLog, "{}: no complete set of ranks arrived before the deadline ({} rank counts claimed); giving up",
                  who, groups.size());
      }
    }
    return;
  }
  std::map<std::uint32_t, Member>& members = groups[complete];
  std::vector<std::uint8_t> answer(sizeof(std::uint64_t) + std::size_t(complete) * sizeof(WireAddr));
  const std::uint64_t len = std::uint64_t(complete) * sizeof(WireAddr);
  std::memcpy(answer.data(), &len, sizeof(len));
  for (auto& [rank, m] : members) std::memcpy(answer.data() + sizeof(len) + rank * sizeof(WireAddr), &m.addr, sizeof(WireAddr));
  int answered = 0;
  for (auto& [rank, m] : members) {
    if (!failed(net::send_all(m.sock, answer.data(), answer.size(), deadline, AbortFlags(stop)))) ++answered;
    m.sock.close();
  }
  if (groups.size() > 1) {
    log::info(kLog, "{}: dropped {} hellos that claimed another rank count", who, checked_in - members.size());
  }
  log::info(kLog, "{}: all {} ranks met; answered {}", who, complete, answered);
}

// Root services run on threads owned here. At process exit every one still running is told to
// stop and joined, so none outlives the objects it logs through. A child created by fork() does
// not own its parent's threads: it forgets them instead of joining.
class RootRegistry {
 public:
  static RootRegistry& get() {
    static RootRegistry registry;
    return registry;
  }

  Status start(std::unique_ptr<RootService> service) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(entries_, [](Entry& e) {
      if (e.pid != getpid() || !e.finished->load(std::memory_order_acquire)) return false;
      e.thread->join();
      return true;
    });
    Entry e;
    e.pid = getpid();
    e.finished = std::make_shared<std::atomic<bool>>(false);
    try {
      e.thread = std::make_unique<std::thread>(
          [svc = std::move(service), stop = stop_, finished = e.finished]() mutable {
            svc->run(stop.get());
            svc.reset();
            finished->store(true, std::memory_order_release);
          });
    } catch (const std::exception& ex) {
      return fail(Status::system_error, fmt::format("cannot start the bootstrap root thread: {}", ex.what()));
    }
    entries_.push_back(std::move(e));
    return Status::ok;
  }

  ~RootRegistry() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_->store(true, std::memory_order_release);
    for (Entry& e : entries_) {
      if (e.pid == getpid()) {
        e.thread->join();
      } else {
        (void)e.thread.release();  // not a thread of this process: leave it alone
      }
    }
  }

 private:
  RootRegistry() = default;
  struct Entry {
    std::unique_ptr<std::thread> thread;
    std::shared_ptr<std::atomic<bool>> finished;
    pid_t pid = 0;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
};

// Binds `bind_addr` and serves the rendezvous for `nranks` ranks (0: unknown yet) on a thread.
Status start_root(const Address& bind_addr, std::uint64_t secret, std::uint32_t nranks, bool fixed_port,
                  Address* bound) {
  auto svc = std::make_unique<RootService>();
  PURLIN_TRY(net::listen_on(bind_addr, fixed_port, &svc->listener, &svc->address));
  svc->secret = secret;
  svc->nranks = nranks;
  svc->deadline = net::deadline_after(config().bootstrap_timeout_s);
  if (bound) *bound = svc->address;
  Address where = svc->address;
  // The registry is created after the logger and config are in use, so it is destroyed first.
  log::info(kLog, "Bootstrap: root service listening on {} for {} s", where.str(), config().bootstrap_timeout_s);
  return RootRegistry::get().start(std::move(svc));
}

// ---- the mesh ----------------------------------------------------------------------------------

struct Frame {
  std::uint32_t seq = 0;
  std::vector<std::uint8_t> data;
};

struct OutFrame {
  FrameHeader header{};
  std::shared_ptr<const std::vector<std::uint8_t>> payload;
  std::size_t sent = 0;  // bytes of header + payload already written
  std::size_t total() const { return sizeof(header) + payload->size(); }
};

struct Peer {
  Socket sock;                   // the fd never changes until the Bootstrap is destroyed
  std::atomic<bool> lost{false};
  std::atomic<bool> departed{false};  // its farewell arrived: a later close is no failure
  std::string lost_why;
  // Receiving: a header, then its payload into `body`, which grows as the bytes arrive.
  std::uint8_t header_bytes[sizeof(FrameHeader)] = {};
  std::size_t header_got = 0;
  FrameHeader header{};
  bool in_body = false;
  std::vector<std::uint8_t> body;
  std::size_t body_got = 0;
  std::deque<Frame> p2p;
  std::deque<Frame> coll;
  // Sending: frames not yet handed to the kernel.
  std::deque<OutFrame> out;
};

// The secret of every id made from NCCL_COMM_ID: the same in every process.
std::uint64_t comm_id_secret(const std::string& comm_id) { return fnv1a("NCCL_COMM_ID=" + comm_id); }

}  // namespace

Status make_unique_id(UniqueId* out, IdFor whose) {
  if (!out) return fail(Status::invalid_argument, "make_unique_id: null output");
  UniqueId id{};
  id.magic = kUniqueIdMagic;
  Address root;
  const std::string& comm_id = config().comm_id;
  if (!comm_id.empty() && whose == IdFor::caller) {
    PURLIN_TRY(net::parse_address(comm_id, &root));
    if (root.is_any()) return fail(Status::invalid_argument, fmt::format("NCCL_COMM_ID={}: wildcard address", comm_id));
    // Every process that makes an id from NCCL_COMM_ID must get the same id.
    id.secret = comm_id_secret(comm_id);
    log::info(kLog, "Bootstrap: unique id for NCCL_COMM_ID={} ({}); rank 0 serves the rendezvous", comm_id, root.str());
  } else {
    PURLIN_TRY(net::random64(&id.secret));
    Address local;
    PURLIN_TRY(net::bootstrap_address(&local));
    PURLIN_TRY(start_root(local, id.secret, 0, false, &root));
  }
  std::memcpy(id.addr, &root.storage, root.len);
  id.addr_len = root.len;
  *out = id;
  return Status::ok;
}

struct Bootstrap::Impl {
  int rank = 0;
  int nranks = 0;
  std::uint64_t secret = 0;
  const std::atomic<bool>* user_abort = nullptr;
  std::atomic<bool> aborted{false};
  mutable std::atomic<bool> any_lost{false};
  // Held by every operation, and by failed_peer() while it reads pending traffic.
  std::mutex op_mu;
  std::atomic<const std::atomic<bool>*> interrupt{nullptr};
  bool left = false;  // leave() sent its farewells (under op_mu)

  bool interrupted() const {
    const std::atomic<bool>* f = interrupt.load(std::memory_order_acquire);
    return f && f->load(std::memory_order_acquire);
  }
  std::vector<std::unique_ptr<Peer>> peers;  // by rank; the caller's own entry has no socket
  std::uint32_t coll_seq = 0;
  std::vector<pollfd> fds;
  std::vector<int> fd_rank;

  AbortFlags flags() const { return AbortFlags(user_abort, &aborted); }
  Deadline op_deadline() const { return net::deadline_after(config().timeout_s); }

  void mark_lost(int r, std::string why);
  void pump_in(int r);
  void pump_out(int r);
  Status usable(const char* what, int peer) const;
  // Moves bytes on every connection until `check` returns something other than in_progress.
  Status progress(const char* what, const std::function<Status()>& check);
  Status enqueue(int peer, std::uint32_t kind, std::uint32_t seq,
                 std::shared_ptr<const std::vector<std::uint8_t>> payload);
};

void Bootstrap::Impl::mark_lost(int r, std::string why) {
  Peer& p = *peers[r];
  if (p.lost.load()) return;
  p.lost_why = std::move(why);
  p.out.clear();
  p.in_body = false;
  p.header_got = 0;
  p.body.clear();
  p.lost.store(true, std::memory_order_release);
  // Our own abort() shuts the sockets down; that is not a peer's failure.
  if (!aborted.load(std::memory_order_acquire)) {
    any_lost.store(true, std::memory_order_release);
    // Not a warning: peers leave this way at every normal teardown. An operation that needed the
    // peer reports the failure.
    log::trace(kLog, "Bootstrap: rank {} lost its connection to rank {}: {}", rank, r, p.lost_why);
  }
}

void Bootstrap::Impl::pump_in(int r) {
  Peer& p = *peers[r];
  // A budget per call keeps one busy connection from starving the others.
  std::size_t budget = std::size_t(8) << 20;
  while (budget > 0 && !p.lost.load(std::memory_order_relaxed)) {
    std::size_t n = 0;
    Io io;
    if (!p.in_body) {
      io = net::recv_some(p.sock.fd(), p.header_bytes + p.header_got, sizeof(FrameHeader) - p.header_got, &n);
      if (io == Io::done) {
        p.header_got += n;
        if (p.header_got == sizeof(FrameHeader)) {
          std::memcpy(&p.header, p.header_bytes, sizeof(FrameHeader));
          p.header_got = 0;
          if (p.header.kind == kFrameFarewell && p.header.len == 0) {
            p.departed.store(true, std::memory_order_release);
            continue;
          }
          if (p.header.kind != kFrameP2p && p.header.kind != kFrameColl) {
            mark_lost(r, fmt::format("corrupt frame (kind {:#x})", p.header.kind));
            return;
          }
          if (p.header.len > kMaxFrameBytes) {
            mark_lost(r, fmt::format("corrupt frame ({} bytes announced)", p.header.len));
            return;
          }
          p.body.clear();
          p.body_got = 0;
          p.in_body = true;
        }
      }
    } else {
      std::size_t want = std::min<std::size_t>(p.header.len - p.body_got, std::min(budget, kFrameGrowBytes));
      if (want > 0 && p.body.size() < p.body_got + want) {
        try {
          p.body.resize(p.body_got + want);
        } catch (const std::exception&) {
          mark_lost(r, fmt::format("cannot hold a frame of {} bytes", p.header.len));
          return;
        }
      }
      io = want ? net::recv_some(p.sock.fd(), p.body.data() + p.body_got, want, &n) : Io::done;
      p.body_got += n;
    }
    if (io == Io::would_block) return;
    if (io == Io::closed) { mark_lost(r, "connection closed by the peer"); return; }
    if (io == Io::error) { mark_lost(r, fmt::format("recv failed: {}", std::strerror(errno))); return; }
    budget -= std::min(budget, n);
    if (p.in_body && p.body_got == p.header.len) {
      p.body.resize(p.body_got);
      Frame f{p.header.seq, std::move(p.body)};
      (p.header.kind == kFrameP2p ? p.p2p : p.coll).push_back(std::move(f));
      p.body = {};
      p.in_body = false;
    }
  }
}

void Bootstrap::Impl::pump_out(int r) {
  Peer& p = *peers[r];
  while (!p.out.empty() && !p.lost.load(std::memory_order_relaxed)) {
    OutFrame& f = p.out.front();
    const auto* hdr = reinterpret_cast<const std::uint8_t*>(&f.header);
    std::size_t n = 0;
    Io io;
    if (f.sent < sizeof(FrameHeader)) {
      io = net::send_some2(p.sock.fd(), hdr + f.sent, sizeof(FrameHeader) - f.sent, f.payload->data(),
                           f.payload->size(), &n);
    } else {
      std::size_t off = f.sent - sizeof(FrameHeader);
      io = net::send_some(p.sock.fd(), f.payload->data() + off, f.payload->size() - off, &n);
    }
    if (io == Io::would_block) return;
    if (io == Io::closed) { mark_lost(r, "connection closed by the peer"); return; }
    if (io == Io::error) { mark_lost(r, fmt::format("send failed: {}", std::strerror(errno))); return; }
    f.sent += n;
    if (f.sent == f.total()) p.out.pop_front();
  }
}

Status Bootstrap::Impl::usable(const char* what, int peer) const {
  if (flags().raised()) return fail(Status::remote_error, fmt::format("Bootstrap {}: aborted (rank {})", what, rank));
  if (peer != rank && peers[peer]->lost.load(std::memory_order_acquire)) {
    return fail(Status::remote_error,
                fmt::format("Bootstrap {}: rank {} lost its connection to rank {} ({})", what, rank, peer,
                            peers[peer]->lost_why));
  }
  return Status::ok;
}

Status Bootstrap::Impl::enqueue(int peer, std::uint32_t kind, std::uint32_t seq,
                                std::shared_ptr<const std::vector<std::uint8_t>> payload) {
  OutFrame f;
  f.header.kind = kind;
  f.header.seq = seq;
  f.header.len = payload->size();
  f.payload = std::move(payload);
  if (peer == rank) {
    // To ourselves: straight into the inbox.
    Frame in{seq, *f.payload};
    (kind == kFrameP2p ? peers[peer]->p2p : peers[peer]->coll).push_back(std::move(in));
    return Status::ok;
  }
  peers[peer]->out.push_back(std::move(f));
  return Status::ok;
}

Status Bootstrap::Impl::progress(const char* what, const std::function<Status()>& check) {
  const Deadline deadline = op_deadline();
  for (;;) {
    if (flags().raised()) return fail(Status::remote_error, fmt::format("Bootstrap {}: aborted (rank {})", what, rank));
    if (interrupted()) return fail(Status::remote_error, fmt::format("Bootstrap {}: interrupted (rank {})", what, rank));
    for (int r = 0; r < nranks; ++r) {
      if (r != rank && !peers[r]->out.empty()) pump_out(r);
    }
    Status s = check();
    if (s != Status::in_progress) return s;
    if (Clock::now() >= deadline) {
      return fail(Status::remote_error,
                  fmt::format("Bootstrap {}: rank {} timed out after {} s", what, rank, config().timeout_s));
    }
    fds.clear();
    fd_rank.clear();
    for (int r = 0; r < nranks; ++r) {
      const Peer& p = *peers[r];
      if (r == rank || p.lost.load(std::memory_order_relaxed)) continue;
      short events = POLLIN;
      if (!p.out.empty()) events |= POLLOUT;
      fds.push_back(pollfd{p.sock.fd(), events, 0});
      fd_rank.push_back(r);
    }
    int rc = ::poll(fds.data(), fds.size(), net::slice_ms(deadline));
    if (rc < 0 && errno != EINTR) {
      return fail(Status::system_error, fmt::format("Bootstrap {}: poll failed: {}", what, std::strerror(errno)));
    }
    for (std::size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      short ev = fds[i].revents;
      if (ev & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) pump_in(fd_rank[i]);
      if (ev & (POLLOUT | POLLERR | POLLHUP)) pump_out(fd_rank[i]);
    }
  }
}

Bootstrap::Bootstrap(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Bootstrap::~Bootstrap() = default;

int Bootstrap::rank() const { return impl_->rank; }
int Bootstrap::nranks() const { return impl_->nranks; }

Status Bootstrap::create(const UniqueId& id, int rank, int nranks, const std::atomic<bool>* abort,
                         std::unique_ptr<Bootstrap>* out) {
  if (!out) return fail(Status::invalid_argument, "Bootstrap::create: null output");
  if (nranks < 1 || static_cast<std::uint32_t>(nranks) > kMaxRanks) {
    return fail(Status::invalid_argument, fmt::format("Bootstrap::create: invalid nranks {}", nranks));
  }
  if (rank < 0 || rank >= nranks) {
    return fail(Status::invalid_argument, fmt::format("Bootstrap::create: invalid rank {} (nranks {})", rank, nranks));
  }
  if (id.magic != kUniqueIdMagic) return fail(Status::invalid_argument, "Bootstrap::create: not a valid unique id");
  Address root;
  if (!Address::from_bytes(id.addr, id.addr_len, &root)) {
    return fail(Status::invalid_argument, "Bootstrap::create: the unique id holds no valid root address");
  }
  const auto started = Clock::now();
  const Deadline deadline = net::deadline_after(config().bootstrap_timeout_s);
  const AbortFlags flags(abort);
  const std::string who = fmt::format("Bootstrap rank {}/{}", rank, nranks);

  // An id made from NCCL_COMM_ID has no root service yet: rank 0 serves it. A child's id, made
  // while NCCL_COMM_ID is set too, has its service running already.
  if (rank == 0 && !config().comm_id.empty() && id.secret == comm_id_secret(config().comm_id)) {
    Status s = start_root(root, id.secret, static_cast<std::uint32_t>(nranks), true, nullptr);
    if (failed(s)) return fail(s, fmt::format("{}: cannot serve the rendezvous at NCCL_COMM_ID={}", who, config().comm_id));
  }

  Address local;
  PURLIN_TRY(net::bootstrap_address(&local));
  Socket listener;
  Address listening;
  PURLIN_TRY(net::listen_on(local, false, &listener, &listening));

  // Rendezvous: our hello to the root, then the table of every rank's listening address.
  std::vector<WireAddr> table(nranks);
  {
    Socket s;
    Status st = net::connect_to(root, deadline, flags, &s);
    if (failed(st)) return fail(st, fmt::format("{}: cannot reach the bootstrap root {}", who, root.str()));
    std::uint8_t hello_bytes[sizeof(Hello) + Address::kMaxBytes] = {};
    Hello h{kUniqueIdMagic, id.secret, kHelloRoot, static_cast<std::uint32_t>(rank),
            static_cast<std::uint32_t>(nranks), static_cast<std::uint32_t>(listening.len)};
    std::memcpy(hello_bytes, &h, sizeof(h));
    std::memcpy(hello_bytes + sizeof(h), &listening.storage, listening.len);
    st = net::send_all(s, hello_bytes, sizeof(h) + listening.len, deadline, flags);
    std::uint64_t len = 0;
    if (!failed(st)) st = net::recv_all(s, &len, sizeof(len), deadline, flags);
    if (failed(st)) return fail(st, fmt::format("{}: no answer from the bootstrap root {}", who, root.str()));
    if (len != table.size() * sizeof(WireAddr)) {
      return fail(Status::remote_error, fmt::format("{}: the root answered {} bytes, expected {}", who, len,
                                                    table.size() * sizeof(WireAddr)));
    }
    st = net::recv_all(s, table.data(), len, deadline, flags);
    if (failed(st)) return fail(st, fmt::format("{}: truncated answer from the bootstrap root", who));
  }

  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->nranks = nranks;
  impl->secret = id.secret;
  impl->user_abort = abort;
  for (int r = 0; r < nranks; ++r) impl->peers.push_back(std::make_unique<Peer>());

  // The mesh: connect to every lower rank, accept every higher one.
  for (int j = 0; j < rank; ++j) {
    Address to;
    if (!Address::from_bytes(table[j].bytes, table[j].len, &to)) {
      return fail(Status::remote_error, fmt::format("{}: the root sent a bad address for rank {}", who, j));
    }
    Socket s;
    Status st = net::connect_to(to, deadline, flags, &s);
    Hello h{kUniqueIdMagic, id.secret, kHelloMesh, static_cast<std::uint32_t>(rank),
            static_cast<std::uint32_t>(nranks), 0};
    if (!failed(st)) st = net::send_all(s, &h, sizeof(h), deadline, flags);
    if (failed(st)) return fail(st, fmt::format("{}: cannot connect to rank {} at {}", who, j, to.str()));
    impl->peers[j]->sock = std::move(s);
  }
  int accepted = 0;
  const int expected = nranks - 1 - rank;
  if (expected > 0) {
    auto admit = [&](const Hello& h, const std::uint8_t*, Socket& s, std::string* why) {
      if (h.nranks != static_cast<std::uint32_t>(nranks)) { *why = fmt::format("nranks {} differs", h.nranks); return false; }
      if (h.rank <= static_cast<std::uint32_t>(rank) || h.rank >= h.nranks) {
        *why = fmt::format("rank {} is not one that connects to rank {}", h.rank, rank);
        return false;
      }
      Peer& p = *impl->peers[h.rank];
      if (p.sock.valid()) { *why = fmt::format("duplicate rank {}", h.rank); return false; }
      p.sock = std::move(s);
      ++accepted;
      return true;
    };
    HelloGate gate(listener, id.secret, kHelloMesh, who);
    switch (gate.run(deadline, flags, admit, [&] { return accepted == expected; })) {
      case HelloGate::End::done:
        break;
      case HelloGate::End::aborted:
        return fail(Status::remote_error, fmt::format("{}: aborted while waiting for peers", who));
      case HelloGate::End::timed_out:
        return fail(Status::remote_error, fmt::format("{}: {} of {} higher ranks connected within {} s", who,
                                                      accepted, expected, config().bootstrap_timeout_s));
      case HelloGate::End::failed:
        return fail(Status::system_error, fmt::format("{}: accepting peers failed", who));
    }
  }
  listener.close();

  double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  log::info(kLog, "{}: connected to {} peers in {:.1f} ms (listening on {}, root {})", who, nranks - 1, ms,
            listening.str(), root.str());
  out->reset(new Bootstrap(std::move(impl)));
  return Status::ok;
}

Status Bootstrap::all_gather(const void* mine, std::size_t bytes, void* all) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> op(m.op_mu);
  if (bytes && (!mine || !all)) return fail(Status::invalid_argument, "Bootstrap all_gather: null buffer");
  for (int r = 0; r < m.nranks; ++r) PURLIN_TRY(m.usable("all_gather", r));
  const std::uint32_t seq = m.coll_seq++;
  auto* dst = static_cast<std::uint8_t*>(all);
  if (m.nranks > 1) {
    std::shared_ptr<const std::vector<std::uint8_t>> payload;
    try {
      const auto* src = static_cast<const std::uint8_t*>(mine);
      payload = std::make_shared<const std::vector<std::uint8_t>>(src, src + bytes);
    } catch (const std::exception&) {
      return fail(Status::system_error, fmt::format("Bootstrap all_gather: cannot buffer {} bytes", bytes));
    }
    for (int r = 0; r < m.nranks; ++r) {
      if (r != m.rank) PURLIN_TRY(m.enqueue(r, kFrameColl, seq, payload));
    }
  }
  if (bytes) std::memmove(dst + static_cast<std::size_t>(m.rank) * bytes, mine, bytes);
  PURLIN_TRY(m.progress("all_gather", [&]() -> Status {
    bool waiting = false;
    for (int r = 0; r < m.nranks; ++r) {
      if (r == m.rank) continue;
      const Peer& p = *m.peers[r];
      if (!p.out.empty() || p.coll.empty()) {
        if (p.lost.load(std::memory_order_acquire)) return m.usable("all_gather", r);
        waiting = true;
      }
    }
    return waiting ? Status::in_progress : Status::ok;
  }));
  // Take one contribution from every peer even when one is wrong, so the streams stay in step.
  Status result = Status::ok;
  for (int r = 0; r < m.nranks; ++r) {
    if (r == m.rank) continue;
    Frame f = std::move(m.peers[r]->coll.front());
    m.peers[r]->coll.pop_front();
    if (failed(result)) continue;
    if (f.seq != seq) {
      result = fail(Status::remote_error, fmt::format("Bootstrap all_gather: rank {} is at collective {} but rank {} "
                                                      "sent collective {}", m.rank, seq, r, f.seq));
    } else if (f.data.size() != bytes) {
      result = fail(Status::invalid_usage, fmt::format("Bootstrap all_gather: rank {} expected {} bytes, rank {} sent {}",
                                                       m.rank, bytes, r, f.data.size()));
    } else if (bytes) {
      std::memcpy(dst + static_cast<std::size_t>(r) * bytes, f.data.data(), bytes);
    }
  }
  return result;
}

Status Bootstrap::barrier() { return all_gather(nullptr, 0, nullptr); }

Status Bootstrap::send(int peer, const void* data, std::size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> op(m.op_mu);
  if (peer < 0 || peer >= m.nranks) {
    return fail(Status::invalid_argument, fmt::format("Bootstrap send: invalid peer {} (nranks {})", peer, m.nranks));
  }
  if (bytes && !data) return fail(Status::invalid_argument, "Bootstrap send: null buffer");
  PURLIN_TRY(m.usable("send", peer));
  std::shared_ptr<const std::vector<std::uint8_t>> payload;
  try {
    const auto* src = static_cast<const std::uint8_t*>(data);
    payload = std::make_shared<const std::vector<std::uint8_t>>(src, src + bytes);
  } catch (const std::exception&) {
    return fail(Status::system_error, fmt::format("Bootstrap send: cannot buffer {} bytes", bytes));
  }
  PURLIN_TRY(m.enqueue(peer, kFrameP2p, 0, std::move(payload)));
  if (peer == m.rank) return Status::ok;
  const Peer& p = *m.peers[peer];
  return m.progress("send", [&]() -> Status {
    if (p.lost.load(std::memory_order_acquire)) return m.usable("send", peer);
    return p.out.empty() ? Status::ok : Status::in_progress;
  });
}

Status Bootstrap::recv(int peer, void* data, std::size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> op(m.op_mu);
  if (peer < 0 || peer >= m.nranks) {
    return fail(Status::invalid_argument, fmt::format("Bootstrap recv: invalid peer {} (nranks {})", peer, m.nranks));
  }
  if (bytes && !data) return fail(Status::invalid_argument, "Bootstrap recv: null buffer");
  if (m.flags().raised()) return m.usable("recv", peer);
  Peer& p = *m.peers[peer];
  PURLIN_TRY(m.progress("recv", [&]() -> Status {
    if (!p.p2p.empty()) return Status::ok;
    // Messages that arrived before the connection was lost can still be received.
    if (p.lost.load(std::memory_order_acquire)) return m.usable("recv", peer);
    return Status::in_progress;
  }));
  Frame f = std::move(p.p2p.front());
  p.p2p.pop_front();
  if (f.data.size() != bytes) {
    return fail(Status::invalid_usage, fmt::format("Bootstrap recv: rank {} expected {} bytes from rank {}, got {}",
                                                   m.rank, bytes, peer, f.data.size()));
  }
  if (bytes) std::memcpy(data, f.data.data(), bytes);
  return Status::ok;
}

void Bootstrap::abort() {
  Impl& m = *impl_;
  if (m.aborted.exchange(true, std::memory_order_acq_rel)) return;
  // Wakes our own waits at once and tells the peers, whose operations then fail instead of
  // waiting for their deadline.
  for (int r = 0; r < m.nranks; ++r) {
    if (r != m.rank) m.peers[r]->sock.shutdown();
  }
}

bool Bootstrap::stopped() const {
  const Impl& m = *impl_;
  return m.flags().raised() || m.interrupted() || peer_lost();
}

bool Bootstrap::peer_lost() const {
  const Impl& m = *impl_;
  if (m.any_lost.load(std::memory_order_acquire)) return true;
  if (m.aborted.load(std::memory_order_acquire)) return false;
  // Liveness check: a peer that closed its end (process died or destroyed its Bootstrap) shows
  // as read-hangup, without consuming anything an operation in another thread may be reading.
  for (int r = 0; r < m.nranks; ++r) {
    const Peer& p = *m.peers[r];
    if (r == m.rank || p.lost.load(std::memory_order_acquire)) continue;
    pollfd pfd{p.sock.fd(), POLLRDHUP, 0};
    if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      m.any_lost.store(true, std::memory_order_release);
      return true;
    }
  }
  return false;
}

void Bootstrap::set_interrupt(const std::atomic<bool>* flag) { impl_->interrupt.store(flag, std::memory_order_release); }

void Bootstrap::leave() {
  Impl& m = *impl_;
  if (m.aborted.load(std::memory_order_acquire)) return;  // an abort is no orderly departure
  std::lock_guard<std::mutex> op(m.op_mu);
  if (m.left) return;
  m.left = true;
  const FrameHeader bye{kFrameFarewell, 0, 0};
  const Deadline until = net::deadline_after(kFarewellWaitS);
  for (int r = 0; r < m.nranks; ++r) {
    Peer& p = *m.peers[r];
    if (r == m.rank || p.lost.load(std::memory_order_acquire) || !p.out.empty()) continue;
    // 16 bytes into an idle connection: the kernel takes them at once unless the peer stopped
    // reading long ago, in which case it learns of our departure from the closed connection.
    // Quietly: a peer that left first is no error here.
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&bye);
    std::size_t sent = 0;
    while (sent < sizeof(bye)) {
      std::size_t n = 0;
      Io io = net::send_some(p.sock.fd(), bytes + sent, sizeof(bye) - sent, &n);
      if (io == Io::done) {
        sent += n;
        continue;
      }
      pollfd pfd{p.sock.fd(), POLLOUT, 0};
      if (io != Io::would_block || Clock::now() >= until || ::poll(&pfd, 1, net::slice_ms(until)) < 0) break;
    }
  }
}

int Bootstrap::failed_peer() {
  Impl& m = *impl_;
  if (m.aborted.load(std::memory_order_acquire)) return -1;
  std::unique_lock<std::mutex> op(m.op_mu, std::try_to_lock);
  if (op.owns_lock()) {
    // Idle: read what is pending, so that farewells and closed connections are seen.
    m.fds.clear();
    m.fd_rank.clear();
    for (int r = 0; r < m.nranks; ++r) {
      const Peer& p = *m.peers[r];
      if (r == m.rank || p.lost.load(std::memory_order_relaxed)) continue;
      m.fds.push_back(pollfd{p.sock.fd(), POLLIN, 0});
      m.fd_rank.push_back(r);
    }
    if (!m.fds.empty() && ::poll(m.fds.data(), m.fds.size(), 0) > 0) {
      for (std::size_t i = 0; i < m.fds.size(); ++i) {
        if (m.fds[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) m.pump_in(m.fd_rank[i]);
      }
    }
  }
  for (int r = 0; r < m.nranks; ++r) {
    const Peer& p = *m.peers[r];
    if (r != m.rank && p.lost.load(std::memory_order_acquire) && !p.departed.load(std::memory_order_acquire)) return r;
  }
  return -1;
}

}  // namespace purlin
