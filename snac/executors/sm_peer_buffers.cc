#include "snac/executors/sm_peer_buffers.h"

#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "core/config.h"
#include "core/log.h"
#include "snac/executors/peer_remap.h"

namespace purlin::snac {
namespace {

// One side (input or output) of a rank's call as its peers need it.
struct Side {
  std::uint64_t id = 0;      // buffer id (0: cannot be shared)
  std::uint64_t base = 0;    // the allocation's base in the owner's address space
  std::uint64_t bytes = 0;   // the allocation's size
  std::uint64_t offset = 0;  // where the buffer starts in it
  std::uint64_t ptr = 0;     // the buffer in the owner's address space (peers of its process use it)
  std::uint8_t kind = 0;     // cuda::ShareKind
  std::uint8_t unused = 0;   // the collective does not use this side of this rank: nothing to map
  cuda::IpcHandle ipc{};     // kind ipc
};

// Whether side s of an offer names an allocation of its own to map (not unused, and the output not
// in the input's allocation).
bool maps_side(const Side (&side)[2], int s) {
  if (side[s].unused) return false;
  return s == 0 || side[0].unused || side[1].id != side[0].id;
}

Status describe(const void* ptr, std::uint64_t bytes, Side* s) {
  cuda::BufferShare b;
  PURLIN_TRY(cuda::describe_buffer(ptr, bytes, &b));
  *s = Side{};
  s->ptr = reinterpret_cast<std::uint64_t>(ptr);
  if (b.kind == cuda::ShareKind::none) return Status::ok;
  s->id = b.id;
  s->base = b.base;
  s->bytes = b.bytes;
  s->offset = s->ptr - b.base;
  s->kind = static_cast<std::uint8_t>(b.kind);
  if (b.kind == cuda::ShareKind::ipc &&
      cuda::ipc_export(reinterpret_cast<void*>(static_cast<std::uintptr_t>(b.base)), &s->ipc) != Status::ok)
    s->id = 0;
  return Status::ok;
}

}  // namespace

struct PeerBuffers::Offer {
  std::int32_t pid = 0;
  std::int32_t ok = 0;
  std::uint64_t key = 0;
  Side side[2];
  FdAddress mailbox{};
};

PeerBuffers::~PeerBuffers() {
  // The executor synchronised its device before: every call that used these is complete.
  for (auto& [key, m] : mapped_) unmap(m);
  for (auto& [m, fence] : retiring_) unmap(m);
}

std::size_t PeerBuffers::held_eager() const {
  std::size_t k = 0;
  for (const auto& [key, m] : mapped_) k += m.eager ? 1 : 0;
  return k;
}

void PeerBuffers::release(std::map<Key, Mapping>::iterator it) {
  Mapping& m = it->second;
  std::shared_ptr<MappingFence> fence = m.fence;
  if (fence && !fence->done()) retiring_.emplace_back(std::move(m), std::move(fence));
  else unmap(m);
  mapped_.erase(it);
}

void PeerBuffers::drop_eager(const Key& key, bool now) {
  auto it = mapped_.find(key);
  if (it == mapped_.end()) return;
  it->second.eager = false;
  if (it->second.graphs > 0) return;
  // The owner freed the allocation after its own part of the last call that used it, and that
  // call's barriers let no rank finish before every rank is done moving: what is left to wait
  // for is the tail of this rank's kernel.
  if (now && it->second.fence) cudaEventSynchronize(it->second.fence->event);
  release(it);
}

void PeerBuffers::drop_stale(const std::vector<Offer>& all) {
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    for (const Side& side : all[p].side) {
      for (auto it = agreed_.lower_bound(Key{p, 0}); it != agreed_.end() && it->first.first == p;) {
        const Agreed& a = it->second;
        const bool overlaps = a.base < side.base + side.bytes && side.base < a.base + a.bytes;
        if (it->first.second != side.id && overlaps) {
          drop_eager(it->first, true);
          it = agreed_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
}

void PeerBuffers::reap() {
  for (std::size_t i = 0; i < retiring_.size();) {
    if (retiring_[i].second->done()) {
      unmap(retiring_[i].first);
      retiring_[i] = std::move(retiring_.back());
      retiring_.pop_back();
    } else {
      ++i;
    }
  }
}

void PeerBuffers::unmap(Mapping& m) {
  if (m.vmm.ptr) cuda::vmm_free(&m.vmm);
  if (m.ipc) cuda::ipc_close(m.ipc);
  m = Mapping{};
}

void PeerBuffers::take_returns() {
  for (const Key& k : returns_->take()) {
    auto it = mapped_.find(k);
    if (it == mapped_.end() || --it->second.graphs > 0 || it->second.eager) continue;
    release(it);
  }
}

Status PeerBuffers::describe_call(const Mine& mine, Offer* my) {
  *my = Offer{};
  my->pid = getpid();
  my->key = mine.key;
  my->mailbox = mailbox_->address();
  const void* ptrs[2] = {mine.in, mine.out};
  const std::uint64_t bytes[2] = {mine.in_bytes, mine.out_bytes};
  bool ok = true;
  for (int s = 0; s < 2; ++s) {
    if (ptrs[s]) PURLIN_TRY(describe(ptrs[s], bytes[s], &my->side[s]));
    else my->side[s].unused = 1;
    ok = ok && (my->side[s].unused || my->side[s].id);
  }
  const std::uint64_t in0 = my->side[0].ptr, out0 = my->side[1].ptr;
  const bool overlap = mine.in && mine.out && in0 < out0 + mine.out_bytes && out0 < in0 + mine.in_bytes;
  const bool same = mine.in == mine.out && mine.in_bytes == mine.out_bytes;
  my->ok = ok && (mine.overlap_ok || !overlap || same);
  return Status::ok;
}

std::vector<PeerBuffers::Key> PeerBuffers::call_keys(const std::vector<Offer>& all, const Offer& my,
                                                     bool mapped_only) const {
  const int me = boot_->rank();
  std::vector<Key> keys;
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    if (mapped_only && (p == me || all[p].pid == my.pid)) continue;
    for (int s = 0; s < 2; ++s)
      if (maps_side(all[p].side, s)) keys.push_back(Key{p, all[p].side[s].id});
  }
  return keys;
}

Status PeerBuffers::map_peers(const std::vector<Offer>& all, const Offer& my, bool* all_ok) {
  *all_ok = false;
  const int n = boot_->nranks(), me = boot_->rank();
  // Map what is new: CUDA IPC at once, cuMem through descriptors the owners send on request.
  bool ok = true;
  std::size_t fresh = 0;
  std::uint64_t need[2] = {0, 0};  // bit p: peer p's descriptor for side s
  for (int p = 0; p < n; ++p) {
    if (p == me || all[p].pid == my.pid) continue;
    for (int s = 0; s < 2; ++s) {
      const Side& side = all[p].side[s];
      const Key key{p, side.id};
      if (!maps_side(all[p].side, s) || mapped_.count(key)) continue;
      if (side.kind == static_cast<std::uint8_t>(cuda::ShareKind::ipc)) {
        Mapping m;
        if (cuda::ipc_import(side.ipc, &m.ipc) != Status::ok) {
          ok = false;
          continue;
        }
        m.base = static_cast<char*>(m.ipc);
        mapped_[key] = m;
        ++fresh;
      } else {
        need[s] |= std::uint64_t{1} << p;
      }
    }
  }
  std::vector<std::uint64_t> needs(2 * static_cast<std::size_t>(n));
  PURLIN_TRY(boot_->all_gather(need, sizeof(need), needs.data()));
  std::vector<FdAddress> boxes(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) boxes[r] = all[r].mailbox;
  // A mailbox takes one descriptor per sender and exchange: the output's descriptors go only once
  // every rank is done with the input's (a barrier, where both sides have some).
  bool any[2] = {false, false};
  for (int q = 0; q < n; ++q)
    for (int s = 0; s < 2; ++s) any[s] = any[s] || needs[2 * q + s] != 0;
  for (int s = 0; s < 2; ++s) {
    if (!any[s]) continue;
    if (s == 1 && any[0]) PURLIN_TRY(boot_->barrier());
    std::vector<int> to, from;
    for (int q = 0; q < n; ++q) {
      if (needs[2 * q + s] >> me & 1) to.push_back(q);
      if (need[s] >> q & 1) from.push_back(q);
    }
    if (to.empty() && from.empty()) continue;
    int fd = -1;
    Status st = Status::ok;
    if (!to.empty()) st = cuda::vmm_export_buffer_fd(my.side[s].base, &fd);
    // A rank that cannot export still takes part: its peers' waits end at the timeout, and every
    // rank then stages the call.
    std::vector<ReceivedFd> got;
    if (st == Status::ok)
      st = mailbox_->exchange(me, fd, to, from, boxes, timeout_s_, [this] { return boot_->stopped(); }, &got);
    if (fd >= 0) ::close(fd);
    if (st != Status::ok) ok = false;
    for (const ReceivedFd& g : got) {
      Mapping m;
      if (ok && cuda::vmm_import_fd(g.fd, all[g.from].side[s].bytes, device_, &m.vmm) == Status::ok) {
        m.base = static_cast<char*>(m.vmm.ptr);
        m.owner_base = all[g.from].side[s].base;
        mapped_[Key{g.from, all[g.from].side[s].id}] = m;
        ++fresh;
      } else {
        ok = false;
      }
      ::close(g.fd);
    }
  }
  // Every rank goes only if every rank mapped everything.
  const std::int32_t mapped_ok = ok ? 1 : 0;
  std::vector<std::int32_t> oks(static_cast<std::size_t>(n));
  PURLIN_TRY(boot_->all_gather(&mapped_ok, sizeof(mapped_ok), oks.data()));
  if (fresh) log::info(log::kColl, "zero-staging: rank {} mapped {} more peer allocations ({} held)", me, fresh, mapped_.size());
  for (std::int32_t o : oks)
    if (!o) return Status::ok;
  *all_ok = true;
  return Status::ok;
}

void PeerBuffers::point(const std::vector<Offer>& all, const Offer& my, const char** in, char** out) const {
  const int n = boot_->nranks(), me = boot_->rank();
  for (int p = 0; p < n; ++p) {
    for (int s = 0; s < 2; ++s) {
      const Side& side = all[p].side[s];
      char* at = reinterpret_cast<char*>(static_cast<std::uintptr_t>(side.ptr));
      if (side.unused) {
        at = nullptr;
      } else if (p != me && all[p].pid != my.pid) {
        const int from = maps_side(all[p].side, s) ? s : 0;
        at = mapped_.at(Key{p, all[p].side[from].id}).base + side.offset;
      }
      if (s == 0) in[p] = at;
      else out[p] = at;
    }
  }
}

Status PeerBuffers::share(const Mine& mine, cudaGraph_t graph, bool* go, const char** in, char** out) {
  *go = false;
  const int n = boot_->nranks();
  RelaxedCapture relaxed;
  take_returns();
  reap();
  if (!mailbox_) PURLIN_TRY(FdMailbox::open(&mailbox_));

  Offer my;
  PURLIN_TRY(describe_call(mine, &my));
  std::vector<Offer> all(static_cast<std::size_t>(n));
  PURLIN_TRY(boot_->all_gather(&my, sizeof(Offer), all.data()));
  for (const Offer& o : all)
    if (!o.ok || o.key != my.key) return Status::ok;  // every rank sees the same offers
  drop_stale(all);
  bool ok = false;
  PURLIN_TRY(map_peers(all, my, &ok));
  if (!ok) return Status::ok;
  point(all, my, in, out);
  const std::vector<Key> used = call_keys(all, my, true);
  // The graph holds what it uses until it is destroyed (counted first: a hold that fails returns them).
  if (!used.empty()) {
    for (const Key& k : used) ++mapped_.at(k).graphs;
    PURLIN_TRY(hold_in_graph(graph, returns_, used));
  }
  *go = true;
  return Status::ok;
}

Status PeerBuffers::start_eager() { return ShmGather::create(*boot_, sizeof(Offer), timeout_s_, &gather_); }

Status PeerBuffers::share_eager(const Mine& mine, std::uint64_t call, bool* go, const char** in, char** out) {
  *go = false;
  last_used_.clear();
  if (!gather_) return fail(Status::internal_error, "zero-staging outside graphs was not set up");
  const int n = boot_->nranks();
  take_returns();
  reap();
  if (!mailbox_) PURLIN_TRY(FdMailbox::open(&mailbox_));

  Offer my;
  PURLIN_TRY(describe_call(mine, &my));
  std::vector<Offer> all(static_cast<std::size_t>(n));
  eager_met_ = call;
  PURLIN_TRY(gather_->all_gather(&my, all.data(), [this] { return boot_->stopped(); }, call));
  for (const Offer& o : all)
    if (!o.ok || o.key != my.key) return Status::ok;  // every rank sees the same offers

  // Every rank's allocations of this call, as every rank names them.
  ++eager_calls_;
  drop_stale(all);
  const std::vector<Key> keys = call_keys(all, my, false);
  bool fresh = false;
  for (const Key& k : keys) {
    if (refused_.count(k)) return Status::ok;
    fresh = fresh || !agreed_.count(k);
  }
  if (fresh) {
    bool ok = false;
    PURLIN_TRY(map_peers(all, my, &ok));
    if (!ok) {
      for (const Key& k : keys)
        if (!agreed_.count(k)) refused_.insert(k);
      log::info(log::kColl, "zero-staging: rank {} of {}: some rank could not map every rank's buffers; calls on "
                "these allocations are staged", boot_->rank(), n);
      return Status::ok;
    }
  }
  for (const Key& k : keys) {
    const Side& side = all[k.first].side[maps_side(all[k.first].side, 0) && all[k.first].side[0].id == k.second ? 0 : 1];
    agreed_[k] = Agreed{eager_calls_, side.base, side.bytes};
  }
  std::vector<Key> used = call_keys(all, my, true);
  for (const Key& k : used) mapped_.at(k).eager = true;
  // Each rank's allocations beyond the last kEagerPerOwner it used drop out, alike everywhere; this
  // call's are the newest, and a call uses at most two of a rank's.
  for (int p = 0; p < n; ++p) {
    for (;;) {
      std::size_t count = 0;
      auto oldest = agreed_.end();
      for (auto it = agreed_.lower_bound(Key{p, 0}); it != agreed_.end() && it->first.first == p; ++it) {
        ++count;
        if (oldest == agreed_.end() || it->second.last < oldest->second.last) oldest = it;
      }
      if (count <= kEagerPerOwner) break;
      drop_eager(oldest->first, false);
      agreed_.erase(oldest);
    }
  }
  point(all, my, in, out);
  last_used_ = std::move(used);
  *go = true;
  return Status::ok;
}

Status PeerBuffers::launched(cudaStream_t stream) { return fence_used(stream, &last_used_, &mapped_); }

void PeerBuffers::suspend() {
  take_returns();
  for (auto& [m, fence] : retiring_) unmap(m);  // every call is complete
  retiring_.clear();
  for (auto& [key, m] : mapped_) cuda::vmm_unmap(&m.vmm);  // CUDA IPC mappings stay
}

Status PeerBuffers::resume() {
  std::vector<Remap> wants;
  for (auto& [key, m] : mapped_)
    if (m.vmm.ptr && !m.vmm.handle) wants.push_back(Remap{key.first, m.owner_base, m.vmm.bytes, &m.vmm});
  return remap_peer_allocations(*boot_, device_, timeout_s_, wants, "zero-staging");
}

}  // namespace purlin::snac
