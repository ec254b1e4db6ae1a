// The SM datapath's Atom for the latency exchange (snac/protocol/exchange.h): packets of
// atom/ll_packet.h pushed into peers' boxes and polled in one's own.
//
// Every thread of the CTA calls each method (control flow is uniform). Each method gives word p of
// every message (8 payload bytes, one packet) to thread p % blockDim.x, the same in every method,
// which is what in-place calls rely on (exchange.h). A method's only barrier is the one that
// publishes its message table, and the one that agrees on its outcome.
//
// Memory ordering:
//  - push: one 16-byte volatile store per packet; each of its 8-byte words carries payload and flag,
//    and 8-byte stores are single-copy atomic, so a reader needs no fence.
//  - receive, fold: volatile 16-byte loads until both words carry the awaited flag; the packets of
//    every peer for one word are loaded together, then re-polled until all have arrived.
//  - The caller's buffers are read and written with plain accesses: the kernel's launch orders
//    them after the stream's earlier work, and its end before the later.
// Every spin checks the communicator's abort word, the rank's fault word and a time budget every
// 1024 iterations (atom/sm/sm_atom.cuh's rules).
#pragma once

#include <cstdint>
#include <type_traits>

#include "atom/ll_packet.h"
#include "atom/sm/sm_atom.cuh"

namespace purlin::atom {

__device__ __forceinline__ void st_ll(LLPacket* p, std::uint64_t lo, std::uint64_t hi) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
}
__device__ __forceinline__ void ld_ll(const LLPacket* p, std::uint64_t* lo, std::uint64_t* hi) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*lo), "=l"(*hi) : "l"(p) : "memory");
}

// A producer's own contribution as PreMulSum sends it: every element of the word scaled by the
// rank's scalar and rounded to the element type (atom/reduce.h's Scaler).
template <DataType T>
struct ScaleWord {
  Scaler<T> sc;
  __device__ __forceinline__ std::uint64_t operator()(std::uint64_t w) const {
    using S = typename Scaler<T>::S;
    constexpr int kElems = 8 / static_cast<int>(sizeof(S));
    S e[kElems];
    memcpy(e, &w, 8);
#pragma unroll
    for (int k = 0; k < kElems; ++k) e[k] = sc.apply(e[k]);
    memcpy(&w, e, 8);
    return w;
  }
};
struct SameWord {
  __device__ __forceinline__ std::uint64_t operator()(std::uint64_t w) const { return w; }
};

// Calls f(fold, scale) for the run-time type and operator: `fold` the Reducer the consumer folds
// with, `scale` what a producer applies to its own words first (PreMulSum: scale, then sum).
template <class F>
__device__ __forceinline__ void with_exchange_reducer(DataType type, const ReduceOp& op, F&& f) {
  auto by_op = [&](auto tag_t) {
    constexpr DataType T = decltype(tag_t)::value;
    switch (op.kind) {
      case RedOpKind::sum: return f(Reducer<T, RedOpKind::sum>(op), SameWord{});
      case RedOpKind::prod: return f(Reducer<T, RedOpKind::prod>(op), SameWord{});
      case RedOpKind::max: return f(Reducer<T, RedOpKind::max>(op), SameWord{});
      case RedOpKind::min: return f(Reducer<T, RedOpKind::min>(op), SameWord{});
      case RedOpKind::avg: return f(Reducer<T, RedOpKind::avg>(op), SameWord{});
      case RedOpKind::premulsum:  // scaled by each producer, then summed
        return f(Reducer<T, RedOpKind::sum>(op), ScaleWord<T>{Scaler<T>(op)});
    }
  };
  with_type(type, by_op);
}

// The CTA's shared memory for the exchange's message tables (kernel-owned).
struct LLTables {
  LLSend send[kMaxBatch];
  LLRecv recv[kMaxBatch];
  int send_live[kMaxBatch];
  int recv_live[kMaxBatch];
  std::uint64_t send_packets, recv_packets;  // the most packets of any live message of each table
  int sends, recvs;                          // live messages of each table
  int start;                                 // the outcome of the first step's start, for the CTA
};

