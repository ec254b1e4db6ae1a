// Zero-staging: a collective whose buffers every rank can reach runs in place. Nothing is staged:
// each rank reads the peers' inputs and writes the peers' outputs where they are, so every input is
// read once and every output written once (AllReduce: the rank's shard of every input is folded in
// rank order and the shard of the result written into every output).
//
// AlltoAll whose input and output are one buffer on some rank moves in pairs: the two blocks that
// ranks p and q send each other (p's block q and q's block p) are taken by both ends, each half of
// them, each of its elements read from both inputs before it is stored into both outputs, so a
// block is overwritten only once what it held is in registers, and every byte still goes through
// memory once. The copy engines cannot swap, so such a call stays on the SMs.
//
// Rooted collectives split the work alike over all ranks: Broadcast as AllGather from the root's
// input (rank k pushes shard k of it into every output), Reduce as AllReduce whose result goes to
// the root only, Gather and Scatter as one copy per rank into or out of the root's buffer. A rank's
// side that the collective does not use (a non-root's Broadcast input, Reduce output, Gather output
// or Scatter input) is never touched and need not be mapped.
//
// Coordination is two barriers per call and CTA, both derived from the layouts: a rank may read a
// peer's input and write its output only once the peer has entered the call (its stream has finished
// writing the input and using the output: arrival), and may leave the call only once every peer has
// finished with its buffers (done). CTA k of a rank meets CTA k of every peer, and each CTA handles
// the same share of every message on every rank, so no CTA waits for another of its own rank.
//
// Each CTA's barrier words are flag words (atom/packet.h) of a persistent per-CTA call number: call
// s signals 2s - 1 on arrival and 2s when done, so a word only grows and a peer already in the next
// call also counts as done with this one.
#pragma once

#include <cstdint>

#include "atom/contract.h"
#include "atom/packet.h"
#include "core/hd.h"
#include "core/status.h"
#include "snac/window.h"

namespace purlin::snac {

enum class ZeroStagingKind : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast,
  reduce,
  gather,
  scatter,
};

// Whether a collective only copies (the copy engines can move its bytes: zero_staging_copies).
PURLIN_HD constexpr bool zero_staging_copies_only(ZeroStagingKind k) {
  return k != ZeroStagingKind::all_reduce && k != ZeroStagingKind::reduce_scatter && k != ZeroStagingKind::reduce;
}

// What one launch does of a call (or of a round's legs): all of it, or, where the copy engines move
// the bytes between two launches, only the arrival, or only what follows the move, which closes it.
enum class ZeroStagingPhase : std::uint8_t { whole, arrive, leave };

// CTAs of one zero-staging call at most; each rank's barrier words are [kZeroStagingMaxCtas][kMaxRanks].
inline constexpr int kZeroStagingMaxCtas = 64;
inline constexpr std::uint64_t kZeroStagingWords = static_cast<std::uint64_t>(kZeroStagingMaxCtas) * kMaxRanks;
// An Atom that does not fan moves a CTA's share in steps of this many bytes, so that AllReduce's
// shard of the result is still in L2 when it is copied to the peers, and AllGather's input when it
// is pushed to the next.
inline constexpr std::uint64_t kZeroStagingStep = 64u << 10;

struct ZeroStagingCall {
  ZeroStagingKind kind = ZeroStagingKind::all_reduce;
  int rank = 0;
  int nranks = 1;
  int root = 0;  // Broadcast, Reduce, Gather, Scatter
  // AllReduce, Broadcast and Reduce: the whole buffer, cut into nranks shards as coll::uniform_split
  // cuts it (elements of `elem` bytes, shards aligned to `align_elems`); the others: one block (a
  // rank's message).
  std::uint64_t bytes = 0;
  std::uint64_t elem = 1;
  std::uint64_t align_elems = 1;
  const char* const* in = nullptr;      // [nranks]: every rank's input as mapped here (unused: null)
  char* const* out = nullptr;           // [nranks]: every rank's output as mapped here (unused: null)
  std::uint64_t* const* words = nullptr;  // [nranks]: every rank's barrier words as mapped here
  std::uint64_t call = 1;               // this CTA's call number, from 1
  std::uint64_t tag = 0;                // what every rank's call agrees on (atom/packet.h)
  // AlltoAll: every pair of blocks moved by both its ends, a half each (some rank runs in place;
  // alike on every rank: zero_staging_in_pairs).
  bool pairs = false;
};

