// Stage and notify, the producer's role of SNAC (the protocol: snac/protocol/messages.h): latency
// messages pushed as packets, staged messages placed, claimed and copied chunk by chunk.
#pragma once

#include "snac/protocol/messages.h"

namespace purlin::snac {

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

}  // namespace purlin::snac
