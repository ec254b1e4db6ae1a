// The TCP bootstrap behind ncclGetUniqueId: ranks rendezvous at a root whose address travels in the
// 128-byte unique id, exchange their listening addresses, and then talk over a full mesh of TCP
// connections (all-gather, barrier, point-to-point) for the life of the communicator.
//
// Every connection starts with a hello carrying the id's 64-bit secret; connections that do not
// carry it, or send truncated or oversized messages, are dropped without disturbing the others.
// Every blocking operation honours a deadline and an abort flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"

namespace purlin {

// Exactly NCCL_UNIQUE_ID_BYTES (128) bytes, trivially copyable.
struct UniqueId {
  std::uint64_t magic;      // kUniqueIdMagic: tells our ids from garbage
  std::uint64_t secret;     // fresh random 64 bits per id: connections must present it
  std::uint8_t addr[28];    // the root's sockaddr_in or sockaddr_in6
  std::uint32_t addr_len;
  std::uint8_t reserved[80];
};
static_assert(sizeof(UniqueId) == 128);
inline constexpr std::uint64_t kUniqueIdMagic = 0x31304449'4e4c5250ull;  // "PRLNID01"

// Whose id: the caller's (ncclGetUniqueId), which honours NCCL_COMM_ID, or a child communicator's
// (split, shrink), which never does: children made at once must not share one fixed address.
enum class IdFor { caller, child };

// Creates an id and starts, in this process, the root service that ranks of this id rendezvous at
// (it ends once all ranks of the id have met, or at its deadline). With NCCL_COMM_ID set, a
// caller's id holds that address instead and no service starts here: rank 0 starts it in
// Bootstrap::create.
Status make_unique_id(UniqueId* out, IdFor whose = IdFor::caller);
// The id as logs name it (NCCL's commId): a hash of the root's address alone, the same on every
// rank, so that the id's secret stays out of logs.
std::uint64_t public_hash(const UniqueId& id);

class Bootstrap {
 public:
  // Rendezvous of `nranks` ranks at the id's root; returns once the mesh is connected.
  // `abort` (may be null) is polled; when it becomes true the call fails with remote_error.
  static Status create(const UniqueId& id, int rank, int nranks, const std::atomic<bool>* abort,
                       std::unique_ptr<Bootstrap>* out);
  ~Bootstrap();

  int rank() const;
  int nranks() const;

  // Gathers `bytes` from every rank into `all` (nranks * bytes, rank order). `mine` may alias the
  // rank's own slot of `all`.
  Status all_gather(const void* mine, std::size_t bytes, void* all);
  Status barrier();
  // Ordered, reliable point-to-point messages (any size), matched by sequence per peer.
  Status send(int peer, const void* data, std::size_t bytes);
  Status recv(int peer, void* data, std::size_t bytes);

  // Unblocks every operation in progress; all later operations fail with remote_error.
  void abort();
  // True once a peer's connection was lost (a dead peer), as seen by the last operation or by the
  // liveness check.
  bool peer_lost() const;

  // While set, operations also end with remote_error when *flag is raised, and the Bootstrap stays
  // usable (a split whose new communicator is aborted while the ranks exchange). Any thread; null
  // clears it.
  void set_interrupt(const std::atomic<bool>* flag);

  // True once this rank aborted (abort(), the abort flag of create, the interrupt flag) or a peer's
  // connection was lost: a wait between these ranks outside the Bootstrap should end too. Never
  // blocks.
  bool stopped() const;

  // Tells every peer that this rank is leaving in good order (the communicator is finalized or
  // destroyed, not aborted), so that its closing connection is not taken for a death. Best effort,
  // never blocks for long, sends once; call it when this rank has no more operations to make.
  void leave();
  // The liveness check, for a watcher thread: the lowest rank whose connection closed without a
  // leave() (its process died, or it aborted), or -1. Reads pending traffic only when no operation
  // is in progress (an operation reads it itself). Never blocks.
  int failed_peer();

  struct Impl;
 private:
  explicit Bootstrap(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace purlin