// Whether an AlltoAll must move in pairs: some rank's input is its output (as mapped here, which
// keeps that: a rank's two sides in one allocation are mapped once). Alike on every rank.
PURLIN_HD bool zero_staging_in_pairs(const char* const* in, char* const* out, int nranks) {
  for (int p = 0; p < nranks; ++p)
    if (in[p] && in[p] == out[p]) return true;
  return false;
}

// Shard k of n of a buffer of `bytes` (uniform_split's cut, as offset and length in bytes).
PURLIN_HD void zero_staging_shard(const ZeroStagingCall& z, int k, std::uint64_t* off, std::uint64_t* len) {
  const std::uint64_t count = z.bytes / z.elem, n = static_cast<std::uint64_t>(z.nranks);
  std::uint64_t per = count / n + (count % n != 0 ? 1 : 0);
  per = (per + z.align_elems - 1) / z.align_elems * z.align_elems;
  const std::uint64_t index = static_cast<std::uint64_t>(k);
  const std::uint64_t first = per == 0 || index > count / per ? count : (index * per < count ? index * per : count);
  const std::uint64_t last = per < count - first ? first + per : count;
  *off = first * z.elem;
  *len = (last - first) * z.elem;
}

// CTA c's share of `bytes`: equal 16-byte-aligned shares, the last ones what is left.
PURLIN_HD void zero_staging_share(std::uint64_t bytes, int c, int ctas, std::uint64_t* off, std::uint64_t* len) {
  std::uint64_t per = (bytes + static_cast<std::uint64_t>(ctas) - 1) / static_cast<std::uint64_t>(ctas);
  per = (per + 15) / 16 * 16;
  const std::uint64_t first = per * static_cast<std::uint64_t>(c) < bytes ? per * static_cast<std::uint64_t>(c) : bytes;
  *off = first;
  *len = per < bytes - first ? per : bytes - first;
}

// Signals `step` to CTA c of every peer and waits for theirs.
template <class Atom>
PURLIN_HD Status zero_staging_barrier(const Atom& atom, const ZeroStagingCall& z, int c, std::uint64_t step) {
  const std::uint64_t want = atom::flag_word(step, z.tag);
  const std::uint64_t slot = static_cast<std::uint64_t>(c) * kMaxRanks;
  atom.signal_each(z.nranks, [&](int p, std::uint64_t*& word, std::uint64_t& value) {
    if (p == z.rank) return false;
    word = z.words[p] + slot + static_cast<std::uint64_t>(z.rank);
    value = want;
    return true;
  });
  return atom.wait_each(z.nranks, [&](int p, std::uint64_t*& word, std::uint64_t& value) {
    if (p == z.rank) return false;
    word = z.words[z.rank] + slot + static_cast<std::uint64_t>(p);
    value = want;
    return true;
  });
}

// An Atom that fans: reduce_fan stores the fold of n sources into n destinations and copy_fan one
// source into n destinations, each in one pass over the sources. Such an Atom gets a CTA's whole
// share at once; any other folds (or copies) a step at a time into one destination and copies on
// from it while the step is still in L2.
template <class Atom>
concept ZeroStagingFans = requires(const Atom& a, char* const* d, const char* const* s, int n, std::uint64_t b) {
  a.reduce_fan(d, s, n, b);
  a.copy_fan(d, n, s[0], b);
};

