// An all-gather among the ranks of one host through shared memory, for what the ranks must agree
// on at every call, where the bootstrap (a socket round trip per rank) would cost more than the
// call. Rank 0 creates a segment (core/shm.h) and hands it to the others as a descriptor
// (core/fd_passing.h); each rank then owns two slots, used in turn by its rounds. A round is a
// lockstep: every rank posts its record and waits for every other rank's record of the same round.
//
// Two slots per rank suffice: a rank writes round r + 2 only after it has read every rank's record
// of round r + 1, which each posted only after reading every record of round r.
//
// A caller that meets its peers here for some of its calls only can name each round's call: a
// number the ranks count alike over all their calls. Each rank says which calls it ran without a
// round (pass), so that a peer waiting in a round for a call this rank ran another way learns at
// once that the ranks' calls differed, instead of waiting until the timeout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/bootstrap.h"
#include "core/shm.h"
#include "core/status.h"

namespace purlin {

// Collective over `boot`: rank 0 creates a zero-filled segment of `bytes` and every other rank maps
// it from a descriptor rank 0 hands it; fails on every rank where any rank failed.
Status share_segment(Bootstrap& boot, std::size_t bytes, double timeout_s, ShmSegment* out);

class ShmGather {
 public:
  // Collective over `boot`: every rank calls it once, at the same point of its calls. Records are
  // at most `record_bytes` bytes.
  static Status create(Bootstrap& boot, std::size_t record_bytes, double timeout_s, std::unique_ptr<ShmGather>* out);
  ShmGather(const ShmGather&) = delete;
  ShmGather& operator=(const ShmGather&) = delete;

  // One round: posts `mine` (record_bytes) and copies every rank's record of the round into
  // all[0 .. nranks-1]. Every rank runs the same number of rounds. Fails after timeout_s, or once
  // `stop` (may be empty) returns true; after a failure the ranks no longer count rounds alike, so
  // every later round fails at once.
  // `call` (0: none named) is the caller's call this round stands for, counted alike on every rank
  // from 1. A peer whose round names another call, or that passed this one, made another call: the
  // round fails with Status::invalid_usage.
  Status all_gather(const void* mine, void* all, const std::function<bool()>& stop, std::uint64_t call = 0);
  // This rank ran `call` (as all_gather names calls, growing) without a round.
  void pass(std::uint64_t call);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  std::uint64_t rounds() const { return round_; }

 private:
  ShmGather() = default;
  struct Slot;
  Slot* slot(int rank, std::uint64_t round) const;
  std::uint64_t* passed(int rank) const;

  ShmSegment segment_;
  int rank_ = 0;
  int nranks_ = 1;
  std::size_t record_bytes_ = 0;
  std::size_t slot_bytes_ = 0;
  double timeout_s_ = 0;
  std::uint64_t round_ = 0;
  bool broken_ = false;
};

}  // namespace purlin
