// The latency exchange: SNAC's latency path in its lean form, for calls whose messages are small
// enough to travel as packets (atom/ll_packet.h), written once over the Atom and the declaration.
//
// A call is one or two phases (a plain declaration, or both parts of a composition). In every
// phase every rank sends every other rank exactly one message, stage and notify in one: packets
// pushed into the consumer's box for (phase, producer). Where the declaration gives a pair nothing
// to move (a rank that neither produces for nor consumes from a peer: Broadcast away from the root,
// Reduce at non-roots, Gather and Scatter), the message is empty and travels as one packet with a
// flag and no payload.
//
// Why no acknowledgement is needed: a box has two parities, and call e writes parity e % 2. The
// producer writes the consumer's box of parity e % 2 in call e only after it has received the
// consumer's message of call e - 1 (every phase is such a full exchange, and a rank's call ends
// only when all its messages have arrived), which the consumer sent after its call e - 2 had ended,
// reads of that box included (calls of one rank run in stream order; a kernel launched early waits
// for the one before it to complete). So every phase of every call synchronises all ranks, and a
// box is free again whenever it is written.
//
// The epoch: one counter per channel, in the rank's own memory, counting the calls that used the
// channel; every rank computes the same channel count for a call from its sizes, so the channels'
// epochs agree across ranks. It is the packets' flag (with the message's tag), so no counter is
// copied in and out per call and nothing is reset.
//
// Layouts decide, at compile time, what goes where (as in snac/protocol/messages.h): a scattered input sends
// partition d to rank d, a packed one its whole self to every consumer; a packed reduce output
// folds every producer's contribution in rank order 0..n-1 (this rank's own read straight from its
// input), scattered and transposed outputs take producer s's message into partition s, a packed copy
// output the root's. For PreMulSum each producer scales its own contribution (the Atom's push with
// `scale`, and the fold for the rank's own), so consumers sum.
//
// In place: every Atom operation assigns the words of a message to the threads of the CTA the same
// way, so the thread that writes word p of an output partition has already read word p of the input
// partition in the same memory (the push of an earlier step, or the fold's own source).
#pragma once

#include <cstdint>

#include "atom/contract.h"
#include "atom/ll_packet.h"
#include "collectives/declaration.h"
#include "core/hd.h"
#include "core/status.h"
#include "snac/call.h"
#include "snac/protocol/call.h"

