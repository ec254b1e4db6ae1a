#include "snac/executors/pair_slots.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <fmt/format.h>

namespace purlin::snac {

struct PairSlots::Slot {
  alignas(64) std::uint64_t state;
  PairOffer offer[2];  // [side]: the sender's, the receiver's
};

std::size_t PairSlots::bytes_for(int nranks) {
  const std::size_t n = static_cast<std::size_t>(nranks);
  return n * n * kDepth * sizeof(Slot);
}

PairSlots::Slot* PairSlots::slot(int sender, int receiver, std::uint64_t q) const {
  const std::size_t index =
      (static_cast<std::size_t>(sender) * static_cast<std::size_t>(nranks_) + static_cast<std::size_t>(receiver)) * kDepth +
      static_cast<std::size_t>(q % kDepth);
  return static_cast<Slot*>(board_) + index;
}

Status PairSlots::meet(int peer, int side, const std::function<void(PairOffer*, std::uint64_t)>& prepare,
                       const std::function<bool()>& stop, bool* first, PairOffer* other, bool* prepared,
                       std::uint64_t* message) {
  *first = false;
  *prepared = false;
  std::uint64_t& next = next_[static_cast<std::size_t>(side) * static_cast<std::size_t>(nranks_) +
                              static_cast<std::size_t>(peer)];
  const std::uint64_t q = next, gen = q / kDepth;
  if (message) *message = q;
  Slot* s = side == 0 ? slot(rank_, peer, q) : slot(peer, rank_, q);
  std::atomic_ref<std::uint64_t> state(s->state);
  const std::uint64_t mine = std::uint64_t{1} << side, theirs = std::uint64_t{1} << (1 - side);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  std::uint64_t seen = state.load(std::memory_order_acquire);
  for (std::uint32_t spins = 0; seen >> 2 != gen; ++spins, seen = state.load(std::memory_order_acquire)) {
    if (seen >> 2 > gen)
      return fail(Status::internal_error, fmt::format("rank {}: the Send/Recv board's slot with rank {} is ahead of "
                                                      "message {}", rank_, peer, q));
    if (spins < 64) continue;
    std::this_thread::yield();
    if (spins % 256 != 0) continue;
    if (stop && stop()) return fail(Status::remote_error, fmt::format("rank {} stopped while waiting for rank {}", rank_, peer));
    if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s_)
      return fail(Status::remote_error,
                  fmt::format("rank {}: rank {} did not reach its Send/Recv message {} messages behind this rank's within "
                              "{} s", rank_, peer, kDepth, timeout_s_));
  }
  for (;;) {
    if (seen & theirs) {
      *other = s->offer[1 - side];
      state.store((gen + 1) << 2, std::memory_order_release);
      ++next;
      return Status::ok;
    }
    if (!*prepared) {
      s->offer[side] = PairOffer{};
      prepare(&s->offer[side], q);
      *prepared = true;
    }
    // Only the other end's bit can change the word meanwhile: a failed swap means it came first.
    if (state.compare_exchange_strong(seen, seen | mine, std::memory_order_acq_rel, std::memory_order_acquire)) {
      *first = true;
      ++next;
      return Status::ok;
    }
  }
}

bool PairHeld::has(std::uint64_t id) const {
  for (std::size_t i = 0; i < used_; ++i)
    if (ids_[i] == id) return true;
  return false;
}

bool PairHeld::touch(std::uint64_t id, std::uint64_t* evicted) {
  *evicted = 0;
  std::size_t at = used_;
  for (std::size_t i = 0; i < used_; ++i)
    if (ids_[i] == id) at = i;
  const bool held = at < used_;
  if (!held) {
    if (used_ < kHeld) at = used_++;
    else *evicted = ids_[at = kHeld - 1];
  }
  for (std::size_t i = at; i > 0; --i) ids_[i] = ids_[i - 1];
  ids_[0] = id;
  return held;
}

}  // namespace purlin::snac
