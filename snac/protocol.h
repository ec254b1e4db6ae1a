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
// Stage and notify.

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

// Latency path: every packet message of this producer on `phase`, pushed in one batch. A pair's
// packet buffer is reused only after the consumer acked the message kDepth before.
template <class D, class Atom>
PURLIN_HD Status push_messages(Atom& atom, const Context& ctx, const Call& call, int phase) {
  const int n = ctx.nranks;
  std::uint64_t* tx = ctx.state->tx[phase];
  PURLIN_TRY(atom.wait_each(n, [&](int i, std::uint64_t*& word, std::uint64_t& value) {
    const int d = served(ctx, i);
    Offer o;
    if (!latency_offer<D>(ctx, call, d, &o) || tx[d] + 1 <= kDepth) return false;
    word = slot_ack(ctx, phase, d);
    value = flag_word(tx[d] + 1 - kDepth);
    return true;
  }));
  auto message = [&](int i, PacketPush& m) {
    const int d = served(ctx, i);
    Offer o;
    if (!latency_offer<D>(ctx, call, d, &o)) return false;
    const std::uint64_t q = tx[d] + 1;
    m = PacketPush{packets_of(ctx, d, phase, ctx.rank, q), o.src, o.bytes, flag_word(q, message_tag<D>(call, o.bytes))};
    return true;
  };
  if constexpr (D::consume == Consume::reduce) atom.push_contributions(n, message);
  else atom.push_each(n, message);
  atom.put_each(n, [&](int d, std::uint64_t*& word, std::uint64_t& value) {
    Offer o;
    if (!latency_offer<D>(ctx, call, d, &o)) return false;
    word = &tx[d];
    value = tx[d] + 1;
    return true;
  });
  return Status::ok;
}

// Latency path, consumer side: ack message rx + 1 of every producer `from(s)` names, and count it.
template <class Atom, class From>
PURLIN_HD void ack_messages(Atom& atom, const Context& ctx, int phase, From&& from) {
  std::uint64_t* rx = ctx.state->rx[phase];
  atom.signal_each(ctx.nranks, [&](int s, std::uint64_t*& word, std::uint64_t& value) {
    if (!from(s)) return false;
    word = ack_at(ctx, s, phase, ctx.rank);
    value = flag_word(rx[s] + 1);
    return true;
  });
  atom.put_each(ctx.nranks, [&](int s, std::uint64_t*& word, std::uint64_t& value) {
    if (!from(s)) return false;
    word = &rx[s];
    value = rx[s] + 1;
    return true;
  });
}

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

// Throughput path, before a lane's first chunk: the region of this call's staging half that the
// lane covers (`span`, span_of) must have been read by every consumer of an earlier message staged
// over it, and only those: a chain of calls to different peers never waits on a peer that has yet
// to receive. Once per lane, whatever the number of its consumers.
template <class Atom>
PURLIN_HD Status claim_region(Atom& atom, const Context& ctx, std::uint64_t span) {
  const LocalState& st = *ctx.state;
  const std::uint64_t half = st.epoch & 1;
  const int n = ctx.nranks;
  return atom.wait_each(kMaxPhases * n, [&](int i, std::uint64_t*& word, std::uint64_t& value) {
    const int ph = i / n, d = i % n;
    const std::uint64_t need = st.half_need[half][ph][d];
    if (need == 0 || !spans_overlap(st.half_span[half][ph][d], span)) return false;
    word = slot_ack(ctx, ph, d);
    value = flag_word(need);
    return true;
  });
}

// Then, per consumer: the message's first chunk is sequence number f of the pair, and its lane base
// goes to slot f % kDepth. The slot's earlier user started at f - kDepth or before, so once the
// consumer has acked f - kDepth it has read that lane base. Publish this one's and note the region
// for the end of the call.
template <class Atom>
PURLIN_HD Status open_lane(Atom& atom, const Context& ctx, int phase, int consumer, std::uint64_t offset,
                           std::uint64_t span) {
  LocalState& st = *ctx.state;
  const std::uint64_t first = st.tx[phase][consumer] + 1;
  if (first > kDepth) PURLIN_TRY(atom.wait(slot_ack(ctx, phase, consumer), flag_word(first - kDepth)));
  atom.store_relaxed(lane_base_at(ctx, consumer, phase, ctx.rank, first), offset);
  atom.put(&st.lane_first[phase][consumer], first);
  atom.put(&st.staged[phase][consumer], span_union(st.staged[phase][consumer], span));
  return Status::ok;
}

