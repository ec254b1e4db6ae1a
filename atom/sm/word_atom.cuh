// The SM datapath's word Atom for the latency exchange (snac/protocol/exchange.h) and the pair
// exchange (snac/protocol/pair_exchange.h), built for the synchronisation floor: a thread per 8-byte
// word of every message, the loads of a word from every message in flight together, and as little
// code as the steps allow (on one H200 shared by 8 rank processes, each process fetches its own
// copy of the kernel's instructions, and a kernel of 5,600 instructions took 8 us per call where
// one of 540 took 3).
//
// Each step describes its messages once per CTA, thread i message i (WordTables), so the
// description's code appears once rather than once per rank; then thread q takes word q of every
// message, for q = threadIdx.x, threadIdx.x + blockDim.x, ... (the same in every step and phase, as
// in-place calls and a composition's second phase need: the thread that pushes word q of an
// intermediate is the one that folded it). Compiled for at most N ranks (2, 4 or 8: loops over the
// messages are unrolled, so a word of each lives in registers) and, for reductions, one Reducer.
// Messages are whole 8-byte words at 8-byte aligned addresses (the launch checks); PreMulSum, other
// reductions and unaligned calls run on atom::LLAtom.
//
// Its wire format is LLAtom's (atom/ll_packet.h): word q of a message is packet q of the box, so
// either Atom can serve either end of an exchange.
//
// Memory ordering:
//  - push: one 16-byte volatile store per packet; each 8-byte half carries the flag, and 8-byte
//    stores are single-copy atomic, so a reader that sees the flag in both halves holds the payload.
//  - receive, fold: volatile 16-byte loads of the word's packet from every producer, issued
//    together, again for those not yet there.
//  - wait_each: acquire loads; signal_each: release stores after a barrier of the CTA.
//  - The caller's buffers are read and written with plain accesses: the kernel's start orders them
//    after the stream's earlier work, its completion before the later.
// Every spin checks the abort word, the rank's fault word and the time budget every 1024 looks
// (atom/sm/sm_atom.cuh's cta_give_up); a thread that stops tells its CTA's other threads through
// SmCtaWords, and every step ends with the CTA agreeing on its outcome.
#pragma once

#include <cstdint>
#include <type_traits>

#include "atom/contract.h"
#include "atom/ll_packet.h"
#include "atom/reduce.h"
#include "atom/sm/ll_atom.cuh"
#include "atom/sm/sm_atom.cuh"
#include "atom/word_list.h"

namespace purlin::atom {

// The messages of one step, described once per CTA: thread i evaluates the protocol's description
// of message i (code for one message, not one per rank), and every thread reads the table.
struct WordTables {
  LLSend send[kLLGroup];
  LLRecv recv[kLLGroup];
  bool send_live[kLLGroup];
  bool recv_live[kLLGroup];
};

// `Flat`: 0, thread q takes word q of every message (a word of each in flight together); F > 0, the
// words of all messages of a step form one list, and each thread has F of its items in flight
// together (the pair exchange, whose messages are independent: with one message of many words per
// thread, the word-per-thread form waits a memory latency per word).
template <int N, class Fixed, bool Reduces, bool Aligned = true, int Flat = 0>
class WordAtom {
  static_assert(N >= 2 && N <= kLLGroup, "a word Atom is compiled for 2 to kLLGroup ranks");
  static_assert(!Reduces || !std::is_void_v<Fixed>, "a word Atom folds with a Reducer fixed at compile time");
  static_assert(Flat >= 0 && Flat <= 16 && (Flat == 0 || !Reduces), "the flat form moves copies' words only");

 public:
  // `trigger_phase`: after the pushes of this phase the next kernel of the stream may launch
  // (griddepcontrol.launch_dependents); negative: the kernel does so itself. `one_gpu`: every peer
  // runs on this GPU, so wait_each and signal_each order at GPU scope only.
  __device__ WordAtom(const ReduceOp& op, SmGuard guard, SmCtaWords* cta, WordTables* tables, bool pdl,
                      int trigger_phase, bool one_gpu = false)
      : op_(op), guard_(guard), cta_(cta), t_(tables), begin_(global_ns()), pdl_(pdl), trigger_phase_(trigger_phase),
        one_gpu_(one_gpu) {}