namespace purlin::snac {

// One channel of one rank's exchange in one call.
struct ExchangeContext {
  int rank = 0;
  int nranks = 1;
  int channel = 0;
  int channels = 1;                         // the call's channels, in the messages' tag
  std::uint64_t epoch = 1;                  // this call's on the channel, >= 1
  std::uint64_t box_packets = 0;            // packets per box
  atom::LLPacket* const* inbox = nullptr;   // [nranks]: each rank's boxes, as mapped here
};

// Boxes per rank and channel: phases x parities x producers.
PURLIN_HD constexpr std::uint64_t exchange_boxes(int nranks) { return 2ull * 2ull * static_cast<std::uint64_t>(nranks); }

// Rank `owner`'s box for the messages of `producer` on `phase`, of this call's parity.
PURLIN_HD atom::LLPacket* exchange_box(const ExchangeContext& x, int owner, int phase, int producer) {
  const std::uint64_t parity = x.epoch & 1;
  const std::uint64_t index = ((static_cast<std::uint64_t>(x.channel) * 2 + static_cast<std::uint64_t>(phase)) * 2 +
                               parity) * static_cast<std::uint64_t>(x.nranks) + static_cast<std::uint64_t>(producer);
  return x.inbox[owner] + index * x.box_packets;
}

// What this rank sends rank d under D: its offer, or nothing (an empty message).
template <class D>
PURLIN_HD Part exchange_offer(const Call& call, int me, int d) {
  if (!produces<D>(call, me) || !consumes<D>(call, d)) return Part{nullptr, 0};
  return D::input == Layout::scattered ? call.in[d] : call.in[0];
}

// What this rank takes from producer s under D: where it goes and how many bytes (none: an empty
// message). `packed` is the packed output.
template <class D>
PURLIN_HD Part exchange_intake(const Call& call, int me, int s, const Part& packed) {
  if (!consumes<D>(call, me) || !consumes_from<D>(call, s)) return Part{nullptr, 0};
  if constexpr (D::output == Layout::packed) return packed;
  else return call.out[s];
}

// The flag of a message of `bytes` on this channel. The tag has the call's channel count beside the
// slice's size: ranks whose sizes differ may still cut equal first slices (4,000 B in 2 channels and
// 8,000 B in 4), and the channels only one of them runs would wait for ever.
template <class D>
PURLIN_HD std::uint32_t exchange_flag(const ExchangeContext& x, const Call& call, std::uint64_t bytes) {
  return atom::ll_flag(x.epoch, message_tag<D>(call, bytes ^ static_cast<std::uint64_t>(x.channels) << 56));
}

// One phase of plain declaration D: push this rank's messages, then take every peer's.
template <class D, class Atom>
PURLIN_HD Status exchange_phase(Atom& atom, const ExchangeContext& x, const Call& call, int phase, const Part& packed) {
  static_assert(!D::composed, "one phase is one plain declaration");
  const int n = x.nranks, me = x.rank;
  constexpr bool reduces = D::consume == Consume::reduce;
  atom.push(n, reduces, [&](int d, atom::LLSend& m) {
    if (d == me) return false;
    const Part p = exchange_offer<D>(call, me, d);
    m = atom::LLSend{exchange_box(x, d, phase, me), p.ptr, p.bytes, exchange_flag<D>(x, call, p.bytes)};
    return true;
  });
  if constexpr (reduces) {
    // Every producer offers the same bytes; a rank that consumes nothing still takes the empty
    // messages.
    const std::uint64_t bytes = consumes<D>(call, me) ? packed.bytes : 0;
    auto from = [&](int s, atom::LLRecv& m) {
      if (s == me) return false;
      m = atom::LLRecv{exchange_box(x, me, phase, s), nullptr, bytes, exchange_flag<D>(x, call, bytes)};
      return true;
    };
    if (bytes == 0) return atom.receive(n, from);
    return atom.fold(packed.ptr, bytes, me, exchange_offer<D>(call, me, me).ptr, n, from);
  } else {
    const Part self_in = exchange_offer<D>(call, me, me);
    const Part self_out = exchange_intake<D>(call, me, me, packed);
    if (self_in.bytes != 0 && self_out.bytes != 0) atom.copy(self_out.ptr, self_in.ptr, self_out.bytes);
    return atom.receive(n, [&](int s, atom::LLRecv& m) {
      if (s == me) return false;
      const Part into = exchange_intake<D>(call, me, s, packed);
      m = atom::LLRecv{exchange_box(x, me, phase, s), into.ptr, into.bytes, exchange_flag<D>(x, call, into.bytes)};
      return true;
    });
  }
}

// Where a composition keeps its intermediate on this rank: its own partition of the output (as
// coll::uniform_shape lays it out), from where the second part sends it. Where the second part
// gathers at a root (Reduce), a rank other than the root has no output; it keeps its shard in its own
// box for the second phase's messages from itself, which no rank writes (a rank sends itself
// nothing). That box is this call's parity, so the next call that uses it is this rank's call two
// later, which runs after this one has ended. A box holds a slice's packets, 16 bytes for every 8 of
// payload, so the shard's raw bytes (no longer than any message's slice) fit in it twice over.
template <class D>
PURLIN_HD Part exchange_mid(const ExchangeContext& x, const Call& call) {
  if constexpr (D::second::root == Root::consumer) {
    if (x.rank != call.root) return Part{reinterpret_cast<char*>(exchange_box(x, x.rank, 1, x.rank)), call.in[x.rank].bytes};
  }
  return call.out[x.rank];
}

// The whole call of D on this channel.
template <class D, class Atom>
PURLIN_HD Status exchange_call(Atom& atom, const ExchangeContext& x, const Call& call) {
  static_assert(atom::AtomExchanges<Atom>, "the exchange's Atom keeps the contract of atom/contract.h");
  if constexpr (!D::composed) {
    const Part packed = D::output == Layout::packed ? call.out[0] : Part{nullptr, 0};
    return exchange_phase<D>(atom, x, call, 0, packed);
  } else {
    using F = typename D::first;
    using G = typename D::second;
    static_assert(F::output == Layout::packed && G::input == Layout::packed, "a packed intermediate");
    const Part mid = exchange_mid<D>(x, call);
    PURLIN_TRY(exchange_phase<F>(atom, x, call, 0, mid));
    Call g = call;
    g.in = &mid;
    return exchange_phase<G>(atom, x, g, 1, Part{nullptr, 0});
  }
}

}  // namespace purlin::snac
