// The unit of the latency path: 8 bytes of payload and the 8-byte flag word that says they are
// there. A consumer that sees the flag word of message q knows its payload is complete (the producer
// writes the payload before the flag, with release ordering, or both in one 16-byte store on a GPU).
//
// Every flag word (packet flags, the ready and ack counters of the windows) holds a message's
// sequence number in its high 48 bits and a 16-bit tag in its low bits. The tag is a hash of what
// both ends of a message must agree on (the caller's count, type, op, root); acks carry tag 0. A
// wait for word `want` ends when the word shows a later sequence number, or the same one with the
// same tag; the same sequence number with another tag means the ranks made different calls.
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace purlin::atom {

inline constexpr int kTagBits = 16;

PURLIN_HD constexpr std::uint64_t flag_word(std::uint64_t seq, std::uint64_t tag = 0) {
  return seq << kTagBits | (tag & ((1u << kTagBits) - 1));
}
PURLIN_HD constexpr std::uint64_t seq_of(std::uint64_t word) { return word >> kTagBits; }
PURLIN_HD constexpr std::uint64_t tag_of(std::uint64_t word) { return word & ((1u << kTagBits) - 1); }

// What a waiter for flag word `want` makes of the word it read.
enum class Arrival { pending, arrived, mismatch };
PURLIN_HD constexpr Arrival arrival(std::uint64_t seen, std::uint64_t want) {
  if (seq_of(seen) != seq_of(want)) return seq_of(seen) > seq_of(want) ? Arrival::arrived : Arrival::pending;
  return seen == want ? Arrival::arrived : Arrival::mismatch;
}

struct alignas(16) Packet {
  std::uint64_t data;
  std::uint64_t flag;
};
static_assert(sizeof(Packet) == 16);

// Messages handled together by the batched operations (push_each, pull_each, pull_reduce): at most
// one per peer of a communicator.
inline constexpr int kMaxBatch = 64;

// One message of packets to push: `bytes` from `src` into the packet buffer `dst`, flag word `q`.
struct PacketPush {
  Packet* dst;
  const char* src;
  std::uint64_t bytes;
  std::uint64_t q;
};

// One message of packets to receive: wait for flag word `q` in `src`, write `bytes` to `dst`. While
// it waits long, it also reads `watch` (where the producer would have notified the message had it
// sent it the other way, staged): the same sequence number there with another tag is a mismatch.
struct PacketPull {
  char* dst;
  const Packet* src;
  std::uint64_t bytes;
  std::uint64_t q;
  const std::uint64_t* watch;
};

// One source of a reduction read straight from packets (fields as in PacketPull).
struct PacketSource {
  const Packet* src;
  std::uint64_t q;
  const std::uint64_t* watch;
};

}  // namespace purlin::atom