// The copies of a call that only copies (zero_staging_copies_only), whole, as this rank makes them:
// visit(dst, src, bytes) for each, the peers' outputs in turn from the next rank on and this rank's
// own last, so that the ranks' copies spread over the destinations. A copy onto itself (in-place
// buffers) is left out. The copy engines' executor moves these; the SM Atoms move the same bytes in
// CTA shares (zero_staging_move). An AlltoAll in pairs has no such copies: it visits nothing.
template <class Visit>
PURLIN_HD void zero_staging_copies(const ZeroStagingCall& z, Visit&& visit) {
  const int n = z.nranks, me = z.rank;
  const std::uint64_t b = z.bytes, mine = static_cast<std::uint64_t>(me) * b;
  const auto emit = [&](char* dst, const char* src, std::uint64_t bytes) {
    if (bytes && dst != src) visit(dst, src, bytes);
  };
  switch (z.kind) {
    case ZeroStagingKind::all_gather:
      for (int k = 1; k <= n; ++k) emit(z.out[(me + k) % n] + mine, z.in[me], b);
      return;
    case ZeroStagingKind::all_to_all:
      if (z.pairs) return;
      for (int k = 1; k <= n; ++k) {
        const int p = (me + k) % n;
        emit(z.out[p] + mine, z.in[me] + static_cast<std::uint64_t>(p) * b, b);
      }
      return;
    case ZeroStagingKind::broadcast: {
      std::uint64_t shard = 0, len = 0;
      zero_staging_shard(z, me, &shard, &len);
      for (int k = 1; k <= n; ++k) emit(z.out[(me + k) % n] + shard, z.in[z.root] + shard, len);
      return;
    }
    case ZeroStagingKind::gather: emit(z.out[z.root] + mine, z.in[me], b); return;
    case ZeroStagingKind::scatter: emit(z.out[me], z.in[z.root] + mine, b); return;
    default: return;
  }
}

// Stores `len` bytes from src into every rank's output at offset `at` (AllGather's share of this
// rank's input, Broadcast's of the root's), this rank's own output first, then the peers in turn; a
// destination that is src itself (in place) is left out.
template <class Atom>
PURLIN_HD void zero_staging_push(const Atom& atom, const ZeroStagingCall& z, const char* src, std::uint64_t at,
                                 std::uint64_t len) {
  char* dsts[kMaxRanks];
  int m = 0;
  for (int k = 0; k < z.nranks; ++k) {
    char* d = z.out[(z.rank + k) % z.nranks] + at;
    if (d != src) dsts[m++] = d;
  }
  if (!len || !m) return;
  if constexpr (ZeroStagingFans<Atom>) {
    atom.copy_fan(dsts, m, src, len);
  } else {
    for (std::uint64_t done = 0; done < len; done += kZeroStagingStep) {
      const std::uint64_t step = len - done < kZeroStagingStep ? len - done : kZeroStagingStep;
      for (int k = 0; k < m; ++k) atom.copy(dsts[k] + done, src + done, step);
    }
  }
}

