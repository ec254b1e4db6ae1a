// How the two ends of a zero-staged Send/Recv message agree on its roles without waiting for each
// other (snac/protocol/zero_staging.h, legs). The ranks of one host share a board in shared memory:
// for each sender and receiver a ring of kDepth slots, one per message between them in the order
// both ends make them. Each end writes its offer into the message's slot and then sets its bit of
// the slot's state word with one compare-and-swap: the end that set its bit first has come first,
// and its offer is final; the other finds that bit already set, reads the offer, and frees the slot
// for the message kDepth later. Neither ever waits for the other, except when one end is kDepth
// messages ahead of the other on the same pair and side.
//
// The state word is (generation << 2) | bits, generation = message / kDepth: a zero-filled board has
// every slot ready for its first message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"

namespace purlin::snac {

// One end's offer of a message.
struct PairOffer {
  std::uint64_t bytes = 0;
  std::uint64_t ptr = 0;          // the buffer in its owner's address space
  std::uint64_t id = 0;           // its allocation's buffer id (cuMem that exports a descriptor), else 0
  std::uint64_t alloc_bytes = 0;  // that allocation's size
  std::uint64_t offset = 0;       // where the buffer starts in it
  std::int32_t pid = 0;
  std::uint8_t direct = 0;        // its owner waits while the other end moves the message in place
  std::uint8_t fd_sent = 0;       // the allocation's descriptor was posted to the other end for it
  std::uint8_t unused[2] = {};
};

class PairSlots {
 public:
  static constexpr std::uint64_t kDepth = 32;
  // The board's size for `nranks` ranks.
  static std::size_t bytes_for(int nranks);

  // `board`: bytes_for(nranks) bytes shared by the ranks, zero-filled before any rank used it.
  PairSlots(void* board, int rank, int nranks, double timeout_s) : board_(board), rank_(rank), nranks_(nranks),
      timeout_s_(timeout_s), next_(2 * static_cast<std::size_t>(nranks), 0) {}

  // This rank's next message with `peer` on `side` (0: it sends, 1: it receives). `prepare(offer, q)`
  // writes this rank's offer for message q (of the pair and side, from 0), at most once, and only
  // while the other end has not come yet. *first: this rank came first (its offer is final);
  // otherwise *other is the other end's offer. *prepared: prepare ran. Fails after the timeout (a
  // peer kDepth messages behind), or once `stop` returns true.
  Status meet(int peer, int side, const std::function<void(PairOffer*, std::uint64_t)>& prepare,
              const std::function<bool()>& stop, bool* first, PairOffer* other, bool* prepared,
              std::uint64_t* message = nullptr);

 private:
  struct Slot;
  Slot* slot(int sender, int receiver, std::uint64_t q) const;

  void* board_;
  int rank_, nranks_;
  double timeout_s_;
  std::vector<std::uint64_t> next_;  // [side][peer]: the next message's number
};

// Which of an owner's allocations the other end of a pair keeps mapped for one side: the kHeld used
// last. The owner and the mapping end each keep this list and update it at the same messages (those
// moved in place between processes), in the same order, so the owner knows without asking whether
// the other end still holds an allocation or needs its descriptor again.
class PairHeld {
 public:
  static constexpr std::size_t kHeld = 4;
  bool has(std::uint64_t id) const;
  // Makes `id` the newest: returns whether it was held, and in *evicted the one that dropped out (0: none).
  bool touch(std::uint64_t id, std::uint64_t* evicted);

 private:
  std::uint64_t ids_[kHeld] = {};  // newest first
  std::size_t used_ = 0;
};

}  // namespace purlin::snac