// Bytes of its lane a staged message of `bytes` occupies: all of it while it fits the ring of
// slots (chunk j at j * chunk), else the whole ring.
PURLIN_HD std::uint64_t lane_bytes(const Lanes& l, std::uint64_t bytes) {
  const std::uint64_t ring = static_cast<std::uint64_t>(l.slots) * l.chunk;
  return bytes < ring ? (bytes + 255) / 256 * 256 : ring;
}

// Where in its lane (from the lane's start) a staged message of `used` bytes to one consumer goes:
// just after the pair's messages of this half that the consumer may still be reading, so that
// several such messages can wait for their receives at once; at the lane's start when they are
// all read or the rest of the lane is too small (claim_region then waits for what it overlaps).
PURLIN_HD std::uint64_t place_in_lane(const Context& ctx, const Lanes& l, int phase, int consumer,
                                      std::uint64_t lane_start, std::uint64_t used) {
  const LocalState& st = *ctx.state;
  const std::uint64_t record = st.half_span[st.epoch & 1][phase][consumer];
  if (record == 0) return 0;
  const std::uint64_t start = lane_start % ctx.geo.staging_half, end = (record >> 32) * 256;
  return end > start && end + used <= start + l.region ? end - start : 0;
}

// Where in this rank's staging offer o of the call goes. Its inputs (the half's records) change only
// at the end of a call, so every look within the call agrees.
PURLIN_HD std::uint64_t offer_offset(const Context& ctx, const Lanes& l, int phase, const Offer& o) {
  const std::uint64_t start = lane_offset(ctx, l, phase, o.lane);
  return o.consumer < 0 ? start : start + place_in_lane(ctx, l, phase, o.consumer, start, lane_bytes(l, o.bytes));
}

// Waits until every consumer of an offer has acked chunk j - slots of the message that started at
// sequence first[d], so that slot j % slots may be overwritten.
template <class D, class Atom>
PURLIN_HD Status wait_slot(Atom& atom, const Context& ctx, const Call& call, const Lanes& l, int phase, const Offer& o,
                           std::uint64_t j) {
  if (j < static_cast<std::uint64_t>(l.slots)) return Status::ok;
  return atom.wait_each(ctx.nranks, [&](int d, std::uint64_t*& word, std::uint64_t& value) {
    if (!offered_to<D>(call, o, d)) return false;
    word = slot_ack(ctx, phase, d);
    value = flag_word(ctx.state->lane_first[phase][d] + j - l.slots);
    return true;
  });
}

// Chunk j of the offer is in its slot: notify its consumers with the chunk's sequence number.
template <class D, class Atom>
PURLIN_HD void notify_chunk(Atom& atom, const Context& ctx, const Call& call, int phase, const Offer& o,
                            std::uint64_t j) {
  atom.put_each(ctx.nranks, [&](int d, std::uint64_t*& word, std::uint64_t& value) {
    if (!offered_to<D>(call, o, d)) return false;
    word = &ctx.state->tx[phase][d];
    value = ctx.state->lane_first[phase][d] + j;
    return true;
  });
  const std::uint64_t tag = message_tag<D>(call, o.bytes);
  atom.signal_each(ctx.nranks, [&](int d, std::uint64_t*& word, std::uint64_t& value) {
    if (!offered_to<D>(call, o, d)) return false;
    word = ready_at(ctx, d, phase, ctx.rank);
    value = flag_word(ctx.state->lane_first[phase][d] + j, tag);
    return true;
  });
}