// The work of CTA c of `ctas` between the barriers. Destinations go in the order this rank's own
// first, then the peers in turn, so that the ranks' stores spread over the peers.
template <class Atom>
PURLIN_HD void zero_staging_move(const Atom& atom, const ZeroStagingCall& z, int c, int ctas) {
  const int n = z.nranks, me = z.rank;
  const std::uint64_t b = z.bytes;
  const char* srcs[kMaxRanks];
  char* dsts[kMaxRanks];
  switch (z.kind) {
    case ZeroStagingKind::all_reduce: {
      std::uint64_t shard = 0, shard_len = 0, off = 0, len = 0;
      zero_staging_shard(z, me, &shard, &shard_len);
      zero_staging_share(shard_len, c, ctas, &off, &len);
      if constexpr (ZeroStagingFans<Atom>) {
        for (int p = 0; p < n; ++p) srcs[p] = z.in[p] + shard + off;
        for (int k = 0; k < n; ++k) dsts[k] = z.out[(me + k) % n] + shard + off;
        if (len) atom.reduce_fan(dsts, srcs, n, len);
      } else {
        for (std::uint64_t done = 0; done < len; done += kZeroStagingStep) {
          const std::uint64_t at = shard + off + done, step = len - done < kZeroStagingStep ? len - done : kZeroStagingStep;
          for (int p = 0; p < n; ++p) srcs[p] = z.in[p] + at;
          atom.reduce(z.out[me] + at, srcs, n, step);
          for (int p = 0; p < n; ++p)
            if (p != me) atom.copy(z.out[p] + at, z.out[me] + at, step);
        }
      }
      return;
    }
    case ZeroStagingKind::all_gather: {
      std::uint64_t off = 0, len = 0;
      zero_staging_share(b, c, ctas, &off, &len);
      zero_staging_push(atom, z, z.in[me] + off, static_cast<std::uint64_t>(me) * b + off, len);
      return;
    }
    case ZeroStagingKind::reduce_scatter: {
      std::uint64_t off = 0, len = 0;
      zero_staging_share(b, c, ctas, &off, &len);
      const std::uint64_t block = static_cast<std::uint64_t>(me) * b;
      for (int p = 0; p < n; ++p) srcs[p] = z.in[p] + block + off;
      if (len) atom.reduce(z.out[me] + off, srcs, n, len);
      return;
    }
    case ZeroStagingKind::all_to_all: {
      const std::uint64_t block = static_cast<std::uint64_t>(me) * b;
      if (!z.pairs) {
        std::uint64_t off = 0, len = 0;
        zero_staging_share(b, c, ctas, &off, &len);
        for (int k = 0; k < n; ++k) {
          const int p = (me + k) % n;
          if (len) atom.copy(z.out[p] + block + off, z.in[me] + static_cast<std::uint64_t>(p) * b + off, len);
        }
        return;
      }
      // In pairs: this rank's own block as a copy (nothing where it is in place), then with each
      // peer p the half of the pair that is this end's (the lower rank the first), both ways at once.
      for (int k = 0; k < n; ++k) {
        const int p = (me + k) % n;
        const std::uint64_t theirs = static_cast<std::uint64_t>(p) * b;
        std::uint64_t half = 0, half_len = b, off = 0, len = 0;
        if (p != me) zero_staging_share(b, me < p ? 0 : 1, 2, &half, &half_len);
        zero_staging_share(half_len, c, ctas, &off, &len);
        if (!len) continue;
        const std::uint64_t at = half + off;
        if (p == me) atom.copy(z.out[me] + block + at, z.in[me] + block + at, len);
        else atom.copy_pair(z.out[p] + block + at, z.in[me] + theirs + at, z.out[me] + theirs + at, z.in[p] + block + at, len);
      }
      return;
    }
    case ZeroStagingKind::broadcast: {
      std::uint64_t shard = 0, shard_len = 0, off = 0, len = 0;
      zero_staging_shard(z, me, &shard, &shard_len);
      zero_staging_share(shard_len, c, ctas, &off, &len);
      zero_staging_push(atom, z, z.in[z.root] + shard + off, shard + off, len);
      return;
    }
    case ZeroStagingKind::reduce: {
      std::uint64_t shard = 0, shard_len = 0, off = 0, len = 0;
      zero_staging_shard(z, me, &shard, &shard_len);
      zero_staging_share(shard_len, c, ctas, &off, &len);
      for (int p = 0; p < n; ++p) srcs[p] = z.in[p] + shard + off;
      if (len) atom.reduce(z.out[z.root] + shard + off, srcs, n, len);
      return;
    }
    case ZeroStagingKind::gather:
    case ZeroStagingKind::scatter: {
      std::uint64_t off = 0, len = 0;
      zero_staging_share(b, c, ctas, &off, &len);
      const std::uint64_t block = static_cast<std::uint64_t>(me) * b + off;
      char* dst = z.kind == ZeroStagingKind::gather ? z.out[z.root] + block : z.out[me] + off;
      const char* src = z.kind == ZeroStagingKind::gather ? z.in[me] + off : z.in[z.root] + block;
      if (len && dst != src) atom.copy(dst, src, len);
      return;
    }
  }
}