  // Pushes word q of every message f(d, LLSend&) names, for each q of this thread: the loads of a
  // word from every message in flight together, then the packets. `reduces`: contributions to a
  // reduction (no scaling here: PreMulSum never runs on this Atom).
  template <class F>
  __device__ void push(int n, bool reduces, F&& f) {
    (void)reduces;
    for (int d = threadIdx.x; d < N; d += blockDim.x) t_->send_live[d] = d < n && f(d, t_->send[d]);
    __syncthreads();
    if constexpr (Flat > 0) {
      push_flat();
    } else {
      push_words();
    }
#if __CUDA_ARCH__ >= 900
    if (pdl_ && phase_ == trigger_phase_) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  }

 private:
  __device__ void push_words() {
    for (std::uint32_t q = threadIdx.x;; q += blockDim.x) {
      std::uint64_t v[N];
      bool any = false;
#pragma unroll
      for (int d = 0; d < N; ++d) {
        const LLSend& m = t_->send[d];
        v[d] = t_->send_live[d] && q * 8 < static_cast<std::uint32_t>(m.bytes) ? load(m.src, q, m.bytes) : 0;
      }
#pragma unroll
      for (int d = 0; d < N; ++d) {
        const LLSend& m = t_->send[d];
        if (!t_->send_live[d] || q >= packets(m.bytes)) continue;
        any = true;
        st_ll(m.dst + q, ll_word(ll_word_data(v[d]), m.flag), ll_word(static_cast<std::uint32_t>(v[d] >> 32), m.flag));
      }
      if (!any) break;
    }
  }

  // The items of the send table as one list: Flat of this thread's loads in flight, then their
  // packets.
  __device__ void push_flat() {
    std::uint32_t end[N];
    const std::uint32_t total = word_list_ends<N>(t_->send, t_->send_live, end);
    for (std::uint32_t base = threadIdx.x; base < total; base += blockDim.x * Flat) {
      int d[Flat];
      std::uint32_t q[Flat];
      std::uint64_t v[Flat];
#pragma unroll
      for (int u = 0; u < Flat; ++u) {
        const std::uint32_t i = base + static_cast<std::uint32_t>(u) * blockDim.x;
        word_list_locate<N>(i, end, &d[u], &q[u]);
        const LLSend& m = t_->send[d[u]];
        v[u] = i < total && q[u] * 8 < static_cast<std::uint32_t>(m.bytes) ? load(m.src, q[u], m.bytes) : 0;
      }
#pragma unroll
      for (int u = 0; u < Flat; ++u) {
        if (base + static_cast<std::uint32_t>(u) * blockDim.x >= total) break;
        const LLSend& m = t_->send[d[u]];
        st_ll(m.dst + q[u], ll_word(ll_word_data(v[u]), m.flag), ll_word(static_cast<std::uint32_t>(v[u] >> 32), m.flag));
      }
    }
  }

 public:
  // dst = src, word by word (this rank's own part of a copy); nothing when they are the same.
  __device__ void copy(char* dst, const char* src, std::uint64_t bytes) {
    if (dst == src) return;
    for (std::uint32_t q = threadIdx.x; q * 8 < static_cast<std::uint32_t>(bytes); q += blockDim.x) store(dst, q, bytes, load(src, q, bytes));
  }

  // Takes every message f(s, LLRecv&) names into its destination (empty ones: awaited only).
  template <class F>
  __device__ Status receive(int n, F&& f) {
    describe(n, f);
    int result = 0;
    if constexpr (Flat > 0) result = receive_flat();
    for (std::uint32_t q = threadIdx.x; Flat == 0 && result == 0; q += blockDim.x) {
      unsigned pending = 0;
#pragma unroll
      for (int s = 0; s < N; ++s)
        if (t_->recv_live[s] && q < packets(t_->recv[s].bytes)) pending |= 1u << s;
      if (!pending) break;
      const unsigned stores = pending;
      std::uint64_t data[N];
      result = await(q, pending, data);
      if (result) break;
#pragma unroll
      for (int s = 0; s < N; ++s)
        if ((stores >> s & 1u) && q * 8 < static_cast<std::uint32_t>(t_->recv[s].bytes)) store(t_->recv[s].dst, q, t_->recv[s].bytes, data[s]);
    }
    ++phase_;
    return agree(result);
  }

