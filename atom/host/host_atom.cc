#include "atom/host/host_atom.h"

#include <sched.h>
#include <time.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

namespace purlin::atom {
namespace {

// Spin briefly, then yield, then sleep: ranks often outnumber cores on the host datapath.
class Backoff {
 public:
  void pause() {
    ++spins_;
    if (spins_ < 64) return;
    if (spins_ < 4096) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  bool check_now() const { return (spins_ & 255) == 0; }

 private:
  std::uint64_t spins_ = 0;
};

}  // namespace

Status HostAtom::mismatched(const std::uint64_t* flag, std::uint64_t seen, std::uint64_t want) const {
  if (guard_.failed) guard_.failed->store(true);
  return fail(Status::invalid_usage,
              fmt::format("{}: message {} arrived with tag {:04x} at {}, this rank's call expects tag {:04x}",
                          kDifferentArguments, seq_of(want), tag_of(seen), static_cast<const void*>(flag), tag_of(want)));
}

Status HostAtom::wait_word(std::uint64_t* flag, std::uint64_t value, const std::uint64_t* watch) const {
  std::atomic_ref<std::uint64_t> f(*flag);
  if (arrival(f.load(std::memory_order_acquire), value) == Arrival::arrived) return Status::ok;
  Backoff backoff;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const std::uint64_t seen = f.load(std::memory_order_acquire);
    const Arrival a = arrival(seen, value);
    if (a == Arrival::arrived) return Status::ok;
    if (a == Arrival::mismatch) return mismatched(flag, seen, value);
    backoff.pause();
    if (!backoff.check_now()) continue;
    if (watch) {
      const std::uint64_t said =
          std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(watch)).load(std::memory_order_relaxed);
      if (arrival(said, value) == Arrival::mismatch) return mismatched(watch, said, value);
    }
    PURLIN_TRY(stalled(start, [&] {
      return fmt::format("waiting for message {} at {}, seen {}", seq_of(value), static_cast<void*>(flag), seq_of(f.load()));
    }));
  }
}

template <class What>
Status HostAtom::stalled(std::chrono::steady_clock::time_point start, What&& what) const {
  if (guard_.fault) {
    const std::uint64_t fault =
        std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(guard_.fault)).load(std::memory_order_acquire);
    if (fault != 0) {
      if (guard_.failed) guard_.failed->store(true);
      return fail(static_cast<Status>(fault), fmt::format("a peer found that {}", kDifferentArguments));
    }
  }
  if (guard_.failed && guard_.failed->load(std::memory_order_relaxed)) return Status::remote_error;
  if (guard_.abort && guard_.abort->load(std::memory_order_relaxed)) {
    if (guard_.failed) guard_.failed->store(true);
    return fail(Status::remote_error, "wait ended: the communicator was aborted");
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (waited > guard_.timeout_s) {
    if (guard_.failed) guard_.failed->store(true);
    return fail(Status::remote_error,
                fmt::format("a peer did not answer within {:.0f} s (PURLIN_TIMEOUT): {}", guard_.timeout_s, what()));
  }
  return Status::ok;
}

void HostAtom::push_ll(LLPacket* dst, const char* src, std::uint64_t bytes, std::uint32_t flag) const {
  const std::uint64_t packets = ll_packets(bytes);
  for (std::uint64_t p = 0; p < packets; ++p) {
    std::uint64_t v = 0;
    if (p * 8 < bytes) std::memcpy(&v, src + 8 * p, bytes - p * 8 < 8 ? bytes - p * 8 : 8);
    std::atomic_ref<std::uint64_t>(dst[p].lo).store(ll_word(ll_word_data(v), flag), std::memory_order_release);
    std::atomic_ref<std::uint64_t>(dst[p].hi).store(ll_word(static_cast<std::uint32_t>(v >> 32), flag),
                                                    std::memory_order_release);
  }
}

Status HostAtom::pull_ll(char* dst, const LLPacket* src, std::uint64_t bytes, std::uint32_t flag) const {
  const std::uint64_t packets = ll_packets(bytes);
  for (std::uint64_t p = 0; p < packets; ++p) {
    std::atomic_ref<std::uint64_t> lo(const_cast<LLPacket*>(src)[p].lo), hi(const_cast<LLPacket*>(src)[p].hi);
    Backoff backoff;
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t a = lo.load(std::memory_order_acquire), b = hi.load(std::memory_order_acquire);
    while (ll_word_flag(a) != flag || ll_word_flag(b) != flag) {
      for (std::uint64_t w : {a, b})
        if (ll_arrival(ll_word_flag(w), flag) == LLArrival::mismatch) {
          if (guard_.failed) guard_.failed->store(true);
          return fail(Status::invalid_usage,
                      fmt::format("{}: a packet arrived with tag {:04x} at {}, this rank's call expects tag {:04x}",
                                  kDifferentArguments, ll_word_flag(w) & 0xffff, static_cast<const void*>(src + p),
                                  flag & 0xffff));
        }
      backoff.pause();
      if (backoff.check_now())
        PURLIN_TRY(stalled(start, [&] { return fmt::format("waiting for a packet at {}", static_cast<const void*>(src + p)); }));
      a = lo.load(std::memory_order_acquire);
      b = hi.load(std::memory_order_acquire);
    }
    if (p * 8 < bytes) {
      const std::uint64_t v = static_cast<std::uint64_t>(ll_word_data(b)) << 32 | ll_word_data(a);
      std::memcpy(dst + 8 * p, &v, bytes - p * 8 < 8 ? bytes - p * 8 : 8);
    }
  }
  return Status::ok;
}

void HostAtom::push(Packet* dst, const char* src, std::size_t bytes, std::uint64_t q) const {
  std::size_t words = bytes / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t v;
    std::memcpy(&v, src + 8 * i, 8);
    std::atomic_ref<std::uint64_t>(dst[i].data).store(v, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(dst[i].flag).store(q, std::memory_order_release);
  }
  if (std::size_t tail = bytes % 8) {
    std::uint64_t v = 0;
    std::memcpy(&v, src + 8 * words, tail);
    std::atomic_ref<std::uint64_t>(dst[words].data).store(v, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(dst[words].flag).store(q, std::memory_order_release);
  }
}

Status HostAtom::pull(char* dst, Packet* src, std::size_t bytes, std::uint64_t q, const std::uint64_t* watch) const {
  std::size_t packets = (bytes + 7) / 8;
  for (std::size_t i = 0; i < packets; ++i) {
    PURLIN_TRY(wait_word(&src[i].flag, q, watch));
    std::uint64_t v = std::atomic_ref<std::uint64_t>(src[i].data).load(std::memory_order_relaxed);
    std::size_t n = (i + 1) * 8 <= bytes ? 8 : bytes - i * 8;
    std::memcpy(dst + 8 * i, &v, n);
  }
  return Status::ok;
}

}  // namespace purlin::atom
