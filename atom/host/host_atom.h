// The host datapath's Atom: plain memory copies, the rank-ordered reduction on the CPU, and flags as
// std::atomic_ref on shared memory (release on signal, acquire on wait). One thread executes a role;
// every wait polls an abort flag and a deadline so that a dead or stuck peer ends in an error.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "atom/host/reduce_host.h"
#include "atom/packet.h"
#include "core/status.h"
#include "core/types.h"

namespace purlin::atom {

// Why waits end early. `abort` is the communicator's (ncclCommAbort, a revoked or failed comm);
// `failed` is this call's, set by the first role that fails so its siblings stop too.
struct WaitGuard {
  const std::atomic<bool>* abort = nullptr;
  std::atomic<bool>* failed = nullptr;
  double timeout_s = 300.0;
};

class HostAtom {
 public:
  HostAtom(DataType type, const ReduceOp& op, WaitGuard guard) : type_(type), op_(op), guard_(guard) {}

  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (dst != src && bytes) std::memmove(dst, src, bytes);
  }

  // dst[i] = fold over srcs[0..n-1] in order. dst may equal a source exactly.
  void reduce(void* dst, const char* const* srcs, int n, std::size_t bytes) const {
    reduce_host(type_, op_, dst, reinterpret_cast<const void* const*>(srcs), n, bytes / size_of(type_));
  }

  // Release store: everything written before is visible to whoever acquires this value.
  void signal(std::uint64_t* flag, std::uint64_t value) const {
    std::atomic_ref<std::uint64_t>(*flag).store(value, std::memory_order_release);
  }
  // A write to the rank's own protocol state (single writer).
  void put(std::uint64_t* word, std::uint64_t value) const { *word = value; }
  void store_relaxed(std::uint64_t* word, std::uint64_t value) const {
    std::atomic_ref<std::uint64_t>(*word).store(value, std::memory_order_relaxed);
  }
  std::uint64_t load_relaxed(std::uint64_t* word) const {
    return std::atomic_ref<std::uint64_t>(*word).load(std::memory_order_relaxed);
  }

  // Acquire wait until *flag >= value, or an error on abort, failure of a sibling, or timeout.
  Status wait(std::uint64_t* flag, std::uint64_t value) const;

  // Latency path: payload words then flags (release), one packet per 8 bytes.
  void push(Packet* dst, const char* src, std::size_t bytes, std::uint64_t q) const;
  Status pull(char* dst, Packet* src, std::size_t bytes, std::uint64_t q) const;

 private:
  DataType type_;
  ReduceOp op_;
  WaitGuard guard_;
};

}  // namespace purlin::atom