  // dst = the rank-ordered fold of `bytes` from every rank: this rank's (`me`) read from `self`, the
  // others' from the packets f(s, LLRecv&) names (s != me).
  template <class F>
  __device__ Status fold(char* dst, std::uint64_t bytes, int me, const char* self, int n, F&& f) {
    describe(n, f);
    int result = 0;
    if constexpr (!Reduces) {
      result = static_cast<int>(Status::internal_error);  // a copy's kernel has no fold
    } else {
      const Fixed r(op_);
      unsigned live = 0;
#pragma unroll
      for (int s = 0; s < N; ++s)
        if (t_->recv_live[s]) live |= 1u << s;
      for (std::uint32_t q = threadIdx.x; q * 8 < static_cast<std::uint32_t>(bytes) && result == 0; q += blockDim.x) {
        const std::uint64_t own = load(self, q, bytes);
        std::uint64_t data[N];
        result = await(q, live, data);
        if (result) break;
        WordFold<Fixed, 8> acc;
#pragma unroll
        for (int s = 0; s < N; ++s) {
          if (s >= n) break;
          const std::uint64_t w = s == me ? own : data[s];
          if (s == 0) acc.first(r, w);
          else acc.next(r, w);
        }
        store(dst, q, bytes, acc.template finish<std::uint64_t>(r));
      }
    }
    ++phase_;
    return agree(result);
  }

  // Returns once every word f(i, word, value) names (i < n) holds at least `value`, read with
  // acquire order; every thread reads them all (they are few, and usually there already).
  template <class F>
  __device__ Status wait_each(int n, F&& f) const {
    int result = 0;
    for (int i = 0; i < n && result == 0; ++i) {
      std::uint64_t* word = nullptr;
      std::uint64_t value = 0;
      if (!f(i, word, value)) continue;
      std::uint32_t spins = 0;
      while ((one_gpu_ ? ld_acquire_gpu(word) : ld_acquire_sys(word)) < value)
        if ((++spins & 1023u) == 0 && (result = give_up()) != 0) break;
    }
    return agree(result);
  }

  // Stores `value` into every word f(i, word, value) names with release order, once every thread of
  // the CTA has finished its earlier steps (a barrier: what they read is read).
  template <class F>
  __device__ void signal_each(int n, F&& f) const {
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      std::uint64_t* word = nullptr;
      std::uint64_t value = 0;
      if (!f(i, word, value)) continue;
      if (one_gpu_) st_release_gpu(word, value);
      else st_release_sys(word, value);
    }
  }

 private:
  // Word q of a message of `bytes` (the launch keeps every message within 4 GiB): one load when
  // the launch made sure every message is whole words at aligned addresses, else the bytes there.
  static __device__ __forceinline__ std::uint64_t load(const char* src, std::uint32_t q, std::uint64_t bytes) {
    if constexpr (Aligned) return reinterpret_cast<const std::uint64_t*>(src)[q];
    else return load_word(src, q, bytes);
  }
  static __device__ __forceinline__ void store(char* dst, std::uint32_t q, std::uint64_t bytes, std::uint64_t v) {
    if constexpr (Aligned) reinterpret_cast<std::uint64_t*>(dst)[q] = v;
    else store_word(dst, q, bytes, v);
  }
  // Packets of a message: one per word, one for an empty message (ll_packets, in 32 bits).
  static __device__ __forceinline__ std::uint32_t packets(std::uint64_t bytes) {
    const std::uint32_t b = static_cast<std::uint32_t>(bytes);
    return b ? (b + 7) / 8 : 1;
  }

  // The items of the receive table as one list: Flat of this thread's packets awaited together, then
  // stored. 0, or the Status that ended a wait.
  __device__ int receive_flat() const {
    std::uint32_t end[N];
    const std::uint32_t total = word_list_ends<N>(t_->recv, t_->recv_live, end);
    for (std::uint32_t base = threadIdx.x; base < total; base += blockDim.x * Flat) {
      int s[Flat];
      std::uint32_t q[Flat];
      std::uint64_t data[Flat];
      unsigned pending = 0;
#pragma unroll
      for (int u = 0; u < Flat; ++u) {
        const std::uint32_t i = base + static_cast<std::uint32_t>(u) * blockDim.x;
        word_list_locate<N>(i, end, &s[u], &q[u]);
        if (i < total) pending |= 1u << u;
      }
      const unsigned stores = pending;
      if (int e = await_packets<Flat>(pending, data, [&](int u) { return &t_->recv[s[u]]; }, [&](int u) { return q[u]; }))
        return e;
#pragma unroll
      for (int u = 0; u < Flat; ++u) {
        const LLRecv& m = t_->recv[s[u]];
        if ((stores >> u & 1u) && q[u] * 8 < static_cast<std::uint32_t>(m.bytes)) store(m.dst, q[u], m.bytes, data[u]);
      }
    }
    return 0;
  }