// How the first step of a call starts (the kernel's part): with programmatic dependent launch the
// kernel runs ahead of the previous one on its stream and builds its tables for the epoch it
// expects; the first step then waits for that kernel to complete, reads the channel's epoch word
// and, when it holds the expected epoch less one, takes the call's epoch and goes on (otherwise
// ll_restart: the tables are built again for the epoch the word holds).
// Where the next kernel may launch (griddepcontrol.launch_dependents): at the first phase's start
// (`at_start`), or after the pushes of phase `phase` (none: past the last phase, at the kernel's end).
struct LLStart {
  bool pdl = false;
  std::uint64_t* epoch = nullptr;  // the channel's epoch word (calls so far)
  std::uint64_t expected = 0;      // the epoch the tables were built for
  bool at_start = true;
  int phase = 0;
};
inline constexpr int ll_restart = -1;
// Where an LLAtom's finer stamps start, from the stamps it is given (LLAtom::detail).
inline constexpr int kLLDetailStamps = 8;

// `Fixed` (a Reducer<T, K>, or void): the one type and operator the folds are compiled for, or, with
// void, every one, chosen at run time. `Reduces`: whether the kernel has reductions at all (a copy's
// kernel compiles neither folds nor PreMulSum's scaling).
//
// The steps are deferred: push() and copy() only record their messages, and the receive() or fold()
// that follows runs the whole phase, so that everything but the data waits for no one: the tables
// are built before the previous kernel has completed, and every load of a thread's words is in
// flight at once (a load per word, then a store per word, would pay the memory's latency per word).
//
// `Slots` (2, 4 or 8; 0: every form): the lean kernel of a launch whose every phase fits the
// one-word form with at most that many message slots (the launch knows: a thread per word of a
// channel's slice, n <= Slots). Only that form is compiled, for that many slots: on one H200 the
// kernel with every form was 45,000 instructions and more, and a phase whose code is not yet in
// the instruction caches waits for it to be fetched. A phase that does not fit (which the launch
// rules out) stops with internal_error.
template <class Fixed = void, bool Reduces = true, int Slots = 0>
class LLAtom {
  static_assert(Slots == 0 || Slots == 2 || Slots == 4 || Slots == kLLGroup, "the one-word form's slot counts");
  static_assert(Slots == 0 || !(Reduces && std::is_void_v<Fixed>), "a lean kernel folds with a fixed Reducer");
 public:
  static constexpr int kGroup = kLLGroup;

  // `stamps` (may be null): where thread 0 records the globaltimer as the start and each phase end.
  __device__ LLAtom(DataType type, const ReduceOp& op, SmGuard guard, SmCtaWords* cta, LLTables* tables,
                    const LLStart& start, std::uint64_t* stamps = nullptr)
      : type_(type), op_(op), guard_(guard), cta_(cta), t_(tables), start_(start), stamps_(stamps),
        detail_(stamps ? stamps + kLLDetailStamps : nullptr),
        begin_(global_ns()) {}

  // The messages f(d, LLSend&) names, pushed by the next receive() or fold(). `reduces`: they are
  // contributions to a reduction, which PreMulSum scales at their producer.
  template <class F>
  __device__ void push(int n, bool reduces, F&& f) {
    __syncthreads();  // the previous phase's readers of the tables are done
    for (int i = threadIdx.x; i < n; i += blockDim.x) t_->send_live[i] = f(i, t_->send[i]) ? 1 : 0;
    scale_ = reduces && op_.kind == RedOpKind::premulsum;
    sends_ = n;
    copy_ = Copy{};
  }

  // dst = src (this rank's own part), done by the next receive(); nothing when they are the same.
  __device__ void copy(char* dst, const char* src, std::uint64_t bytes) {
    if (dst != src) copy_ = Copy{dst, src, bytes};
  }

