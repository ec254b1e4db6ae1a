#include "snac/executors/sm_pair_board.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "core/log.h"
#include "core/shm_gather.h"
#include "snac/executors/peer_remap.h"

namespace purlin::snac {

Status PairBoard::create(Bootstrap& boot, int device, double timeout_s, std::unique_ptr<PairBoard>* out) {
  std::unique_ptr<PairBoard> b(new PairBoard());
  b->boot_ = &boot;
  b->device_ = device;
  b->rank_ = boot.rank();
  b->nranks_ = boot.nranks();
  b->pid_ = static_cast<std::int32_t>(getpid());
  b->timeout_s_ = timeout_s;
  const std::size_t n = static_cast<std::size_t>(b->nranks_);
  PURLIN_TRY(share_segment(boot, PairSlots::bytes_for(b->nranks_), timeout_s, &b->segment_));
  b->slots_ = std::make_unique<PairSlots>(b->segment_.data(), b->rank_, b->nranks_, timeout_s);
  Status s = FdMailbox::open(&b->mailbox_);
  struct Card {
    std::int32_t pid;
    std::int32_t ok;
    FdAddress box;
  } mine{b->pid_, s == Status::ok ? 1 : 0, {}};
  if (b->mailbox_) mine.box = b->mailbox_->address();
  std::vector<Card> all(n);
  PURLIN_TRY(boot.all_gather(&mine, sizeof(Card), all.data()));
  for (const Card& c : all)
    if (!c.ok) return s != Status::ok ? s : fail(Status::remote_error, "a peer could not open its descriptor mailbox");
  for (const Card& c : all) {
    b->pids_.push_back(c.pid);
    b->boxes_.push_back(c.box);
  }
  b->sent_.resize(2 * n);
  b->held_.resize(2 * n);
  *out = std::move(b);
  return Status::ok;
}

PairBoard::~PairBoard() {
  // The executor synchronised its device before: every call that used these is complete.
  for (auto& [key, m] : maps_) cuda::vmm_free(&m.vmm);
  for (auto& [m, fence] : retiring_) cuda::vmm_free(&m);
  for (auto& [key, fd] : fds_) ::close(fd);
}

void PairBoard::reap() {
  for (std::size_t i = 0; i < retiring_.size();) {
    if (retiring_[i].second->done()) {
      cuda::vmm_free(&retiring_[i].first);
      retiring_[i] = std::move(retiring_.back());
      retiring_.pop_back();
    } else {
      ++i;
    }
  }
}

void PairBoard::release_if_unused(const Key& key) {
  auto it = maps_.find(key);
  if (it == maps_.end() || it->second.listed || it->second.graphs > 0) return;
  if (it->second.fence && !it->second.fence->done()) retiring_.emplace_back(it->second.vmm, it->second.fence);
  else cuda::vmm_free(&it->second.vmm);
  maps_.erase(it);
}

void PairBoard::take_returns() {
  for (const Key& k : returns_->take()) {
    auto it = maps_.find(k);
    if (it == maps_.end()) continue;
    --it->second.graphs;
    release_if_unused(k);
  }
}

Status PairBoard::take_fd(int from, std::uint64_t tag, int* fd) {
  *fd = -1;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (std::uint32_t spins = 0;; ++spins) {
    std::vector<ReceivedFd> got;
    mailbox_->take(boxes_, &got);
    for (const ReceivedFd& g : got) {
      auto [it, fresh] = fds_.emplace(std::make_pair(g.from, g.tag), g.fd);
      if (!fresh) ::close(g.fd);
    }
    // Descriptors of earlier messages on the same side were posted by an end that then came second.
    for (auto it = fds_.lower_bound({from, 0}); it != fds_.end() && it->first.first == from;) {
      if ((it->first.second & 1) == (tag & 1) && it->first.second < tag) {
        ::close(it->second);
        it = fds_.erase(it);
      } else {
        ++it;
      }
    }
    if (auto it = fds_.find({from, tag}); it != fds_.end()) {
      *fd = it->second;
      fds_.erase(it);
      return Status::ok;
    }
    // The owner posted it before it offered the buffer: it is normally here already.
    if (spins > 64) std::this_thread::yield();
    if (spins % 256 == 255 && (boot_->stopped() || std::chrono::duration<double>(Clock::now() - start).count() > timeout_s_))
      return fail(Status::remote_error, fmt::format("rank {}: the descriptor of rank {}'s Send/Recv buffer did not arrive",
                                                    rank_, from));
  }
}

Status PairBoard::map_peer(int owner, int owner_side, std::uint64_t q, const PairOffer& o, cudaGraph_t graph,
                           char** at) {
  const Key key{owner, owner_side, o.id};
  int fd = -1;
  if (o.fd_sent) PURLIN_TRY(take_fd(owner, q << 1 | static_cast<std::uint64_t>(owner_side), &fd));
  std::uint64_t evicted = 0;
  held_[static_cast<std::size_t>(owner_side) * static_cast<std::size_t>(nranks_) + static_cast<std::size_t>(owner)].touch(
      o.id, &evicted);
  auto it = maps_.find(key);
  if (it == maps_.end()) {
    Mapping m;
    const Status s = fd >= 0 ? cuda::vmm_import_fd(fd, o.alloc_bytes, device_, &m.vmm)
                             : fail(Status::internal_error,
                                    fmt::format("rank {}: rank {}'s Send/Recv buffer is neither mapped nor sent", rank_, owner));
    if (fd >= 0) ::close(fd);
    PURLIN_TRY(s);
    m.owner_base = o.ptr - o.offset;
    it = maps_.emplace(key, std::move(m)).first;
    log::info(log::kColl, "zero-staging: rank {} mapped rank {}'s Send/Recv buffer ({} peer allocations held for Send/Recv)",
              rank_, owner, maps_.size());
  } else if (fd >= 0) {
    ::close(fd);
  }
  it->second.listed = true;
  if (evicted) {
    auto e = maps_.find(Key{owner, owner_side, evicted});
    if (e != maps_.end()) e->second.listed = false;
    release_if_unused(Key{owner, owner_side, evicted});
  }
  *at = static_cast<char*>(it->second.vmm.ptr) + o.offset;
  if (!graph) {
    last_used_.push_back(key);
    return Status::ok;
  }
  // The graph holds the mapping until it is destroyed (counted first: a hold that fails returns it).
  ++it->second.graphs;
  return hold_in_graph(graph, returns_, std::vector<Key>{key});
}

Status PairBoard::meet(int peer, int side, char* buf, std::uint64_t bytes, cudaGraph_t graph, Role* role,
                       char** peer_buf, std::uint64_t* peer_bytes) {
  RelaxedCapture relaxed;  // events are queried and mappings made while the thread may be capturing
  *role = Role::staged;
  *peer_buf = nullptr;
  *peer_bytes = bytes;
  take_returns();
  reap();
  const bool same_process = pids_[static_cast<std::size_t>(peer)] == pid_;
  cuda::BufferShare share;
  if (!same_process) PURLIN_TRY(cuda::describe_buffer(buf, bytes, &share));
  PairHeld& sent = sent_[static_cast<std::size_t>(side) * static_cast<std::size_t>(nranks_) + static_cast<std::size_t>(peer)];
  PairOffer offered;  // this rank's offer, as prepare wrote it
  const auto prepare = [&](PairOffer* o, std::uint64_t q) {
    o->bytes = bytes;
    o->ptr = reinterpret_cast<std::uint64_t>(buf);
    o->pid = pid_;
    if (same_process) {
      o->direct = 1;
    } else if (share.kind == cuda::ShareKind::vmm_fd) {
      o->id = share.id;
      o->alloc_bytes = share.bytes;
      o->offset = o->ptr - share.base;
      int fd = -1;
      if (sent.has(share.id)) {
        o->direct = 1;
      } else if (cuda::vmm_export_buffer_fd(share.base, &fd) == Status::ok) {
        // A descriptor that cannot be sent leaves the message staged.
        bool ok = false;
        if (mailbox_->post(rank_, fd, q << 1 | static_cast<std::uint64_t>(side), boxes_[static_cast<std::size_t>(peer)],
                           &ok) != Status::ok)
          ok = false;
        ::close(fd);
        o->fd_sent = o->direct = ok ? 1 : 0;
      }
    }
    offered = *o;
  };
  bool first = false, prepared = false;
  PairOffer other;
  std::uint64_t q = 0;
  PURLIN_TRY(slots_->meet(peer, side, prepare, [this] { return boot_->stopped(); }, &first, &other, &prepared, &q));
  if (first) {
    // This rank's offer is final. A descriptor it posted, had it come second, waits at the peer
    // until the peer's next message on this side drops it.
    if (!offered.direct) return Status::ok;
    *role = Role::wait;
    std::uint64_t evicted = 0;
    if (!same_process) sent.touch(offered.id, &evicted);
    return Status::ok;
  }
  if (!other.direct) return Status::ok;
  *role = Role::move;
  *peer_bytes = other.bytes;
  if (other.pid == pid_) {
    *peer_buf = reinterpret_cast<char*>(static_cast<std::uintptr_t>(other.ptr));
    return Status::ok;
  }
  return map_peer(peer, 1 - side, q, other, graph, peer_buf);
}

Status PairBoard::launched(cudaStream_t stream) { return fence_used(stream, &last_used_, &maps_); }

void PairBoard::suspend() {
  take_returns();
  for (auto& [m, fence] : retiring_) cuda::vmm_free(&m);  // every call is complete
  retiring_.clear();
  for (auto& [key, m] : maps_) cuda::vmm_unmap(&m.vmm);
}

Status PairBoard::resume() {
  std::vector<Remap> wants;
  for (auto& [key, m] : maps_)
    if (m.vmm.ptr && !m.vmm.handle) wants.push_back(Remap{std::get<0>(key), m.owner_base, m.vmm.bytes, &m.vmm});
  return remap_peer_allocations(*boot_, device_, timeout_s_, wants, "zero-staged Send/Recv");
}

}  // namespace purlin::snac
