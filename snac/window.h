// The peer-accessible memory every rank exposes to the others, and the trivially copyable handle
// the protocol uses to reach it. One window per rank; the layout is identical on every rank.
//
//   ready[phase][producer]      epoch counters written by producers (release), polled by the owner
//   lane_base[phase][producer][kDepth]  where, in the producer's staging, a staged message's lane
//                               starts: slot (its first sequence number) % kDepth
//   ack[phase][consumer]        counters written by consumers (release), polled by the owner
//   fault                       a Status stored by a peer that found the ranks' calls mismatched
//   staging[2][half]            two halves chosen by the producer's call parity
//   packets[phase][producer][kDepth][packets_per_pair]   latency path: 8 data bytes + 8-byte flag
//                               word; message q of the pair uses buffer q % kDepth
// ready, ack and packet flags hold flag words (atom/packet.h): sequence number and tag.
#pragma once

#include <cstddef>
#include <cstdint>

#include "atom/packet.h"
#include "core/hd.h"

namespace purlin::snac {

inline constexpr int kMaxRanks = 64;   // ranks of one host in one communicator
inline constexpr int kMaxPhases = 2;   // a declaration, or a composition of two
// Messages of one (phase, producer, consumer) pair that may be sent and not yet received at once:
// the pair's packet buffers and lane base slots. A send whose receive is not posted yet finishes
// while fewer than kDepth earlier sequence numbers of the pair are unreceived (and its bytes fit),
// as NCCL's sends finish into the NCCL_STEPS (8) slots of a connection's buffer.
inline constexpr int kDepth = 8;

using atom::Packet;

struct WindowGeometry {
  int nranks = 0;
  std::uint64_t staging_half = 0;       // bytes per parity half
  std::uint64_t packets_per_pair = 0;   // per (phase, producer, buffer)
  std::uint64_t ready_off = 0, lane_base_off = 0, ack_off = 0, fault_off = 0, staging_off = 0, packets_off = 0,
                total = 0;

  static WindowGeometry make(int nranks, std::uint64_t staging_half, std::uint64_t packets_per_pair) {
    auto align = [](std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; };
    WindowGeometry g;
    g.nranks = nranks;
    g.staging_half = align(staging_half, 256);
    g.packets_per_pair = packets_per_pair;
    std::uint64_t counters = sizeof(std::uint64_t) * kMaxPhases * static_cast<std::uint64_t>(nranks);
    g.ready_off = 0;
    g.lane_base_off = align(g.ready_off + counters, 128);
    g.ack_off = align(g.lane_base_off + kDepth * counters, 128);
    g.fault_off = align(g.ack_off + counters, 128);
    g.staging_off = align(g.fault_off + sizeof(std::uint64_t), 4096);
    g.packets_off = align(g.staging_off + 2 * g.staging_half, 4096);
    g.total = align(g.packets_off + sizeof(Packet) * kMaxPhases * static_cast<std::uint64_t>(nranks) * kDepth *
                                        packets_per_pair, 4096);
    return g;
  }
};

// One rank's window as mapped in this process.
struct Window {
  std::uint64_t* ready;
  std::uint64_t* lane_base;
  std::uint64_t* ack;
  std::uint64_t* fault;
  char* staging;
  Packet* packets;

  static Window at(void* base, const WindowGeometry& g) {
    char* b = static_cast<char*>(base);
    return Window{reinterpret_cast<std::uint64_t*>(b + g.ready_off),
                  reinterpret_cast<std::uint64_t*>(b + g.lane_base_off),
                  reinterpret_cast<std::uint64_t*>(b + g.ack_off), reinterpret_cast<std::uint64_t*>(b + g.fault_off),
                  b + g.staging_off, reinterpret_cast<Packet*>(b + g.packets_off)};
  }
};

// A rank's persistent protocol state. It lives in the rank's own memory (device memory on a GPU, so
// that a captured graph replays correctly); only this rank writes it.
struct LocalState {
  std::uint64_t tx[kMaxPhases][kMaxRanks];        // messages (chunks or packet batches) sent per pair
  std::uint64_t rx[kMaxPhases][kMaxRanks];        // messages consumed per pair
  std::uint64_t lane_first[kMaxPhases][kMaxRanks];  // first chunk of the last staged message per pair
  std::uint64_t staged[kMaxPhases][kMaxRanks];    // region of this call's half staged per pair (span_of)
  // Per half: the ack that the pair's consumer still owes for messages staged in the half, and the
  // region those messages cover. A call staging over the region waits for the ack (claim_region).
  std::uint64_t half_need[2][kMaxPhases][kMaxRanks];
  std::uint64_t half_span[2][kMaxPhases][kMaxRanks];
  std::uint64_t epoch;                            // calls so far: parity picks the staging half
};

}  // namespace purlin::snac
