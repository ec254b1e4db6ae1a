// The host datapath's Atom: plain memory copies, the rank-ordered reduction on the CPU, and flags as
// std::atomic_ref on shared memory (release on signal, acquire on wait). One thread executes a role;
// every wait polls an abort flag and a deadline so that a dead or stuck peer ends in an error.
//
// A reduction's contributions leave their producer through contribute (staging) and
// push_contributions (packets), which apply the producer's step of the reduction (PreMulSum: this
// rank's scalar, atom/reduce.h); reduce and pull_reduce are the consumer's fold.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "atom/contract.h"
#include "atom/host/reduce_host.h"
#include "atom/ll_packet.h"
#include "atom/packet.h"
#include "atom/reduce.h"
#include "core/status.h"
#include "core/types.h"

namespace purlin::atom {

// Why waits end early. `abort` is the communicator's (ncclCommAbort, a revoked or failed comm);
// `failed` is this call's, set by the first role that fails so its siblings stop too.
struct WaitGuard {
  const std::atomic<bool>* abort = nullptr;
  std::atomic<bool>* failed = nullptr;
  double timeout_s = 300.0;
  // The rank's fault word in its window: a peer that found the ranks' calls mismatched stores a
  // Status there (snac::raise_fault).
  const std::uint64_t* fault = nullptr;
};

class HostAtom {
 public:
  HostAtom(DataType type, const ReduceOp& op, WaitGuard guard) : type_(type), op_(op), guard_(guard) {}

  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (dst != src && bytes) std::memmove(dst, src, bytes);
  }

  // dst0 = src0 and dst1 = src1, each byte of both sources read before either destination's is
  // written, so dst0 may be src1 and dst1 src0 exactly (two blocks swapped in place).
  void copy_pair(void* dst0, const void* src0, void* dst1, const void* src1, std::size_t bytes) const {
    char* d0 = static_cast<char*>(dst0);
    char* d1 = static_cast<char*>(dst1);
    const char* s0 = static_cast<const char*>(src0);
    const char* s1 = static_cast<const char*>(src1);
    for (std::size_t i = 0; i < bytes; ++i) {
      const char x = s0[i], y = s1[i];
      d0[i] = x;
      d1[i] = y;
    }
  }

  // copy for this rank's contribution to a reduction: PreMulSum writes each element times this
  // rank's scalar, rounded to the element type (scale_host); any other operator copies. Plain
  // stores, as copy: a later signal (release) publishes them. dst may be src exactly.
  void contribute(void* dst, const void* src, std::size_t bytes) const {
    if (!scales(op_)) return copy(dst, src, bytes);
    scale_host(type_, op_, dst, src, bytes / size_of(type_));
  }

  // dst[i] = fold over srcs[0..n-1] in order (PreMulSum: the sum of the scaled contributions).
  // dst may equal a source exactly.
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

  // Acquire wait until the flag word at `flag` reaches `value` (atom/packet.h), or an error on a
  // mismatched word, abort, failure of a sibling, a fault raised by a peer, or timeout.
  Status wait(std::uint64_t* flag, std::uint64_t value) const { return wait_word(flag, value, nullptr); }

  // Latency path: payload words then flags (release), one packet per 8 bytes. pull also reads
  // `watch` while it waits long (see PacketPull).
  void push(Packet* dst, const char* src, std::size_t bytes, std::uint64_t q) const;
  Status pull(char* dst, Packet* src, std::size_t bytes, std::uint64_t q, const std::uint64_t* watch = nullptr) const;

  // Batched forms (see atom/sm/sm_atom.cuh): item i is named by f(i, ...), false skips it. One
  // thread runs a role here, so they are loops.
  template <class F>
  Status wait_each(int n, F&& f) const {
    return wait_each_watching(n, [&f](int i, std::uint64_t*& word, std::uint64_t& value, const std::uint64_t*&) {
      return f(i, word, value);
    });
  }
  // wait_each, where f(i, word, value, watch) also names a word to read while the wait is long
  // (see SmAtom::wait_each_watching).
  template <class F>
  Status wait_each_watching(int n, F&& f) const {
    for (int i = 0; i < n; ++i) {
      std::uint64_t* word = nullptr;
      const std::uint64_t* watch = nullptr;
      std::uint64_t value = 0;
      if (f(i, word, value, watch)) PURLIN_TRY(wait_word(word, value, watch));
    }
    return Status::ok;
  }
  template <class F>
  void signal_each(int n, F&& f) const {
    for (int i = 0; i < n; ++i) {
      std::uint64_t* word = nullptr;
      std::uint64_t value = 0;
      if (f(i, word, value)) signal(word, value);
    }
  }
  template <class F>
  void put_each(int n, F&& f) const {
    for (int i = 0; i < n; ++i) {
      std::uint64_t* word = nullptr;
      std::uint64_t value = 0;
      if (f(i, word, value)) put(word, value);
    }
  }
  template <class F>
  void push_each(int n, F&& f) const {
    for (int i = 0; i < n; ++i) {
      PacketPush m{};
      if (f(i, m)) push(m.dst, m.src, m.bytes, m.q);
    }
  }
  // push_each for messages that are this rank's contributions to a reduction: the payload pushed
  // is what contribute would stage (scaled for PreMulSum), with push's ordering. Each message is
  // scaled from its source into a buffer of this thread before its packets go out; consecutive
  // messages of one source share that buffer.
  template <class F>
  void push_contributions(int n, F&& f) const {
    if (!scales(op_)) return push_each(n, f);
    const char* last = nullptr;
    std::uint64_t last_bytes = 0;
    for (int i = 0; i < n; ++i) {
      PacketPush m{};
      if (!f(i, m)) continue;
      std::vector<char>& buf = scale_buffer(m.bytes);
      if (m.src != last || m.bytes != last_bytes) {
        contribute(buf.data(), m.src, m.bytes);
        last = m.src;
        last_bytes = m.bytes;
      }
      push(m.dst, buf.data(), m.bytes, m.q);
    }
  }
  template <class F>
  Status pull_each(int n, F&& f) const {
    for (int i = 0; i < n; ++i) {
      PacketPull m{};
      if (f(i, m)) PURLIN_TRY(pull(m.dst, const_cast<Packet*>(m.src), m.bytes, m.q, m.watch));
    }
    return Status::ok;
  }
  template <class F>
  Status pull_reduce(char* dst, std::uint64_t bytes, int n, F&& f) const {
    std::vector<char>& buf = pull_buffer(static_cast<std::size_t>(n) * bytes);
    const char* srcs[kMaxBatch];
    int nsrc = 0;
    for (int i = 0; i < n; ++i) {
      PacketSource m{};
      if (!f(i, m)) continue;
      char* into = buf.data() + static_cast<std::size_t>(nsrc) * bytes;
      PURLIN_TRY(pull(into, const_cast<Packet*>(m.src), bytes, m.q, m.watch));
      srcs[nsrc++] = into;
    }
    if (nsrc) reduce(dst, srcs, nsrc, bytes);
    return Status::ok;
  }