// Send/Recv, message by message. The two ends of a message agree without waiting for each other
// (the executor's PairBoard): the end that comes first offers its buffer and takes the role `wait`;
// the other maps that buffer and takes `move`: it copies the message in place, a receiver pulling it
// out of the sender's input, a sender pushing it into the receiver's output. Each message (a "leg")
// is cut into `shares` equal shares (alike at both ends), and each share meets on words of its own:
// the waiting end signals its arrival (its stream is done with the buffer: the input written, or the
// output free), the moving end waits for that, moves the share and signals done, on which the
// waiting end leaves. CTA c moves share c; CTA 0 alone signals and awaits every share of the legs
// this rank waits on, so that a round that only waits holds one CTA. Every CTA signals first, moves
// second and waits last, so a round's legs never wait on each other.
//
// Where the copy engines move this rank's legs, one CTA does all of the round but the move in two
// launches (phase arrive, then leave) and the engines copy the moved legs whole in between, in stream
// order; the other end cannot tell: the words and their values are the same.
//
// A rank's leg words are [kind][side][peer][share]: kind 0 the arrival, 1 done; side 0 where this
// rank sends to `peer`, 1 where it receives from it. Its counters [side][peer][share] hold the number
// of each share's last call, which grows alike at both ends (the same legs in the same order).
enum class LegRole : std::uint8_t { wait, move };

inline constexpr int kZeroStagingMaxLegs = 2 * (kMaxRanks - 1);
inline constexpr std::uint64_t kZeroStagingLegWords = 4ull * kMaxRanks * kZeroStagingMaxCtas;
inline constexpr std::uint64_t kZeroStagingLegCounters = 2ull * kMaxRanks * kZeroStagingMaxCtas;

PURLIN_HD constexpr std::uint64_t zero_staging_leg_word(int kind, int side, int peer, int share) {
  return ((static_cast<std::uint64_t>(kind) * 2 + static_cast<std::uint64_t>(side)) * kMaxRanks +
          static_cast<std::uint64_t>(peer)) * kZeroStagingMaxCtas + static_cast<std::uint64_t>(share);
}
PURLIN_HD constexpr std::uint64_t zero_staging_leg_counter(int side, int peer, int share) {
  return (static_cast<std::uint64_t>(side) * kMaxRanks + static_cast<std::uint64_t>(peer)) * kZeroStagingMaxCtas +
         static_cast<std::uint64_t>(share);
}

struct ZeroStagingLeg {
  char* dst = nullptr;        // move: where the message goes (the receiver's output)
  const char* src = nullptr;  // move: the message (the sender's input)
  std::uint64_t bytes = 0;
  std::uint16_t tag = 0;      // what both ends agree on (the message's size)
  std::uint8_t peer = 0;
  std::uint8_t side = 0;      // 0: this rank sends, 1: it receives
  LegRole role = LegRole::wait;
};

struct ZeroStagingLegs {
  int rank = 0;
  int count = 0;
  int shares = 1;                          // alike on every rank (at most kZeroStagingMaxCtas)
  // whole: CTA c of `shares` (of one, where this rank only waits); arrive and leave: one CTA, which
  // meets every share of every leg, the copy engines moving the moved legs between the two launches.
  ZeroStagingPhase phase = ZeroStagingPhase::whole;
  const ZeroStagingLeg* legs = nullptr;    // [count]
  std::uint64_t* const* words = nullptr;   // [nranks]: every rank's leg words as mapped here
  std::uint64_t* counters = nullptr;       // this rank's [side][peer][share] call numbers
};

// CTA c's part of a round's legs (c < shares; CTA 0 also does the waiting for all shares), or, in a
// phase, the one CTA's part of it.
template <class Atom>
  requires atom::AtomCopies<Atom> && atom::AtomFlags<Atom>