// The stage role of a plain declaration D running as `phase` of the call.
template <class D, class Atom>
PURLIN_HD Status stage(Atom& atom, const Context& ctx, const Call& call, const Lanes& l, int phase) {
  if (!produces<D>(call, ctx.rank)) return Status::ok;
  Status status = Status::ok;
  std::uint64_t max_chunks = 0;
  // Latency messages first: they never wait on this call's consumers.
  PURLIN_TRY((push_messages<D>(atom, ctx, call, phase)));
  for_each_offer<D>(ctx, call, [&](const Offer& o) {
    if (status != Status::ok || o.bytes == 0 || use_latency(ctx, o.bytes)) return;
    std::uint64_t chunks = ceil_div(o.bytes, l.chunk);
    if (chunks > max_chunks) max_chunks = chunks;
    const std::uint64_t offset = offer_offset(ctx, l, phase, o), span = span_of(ctx, offset, lane_bytes(l, o.bytes));
    status = claim_region(atom, ctx, span);
    for_each_consumer<D>(ctx, call, o, [&](int d) {
      if (status == Status::ok) status = open_lane(atom, ctx, phase, d, offset, span);
    });
  });
  PURLIN_TRY(status);
  // Throughput messages, chunk j of every lane before chunk j + 1.
  for (std::uint64_t j = 0; j < max_chunks; ++j) {
    for_each_offer<D>(ctx, call, [&](const Offer& o) {
      if (status != Status::ok || o.bytes == 0 || use_latency(ctx, o.bytes)) return;
      std::uint64_t begin = j * l.chunk;
      if (begin >= o.bytes) return;
      std::uint64_t len = o.bytes - begin < l.chunk ? o.bytes - begin : l.chunk;
      status = wait_slot<D>(atom, ctx, call, l, phase, o, j);
      if (status != Status::ok) return;
      char* slot = ctx.win[ctx.rank].staging + offer_offset(ctx, l, phase, o) + (j % l.slots) * l.chunk;
      if constexpr (D::consume == Consume::reduce) atom.contribute(slot, o.src + begin, len);
      else atom.copy(slot, o.src + begin, len);
      notify_chunk<D>(atom, ctx, call, phase, o, j);
    });
    PURLIN_TRY(status);
  }
  return Status::ok;
}

// ---------------------------------------------------------------------------------------------
// Consume.

// Where producer s's staged message on `phase` whose first chunk is sequence number `first` starts
// in its staging (that chunk is notified).
template <class Atom>
PURLIN_HD std::uint64_t take_lane_base(Atom& atom, const Context& ctx, int phase, int s, std::uint64_t first) {
  return atom.load_relaxed(lane_base_at(ctx, ctx.rank, phase, s, first));
}

// Pull (or receive) chunk j of producer s's message (tag `tag`) on `phase`; returns the source pointer.
template <class Atom>
PURLIN_HD Status acquire_chunk(Atom& atom, const Context& ctx, const Lanes& l, int phase, int s, std::uint64_t j,
                               std::uint64_t q0, std::uint64_t tag, std::uint64_t* base, const char** src) {
  PURLIN_TRY(atom.wait(ready_at(ctx, ctx.rank, phase, s), flag_word(q0 + j + 1, tag)));
  if (j == 0) *base = take_lane_base(atom, ctx, phase, s, q0 + 1);
  *src = ctx.win[s].staging + *base + (j % l.slots) * l.chunk;
  return Status::ok;
}

template <class Atom>
PURLIN_HD void ack_chunk(Atom& atom, const Context& ctx, int phase, int s, std::uint64_t q) {
  atom.put(&ctx.state->rx[phase][s], q);
  atom.signal(ack_at(ctx, s, phase, ctx.rank), flag_word(q));
}

// The next-phase (G) producer side used by a fused consume: stage G's input chunk by chunk as F
// produces it.
template <class G, class Atom>
struct NextLane {
  const Context& ctx;
  const Call& call;
  const Lanes& l;
  Offer offer;

  PURLIN_HD Status open(Atom& atom) {
    const std::uint64_t offset = lane_offset(ctx, l, 1, 0), span = span_of(ctx, offset, l.region);
    Status s = claim_region(atom, ctx, span);
    for_each_consumer<G>(ctx, call, offer, [&](int d) {
      if (s == Status::ok) s = open_lane(atom, ctx, 1, d, offset, span);
    });
    return s;
  }
  PURLIN_HD Status slot(Atom& atom, std::uint64_t j, char** dst) {
    PURLIN_TRY(wait_slot<G>(atom, ctx, call, l, 1, offer, j));
    *dst = ctx.win[ctx.rank].staging + lane_offset(ctx, l, 1, 0) + (j % l.slots) * l.chunk;
    return Status::ok;
  }
  PURLIN_HD void publish(Atom& atom, std::uint64_t j) { notify_chunk<G>(atom, ctx, call, 1, offer, j); }
};

