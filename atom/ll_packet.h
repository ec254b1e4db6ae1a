// The packet of the latency exchange (snac/protocol/exchange.h): 8 payload bytes in two 8-byte
// words, each word {4 payload bytes, 4-byte flag}. A reader that sees the awaited flag in a word
// holds that word's payload: an aligned 8-byte store or load is single-copy atomic in the PTX and
// C++ memory models, so the packet needs no fence and no separate flag (a 16-byte store is two such
// words, and the models promise nothing for the pair).
//
// The flag is {16-bit epoch, 16-bit tag}: the epoch of the call on the channel (never 0, so a zeroed
// buffer holds no packet) and the message's tag (snac::message_tag). A box is reused every second
// call, so the only stale flag a reader can meet carries the epoch two calls back: a wait compares
// for equality, and a flag with the awaited epoch and another tag means the ranks' calls differ.
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace purlin::atom {

struct alignas(16) LLPacket {
  std::uint64_t lo;  // payload bytes 0..3, flag
  std::uint64_t hi;  // payload bytes 4..7, flag
};
static_assert(sizeof(LLPacket) == 16);

// The 16-bit epoch of call `epoch` (>= 1): 1..65535, cycling, from the low 32 bits (a 32-bit
// remainder is a few instructions where a 64-bit one is dozens, and every packet's flag needs it).
// Epochs two apart, the calls that share a box, differ also across the 32-bit wrap.
PURLIN_HD constexpr std::uint32_t ll_epoch(std::uint64_t epoch) {
  return static_cast<std::uint32_t>(epoch - 1) % 65535u + 1u;
}
PURLIN_HD constexpr std::uint32_t ll_flag(std::uint64_t epoch, std::uint64_t tag) {
  return ll_epoch(epoch) << 16 | static_cast<std::uint32_t>(tag & 0xffff);
}

// The two words of a packet carrying `data` under `flag`.
PURLIN_HD constexpr std::uint64_t ll_word(std::uint32_t data, std::uint32_t flag) {
  return static_cast<std::uint64_t>(flag) << 32 | data;
}
PURLIN_HD constexpr std::uint32_t ll_word_flag(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 32); }
PURLIN_HD constexpr std::uint32_t ll_word_data(std::uint64_t w) { return static_cast<std::uint32_t>(w); }

// What a reader waiting for `want` makes of a word it read.
enum class LLArrival { pending, arrived, mismatch };
PURLIN_HD constexpr LLArrival ll_arrival(std::uint32_t seen, std::uint32_t want) {
  if (seen == want) return LLArrival::arrived;
  return (seen >> 16) == (want >> 16) ? LLArrival::mismatch : LLArrival::pending;
}

// One message to push: `bytes` from `src` (none: an empty message, one packet with no payload)
// into the consumer's box `dst`, under `flag`.
struct LLSend {
  LLPacket* dst;
  const char* src;
  std::uint64_t bytes;
  std::uint32_t flag;
};

// One message to take from box `src`, awaited under `flag`: `bytes` into `dst` (none: an empty
// message, of which only the flag is awaited).
struct LLRecv {
  const LLPacket* src;
  char* dst;
  std::uint64_t bytes;
  std::uint32_t flag;
};

// How many packets one GPU thread awaits at once (atom/sm/ll_atom.cuh): one word of each of up to
// kLLGroup messages. ll_batch_words is how many words of each message a thread takes at once; every
// method of that Atom gives word p to the same thread whatever it is, and the launch needs a thread
// per that many words. One: more words per thread and fewer threads measured slower (two ranks on
// one H200, nccl-tests AllGather of 1 KiB from a graph: 6.4 us with 8 words a thread, 4.0 with one).
inline constexpr int kLLGroup = 8;
PURLIN_HD constexpr int ll_batch_words(int messages) {
  (void)messages;
  return 1;
}

// Packets of a message of `bytes`: one per 8 bytes, and one for an empty message.
PURLIN_HD constexpr std::uint64_t ll_packets(std::uint64_t bytes) { return bytes ? (bytes + 7) / 8 : 1; }

}  // namespace purlin::atom
