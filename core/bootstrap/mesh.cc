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
//
// This file: the rendezvous through the root (Bootstrap::create) and the full TCP mesh after it.
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

#include "core/bootstrap/gate.h"
#include "core/bootstrap/root.h"
#include "core/bootstrap/wire.h"
#include "core/config.h"
#include "core/log.h"
#include "core/socket.h"

namespace purlin {

using namespace boot;

namespace {

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

}  // namespace

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
