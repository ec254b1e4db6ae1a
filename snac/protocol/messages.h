// Stage, Notify, And Consume, written once over the Atom and the declaration.
//
// The roles run on one thread (host) or on every thread of a CTA (GPU), so all control flow here is
// uniform and every write to LocalState goes through atom.put (one writer, visible to the group).
//
// Every (producer, consumer, phase) pair carries a sequence of messages numbered 1, 2, 3, ... that
// both ends count in their LocalState (tx at the producer, rx at the consumer); the number doubles
// as the notification value, so a wait is always "at least q", never a reset.
//
//  - Latency path (a pair's message up to Context::latency_max bytes): the producer pushes 16-byte
//    packets {8 data bytes, q} into the consumer's packet buffer q % kDepth; stage and notify are
//    one store. Before reusing a buffer it waits for the consumer's ack of message q - kDepth.
//  - Throughput path: the producer copies its contribution chunk by chunk into a ring of slots in its
//    own staging (half chosen by its call parity) and notifies each consumer with q; consumers pull
//    from the producer's staging and ack q into the producer's window. Slot j is reused for chunk
//    j + slots only after every consumer acked chunk j. A message to one consumer is placed in its
//    lane after the pair's earlier messages still unreceived in the half (place_in_lane), and
//    occupies only the bytes it uses; a later call stages over a region of a half only after the
//    consumers that were sent messages in that region acked them (claim_region, end_call). So staged
//    messages that fit their lane let their calls end before the consumer's receive is posted, up to
//    kDepth per pair (the lane base slots), as NCCL's buffered sends do, and a chain of calls to
//    other peers never waits on them.
//
// The layouts decide, at compile time, who produces, who consumes and what goes where:
//  - a scattered input offers partition k to rank k only; a packed input offers itself to every
//    consumer (or to the root alone when the root consumes);
//  - a packed reduce output folds producers in rank order 0..n-1, chunk by chunk; scattered and
//    transposed outputs copy producer s into partition s.
//  - a reduction's producer stages or pushes its contribution through the Atom's contribute and
//    push_contributions, which apply the reduction's producer step (PreMulSum: the producer's own
//    scalar, atom/reduce.h) on the way; its consumers only fold. A composition scales in its first
//    part alone: what its second part moves is already reduced.
//
// Roles (threads on the host, groups of CTAs on a GPU): stage (F's producer), consume (F's consumer,
// which for a composition also stages G's input straight into G's lane), and for compositions
// gather (G's consumer). Each role walks chunks in the same order (chunk j of every lane before chunk
// j + 1), and waits only on chunk j of other roles or on acks of chunk j - slots, so the roles
// cannot deadlock however they are scheduled, as long as they all make progress.
//
// Mismatched calls: every notification (packet flag, ready word) carries a 16-bit tag of the
// message, computed by each end from its own call (message_tag), beside the sequence number
// (atom/packet.h). A consumer whose call differs from its producer's sees the right sequence number
// with another tag and stops with Status::invalid_usage; raise_fault then stops the peers, whose
// waits watch their fault word. Acks carry tag 0. Where the ends disagree on the path (one sends
// packets, the other expects a staged message), a consumer that waits long also reads where the
// message would be notified on the other path (the pair's ready word, or its first packet) and
// finds the producer's tag there.
//
// This header: what both ends of a message compute alike (who produces and consumes, tags, how a
// call divides a staging half, where each pair's words, packets and lane bases live, offers).
// The roles are in stage.h and consume.h, the call's boundaries and run_role in call.h.
#pragma once

#include <cstdint>

#include "atom/contract.h"
#include "collectives/declaration.h"
#include "core/hd.h"
#include "core/status.h"
#include "snac/call.h"
#include "snac/window.h"

static_assert(purlin::snac::kMaxRanks <= purlin::atom::kMaxBatch, "a batch holds one message per peer");