// Bytes this rank receives from producer s under D.
template <class D>
PURLIN_HD std::uint64_t incoming_bytes(const Call& call, int s, std::uint64_t packed_bytes) {
  if constexpr (D::output == Layout::packed) {
    (void)s;
    return packed_bytes;
  } else {
    return call.out[s].bytes;
  }
}

// The consume role of plain declaration D as `phase`. For a composition's first part, `next` stages
// the result into the second part's lane (throughput) or leaves it in ctx.scratch (latency).
template <class D, class Atom, class Next>
PURLIN_HD Status consume(Atom& atom, const Context& ctx, const Call& call, const Lanes& l, int phase, char* packed_dst,
                         std::uint64_t packed_bytes, Next* next) {
  if (!consumes<D>(call, ctx.rank)) return Status::ok;
  const int n = ctx.nranks;
  if constexpr (D::consume == Consume::reduce) {
    // Every producer sends the same number of bytes: one regime, one chunking.
    std::uint64_t bytes = packed_bytes;
    if (bytes == 0) return Status::ok;
    const std::uint64_t tag = message_tag<D>(call, bytes);
    const char* srcs[kMaxRanks];
    int nsrc = 0;
    if (use_latency(ctx, bytes)) {
      // Folded straight from the packets, in rank order.
      std::uint64_t* rx = ctx.state->rx[phase];
      auto from = [&](int s) { return consumes_from<D>(call, s); };
      PURLIN_TRY(atom.pull_reduce(next ? ctx.scratch : packed_dst, bytes, n, [&](int s, PacketSource& m) {
        if (!from(s)) return false;
        m = PacketSource{packets_of(ctx, ctx.rank, phase, s, rx[s] + 1), flag_word(rx[s] + 1, tag),
                         ready_at(ctx, ctx.rank, phase, s)};
        return true;
      }));
      ack_messages(atom, ctx, phase, from);
      return Status::ok;
    }
    std::uint64_t q0[kMaxRanks], base[kMaxRanks];
    for (int s = 0; s < n; ++s) q0[s] = ctx.state->rx[phase][s];
    if (next) PURLIN_TRY(next->open(atom));
    std::uint64_t chunks = ceil_div(bytes, l.chunk);
    for (std::uint64_t j = 0; j < chunks; ++j) {
      std::uint64_t begin = j * l.chunk;
      std::uint64_t len = bytes - begin < l.chunk ? bytes - begin : l.chunk;
      PURLIN_TRY(atom.wait_each_watching(n, [&](int s, std::uint64_t*& word, std::uint64_t& value,
                                                const std::uint64_t*& watch) {
        if (!consumes_from<D>(call, s)) return false;
        word = ready_at(ctx, ctx.rank, phase, s);
        value = flag_word(q0[s] + j + 1, tag);
        if (j == 0) watch = &packets_of(ctx, ctx.rank, phase, s, q0[s] + 1)->flag;
        return true;
      }));
      nsrc = 0;
      for (int s = 0; s < n; ++s) {
        if (!consumes_from<D>(call, s)) continue;
        if (j == 0) base[s] = take_lane_base(atom, ctx, phase, s, q0[s] + 1);
        srcs[nsrc++] = ctx.win[s].staging + base[s] + (j % l.slots) * l.chunk;
      }
      char* dst = packed_dst + begin;
      if (next) PURLIN_TRY(next->slot(atom, j, &dst));
      atom.reduce(dst, srcs, nsrc, len);
      atom.signal_each(n, [&](int s, std::uint64_t*& word, std::uint64_t& value) {
        if (!consumes_from<D>(call, s)) return false;
        word = ack_at(ctx, s, phase, ctx.rank);
        value = flag_word(q0[s] + j + 1);
        return true;
      });
      atom.put_each(n, [&](int s, std::uint64_t*& word, std::uint64_t& value) {
        if (!consumes_from<D>(call, s)) return false;
        word = &ctx.state->rx[phase][s];
        value = q0[s] + j + 1;
        return true;
      });
      if (next) next->publish(atom, j);
    }
    return Status::ok;
  } else {
    // Copy: latency messages first, then throughput chunks in lock step across producers.
    std::uint64_t q0[kMaxRanks], base[kMaxRanks];
    std::uint64_t max_chunks = 0;
    bool fused = false;
    for (int s = 0; s < n; ++s) {
      if (!consumes_from<D>(call, s)) continue;
      std::uint64_t bytes = incoming_bytes<D>(call, s, packed_bytes);
      q0[s] = ctx.state->rx[phase][s];
      if (bytes != 0 && !use_latency(ctx, bytes)) {
        std::uint64_t chunks = ceil_div(bytes, l.chunk);
        if (chunks > max_chunks) max_chunks = chunks;
        if (next) fused = true;
      }
    }
    // Latency messages, all producers at once.
    std::uint64_t* rx = ctx.state->rx[phase];
    auto latency_from = [&](int s) {
      if (!consumes_from<D>(call, s)) return false;
      std::uint64_t bytes = incoming_bytes<D>(call, s, packed_bytes);
      return bytes != 0 && use_latency(ctx, bytes);
    };
    PURLIN_TRY(atom.pull_each(n, [&](int s, PacketPull& m) {
      if (!latency_from(s)) return false;
      char* dst = next ? ctx.scratch : D::output == Layout::packed ? packed_dst : call.out[s].ptr;
      const std::uint64_t bytes = incoming_bytes<D>(call, s, packed_bytes);
      m = PacketPull{dst, packets_of(ctx, ctx.rank, phase, s, rx[s] + 1), bytes,
                     flag_word(rx[s] + 1, message_tag<D>(call, bytes)), ready_at(ctx, ctx.rank, phase, s)};
      return true;
    }));
    ack_messages(atom, ctx, phase, latency_from);
    if (fused) PURLIN_TRY(next->open(atom));
    for (std::uint64_t j = 0; j < max_chunks; ++j) {
      PURLIN_TRY(atom.wait_each_watching(n, [&](int s, std::uint64_t*& word, std::uint64_t& value,
                                                const std::uint64_t*& watch) {
        if (!consumes_from<D>(call, s)) return false;
        std::uint64_t bytes = incoming_bytes<D>(call, s, packed_bytes);
        if (bytes == 0 || use_latency(ctx, bytes) || j * l.chunk >= bytes) return false;
        word = ready_at(ctx, ctx.rank, phase, s);
        value = flag_word(q0[s] + j + 1, message_tag<D>(call, bytes));
        if (j == 0) watch = &packets_of(ctx, ctx.rank, phase, s, q0[s] + 1)->flag;
        return true;
      }));
      for (int s = 0; s < n; ++s) {
        if (!consumes_from<D>(call, s)) continue;
        std::uint64_t bytes = incoming_bytes<D>(call, s, packed_bytes);
        if (bytes == 0 || use_latency(ctx, bytes)) continue;
        std::uint64_t begin = j * l.chunk;
        if (begin >= bytes) continue;
        std::uint64_t len = bytes - begin < l.chunk ? bytes - begin : l.chunk;
        const char* src = nullptr;
        PURLIN_TRY(acquire_chunk(atom, ctx, l, phase, s, j, q0[s], message_tag<D>(call, bytes), &base[s], &src));
        char* dst = (D::output == Layout::packed ? packed_dst : call.out[s].ptr) + begin;
        if (fused) PURLIN_TRY(next->slot(atom, j, &dst));
        atom.copy(dst, src, len);
        ack_chunk(atom, ctx, phase, s, q0[s] + j + 1);
        if (fused) next->publish(atom, j);
      }
    }
    return Status::ok;
  }
}