  // Takes every message f(s, LLRecv&) names into its destination (empty ones: awaited only).
  template <class F>
  __device__ Status receive(int n, F&& f) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) t_->recv_live[i] = f(i, t_->recv[i]) ? 1 : 0;
    recvs_ = n;
    return run(nullptr, 0, -1, nullptr);
  }

  // dst = the rank-ordered fold of `bytes` from every rank: this rank's (`me`) read from `self`,
  // the others' from the packets f(s, LLRecv&) names (s != me).
  template <class F>
  __device__ Status fold(char* dst, std::uint64_t bytes, int me, const char* self, int n, F&& f) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) t_->recv_live[i] = f(i, t_->recv[i]) ? 1 : 0;
    recvs_ = n;
    return run(dst, bytes, me, self);
  }

 private:
  struct Copy {
    char* dst = nullptr;
    const char* src = nullptr;
    std::uint64_t bytes = 0;
  };

  // Packets one thread awaits together: their addresses and flags, and the payloads once there.
  struct Pending {
    const LLPacket* src[kGroup];
    std::uint32_t flag[kGroup];
    int tag[kGroup];  // message * kGroup + word of the batch
    std::uint64_t data[kGroup];
    int count = 0;
    __device__ void add(const LLPacket* p, std::uint32_t f, int t) {
      src[count] = p;
      flag[count] = f;
      tag[count] = t;
      ++count;
    }
  };

  // One phase: the tables' totals, the start (first phase only), the pushes, the own copy, then the
  // receive or the fold (`fold_dst` non-null).
  __device__ Status run(char* fold_dst, std::uint64_t fold_bytes, int me, const char* self) {
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint64_t most = 0;
      int live = 0;
      for (int i = 0; i < sends_; ++i)
        if (t_->send_live[i]) {
          most = ll_packets(t_->send[i].bytes) > most ? ll_packets(t_->send[i].bytes) : most;
          ++live;
        }
      t_->send_packets = most;
      t_->sends = live;
      most = 0;
      live = 0;
      for (int i = 0; i < recvs_; ++i)
        if (t_->recv_live[i]) {
          most = ll_packets(t_->recv[i].bytes) > most ? ll_packets(t_->recv[i].bytes) : most;
          ++live;
        }
      t_->recv_packets = most;
      t_->recvs = live;
    }
    __syncthreads();
    detail(0);
    if constexpr (Slots > 0) {
      if (sends_ > Slots || recvs_ > Slots || !one_word(fold_dst, fold_bytes)) return agreed(static_cast<int>(Status::internal_error));
      return run_one_word(fold_dst, fold_bytes, me, self);
    } else {
      return run_any(fold_dst, fold_bytes, me, self);
    }
  }

  // run() in a kernel of every form: the one-word form where it fits, else the batched one.
  __device__ Status run_any(char* fold_dst, std::uint64_t fold_bytes, int me, const char* self) {
    // The one-word form is compiled into the kernels of one type and operator and of copies; the
    // kernels for any type and operator keep the batched form (one per pair would multiply their
    // build, which is already the longest).
    if constexpr (!(Reduces && std::is_void_v<Fixed>))
      if (one_word(fold_dst, fold_bytes)) return run_one_word(fold_dst, fold_bytes, me, self);
    // The first phase starts inside push_words: its first loads are in flight while the epoch is
    // checked.
    int begun = 0;
    if constexpr (Reduces && std::is_void_v<Fixed>) {
      if (scale_) with_exchange_reducer(type_, op_, [&](const auto&, const auto& scale) { begun = push_words(scale); });
      else begun = push_words(SameWord{});
    } else {
      begun = push_words(SameWord{});
    }
    // ll_restart is no Status: the kernel builds the tables again.
    if (begun) return static_cast<Status>(begun);
    if (copy_.bytes)
      for (std::uint64_t p = threadIdx.x; p * 8 < copy_.bytes; p += blockDim.x)
        store_word(copy_.dst, p, copy_.bytes, load_word(copy_.src, p, copy_.bytes));
    pushed();
    stamp();
    int result = 0;
    if (fold_dst == nullptr) {
      result = receive_words();
    } else if constexpr (!Reduces) {
      result = static_cast<int>(Status::internal_error);  // a copy's kernel has no fold
    } else if constexpr (std::is_void_v<Fixed>) {
      with_exchange_reducer(type_, op_, [&](const auto& r, const auto& scale) {
        result = fold_words_apart(r, scale, fold_dst, fold_bytes, me, self);
      });
    } else {
      result = fold_words(Fixed(op_), SameWord{}, fold_dst, fold_bytes, me, self);
    }
    stamp();
    return agreed(result);
  }

  // The one-word form of a phase: every message has at most a word per thread (the launch gives a
  // thread per word of a channel's slice, snac/executors/sm_executor.cc) and at most kLLGroup
  // messages are live in each table. Thread p then loads word p of every message it pushes and of
  // its own part (the fold's `self`, or the own copy's source) at once, pushes, stores the own copy
  // from that same register, awaits word p of every message it takes at once, and folds or stores
  // them: one memory latency for the loads, one for the packets, no second read of its own input.
  __device__ bool one_word(const char* fold_dst, std::uint64_t fold_bytes) const {
    const std::uint64_t threads = blockDim.x;
    // A copy's kernel with more than four slots keeps the batched form: one H200, 8 ranks, AllGather
    // and AlltoAll of 1-256 KiB took 2-20% longer per call in the one-word form.
    if constexpr (!Reduces)
      if (sends_ > 4 || recvs_ > 4) return false;
    return sends_ <= kGroup && recvs_ <= kGroup && t_->send_packets <= threads && t_->recv_packets <= threads &&
           (copy_.bytes + 7) / 8 <= threads && (fold_dst == nullptr || ll_packets(fold_bytes) <= threads);
  }

  // Only where the Reducer is fixed at compile time (or there is none: a copy's kernel).
  __device__ Status run_one_word(char* fold_dst, std::uint64_t fold_bytes, int me, const char* self) {
    int result = 0;
    if (fold_dst == nullptr) {
      result = one_word_by_slots(NoFold{}, SameWord{}, nullptr, 0, me, nullptr);
    } else if constexpr (Reduces && !std::is_void_v<Fixed>) {
      result = one_word_by_slots(Fixed(op_), SameWord{}, fold_dst, fold_bytes, me, self);
    } else {
      result = static_cast<int>(Status::internal_error);  // a copy's kernel has no fold
    }
    // ll_restart is no Status: the kernel builds the tables again (uniform: begin() agreed on it).
    if (result == ll_restart) return static_cast<Status>(result);
    return agreed(result);
  }

  // agree(), then the stamp of the whole CTA's end of the phase (thread 0's own end is the stamp
  // before).
  __device__ Status agreed(int result) {
    const Status s = agree(result);
    ++phase_;
    stamp();
    return s;
  }

  // After a phase's pushes: the next kernel may launch now if LLStart says so for this phase.
  __device__ void pushed() const {
#if __CUDA_ARCH__ >= 900
    if (start_.pdl && !start_.at_start && start_.phase == phase_) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  }

  struct NoFold {};

  // The one-word form compiled for as many message slots as the tables have (2, 4 or 8): each
  // slot's words live in registers, and a form for fewer slots needs fewer of them.
  template <class R, class Scale>
  __device__ int one_word_by_slots(const R& r, const Scale& scale, char* dst, std::uint64_t bytes, int me, const char* self) {
    if constexpr (Slots > 0) {
      return one_word_phase<Slots>(r, scale, dst, bytes, me, self);
    } else {
      const int slots = sends_ > recvs_ ? sends_ : recvs_;
      if (slots <= 2) return one_word_phase<2>(r, scale, dst, bytes, me, self);
      if (slots <= 4) return one_word_phase<4>(r, scale, dst, bytes, me, self);
      return one_word_phase<kGroup>(r, scale, dst, bytes, me, self);
    }
  }

  // One phase in the one-word form for thread p = threadIdx.x. R: the fold's Reducer (NoFold for a
  // receive). Returns 0, ll_restart (from the first phase's start) or a Status.
  template <int M, class R, class Scale>
  __device__ int one_word_phase(const R& r, const Scale& scale, char* dst, std::uint64_t bytes, int me, const char* self) {
    static_assert(M <= kGroup && M <= 32, "the one-word form's slots");
    const std::uint64_t p = threadIdx.x;
    const bool first = !started_;
#if __CUDA_ARCH__ >= 900
    if (first && start_.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    // Every load of this thread in flight together: word p of each push and of its own part.
    std::uint64_t v[M];
#pragma unroll
    for (int d = 0; d < M; ++d) {
      v[d] = 0;
      if (d < sends_ && t_->send_live[d]) {
        const LLSend& m = t_->send[d];
        if (m.bytes && p < ll_packets(m.bytes)) v[d] = load_word(m.src, p, m.bytes);
      }
    }
    const char* own_src = dst ? self : copy_.src;
    const std::uint64_t own_bytes = dst ? bytes : copy_.bytes;
    const std::uint64_t own = own_src && p * 8 < own_bytes ? load_word(own_src, p, own_bytes) : 0;
    detail(1, v[0] ^ v[M - 1] ^ own);
    if (first)
      if (int b = begin()) return b;
    detail(2);
#pragma unroll
    for (int d = 0; d < M; ++d) {
      if (d >= sends_ || !t_->send_live[d]) continue;
      const LLSend& m = t_->send[d];
      if (p >= ll_packets(m.bytes)) continue;
      const std::uint64_t w = m.bytes ? scale(v[d]) : 0;
      st_ll(m.dst + p, ll_word(ll_word_data(w), m.flag), ll_word(static_cast<std::uint32_t>(w >> 32), m.flag));
    }
    if (dst == nullptr && copy_.bytes && p * 8 < copy_.bytes) store_word(copy_.dst, p, copy_.bytes, own);
    pushed();
    stamp();
    // Word p of every message to take, awaited together.
    unsigned pending = 0;
#pragma unroll
    for (int s = 0; s < M; ++s)
      if (s < recvs_ && t_->recv_live[s] && p < ll_packets(t_->recv[s].bytes)) pending |= 1u << s;
    std::uint64_t data[M] = {};
    int result = 0;
    std::uint32_t spins = 0;
    while (pending && result == 0) {
      std::uint64_t lo[M], hi[M];
#pragma unroll
      for (int s = 0; s < M; ++s)
        if (pending >> s & 1u) ld_ll(t_->recv[s].src + p, &lo[s], &hi[s]);
#pragma unroll
      for (int s = 0; s < M; ++s) {
        if (!(pending >> s & 1u)) continue;
        const std::uint32_t want = t_->recv[s].flag, flo = ll_word_flag(lo[s]), fhi = ll_word_flag(hi[s]);
        if (flo == want && fhi == want) {
          data[s] = static_cast<std::uint64_t>(ll_word_data(hi[s])) << 32 | ll_word_data(lo[s]);
          pending &= ~(1u << s);
        } else if (ll_arrival(flo, want) == LLArrival::mismatch || ll_arrival(fhi, want) == LLArrival::mismatch) {
          result = static_cast<int>(Status::invalid_usage);
        }
      }
      if (pending && result == 0) {
        if ((++spins & 1023) == 0) result = give_up();
        else if (guard_.poll_ns) __nanosleep(guard_.poll_ns);
      }
    }
    if (result == 0) {
      if constexpr (std::is_same_v<R, NoFold>) {
#pragma unroll
        for (int s = 0; s < M; ++s) {
          if (s >= recvs_ || !t_->recv_live[s]) continue;
          const LLRecv& m = t_->recv[s];
          if (p * 8 < m.bytes) store_word(m.dst, p, m.bytes, data[s]);
        }
      } else if (p < ll_packets(bytes)) {
        // Rank order 0..n-1, this rank's own word from its register.
        WordFold<R, 8> acc;
#pragma unroll
        for (int s = 0; s < M; ++s) {
          if (s >= recvs_) break;
          const std::uint64_t word = s == me ? scale(own) : data[s];
          if (s == 0) acc.first(r, word);
          else acc.next(r, word);
        }
        store_word(dst, p, bytes, acc.template finish<std::uint64_t>(r));
      }
    }
    stamp();
    return result;
  }

  // The first phase's start (LLStart), between the first loads of this thread's words and their
  // stores: 0, or ll_restart, for the whole CTA. The epoch word is written without a fence: the next
  // kernel reads it early only to guess (and reads it again after its wait).
  __device__ int begin() {
    started_ = true;
    if (threadIdx.x == 0) {
      const std::uint64_t seen = *static_cast<volatile std::uint64_t*>(start_.epoch) + 1;
      t_->start = seen == start_.expected ? 0 : ll_restart;
      if (seen == start_.expected) *start_.epoch = seen;
    }
    __syncthreads();
    // The next kernel of the stream may launch now: it builds its tables while this one runs, and
    // waits for this one to complete before it touches anything this one writes.
#if __CUDA_ARCH__ >= 900
    if (start_.pdl && start_.at_start) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    stamp();
    return t_->start;
  }

  // This thread's words of every message to push: kGroup (message, word) slots per batch, every
  // load in flight before the stores (the slots are unrolled, so the words stay in registers). In
  // the first phase the start (begin) sits between the first batch's loads and its stores: the
  // loads are the user's data and wait for the previous kernel, which griddepcontrol.wait covers,
  // so the wait comes first. Returns begin()'s outcome.
  template <class Scale>
  __device__ int push_words(const Scale& scale) {
    const std::uint64_t packets = t_->send_packets;
    const int per = ll_batch_words(t_->sends);
    const int span = kGroup / per;  // messages per batch
    const std::uint64_t stride = blockDim.x;
    int begun = 0;
    bool first = !started_;
    if (first) {
#if __CUDA_ARCH__ >= 900
      if (start_.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    }
    for (std::uint64_t p0 = threadIdx.x; p0 < packets || first; p0 += stride * static_cast<std::uint64_t>(per)) {
      for (int m0 = 0; m0 < sends_ || first; m0 += span) {
        std::uint64_t v[kGroup];
        bool valid[kGroup];
#pragma unroll
        for (int k = 0; k < kGroup; ++k) {
          const int m = m0 + k / per;
          const std::uint64_t p = p0 + static_cast<std::uint64_t>(k % per) * stride;
          valid[k] = m < sends_ && p < packets && t_->send_live[m] && p < ll_packets(t_->send[m].bytes);
          v[k] = valid[k] && t_->send[m].bytes ? load_word(t_->send[m].src, p, t_->send[m].bytes) : 0;
        }
        if (first) {
          first = false;
          if ((begun = begin()) != 0) return begun;
        }
#pragma unroll
        for (int k = 0; k < kGroup; ++k) {
          if (!valid[k]) continue;
          const LLSend& s = t_->send[m0 + k / per];
          const std::uint64_t p = p0 + static_cast<std::uint64_t>(k % per) * stride;
          const std::uint64_t w = s.bytes ? scale(v[k]) : 0;
          st_ll(s.dst + p, ll_word(ll_word_data(w), s.flag), ll_word(static_cast<std::uint32_t>(w >> 32), s.flag));
        }
      }
    }
    return 0;
  }

  // This thread's words of every message to take, kGroup packets awaited at once.
  __device__ int receive_words() {
    const std::uint64_t packets = t_->recv_packets;
    const int per = ll_batch_words(t_->recvs);
    const std::uint64_t stride = blockDim.x;
    for (std::uint64_t p0 = threadIdx.x; p0 < packets; p0 += stride * static_cast<std::uint64_t>(per)) {
      for (int m0 = 0; m0 < recvs_;) {
        Pending w;
        int m = m0;
        for (; m < recvs_ && (w.count + per <= kGroup || w.count == 0); ++m) {
          if (!t_->recv_live[m]) continue;
          for (int u = 0; u < per; ++u) {
            const std::uint64_t p = p0 + static_cast<std::uint64_t>(u) * stride;
            if (p < ll_packets(t_->recv[m].bytes)) w.add(t_->recv[m].src + p, t_->recv[m].flag, m * kGroup + u);
          }
        }
        m0 = m;
        if (int e = await(w)) return e;
        for (int k = 0; k < w.count; ++k) {
          const LLRecv& r = t_->recv[w.tag[k] / kGroup];
          const std::uint64_t p = p0 + static_cast<std::uint64_t>(w.tag[k] % kGroup) * stride;
          if (p * 8 < r.bytes) store_word(r.dst, p, r.bytes, w.data[k]);
        }
      }
    }
    return 0;
  }

  // The fold: this thread's words in batches, this rank's own words loaded first, every peer's
  // packets of a batch awaited together (kGroup at most), then folded in rank order.
  template <class R, class Scale>
  __device__ int fold_words(const R& r, const Scale& scale, char* dst, std::uint64_t bytes, int me, const char* self) {
    const int n = recvs_;
    const std::uint64_t packets = ll_packets(bytes);
    const int per = ll_batch_words(t_->recvs);
    const std::uint64_t stride = blockDim.x;
    for (std::uint64_t p0 = threadIdx.x; p0 < packets; p0 += stride * static_cast<std::uint64_t>(per)) {
      std::uint64_t own[kGroup];
      load_own(own, self, p0, per, packets, bytes);
      WordFold<R, 8> accs[kGroup];
      for (int s0 = 0; s0 < n;) {
        // Sources s0 .. s1 - 1 for words p0, p0 + stride, ... (up to `per` of them).
        Pending w;
        int s1 = s0;
        for (; s1 < n && (w.count + per <= kGroup || w.count == 0); ++s1) {
          if (s1 == me) continue;
          for (int u = 0; u < per; ++u) {
            const std::uint64_t p = p0 + static_cast<std::uint64_t>(u) * stride;
            if (p < packets) w.add(t_->recv[s1].src + p, t_->recv[s1].flag, s1 * kGroup + u);
          }
        }
        if (int e = await(w)) return e;
#pragma unroll 1
        for (int u = 0; u < per; ++u) {
          const std::uint64_t p = p0 + static_cast<std::uint64_t>(u) * stride;
          if (p >= packets) break;
          WordFold<R, 8>& acc = accs[u];
          int k = 0;
#pragma unroll 1
          for (int s = s0; s < s1; ++s) {
            std::uint64_t word;
            if (s == me) {
              word = scale(own[u]);
            } else {
              while (w.tag[k] != s * kGroup + u) ++k;
              word = w.data[k];
            }
            if (s == 0) acc.first(r, word);
            else acc.next(r, word);
          }
          if (s1 == n) store_word(dst, p, bytes, acc.template finish<std::uint64_t>(r));
        }
        s0 = s1;
      }
    }
    return 0;
  }

  // fold_words out of line, for the kernels of any type and operator: inlined, the folds of every
  // type and operator each kept a stack frame of their own, 7152 B per thread in all, which the
  // context reserves for every thread the GPU can hold (raising the reservation from 1024 B to that
  // took 1580 MiB on an H100); apart, the kernel needs only the deepest fold's.
  template <class R, class Scale>
  __device__ __noinline__ int fold_words_apart(const R& r, const Scale& scale, char* dst, std::uint64_t bytes, int me,
                                               const char* self) {
    return fold_words(r, scale, dst, bytes, me, self);
  }

  // Words p0, p0 + blockDim.x, ... (`per` of them) of this rank's own contribution, loaded together.
  // Out of line, as await: it needs no type, and every typed fold calls it.
  __device__ __noinline__ void load_own(std::uint64_t* own, const char* self, std::uint64_t p0, int per,
                                        std::uint64_t packets, std::uint64_t bytes) const {
    std::uint64_t v[kGroup];
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const std::uint64_t p = p0 + static_cast<std::uint64_t>(u) * blockDim.x;
      v[u] = u < per && p < packets ? load_word(self, p, bytes) : 0;
    }
#pragma unroll
    for (int u = 0; u < kGroup; ++u) own[u] = v[u];
  }

  // Waits until every packet of `w` carries its flag (loads of all of them in flight, then again
  // for those still missing); fills w.data. 0, or the Status that ended the wait. Out of line: every
  // typed fold calls it, and inlined into each of them it multiplied the exchange's compile time.
  __device__ __noinline__ int await(Pending& w) const {
    unsigned pending = (1u << w.count) - 1;
    std::uint32_t spins = 0;
    while (pending) {
      std::uint64_t lo[kGroup], hi[kGroup];
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        if (pending >> k & 1u) ld_ll(w.src[k], &lo[k], &hi[k]);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        if (!(pending >> k & 1u)) continue;
        const std::uint32_t flo = ll_word_flag(lo[k]), fhi = ll_word_flag(hi[k]);
        if (flo == w.flag[k] && fhi == w.flag[k]) {
          w.data[k] = static_cast<std::uint64_t>(ll_word_data(hi[k])) << 32 | ll_word_data(lo[k]);
          pending &= ~(1u << k);
        } else if (ll_arrival(flo, w.flag[k]) == LLArrival::mismatch || ll_arrival(fhi, w.flag[k]) == LLArrival::mismatch) {
          return static_cast<int>(Status::invalid_usage);
        }
      }
      if (pending && (++spins & 1023) == 0) {
        if (int s = give_up()) return s;
      } else if (pending && guard_.poll_ns) {
        __nanosleep(guard_.poll_ns);
      }
    }
    return 0;
  }

  // The CTA's common outcome of a step in which threads may have failed separately.
  __device__ Status agree(int result) const {
    if (!__syncthreads_or(result != 0)) return Status::ok;
    if (threadIdx.x == 0) cta_->status = 0;
    __syncthreads();
    if (result) atomicMax(&cta_->status, result);
    __syncthreads();
    return static_cast<Status>(cta_->status);
  }

  // As SmAtom's: cta_give_up and cta_stop (atom/sm/sm_atom.cuh).
  __device__ int give_up() const { return cta_give_up(guard_, cta_, begin_); }
  __device__ void stamp() {
    if (stamps_ && threadIdx.x == 0) *stamps_++ = global_ns();
  }
  // Thread 0's finer stamps of the one-word form, three per phase (the first two phases) after the
  // ones stamp() writes: k = 0 its tables agreed, 1 its loads arrived (`dep`, a loaded value, is
  // waited for before the clock is read), 2 the start behind it (first phase) or the same.
  __device__ void detail(int k, std::uint64_t dep = 0) const {
    if (detail_ && threadIdx.x == 0 && phase_ < 2) {
      std::uint64_t t;
      asm volatile("{\n\t.reg .u64 z;\n\tand.b64 z, %1, 0;\n\tmov.u64 %0, %%globaltimer;\n\tadd.u64 %0, %0, z;\n\t}"
                   : "=l"(t) : "l"(dep) : "memory");
      detail_[phase_ * 3 + k] = t;
    }
  }
  __device__ int stop(int s, bool report = true) const { return cta_stop(guard_, cta_, s, report); }

  DataType type_;
  ReduceOp op_;
  SmGuard guard_;
  SmCtaWords* cta_;
  LLTables* t_;
  LLStart start_;
  std::uint64_t* stamps_;
  std::uint64_t* detail_;
  std::uint64_t begin_;
  Copy copy_{};
  int sends_ = 0, recvs_ = 0;
  int phase_ = 0;  // phases ended so far
  bool scale_ = false;
  bool started_ = false;
};

}  // namespace purlin::atom