  // ---- the latency exchange (snac/protocol/exchange.h), message after message ----
  // Packet words are stored with release and loaded with acquire; each carries its own flag.

  // Pushes every message f(d, LLSend&) names; contributions to a reduction (`reduces`) are
  // scaled first under PreMulSum.
  template <class F>
  void push(int n, bool reduces, F&& f) const {
    for (int i = 0; i < n; ++i) {
      LLSend m{};
      if (!f(i, m)) continue;
      const char* src = m.src;
      if (reduces && m.bytes && scales(op_)) {
        std::vector<char>& buf = scale_buffer(m.bytes);
        scale_host(type_, op_, buf.data(), m.src, m.bytes / size_of(type_));
        src = buf.data();
      }
      push_ll(m.dst, src, m.bytes, m.flag);
    }
  }
  // Takes every message f(s, LLRecv&) names.
  template <class F>
  Status receive(int n, F&& f) const {
    for (int i = 0; i < n; ++i) {
      LLRecv m{};
      if (f(i, m)) PURLIN_TRY(pull_ll(m.dst, m.src, m.bytes, m.flag));
    }
    return Status::ok;
  }
  // dst = the rank-ordered fold of `bytes` from every rank: `me`'s from `self` (scaled under
  // PreMulSum), the others' from the packets f(s, LLRecv&) names.
  template <class F>
  Status fold(char* dst, std::uint64_t bytes, int me, const char* self, int n, F&& f) const {
    std::vector<char>& buf = pull_buffer(static_cast<std::size_t>(n) * bytes);
    const char* srcs[kMaxBatch];
    for (int s = 0; s < n; ++s) {
      char* into = buf.data() + static_cast<std::size_t>(s) * bytes;
      if (s == me) {
        srcs[s] = self;
        if (scales(op_)) {
          scale_host(type_, op_, into, self, bytes / size_of(type_));
          srcs[s] = into;
        }
        continue;
      }
      LLRecv m{};
      f(s, m);
      PURLIN_TRY(pull_ll(into, m.src, bytes, m.flag));
      srcs[s] = into;
    }
    reduce_host(type_, op_, dst, reinterpret_cast<const void* const*>(srcs), n, bytes / size_of(type_));
    return Status::ok;
  }

 private:
  void push_ll(LLPacket* dst, const char* src, std::uint64_t bytes, std::uint32_t flag) const;
  Status pull_ll(char* dst, const LLPacket* src, std::uint64_t bytes, std::uint32_t flag) const;
  // Why a wait that began at `start` must end now (a peer's fault, a failed sibling, abort, the
  // time budget), or Status::ok to go on. `what` describes the wait for the timeout's message.
  template <class What>
  Status stalled(std::chrono::steady_clock::time_point start, What&& what) const;

  // wait(), also reading `watch` while it waits long (see PacketPull).
  Status wait_word(std::uint64_t* flag, std::uint64_t value, const std::uint64_t* watch) const;
  Status mismatched(const std::uint64_t* flag, std::uint64_t seen, std::uint64_t want) const;

  // Per-thread room for pull_reduce's received messages; grows, never shrinks.
  static std::vector<char>& pull_buffer(std::size_t bytes) {
    thread_local std::vector<char> buf;
    if (buf.size() < bytes) buf.resize(bytes);
    return buf;
  }
  // Per-thread room for a scaled contribution (push_contributions, the exchange's push); grows,
  // never shrinks.
  static std::vector<char>& scale_buffer(std::size_t bytes) {
    thread_local std::vector<char> buf;
    if (buf.size() < bytes) buf.resize(bytes);
    return buf;
  }

  DataType type_;
  ReduceOp op_;
  WaitGuard guard_;
};

static_assert(SnacAtom<HostAtom> && AtomExchanges<HostAtom>, "the host Atom keeps the contract of atom/contract.h");

}  // namespace purlin::atom