// ---------------------------------------------------------------------------------------------
// Call boundaries and the roles of a declaration.

// A rank that found its call mismatched with a peer's (Status::invalid_usage) stores the status in
// every peer's fault word: their waits end too, instead of waiting for messages that never come.
// `windows` are the windows whose fault words the peers watch.
template <class Atom>
PURLIN_HD void raise_fault(Atom& atom, const Context& ctx, const Window* windows, Status s) {
  atom.signal_each(ctx.nranks, [&](int d, std::uint64_t*& word, std::uint64_t& value) {
    if (d == ctx.rank) return false;
    word = windows[d].fault;
    value = static_cast<std::uint64_t>(s);
    return true;
  });
}

// After every role of this call has finished on this rank; one thread runs it. The regions this call
// staged join their half's record of what consumers may still read, which a later call that
// stages over them waits for (claim_region); records whose consumer has acked everything are dropped,
// so a region stays tied only to the peers that have yet to read it.
template <class Atom>
PURLIN_HD void end_call(Atom& atom, const Context& ctx) {
  LocalState& st = *ctx.state;
  const std::uint64_t half = st.epoch & 1;
  for (int ph = 0; ph < kMaxPhases; ++ph)
    for (int d = 0; d < ctx.nranks; ++d) {
      if (st.half_need[0][ph][d] != 0 || st.half_need[1][ph][d] != 0) {
        const std::uint64_t acked = atom::seq_of(atom.load_relaxed(slot_ack(ctx, ph, d)));
        for (int h = 0; h < 2; ++h)
          if (st.half_need[h][ph][d] != 0 && acked >= st.half_need[h][ph][d]) {
            st.half_need[h][ph][d] = 0;
            st.half_span[h][ph][d] = 0;
          }
      }
      if (st.staged[ph][d] != 0) {
        st.half_need[half][ph][d] = st.tx[ph][d];
        st.half_span[half][ph][d] = span_union(st.half_span[half][ph][d], st.staged[ph][d]);
        st.staged[ph][d] = 0;
      }
    }
  ++st.epoch;
}