PURLIN_HD Status zero_staging_legs_call(const Atom& atom, const ZeroStagingLegs& z, int c) {
  const int shares = z.shares;
  const bool whole = z.phase == ZeroStagingPhase::whole;
  // Items of the waiting: every (leg, share) on CTA 0; of the moving: (leg, share c) on CTA c, or
  // every (leg, share) in a phase. Item k of `count * shares` is leg k / shares, share k % shares.
  const int waits = c == 0 ? z.count * shares : 0, moves = whole ? z.count : z.count * shares;
  const auto waited = [&](int k, int* i, int* share) {
    *i = k / shares;
    *share = k % shares;
    return z.legs[*i].role == LegRole::wait;
  };
  const auto moved = [&](int k, int* i, int* share) {
    *i = whole ? k : k / shares;
    *share = whole ? c : k % shares;
    return z.legs[*i].role == LegRole::move;
  };
  const auto counter = [&](int i, int share) {
    return z.counters + zero_staging_leg_counter(z.legs[i].side, z.legs[i].peer, share);
  };
  const auto value = [&](int i, int share) { return atom::flag_word(*counter(i, share) + 1, z.legs[i].tag); };
  // A leg's word of kind `kind` for a share: the peer's (whose side is the other one) or this rank's.
  const auto word = [&](int i, int share, int kind, bool peers) {
    const ZeroStagingLeg& l = z.legs[i];
    return peers ? z.words[l.peer] + zero_staging_leg_word(kind, 1 - l.side, z.rank, share)
                 : z.words[z.rank] + zero_staging_leg_word(kind, l.side, l.peer, share);
  };
  if (z.phase != ZeroStagingPhase::leave) {
    atom.signal_each(waits, [&](int k, std::uint64_t*& w, std::uint64_t& v) {
      int i = 0, share = 0;
      if (!waited(k, &i, &share)) return false;
      w = word(i, share, 0, true);
      v = value(i, share);
      return true;
    });
    PURLIN_TRY(atom.wait_each(moves, [&](int k, std::uint64_t*& w, std::uint64_t& v) {
      int i = 0, share = 0;
      if (!moved(k, &i, &share)) return false;
      w = word(i, share, 0, false);
      v = value(i, share);
      return true;
    }));
  }
  if (whole) {
    for (int i = 0; i < z.count; ++i) {
      if (z.legs[i].role != LegRole::move) continue;
      std::uint64_t off = 0, len = 0;
      zero_staging_share(z.legs[i].bytes, c, shares, &off, &len);
      if (len) atom.copy(z.legs[i].dst + off, z.legs[i].src + off, len);
    }
  }
  if (z.phase == ZeroStagingPhase::arrive) return Status::ok;
  atom.signal_each(moves, [&](int k, std::uint64_t*& w, std::uint64_t& v) {
    int i = 0, share = 0;
    if (!moved(k, &i, &share)) return false;
    w = word(i, share, 1, true);
    v = value(i, share);
    return true;
  });
  PURLIN_TRY(atom.wait_each(waits, [&](int k, std::uint64_t*& w, std::uint64_t& v) {
    int i = 0, share = 0;
    if (!waited(k, &i, &share)) return false;
    w = word(i, share, 1, false);
    v = value(i, share);
    return true;
  }));
  // The calls are over: their numbers become the last ones.
  atom.put_each(waits + moves, [&](int k, std::uint64_t*& w, std::uint64_t& v) {
    int i = 0, share = 0;
    if (k < waits ? !waited(k, &i, &share) : !moved(k - waits, &i, &share)) return false;
    w = counter(i, share);
    v = *w + 1;
    return true;
  });
  return Status::ok;
}

// One CTA's part of a zero-staging call: arrive, move its share, leave once every peer is done.
template <class Atom>
  requires atom::AtomCopies<Atom> && atom::AtomFlags<Atom>
PURLIN_HD Status zero_staging_call(const Atom& atom, const ZeroStagingCall& z, int c, int ctas) {
  PURLIN_TRY(zero_staging_barrier(atom, z, c, 2 * z.call - 1));
  zero_staging_move(atom, z, c, ctas);
  return zero_staging_barrier(atom, z, c, 2 * z.call);
}

}  // namespace purlin::snac
