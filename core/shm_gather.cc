#include "core/shm_gather.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/fd_passing.h"

namespace purlin {

// A slot: the round its record belongs to (plus one; 0 until the first post) and the call it names,
// then the record.
struct ShmGather::Slot {
  std::uint64_t posted;
  std::uint64_t call;
};

namespace {
constexpr std::size_t kHeader = 64;  // a cache line for the slot's words, the record after it
}

ShmGather::Slot* ShmGather::slot(int rank, std::uint64_t round) const {
  const std::size_t index = static_cast<std::size_t>(rank) * 2 + static_cast<std::size_t>(round & 1);
  return reinterpret_cast<Slot*>(static_cast<char*>(segment_.data()) + index * slot_bytes_);
}

// After the slots, a cache line per rank: the last call it passed (0: none).
std::uint64_t* ShmGather::passed(int rank) const {
  const std::size_t at = slot_bytes_ * 2 * static_cast<std::size_t>(nranks_) + static_cast<std::size_t>(rank) * kHeader;
  return reinterpret_cast<std::uint64_t*>(static_cast<char*>(segment_.data()) + at);
}

void ShmGather::pass(std::uint64_t call) {
  std::atomic_ref<std::uint64_t>(*passed(rank_)).store(call, std::memory_order_release);
}

Status share_segment(Bootstrap& boot, std::size_t bytes, double timeout_s, ShmSegment* out) {
  const int me = boot.rank(), n = boot.nranks();
  // Every rank takes part in each exchange whatever failed before it, so that none waits for the
  // others until the timeout; a failure anywhere fails the creation everywhere.
  Status s = me == 0 ? ShmSegment::create(bytes, out) : Status::ok;
  std::unique_ptr<FdMailbox> box;
  if (s == Status::ok) s = FdMailbox::open(&box);
  FdAddress mine{};
  if (box) mine = box->address();
  std::vector<FdAddress> boxes(static_cast<std::size_t>(n));
  PURLIN_TRY(boot.all_gather(&mine, sizeof(mine), boxes.data()));
  // This rank's status `s` where it failed, a peer's failure where only the peer did.
  auto everyone_ok = [&](const char* what) {
    std::vector<std::int32_t> oks(static_cast<std::size_t>(n));
    const std::int32_t ok = s == Status::ok ? 1 : 0;
    PURLIN_TRY(boot.all_gather(&ok, sizeof(ok), oks.data()));
    for (std::int32_t o : oks)
      if (!o) return s != Status::ok ? s : fail(Status::remote_error, fmt::format("a peer could not {}", what));
    return Status::ok;
  };
  PURLIN_TRY(everyone_ok("set up its shared memory"));
  if (n > 1) {
    std::vector<int> to, from;
    if (me == 0)
      for (int r = 1; r < n; ++r) to.push_back(r);
    else
      from.push_back(0);
    std::vector<ReceivedFd> got;
    s = box->exchange(me, me == 0 ? out->fd() : -1, to, from, boxes, timeout_s, [&boot] { return boot.stopped(); },
                      &got);
    for (const ReceivedFd& r : got) {
      if (s == Status::ok) s = ShmSegment::map(r.fd, bytes, out);
      ::close(r.fd);
    }
    PURLIN_TRY(everyone_ok("map the shared memory"));
  }
  out->close_fd();
  return Status::ok;
}

Status ShmGather::create(Bootstrap& boot, std::size_t record_bytes, double timeout_s, std::unique_ptr<ShmGather>* out) {
  std::unique_ptr<ShmGather> g(new ShmGather());
  g->rank_ = boot.rank();
  g->nranks_ = boot.nranks();
  g->record_bytes_ = record_bytes;
  g->slot_bytes_ = kHeader + (record_bytes + kHeader - 1) / kHeader * kHeader;
  g->timeout_s_ = timeout_s;
  const std::size_t n = static_cast<std::size_t>(g->nranks_);
  PURLIN_TRY(share_segment(boot, g->slot_bytes_ * 2 * n + kHeader * n, timeout_s, &g->segment_));
  *out = std::move(g);
  return Status::ok;
}

Status ShmGather::all_gather(const void* mine, void* all, const std::function<bool()>& stop, std::uint64_t call) {
  if (broken_)
    return fail(Status::internal_error, "the ranks' shared-memory agreement failed before and cannot be used again");
  const std::uint64_t want = round_ + 1;
  Slot* own = slot(rank_, round_);
  own->call = call;
  std::memcpy(reinterpret_cast<char*>(own) + kHeader, mine, record_bytes_);
  std::atomic_ref<std::uint64_t>(own->posted).store(want, std::memory_order_release);
  const auto differed = [&](const std::string& how) {
    broken_ = true;
    return fail(Status::invalid_usage, fmt::format("{}: {}", kDifferentArguments, how));
  };
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (int p = 0; p < nranks_; ++p) {
    Slot* s = slot(p, round_);
    std::atomic_ref<std::uint64_t> posted(s->posted);
    for (std::uint32_t spins = 0; posted.load(std::memory_order_acquire) != want; ++spins) {
      // Spin briefly (a peer's post is usually near), then give the core away: ranks as threads
      // may outnumber the cores.
      if (spins < 64) continue;
      // A peer that ran this call (or a later one) without a round will not post this one. Its
      // post comes before its pass: a post made since the first load shows now.
      if (call && std::atomic_ref<std::uint64_t>(*passed(p)).load(std::memory_order_acquire) >= call &&
          posted.load(std::memory_order_acquire) != want)
        return differed(fmt::format("rank {} ran call {} another way than rank {}", p, call, rank_));
      std::this_thread::yield();
      if (spins % 256 != 0) continue;
      if (stop && stop()) {
        broken_ = true;
        return fail(Status::remote_error, fmt::format("rank {} stopped while waiting for rank {} to agree on a call", rank_, p));
      }
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s_) {
        broken_ = true;
        return fail(Status::remote_error,
                    fmt::format("rank {}: rank {} did not reach the same call within {} s (every rank must make the "
                                "same calls in the same order)", rank_, p, timeout_s_));
      }
    }
    if (call && s->call != call)
      return differed(fmt::format("rank {} met rank {} at its call {} for rank {}'s call {}", p, rank_, s->call, rank_, call));
    std::memcpy(static_cast<char*>(all) + static_cast<std::size_t>(p) * record_bytes_,
                reinterpret_cast<const char*>(s) + kHeader, record_bytes_);
  }
  ++round_;
  return Status::ok;
}

}  // namespace purlin