enum class Role { stage, consume, gather };

template <class D>
PURLIN_HD constexpr int role_count() {
  return D::composed ? 3 : 2;
}

// True when every message of the call takes the latency path, so the roles may run one after the
// other on one worker (stage never waits on this call's consumers then).
template <class D>
PURLIN_HD bool all_latency(const Context& ctx, const Call& call) {
  bool all = true;
  auto check = [&](std::uint64_t bytes) {
    if (!use_latency(ctx, bytes)) all = false;
  };
  if constexpr (D::composed) {
    check(call.mid_bytes);
    for_each_offer<typename D::first>(ctx, call, [&](const Offer& o) { check(o.bytes); });
    if (consumes<typename D::second>(call, ctx.rank))
      for (int s = 0; s < ctx.nranks; ++s) check(call.out[s].bytes);
  } else {
    for_each_offer<D>(ctx, call, [&](const Offer& o) { check(o.bytes); });
    if (consumes<D>(call, ctx.rank)) {
      if constexpr (D::output == Layout::packed) check(call.out[0].bytes);
      else for (int s = 0; s < ctx.nranks; ++s) check(call.out[s].bytes);
    }
  }
  return all;
}

// Runs one role of declaration D (plain or composed) for this rank.
template <class D, class Atom>
PURLIN_HD Status run_role(Atom& atom, const Context& ctx, const Call& call, Role role) {
  static_assert(atom::SnacAtom<Atom>, "the protocol's Atom keeps the contract of atom/contract.h");
  const Lanes l = lanes_of<D>(ctx);
  if constexpr (!D::composed) {
    if (role == Role::stage) return stage<D>(atom, ctx, call, l, 0);
    if (role == Role::consume) {
      char* dst = D::output == Layout::packed ? call.out[0].ptr : nullptr;
      std::uint64_t bytes = D::output == Layout::packed ? call.out[0].bytes : 0;
      return consume<D, Atom, NextLane<D, Atom>>(atom, ctx, call, l, 0, dst, bytes, nullptr);
    }
    return Status::ok;
  } else {
    using F = typename D::first;
    using G = typename D::second;
    static_assert(G::input == Layout::packed, "a composition passes a packed intermediate");
    if (role == Role::stage) return stage<F>(atom, ctx, call, l, 0);
    if (role == Role::consume) {
      NextLane<G, Atom> next{ctx, call, l, Offer{nullptr, call.mid_bytes, 0, G::root == Root::consumer ? call.root : -1}};
      PURLIN_TRY((consume<F, Atom, NextLane<G, Atom>>(atom, ctx, call, l, 0, nullptr, call.mid_bytes, &next)));
      if (call.mid_bytes && use_latency(ctx, call.mid_bytes)) {
        // The intermediate is in scratch: push it to G's consumers.
        Call g = call;
        Part mid{ctx.scratch, call.mid_bytes};
        g.in = &mid;
        return stage<G>(atom, ctx, g, l, 1);
      }
      return Status::ok;
    }
    // Role::gather: G's consumer.
    return consume<G, Atom, NextLane<G, Atom>>(atom, ctx, call, l, 1, nullptr, 0, nullptr);
  }
}

}  // namespace purlin::snac