  // The receive table of a step, described by one thread per message.
  template <class F>
  __device__ void describe(int n, F&& f) {
    for (int s = threadIdx.x; s < N; s += blockDim.x) t_->recv_live[s] = s < n && f(s, t_->recv[s]);
    __syncthreads();
  }

  // Waits until packet q of every message in `pending` carries its flag, loads of all of them in
  // flight at once; fills data[]. 0, or the Status that ended the wait.
  __device__ __forceinline__ int await(std::uint32_t q, unsigned pending, std::uint64_t* data) const {
    return await_packets<N>(pending, data, [&](int s) { return &t_->recv[s]; }, [q](int) { return q; });
  }

  // Waits until, for every k of `pending` (k < K), packet at(k) of message msg(k) carries that
  // message's flag, the loads of all of them in flight at once; data[k] its payload. 0, or the
  // Status that ended the wait.
  template <int K, class Msg, class At>
  __device__ __forceinline__ int await_packets(unsigned pending, std::uint64_t* data, Msg msg, At at) const {
    std::uint32_t spins = 0;
    while (pending) {
      std::uint64_t lo[K], hi[K];
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (pending >> k & 1u) ld_ll(msg(k)->src + at(k), &lo[k], &hi[k]);
      // A word whose flag has the awaited epoch and another tag: the ranks' calls differ
      // (atom/ll_packet.h's ll_arrival, as one test for every source).
      bool mismatch = false;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (!(pending >> k & 1u)) continue;
        const std::uint32_t want = msg(k)->flag;
        const std::uint32_t flo = ll_word_flag(lo[k]) ^ want, fhi = ll_word_flag(hi[k]) ^ want;
        if ((flo | fhi) == 0) {
          data[k] = static_cast<std::uint64_t>(ll_word_data(hi[k])) << 32 | ll_word_data(lo[k]);
          pending &= ~(1u << k);
        } else {
          mismatch |= (flo != 0 && flo < 0x10000u) || (fhi != 0 && fhi < 0x10000u);
        }
      }
      if (mismatch) return stop(static_cast<int>(Status::invalid_usage));
      if (pending && (++spins & 1023u) == 0)
        if (int e = give_up()) return e;
    }
    return 0;
  }

  // The CTA's common outcome of a step in which threads may have failed separately (so that every
  // thread takes the same way out of the protocol and meets the same barriers).
  __device__ Status agree(int result) const {
    if (!__syncthreads_or(result != 0)) return Status::ok;
    if (result) atomicMax(&cta_->status, result);
    __syncthreads();
    return static_cast<Status>(cta_->status);
  }

  // Out of line: the rare paths stay out of the spin's code.
  __device__ __noinline__ int give_up() const { return cta_give_up(guard_, cta_, begin_); }
  // A mismatch stops the CTA's other threads (their next check) without telling the host: the
  // kernel reports the CTA's agreed outcome.
  __device__ __noinline__ int stop(int s) const { return cta_stop(guard_, cta_, s, false); }

  ReduceOp op_;
  SmGuard guard_;
  SmCtaWords* cta_;
  WordTables* t_;
  std::uint64_t begin_;
  bool pdl_;
  int trigger_phase_;
  bool one_gpu_;
  int phase_ = 0;  // phases received or folded so far
};

static_assert(AtomExchanges<WordAtom<8, Reducer<DataType::bf16, RedOpKind::sum>, true>> && AtomExchanges<WordAtom<2, void, false>> &&
                  AtomPairs<WordAtom<8, void, false>> && AtomPairs<WordAtom<8, void, false, true, 8>>,
              "the word Atom keeps the contract of atom/contract.h");

}  // namespace purlin::atom