namespace purlin::snac {

using coll::Consume;
using coll::Layout;
using coll::Root;
using atom::PacketPull;
using atom::PacketPush;
using atom::PacketSource;
using atom::flag_word;


template <class D>
PURLIN_HD constexpr int lane_count(int nranks) {
  return D::input == Layout::scattered ? nranks : 1;
}

template <class D>
PURLIN_HD bool produces(const Call& call, int rank) {
  if constexpr (D::root == Root::producer) return rank == call.root;
  return true;
}

template <class D>
PURLIN_HD bool consumes(const Call& call, int rank) {
  if constexpr (D::root == Root::consumer) return rank == call.root;
  return true;
}

template <class D>
PURLIN_HD bool consumes_from(const Call& call, int producer) {
  if constexpr (D::root == Root::producer) return producer == call.root;
  return true;
}

PURLIN_HD std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// The tag of one message of declaration D carrying `bytes`: a hash of what producer and consumer
// must agree on (the declaration, the data type, the reduction, the root, the message's size). Kept
// to a few multiplies: every message of the latency path computes it.
template <class D>
PURLIN_HD std::uint64_t message_tag(const Call& call, std::uint64_t bytes) {
  constexpr std::uint64_t shape = static_cast<std::uint64_t>(D::consume) << 6 | static_cast<std::uint64_t>(D::input) << 4 |
                                  static_cast<std::uint64_t>(D::output) << 2 | static_cast<std::uint64_t>(D::root);
  std::uint64_t key = shape << 56 | static_cast<std::uint64_t>(call.type) << 48;
  if constexpr (D::root != Root::none) key |= static_cast<std::uint64_t>(call.root & 0xff) << 40;
  if constexpr (D::consume == Consume::reduce) key |= static_cast<std::uint64_t>(call.op.kind) << 32;
  const std::uint64_t h = (key ^ (bytes * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  return h >> 48;
}

// How this call divides a staging half. Identical on every rank for the same declaration.
template <class D>
PURLIN_HD Lanes lanes_of(const Context& ctx) {
  Lanes l;
  int maxlanes;
  if constexpr (D::composed) {
    l.nphases = 2;
    int a = lane_count<typename D::first>(ctx.nranks), b = lane_count<typename D::second>(ctx.nranks);
    maxlanes = a > b ? a : b;
  } else {
    l.nphases = 1;
    maxlanes = lane_count<D>(ctx.nranks);
  }
  l.slots = ctx.slots;
  l.region = ctx.geo.staging_half / static_cast<std::uint64_t>(l.nphases) / static_cast<std::uint64_t>(maxlanes) /
             256 * 256;
  std::uint64_t chunk = l.region / static_cast<std::uint64_t>(l.slots) / 256 * 256;
  l.chunk = chunk < ctx.chunk_cap ? chunk : ctx.chunk_cap / 256 * 256;
  return l;
}

PURLIN_HD bool use_latency(const Context& ctx, std::uint64_t bytes) { return bytes <= ctx.latency_max; }

PURLIN_HD std::uint64_t lane_offset(const Context& ctx, const Lanes& l, int phase, int lane) {
  std::uint64_t half = ctx.state->epoch & 1;
  return half * ctx.geo.staging_half + static_cast<std::uint64_t>(phase) * (ctx.geo.staging_half / l.nphases) +
         static_cast<std::uint64_t>(lane) * l.region;
}

PURLIN_HD Packet* packets_of(const Context& ctx, int owner, int phase, int producer, std::uint64_t q) {
  std::uint64_t per_pair = ctx.geo.packets_per_pair;
  std::uint64_t index =
      ((static_cast<std::uint64_t>(phase) * ctx.nranks + producer) * kDepth + q % kDepth) * per_pair;
  return ctx.win[owner].packets + index;
}

PURLIN_HD std::uint64_t* slot_ack(const Context& ctx, int phase, int consumer) {
  return ctx.win[ctx.rank].ack + phase * ctx.nranks + consumer;
}
PURLIN_HD std::uint64_t* ready_at(const Context& ctx, int consumer, int phase, int producer) {
  return ctx.win[consumer].ready + phase * ctx.nranks + producer;
}
// The lane base slot of the staged message whose first chunk has sequence number `first`.
PURLIN_HD std::uint64_t* lane_base_at(const Context& ctx, int consumer, int phase, int producer, std::uint64_t first) {
  return ctx.win[consumer].lane_base + (phase * ctx.nranks + producer) * kDepth + first % kDepth;
}
PURLIN_HD std::uint64_t* ack_at(const Context& ctx, int producer, int phase, int consumer) {
  return ctx.win[producer].ack + phase * ctx.nranks + consumer;
}

// ---------------------------------------------------------------------------------------------
// Offers.

// A contribution offered to a set of consumers through one lane. `consumer` < 0 means every rank
// that consumes from this producer under D.
struct Offer {
  const char* src;
  std::uint64_t bytes;
  int lane;
  int consumer;
};

template <class D, class Visit>
PURLIN_HD void for_each_offer(const Context& ctx, const Call& call, Visit&& visit) {
  if (!produces<D>(call, ctx.rank)) return;
  if constexpr (D::input == Layout::scattered) {
    for (int k = 0; k < ctx.nranks; ++k) {
      if (!consumes<D>(call, k)) continue;
      visit(Offer{call.in[k].ptr, call.in[k].bytes, k, k});
    }
  } else {
    visit(Offer{call.in[0].ptr, call.in[0].bytes, 0, D::root == Root::consumer ? call.root : -1});
  }
}

template <class D, class F>
PURLIN_HD void for_each_consumer(const Context& ctx, const Call& call, const Offer& o, F&& f) {
  if (o.consumer >= 0) {
    f(o.consumer);
    return;
  }
  for (int d = 0; d < ctx.nranks; ++d)
    if (consumes<D>(call, d)) f(d);
}

// Whether consumer d takes offer o.
template <class D>
PURLIN_HD bool offered_to(const Call& call, const Offer& o, int d) {
  return o.consumer >= 0 ? d == o.consumer : consumes<D>(call, d);
}

// The message this producer sends consumer d under D, when it takes the latency path.
template <class D>
PURLIN_HD bool latency_offer(const Context& ctx, const Call& call, int d, Offer* o) {
  if (!produces<D>(call, ctx.rank) || !consumes<D>(call, d)) return false;
  if constexpr (D::input == Layout::scattered) *o = Offer{call.in[d].ptr, call.in[d].bytes, d, d};
  else *o = Offer{call.in[0].ptr, call.in[0].bytes, 0, d};
  return o->bytes != 0 && use_latency(ctx, o->bytes);
}

// Peers in the order a producer serves them: the next rank first, itself last, so that a consumer
// writing its result in place (over this rank's input) is the last to be served.
PURLIN_HD int served(const Context& ctx, int i) { return (ctx.rank + 1 + i) % ctx.nranks; }

// A region of a staging half as [lo, hi) in 256-byte units from the half's start, packed lo | hi << 32
// (a half of up to 1 TiB).
PURLIN_HD std::uint64_t span_of(const Context& ctx, std::uint64_t offset, std::uint64_t bytes) {
  const std::uint64_t in_half = offset % ctx.geo.staging_half;
  return in_half / 256 | (in_half + bytes + 255) / 256 << 32;
}
PURLIN_HD bool spans_overlap(std::uint64_t a, std::uint64_t b) {
  return (a & 0xffffffffu) < (b >> 32) && (b & 0xffffffffu) < (a >> 32);
}
PURLIN_HD std::uint64_t span_union(std::uint64_t a, std::uint64_t b) {
  if (a == 0) return b;
  const std::uint64_t lo = (a & 0xffffffffu) < (b & 0xffffffffu) ? a & 0xffffffffu : b & 0xffffffffu;
  const std::uint64_t hi = (a >> 32) > (b >> 32) ? a >> 32 : b >> 32;
  return lo | hi << 32;
}

}  // namespace purlin::snac
