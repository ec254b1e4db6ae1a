// The latency exchange of point-to-point messages: one round of a group's Send/Recv (the k-th send
// to and the k-th receive from each peer), written once over the Atom.
//
// Unlike a collective's exchange (exchange.h), only the ranks that move something take part, so no
// phase proves that a peer is done with a box: each (producer, consumer, channel) counts its
// messages 1, 2, 3, ... at both ends, message k goes into the consumer's pair box of slot
// k % kDepth under the flag of k, and the producer writes it only once the consumer has
// acknowledged message k - kDepth (the consumer's count of messages taken, which it stores into
// the producer's memory after its reads). So up to kDepth messages of a pair may be unreceived at
// once, as on the generic path (snac/window.h), and a send completes without its receive.
//
// NCCL's rule that a pair's sends and receives match in order (and in size) makes both ends count
// alike and cut the message into the same channels (pair_channels). The flag carries a tag of the
// slice's size and the message's channel count: a receive whose size differs from its send stops
// with invalid_usage (the count matters where both ends cut equal first slices of unequal messages:
// the channels only one end runs would wait for ever).
#pragma once

#include <cstdint>

#include "atom/contract.h"
#include "atom/ll_packet.h"
#include "atom/packet.h"
#include "core/hd.h"
#include "core/status.h"
#include "snac/call.h"
#include "snac/window.h"

namespace purlin::snac {

// One channel of one rank's round.
struct PairContext {
  int rank = 0;
  int nranks = 1;
  int channel = 0;
  std::uint64_t box_packets = 0;          // packets per box
  atom::LLPacket* const* pbox = nullptr;  // [nranks]: each rank's pair boxes, as mapped here
  std::uint64_t* const* acks = nullptr;   // [nranks]: each rank's ack words, as mapped here
  const std::uint64_t* sent = nullptr;    // [nranks]: messages sent to each rank on this channel so far
  const std::uint64_t* taken = nullptr;   // [nranks]: messages taken from each rank on this channel so far
  unsigned sends = 0;                     // bit d: this round sends rank d a slice on this channel
  unsigned recvs = 0;                     // bit s: this round takes a slice from rank s on this channel
  const std::int32_t* in_channels = nullptr;   // [nranks]: channels of the message to each rank
  const std::int32_t* out_channels = nullptr;  // [nranks]: channels of the message from each rank
};

// Pair boxes per rank and channel: kDepth slots per producer. Ack words per rank and channel: one
// per consumer.
PURLIN_HD constexpr std::uint64_t pair_boxes(int nranks) { return static_cast<std::uint64_t>(kDepth) * static_cast<std::uint64_t>(nranks); }

// Channels of a message of `bytes` on the pair path: one per `channel_bytes`, at most `most`; both
// ends compute it from the message's size alone.
PURLIN_HD int pair_channels(std::uint64_t bytes, std::uint64_t channel_bytes, int most) {
  const std::uint64_t want = (bytes + channel_bytes - 1) / channel_bytes;
  return want < 1 ? 1 : want > static_cast<std::uint64_t>(most) ? most : static_cast<int>(want);
}

// Rank `owner`'s box for message k from `producer`.
PURLIN_HD atom::LLPacket* pair_box(const PairContext& x, int owner, std::uint64_t k, int producer) {
  const std::uint64_t slot = k % static_cast<std::uint64_t>(kDepth);
  const std::uint64_t index = (static_cast<std::uint64_t>(x.channel) * kDepth + slot) * static_cast<std::uint64_t>(x.nranks) +
                              static_cast<std::uint64_t>(producer);
  return x.pbox[owner] + index * x.box_packets;
}

// In `producer`'s memory: how many of its messages on this channel `consumer` has taken, as a flag
// word (atom/packet.h, tag 0).
PURLIN_HD std::uint64_t* pair_ack(const PairContext& x, int producer, int consumer) {
  return x.acks[producer] + static_cast<std::uint64_t>(x.channel) * static_cast<std::uint64_t>(x.nranks) +
         static_cast<std::uint64_t>(consumer);
}

// The flag of message k carrying a slice of `bytes` of a message cut in `channels` (a 16-bit tag
// of both beside k).
PURLIN_HD std::uint32_t pair_flag(std::uint64_t k, std::uint64_t bytes, int channels) {
  const std::uint64_t key = bytes ^ static_cast<std::uint64_t>(channels) << 56;
  const std::uint64_t h = ((0x5e4dull << 48) ^ (key * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  return atom::ll_flag(k, h >> 48);
}

// The round on this channel: wait until every box this rank writes is free, push, copy to itself,
// take what the peers sent, then free their boxes. call.in[d] / call.out[s]: the channel's slices of
// the messages to d and from s (for the ranks x.sends and x.recvs name).
template <class Atom>
PURLIN_HD Status pair_call(Atom& atom, const PairContext& x, const Call& call) {
  static_assert(atom::AtomPairs<Atom>, "the pair exchange's Atom keeps the contract of atom/contract.h");
  const int n = x.nranks, me = x.rank;
  PURLIN_TRY(atom.wait_each(n, [&](int d, std::uint64_t*& word, std::uint64_t& value) {
    if (d == me || !(x.sends >> d & 1u) || x.sent[d] + 1 <= static_cast<std::uint64_t>(kDepth)) return false;
    word = pair_ack(x, me, d);
    value = atom::flag_word(x.sent[d] + 1 - kDepth);
    return true;
  }));
  atom.push(n, false, [&](int d, atom::LLSend& m) {
    if (d == me || !(x.sends >> d & 1u)) return false;
    const std::uint64_t k = x.sent[d] + 1;
    m = atom::LLSend{pair_box(x, d, k, me), call.in[d].ptr, call.in[d].bytes, pair_flag(k, call.in[d].bytes, x.in_channels[d])};
    return true;
  });
  if ((x.sends >> me & 1u) && (x.recvs >> me & 1u)) atom.copy(call.out[me].ptr, call.in[me].ptr, call.out[me].bytes);
  PURLIN_TRY(atom.receive(n, [&](int s, atom::LLRecv& m) {
    if (s == me || !(x.recvs >> s & 1u)) return false;
    const std::uint64_t k = x.taken[s] + 1;
    m = atom::LLRecv{pair_box(x, me, k, s), call.out[s].ptr, call.out[s].bytes, pair_flag(k, call.out[s].bytes, x.out_channels[s])};
    return true;
  }));
  // Every thread's reads of the boxes are done (signal_each orders them first): the producers may
  // write them again.
  atom.signal_each(n, [&](int s, std::uint64_t*& word, std::uint64_t& value) {
    if (s == me || !(x.recvs >> s & 1u)) return false;
    word = pair_ack(x, s, me);
    value = atom::flag_word(x.taken[s] + 1);
    return true;
  });
  return Status::ok;
}

}  // namespace purlin::snac
