// Consume, the consumer's role of SNAC (the protocol: snac/protocol/messages.h): packets folded or
// copied straight from the producer's pushes, staged chunks pulled from its staging and acked; for
// a composition's first part, the result staged into the second part's lane.
#pragma once

#include "snac/protocol/stage.h"

namespace purlin::snac {

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

}  // namespace purlin::snac
