// What SNAC's protocol templates ask of an Atom, as concepts checked at compile time: every Atom
// (atom/host, atom/sm) is asserted against them beside its definition, and the protocol's entry
// points assert them for the Atom they are instantiated with.
//
// Capabilities and their memory ordering:
//  - AtomCopies: copy (plain stores), copy_pair (two copies in one pass, every element of both
//    sources read before either destination's is written: two blocks swapped in place), contribute
//    (copy of this rank's contribution to a reduction, with the reduction's producer step:
//    PreMulSum scales by this rank's scalar), reduce (the consumer's fold of n sources in rank
//    order). None orders anything by itself: a later signal publishes what they wrote.
//  - AtomFlags: signal (release store of a flag word into a peer's window: everything written before
//    is visible to whoever acquires the value), put (a write to the rank's own protocol state, one
//    writer, visible to every thread of the role), store_relaxed / load_relaxed (words whose ordering
//    another flag provides), wait (acquire: returns once the word shows the awaited sequence number,
//    or an error on a mismatched tag, abort, a sibling's failure, a peer's fault or the timeout),
//    and the batched forms, where item i is named by f(i, word, value) and false skips it:
//    wait_each (all items awaited, in any order), wait_each_watching (also reads a word where a
//    peer on the other path would have notified), signal_each, put_each.
//  - AtomPackets (the latency path): push_each writes packets of {8 payload bytes, flag} so that a
//    reader that sees a flag sees its payload; push_contributions does so for contributions to a
//    reduction (scaled as contribute); pull_each waits for and reads messages; pull_reduce folds
//    them in rank order straight from the packets.
//  - AtomExchanges (the latency exchange, snac/protocol/exchange.h): push (every message a batch
//    names, scaled first under PreMulSum when it reduces), receive, fold (the rank-ordered fold of
//    every rank's message, this rank's from its own input).
//  - AtomPairs (the pair exchange of Send/Recv rounds, snac/protocol/pair_exchange.h): push, copy
//    and receive as above, and wait_each / signal_each on the pairs' ack words.
// A role's thread group calls every operation uniformly (all threads of a CTA on a GPU, one thread
// on the host).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "atom/ll_packet.h"
#include "atom/packet.h"
#include "core/hd.h"
#include "core/status.h"

namespace purlin::atom {
namespace probe {

// Callables of the shapes the batched operations take: declared for the concepts, never defined.
struct Word {
  PURLIN_HD bool operator()(int, std::uint64_t*&, std::uint64_t&) const;
};
struct Watched {
  PURLIN_HD bool operator()(int, std::uint64_t*&, std::uint64_t&, const std::uint64_t*&) const;
};
struct Push {
  PURLIN_HD bool operator()(int, PacketPush&) const;
};
struct Pull {
  PURLIN_HD bool operator()(int, PacketPull&) const;
};
struct Source {
  PURLIN_HD bool operator()(int, PacketSource&) const;
};
struct Send {
  PURLIN_HD bool operator()(int, LLSend&) const;
};
struct Recv {
  PURLIN_HD bool operator()(int, LLRecv&) const;
};

}  // namespace probe

template <class A>
concept AtomCopies = requires(A& a, void* dst, const void* src, std::size_t bytes, const char* const* srcs) {
  a.copy(dst, src, bytes);
  a.copy_pair(dst, src, dst, src, bytes);
  a.contribute(dst, src, bytes);
  a.reduce(dst, srcs, 1, bytes);
};

template <class A>
concept AtomFlags = requires(A& a, std::uint64_t* word, std::uint64_t value, probe::Word item, probe::Watched watched) {
  a.signal(word, value);
  a.put(word, value);
  a.store_relaxed(word, value);
  { a.load_relaxed(word) } -> std::same_as<std::uint64_t>;
  { a.wait(word, value) } -> std::same_as<Status>;
  { a.wait_each(1, item) } -> std::same_as<Status>;
  { a.wait_each_watching(1, watched) } -> std::same_as<Status>;
  a.signal_each(1, item);
  a.put_each(1, item);
};

template <class A>
concept AtomPackets = requires(A& a, char* dst, std::uint64_t bytes, probe::Push push, probe::Pull pull,
                               probe::Source source) {
  a.push_each(1, push);
  a.push_contributions(1, push);
  { a.pull_each(1, pull) } -> std::same_as<Status>;
  { a.pull_reduce(dst, bytes, 1, source) } -> std::same_as<Status>;
};

template <class A>
concept AtomExchanges = requires(A& a, char* dst, const char* self, std::uint64_t bytes, probe::Send send,
                                 probe::Recv recv) {
  a.push(1, true, send);
  { a.receive(1, recv) } -> std::same_as<Status>;
  { a.fold(dst, bytes, 0, self, 1, recv) } -> std::same_as<Status>;
};

// The pair exchange (snac/protocol/pair_exchange.h): the exchange's push, copy and receive, and the
// producers' free boxes as flag words (wait_each: acquire; signal_each: release, once every thread
// of the role has finished its reads).
template <class A>
concept AtomPairs = requires(A& a, char* dst, const char* src, std::uint64_t bytes, probe::Send send, probe::Recv recv,
                             probe::Word item) {
  a.push(1, false, send);
  a.copy(dst, src, bytes);
  { a.receive(1, recv) } -> std::same_as<Status>;
  { a.wait_each(1, item) } -> std::same_as<Status>;
  a.signal_each(1, item);
};

// What the roles of snac/protocol/ (stage.h, consume.h) use.
template <class A>
concept SnacAtom = AtomCopies<A> && AtomFlags<A> && AtomPackets<A>;

}  // namespace purlin::atom
