// The SM datapath's Atom: every thread of a CTA calls each method (the protocol's control flow is
// uniform); the method splits the bytes among the threads and synchronises the CTA where the
// protocol needs it.
//
// Memory ordering:
//  - signal: CTA barrier, then thread 0 issues a release store at system scope. The barrier plus
//    the cumulativity of release make every thread's earlier writes visible to whoever acquires.
//  - wait: thread 0 spins with acquire loads at system scope, then a CTA barrier publishes the
//    result (and the ordering) to every thread.
//  - push: one 16-byte store per packet {8 data bytes, 8-byte flag word}; pull_each and pull_reduce
//    spin on the packet's flag word with 16-byte volatile loads.
//  - contribute and push_contributions are copy and push_each for this rank's contribution to a
//    reduction, with their ordering: the data written is the contribution after the reduction's
//    producer step (PreMulSum: each element times this rank's scalar, atom/reduce.h), computed in
//    registers between the load and the store. reduce and pull_reduce are the consumer's fold.
//  - every wait compares flag words as atom/packet.h says: a word with the awaited sequence number
//    and another tag ends the wait with Status::invalid_usage (the ranks' calls differ).
// Every spin checks the communicator's abort word, the rank's fault word and a time budget every
// 1024 iterations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "atom/contract.h"
#include "atom/packet.h"
#include "atom/reduce.h"
#include "atom/sm/sm_guard.h"
#include "core/status.h"
#include "core/types.h"

namespace purlin::atom {

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ std::uint64_t ld_acquire_sys(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ std::uint64_t ld_acquire_gpu(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_gpu(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_relaxed_sys(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ std::uint64_t ld_relaxed_sys(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_packet(Packet* p, std::uint64_t data, std::uint64_t flag) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(data), "l"(flag) : "memory");
}

__device__ __forceinline__ void ld_packet(const Packet* p, std::uint64_t* data, std::uint64_t* flag) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*data), "=l"(*flag) : "l"(p) : "memory");
}

// Calls f(std::integral_constant<DataType, T>{}) for the type chosen at run time.
template <class F>
__device__ __forceinline__ void with_type(DataType type, F&& f) {
  switch (type) {
#define PURLIN_TYPE_CASE(t) \
  case DataType::t: return f(std::integral_constant<DataType, DataType::t>{});
    PURLIN_TYPE_CASE(int8)
    PURLIN_TYPE_CASE(uint8)
    PURLIN_TYPE_CASE(int32)
    PURLIN_TYPE_CASE(uint32)
    PURLIN_TYPE_CASE(int64)
    PURLIN_TYPE_CASE(uint64)
    PURLIN_TYPE_CASE(f16)
    PURLIN_TYPE_CASE(f32)
    PURLIN_TYPE_CASE(f64)
    PURLIN_TYPE_CASE(bf16)
    PURLIN_TYPE_CASE(f8e4m3)
    PURLIN_TYPE_CASE(f8e5m2)
#undef PURLIN_TYPE_CASE
  }
}

// Calls f(reducer) with the consumer's Reducer<T, K> of a type and operator chosen at run time: one
// switch per call, then typed code. PreMulSum folds with sum: its contributions arrive scaled.
template <class F>
__device__ __forceinline__ void with_reducer(DataType type, const ReduceOp& op, F&& f) {
  with_type(type, [&](auto tag_t) {
    constexpr DataType T = decltype(tag_t)::value;
    switch (op.kind) {
      case RedOpKind::sum:
      case RedOpKind::premulsum: return f(Reducer<T, RedOpKind::sum>(op));
      case RedOpKind::prod: return f(Reducer<T, RedOpKind::prod>(op));
      case RedOpKind::max: return f(Reducer<T, RedOpKind::max>(op));
      case RedOpKind::min: return f(Reducer<T, RedOpKind::min>(op));
      case RedOpKind::avg: return f(Reducer<T, RedOpKind::avg>(op));
    }
  });
}

// Calls f(scaler) with the Scaler<T> (PreMulSum's producer step) of the type chosen at run time; the
// scalar is read once, here.
template <class F>
__device__ __forceinline__ void with_scaler(DataType type, const ReduceOp& op, F&& f) {
  with_type(type, [&](auto tag_t) { return f(Scaler<decltype(tag_t)::value>(op)); });
}

// The elements packed in one word, each scaled.
template <class Sc, class Word>
__device__ __forceinline__ Word scale_word(const Sc& sc, Word w) {
  using S = typename Sc::S;
  constexpr int kElems = static_cast<int>(sizeof(Word) / sizeof(S));
  S e[kElems];
  memcpy(e, &w, sizeof(Word));
#pragma unroll
  for (int k = 0; k < kElems; ++k) e[k] = sc.apply(e[k]);
  memcpy(&w, e, sizeof(Word));
  return w;
}

// dst = src scaled, `count` elements, by every thread of the CTA: whole 16-byte vectors where dst
// and src share their alignment (four loads in flight per thread), element by element around them
// and otherwise.
template <class Sc>
__device__ __forceinline__ void scale_block(const Sc& sc, void* dst, const void* src, std::size_t count) {
  using S = typename Sc::S;
  constexpr std::size_t V = 16 / sizeof(S);
  const std::size_t tid = threadIdx.x, stride = blockDim.x;
  S* out = static_cast<S*>(dst);
  const S* in = static_cast<const S*>(src);
  const std::uintptr_t d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  std::size_t head = count, vecs = 0;
  if (((d ^ s) & 15) == 0 && (d & 15) % sizeof(S) == 0) {
    head = ((16 - (d & 15)) & 15) / sizeof(S);
    if (head > count) head = count;
    vecs = (count - head) / V;
  }
  for (std::size_t i = tid; i < head; i += stride) out[i] = sc.apply(in[i]);
  const uint4* vin = reinterpret_cast<const uint4*>(in + head);
  uint4* vout = reinterpret_cast<uint4*>(out + head);
  constexpr int U = 4;
  std::size_t i = tid;
  for (; i + (U - 1) * stride < vecs; i += U * stride) {
    uint4 w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) w[u] = vin[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) vout[i + u * stride] = scale_word(sc, w[u]);
  }
  for (; i < vecs; i += stride) vout[i] = scale_word(sc, vin[i]);
  for (std::size_t k = head + vecs * V + tid; k < count; k += stride) out[k] = sc.apply(in[k]);
}

// Folds the elements packed in one W-byte word of each source, in source order, into acc.
template <class R, int W>
struct WordFold {
  using S = typename R::S;
  using A = typename R::A;
  static constexpr int kElems = W / static_cast<int>(sizeof(S));
  A acc[kElems];

  template <class Word>
  __device__ __forceinline__ void first(const R& r, const Word& w) {
    S e[kElems];
    memcpy(e, &w, W);
#pragma unroll
    for (int k = 0; k < kElems; ++k) acc[k] = r.first(e[k]);
  }
  template <class Word>
  __device__ __forceinline__ void next(const R& r, const Word& w) {
    S e[kElems];
    memcpy(e, &w, W);
#pragma unroll
    for (int k = 0; k < kElems; ++k) acc[k] = r.next(acc[k], e[k]);
  }
  template <class Word>
  __device__ __forceinline__ Word finish(const R& r) const {
    S e[kElems];
#pragma unroll
    for (int k = 0; k < kElems; ++k) e[k] = r.finish(acc[k]);
    Word w;
    memcpy(&w, e, W);
    return w;
  }
};

// One tile of U vectors per thread from exactly NS sources, from vector `base`, into registers:
// every load of the tile is issued before the first fold, so NS * U loads per thread are in flight
// (a peer's memory over NVLink is far, and one load per source and thread left the links mostly
// idle). Bounded: each load (and the fold's store) behind its bound, so that a partial last tile
// keeps them all in flight too.
template <int NS, int U, bool Bounded>
__device__ __forceinline__ void load_tile(uint4 (&w)[NS][U], const uint4* const* src, std::size_t base,
                                          std::size_t vecs) {
  const std::size_t tid = threadIdx.x, stride = blockDim.x;
#pragma unroll
  for (int k = 0; k < NS; ++k)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::size_t i = base + u * stride + tid;
      if (!Bounded || i < vecs) w[k][u] = src[k][i];
    }
}

// The fold of a loaded tile, each vector of the result handed to store(index, vector).
template <class R, int NS, int U, bool Bounded, class Store>
__device__ __forceinline__ void fold_tile(const R& r, const uint4 (&w)[NS][U], std::size_t base, std::size_t vecs,
                                          Store&& store) {
  const std::size_t tid = threadIdx.x, stride = blockDim.x;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const std::size_t i = base + u * stride + tid;
    if (Bounded && i >= vecs) continue;
    WordFold<R, 16> f;
    f.first(r, w[0][u]);
#pragma unroll
    for (int k = 1; k < NS; ++k) f.next(r, w[k][u]);
    store(i, f.template finish<uint4>(r));
  }
}

template <class R, int NS, int U, bool Bounded>
__device__ __forceinline__ void reduce_tile(const R& r, uint4* out, const uint4* const* src, std::size_t base,
                                            std::size_t vecs) {
  uint4 w[NS][U];
  load_tile<NS, U, Bounded>(w, src, base, vecs);
  fold_tile<R, NS, U, Bounded>(r, w, base, vecs, [&](std::size_t i, const uint4& v) { out[i] = v; });
}

// The tiles of a share from exactly NS sources (reduce_tile); returns the vectors done. Bounded:
// all of them, the last tile partial. Otherwise the whole tiles only, the caller folding the rest
// vector by vector: a round trip to the peers per vector a thread has left (with 2 ranks on one H100
// a zero-staged 3.5 MiB AllReduce took 17.9 us against 15.8 for 4 MiB), but bounded tiles doubled
// the time ptxas spends on the kernels that fold every type, which the zero-staging kernel alone
// (the wide Atom) takes on.
template <class R, int NS, int U, bool Bounded = false>
__device__ __forceinline__ std::size_t reduce_tiles(const R& r, uint4* out, const void* const* srcs, std::size_t vecs) {
  const std::size_t step = static_cast<std::size_t>(blockDim.x) * U;
  const uint4* src[NS];
#pragma unroll
  for (int k = 0; k < NS; ++k) src[k] = static_cast<const uint4*>(srcs[k]);
  std::size_t base = 0;
  for (; Bounded ? base < vecs : base + step <= vecs; base += step) reduce_tile<R, NS, U, Bounded>(r, out, src, base, vecs);
  return Bounded ? vecs : base;
}

// dst = rank-ordered fold of srcs over `count` elements, by every thread of the CTA. When every
// pointer is 16-byte aligned, each thread folds whole 16-byte vectors: two sources of types wider
// than a byte in tiles (reduce_tiles), otherwise loading up to four sources before combining them;
// the rest (and any misaligned call) goes element by element.
template <class R>
__device__ __forceinline__ void reduce_block(const R& r, void* dst, const void* const* srcs, int nsrc,
                                             std::size_t count) {
  using S = typename R::S;
  constexpr int V = 16 / static_cast<int>(sizeof(S));
  const std::size_t tid = threadIdx.x, stride = blockDim.x;
  std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(dst);
  for (int s = 0; s < nsrc; ++s) bits |= reinterpret_cast<std::uintptr_t>(srcs[s]);
  std::size_t done = 0;
  if ((bits & 15) == 0) {
    const std::size_t vecs = count / V;
    uint4* out = static_cast<uint4*>(dst);
    std::size_t tiled = 0;
    // Not for 1-byte types: their sixteen accumulators per vector leave no registers for a tile
    // (ptxas spills even at two vectors per thread).
    if constexpr (sizeof(S) > 1)
      if (nsrc == 2) tiled = reduce_tiles<R, 2, 4>(r, out, srcs, vecs);
    for (std::size_t i = tiled + tid; i < vecs; i += stride) {
      WordFold<R, 16> f;
      f.first(r, static_cast<const uint4*>(srcs[0])[i]);
      int s = 1;
      for (; s + 4 <= nsrc; s += 4) {
        uint4 a = static_cast<const uint4*>(srcs[s])[i], b = static_cast<const uint4*>(srcs[s + 1])[i];
        uint4 c = static_cast<const uint4*>(srcs[s + 2])[i], d = static_cast<const uint4*>(srcs[s + 3])[i];
        f.next(r, a);
        f.next(r, b);
        f.next(r, c);
        f.next(r, d);
      }
      for (; s < nsrc; ++s) f.next(r, static_cast<const uint4*>(srcs[s])[i]);
      out[i] = f.template finish<uint4>(r);
    }
    done = vecs * V;
  }
  S* out = static_cast<S*>(dst);
  for (std::size_t i = done + tid; i < count; i += stride) out[i] = r.element(srcs, nsrc, i);
}

// The CTA's common words in shared memory; the kernel zeroes them before the SmAtom's first use.
struct SmCtaWords {
  int status;                     // a step's outcome, agreed by the CTA's threads
  int stop;                       // non-zero (a Status) once a host-mapped guard word said stop
  unsigned long long host_read;   // globaltimer at the CTA's last read of the host-mapped words
};

// How often, at most, one CTA reads the host-mapped guard words while it waits. A packet wait
// occupies every thread of the CTA; were each of them to read host memory over PCIe, 64 channels
// would queue tens of thousands of such reads behind one late peer.
inline constexpr unsigned long long kHostReadPeriodNs = 20000;

// Ends the CTA's waits with `s`; `report` also tells the sibling CTAs and the host. Every SM Atom's
// waits end through here and cta_give_up.
__device__ inline int cta_stop(const SmGuard& guard, SmCtaWords* cta, int s, bool report = true) {
  atomicCAS(&cta->stop, 0, s);
  if (report) {
    *guard.error = s;
    __threadfence_system();
  }
  return s;
}

// Non-zero (a Status) when a wait that began at `begin` must end: abort requested, a sibling
// failed, a peer raised the fault word, or time is up. The host-mapped words are read by one thread
// of the CTA at a time, at most every kHostReadPeriodNs; the others learn the outcome from
// cta->stop.
__device__ inline int cta_give_up(const SmGuard& guard, SmCtaWords* cta, unsigned long long begin) {
  if (int s = *static_cast<volatile int*>(&cta->stop)) return s;
  if (guard.fault && *guard.fault) return cta_stop(guard, cta, static_cast<int>(*guard.fault));
  const unsigned long long now = global_ns();
  if (now - begin > guard.timeout_ns) return cta_stop(guard, cta, static_cast<int>(Status::remote_error));
  const unsigned long long last = *static_cast<volatile unsigned long long*>(&cta->host_read);
  if (now - last < kHostReadPeriodNs || atomicCAS(&cta->host_read, last, now) != last) return 0;
  if (*guard.abort) return cta_stop(guard, cta, static_cast<int>(Status::remote_error), false);
  if (int e = *guard.error) return cta_stop(guard, cta, e, false);
  return 0;
}

// Word p (8 bytes) of a buffer of `bytes`, zero past its end; any alignment.
__device__ __forceinline__ std::uint64_t load_word(const char* src, std::uint64_t p, std::uint64_t bytes) {
  if ((p + 1) * 8 <= bytes && (reinterpret_cast<std::uintptr_t>(src) & 7) == 0)
    return reinterpret_cast<const std::uint64_t*>(src)[p];
  std::uint64_t v = 0;
  for (std::uint64_t b = 0; b < 8 && p * 8 + b < bytes; ++b)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(src[p * 8 + b])) << (8 * b);
  return v;
}
// Stores word p of a buffer of `bytes`, the bytes past its end left alone; any alignment.
__device__ __forceinline__ void store_word(char* dst, std::uint64_t p, std::uint64_t bytes, std::uint64_t v) {
  if ((p + 1) * 8 <= bytes && (reinterpret_cast<std::uintptr_t>(dst) & 7) == 0) {
    reinterpret_cast<std::uint64_t*>(dst)[p] = v;
    return;
  }
  for (std::uint64_t b = 0; b < 8 && p * 8 + b < bytes; ++b) dst[p * 8 + b] = static_cast<char>(v >> (8 * b));
}

class SmAtom {
 public:
  // `one_gpu`: every peer runs on this GPU, so flags need ordering at GPU scope only (cheaper than
  // system scope, which peers on other GPUs need).
  __device__ SmAtom(DataType type, const ReduceOp& op, SmGuard guard, SmCtaWords* cta, bool one_gpu)
      : type_(type), op_(op), guard_(guard), cta_(cta), start_(global_ns()), one_gpu_(one_gpu) {}

  // Vectorised when source and destination share 16-byte alignment; any alignment and tail works.
  __device__ void copy(void* dst, const void* src, std::size_t bytes) const { copy_with<false>(dst, src, bytes); }

  // copy, where Bounded, with the vectors a thread has left after its whole tiles loaded all at once
  // behind their bounds rather than one round trip each (the wide Atom's copy; see reduce_tiles).
  template <bool Bounded>
  __device__ void copy_with(void* dst, const void* src, std::size_t bytes) const {
    if (dst != src && bytes) {
      char* d = static_cast<char*>(dst);
      const char* s = static_cast<const char*>(src);
      const std::size_t tid = threadIdx.x, stride = blockDim.x;
      std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
      if (((reinterpret_cast<std::uintptr_t>(d) ^ reinterpret_cast<std::uintptr_t>(s)) & 15) == 0 && bytes > head + 64) {
        for (std::size_t i = tid; i < head; i += stride) d[i] = s[i];
        const std::size_t vecs = (bytes - head) / 16;
        const uint4* vs = reinterpret_cast<const uint4*>(s + head);
        uint4* vd = reinterpret_cast<uint4*>(d + head);
        std::size_t i = tid;
        // Eight loads in flight per thread before the stores.
        constexpr int U = 8;
        for (; i + (U - 1) * stride < vecs; i += U * stride) {
          uint4 w[U];
#pragma unroll
          for (int u = 0; u < U; ++u) w[u] = vs[i + u * stride];
#pragma unroll
          for (int u = 0; u < U; ++u) vd[i + u * stride] = w[u];
        }
        if (Bounded && i < vecs) {
          const std::size_t base = i - tid;  // this thread's partial tile, as load_tile counts it
          uint4 w[1][U];
          load_tile<1, U, true>(w, &vs, base, vecs);
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (i + u * stride < vecs) vd[i + u * stride] = w[0][u];
          i = vecs;
        }
        for (; i < vecs; i += stride) vd[i] = vs[i];
        for (std::size_t k = head + vecs * 16 + tid; k < bytes; k += stride) d[k] = s[k];
      } else {
        for (std::size_t i = tid; i < bytes; i += stride) d[i] = s[i];
      }
    }
    __syncthreads();
  }

  // dst0 = src0 and dst1 = src1 over `bytes`, in one pass: each thread loads its element (or
  // vector) of both sources before it stores either, so dst0 may be src1 and dst1 src0 exactly (two
  // blocks swapped in place: in-place AlltoAll's pairs). Vectorised in tiles of 4 vectors per
  // source when the four pointers share 16-byte alignment; byte by byte otherwise.
  __device__ void copy_pair(void* dst0, const void* src0, void* dst1, const void* src1, std::size_t bytes) const {
    char* d[2] = {static_cast<char*>(dst0), static_cast<char*>(dst1)};
    const char* s[2] = {static_cast<const char*>(src0), static_cast<const char*>(src1)};
    const std::size_t tid = threadIdx.x, stride = blockDim.x;
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(d[0]);
    const std::uintptr_t apart = (a ^ reinterpret_cast<std::uintptr_t>(d[1])) | (a ^ reinterpret_cast<std::uintptr_t>(s[0])) |
                                 (a ^ reinterpret_cast<std::uintptr_t>(s[1]));
    std::size_t head = bytes, vecs = 0;
    if ((apart & 15) == 0) {
      head = (16 - (a & 15)) & 15;
      if (head > bytes) head = bytes;
      vecs = (bytes - head) / 16;
    }
    const auto bytes_at = [&](std::size_t from, std::size_t to) {
      for (std::size_t i = from + tid; i < to; i += stride) {
        const char x = s[0][i], y = s[1][i];
        d[0][i] = x;
        d[1][i] = y;
      }
    };
    bytes_at(0, head);
    if (vecs) {
      const uint4* vs[2] = {reinterpret_cast<const uint4*>(s[0] + head), reinterpret_cast<const uint4*>(s[1] + head)};
      uint4* vd[2] = {reinterpret_cast<uint4*>(d[0] + head), reinterpret_cast<uint4*>(d[1] + head)};
      constexpr int U = 4;
      for (std::size_t base = 0; base < vecs; base += U * stride) {
        uint4 w[2][U];
        load_tile<2, U, true>(w, vs, base, vecs);
#pragma unroll
        for (int k = 0; k < 2; ++k)
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const std::size_t i = base + u * stride + tid;
            if (i < vecs) vd[k][i] = w[k][u];
          }
      }
    }
    bytes_at(head + vecs * 16, bytes);
    __syncthreads();
  }

  // copy for this rank's contribution to a reduction: PreMulSum writes each element times this
  // rank's scalar, rounded to the element type; any other operator copies. Ends with a CTA
  // barrier, as copy; a later signal (release) publishes the data.
  __device__ void contribute(void* dst, const void* src, std::size_t bytes) const {
    if (!scales(op_)) return copy(dst, src, bytes);
    with_scaler(type_, op_, [&](const auto& sc) { scale_block(sc, dst, src, bytes / size_of(type_)); });
    __syncthreads();
  }

  // dst = the consumer's fold of srcs (PreMulSum: the sum of the scaled contributions).
  __device__ void reduce(void* dst, const char* const* srcs, int n, std::size_t bytes) const {
    const std::size_t count = bytes / size_of(type_);
    with_reducer(type_, op_, [&](const auto& r) {
      reduce_block(r, dst, reinterpret_cast<const void* const*>(srcs), n, count);
    });
    __syncthreads();
  }

  __device__ void signal(std::uint64_t* flag, std::uint64_t value) const {
    __syncthreads();
    if (threadIdx.x == 0) release(flag, value);
    __syncthreads();
  }
  __device__ void put(std::uint64_t* word, std::uint64_t value) const {
    __syncthreads();
    if (threadIdx.x == 0) *word = value;
    __syncthreads();
  }
  __device__ void store_relaxed(std::uint64_t* word, std::uint64_t value) const {
    __syncthreads();
    if (threadIdx.x == 0) st_relaxed_sys(word, value);
    __syncthreads();
  }
  __device__ std::uint64_t load_relaxed(std::uint64_t* word) const { return ld_relaxed_sys(word); }

  __device__ Status wait(std::uint64_t* flag, std::uint64_t value) const {
    if (threadIdx.x == 0) cta_->status = spin_flag(flag, value);
    __syncthreads();
    Status s = static_cast<Status>(cta_->status);
    __syncthreads();
    return s;
  }

  // ---- batched operations: one call serves every peer, the peers' work spread over the threads ----
  // f(i, word, value) names item i (returns false to skip it); items are independent of each other.

  // Waits, in parallel, until *word_i >= value_i for every item.
  template <class F>
  __device__ Status wait_each(int n, F&& f) const {
    int result = 0;
    for (int i = threadIdx.x; i < n && result == 0; i += blockDim.x) {
      std::uint64_t* word = nullptr;
      std::uint64_t value = 0;
      if (f(i, word, value)) result = spin_flag(word, value);
    }
    return agree(result);
  }

  // wait_each, where f(i, word, value, watch) also names a word to read while the wait is long: the
  // awaited sequence number there with another tag (the peer notified the message another way) is
  // a mismatch. `watch` may stay null.
  template <class F>
  __device__ Status wait_each_watching(int n, F&& f) const {
    int result = 0;
    for (int i = threadIdx.x; i < n && result == 0; i += blockDim.x) {
      std::uint64_t* word = nullptr;
      const std::uint64_t* watch = nullptr;
      std::uint64_t value = 0;
      if (f(i, word, value, watch)) result = spin_flag(word, value, watch);
    }
    return agree(result);
  }

  // Release stores, one per item, after everything the CTA wrote so far.
  template <class F>
  __device__ void signal_each(int n, F&& f) const {
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      std::uint64_t* word = nullptr;
      std::uint64_t value = 0;
      if (f(i, word, value)) release(word, value);
    }
    __syncthreads();
  }

  // Writes to the rank's own protocol state, one per item, visible to the whole CTA afterwards.
  template <class F>
  __device__ void put_each(int n, F&& f) const {
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      std::uint64_t* word = nullptr;
      std::uint64_t value = 0;
      if (f(i, word, value)) *word = value;
    }
    __syncthreads();
  }

  // Pushes every message f(i, PacketPush&) names. Each packet index is handled by one thread for all
  // messages, and messages that share a source reuse one load, so a message's packet i is stored
  // only after every read of source word i by this call (an in-place consumer may overwrite it then).
  template <class F>
  __device__ void push_each(int n, F&& f) const {
    push_batch<false>(n, f);
  }

  // push_each for messages that are this rank's contributions to a reduction: each word pushed is
  // the source word after the reduction's producer step (contribute's arithmetic), with push_each's
  // ordering.
  template <class F>
  __device__ void push_contributions(int n, F&& f) const {
    push_batch<true>(n, f);
  }

  // Receives every message f(i, PacketPull&) names.
  template <class F>
  __device__ Status pull_each(int n, F&& f) const {
    __shared__ PacketPull batch[kMaxBatch];
    __shared__ int live[kMaxBatch];
    const std::uint64_t packets = gather_batch(n, f, batch, live);
    int result = 0;
    for (std::uint64_t p = threadIdx.x; p < packets && result == 0; p += blockDim.x) {
      for (int m = 0; m < n && result == 0; ++m) {
        if (!live[m] || p * 8 >= batch[m].bytes) continue;
        std::uint64_t v;
        result = wait_packet(batch[m].src + p, batch[m].q, batch[m].watch, &v);
        if (result == 0) store_word(batch[m].dst, p, batch[m].bytes, v);
      }
    }
    return agree(result);
  }

  // dst = rank-ordered fold of the sources f(i, PacketSource&) names, read straight from their
  // packets (each thread folds whole packets: 8 bytes hold whole elements of every type).
  template <class F>
  __device__ Status pull_reduce(char* dst, std::uint64_t bytes, int n, F&& f) const {
    __shared__ PacketSource batch[kMaxBatch];
    __shared__ int live[kMaxBatch];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) live[i] = f(i, batch[i]) ? 1 : 0;
    __syncthreads();
    const std::uint64_t packets = (bytes + 7) / 8;
    int result = 0;
    with_reducer(type_, op_, [&](const auto& r) {
      using R = std::decay_t<decltype(r)>;
      for (std::uint64_t p = threadIdx.x; p < packets && result == 0; p += blockDim.x) {
        WordFold<R, 8> fold;
        bool started = false;
        for (int m = 0; m < n && result == 0; ++m) {
          if (!live[m]) continue;
          std::uint64_t v;
          result = wait_packet(batch[m].src + p, batch[m].q, batch[m].watch, &v);
          if (result) break;
          if (started) fold.next(r, v);
          else fold.first(r, v);
          started = true;
        }
        if (result == 0 && started) store_word(dst, p, bytes, fold.template finish<std::uint64_t>(r));
      }
    });
    return agree(result);
  }

 private:
  __device__ std::uint64_t acquire(const std::uint64_t* flag) const {
    return one_gpu_ ? ld_acquire_gpu(flag) : ld_acquire_sys(flag);
  }
  __device__ void release(std::uint64_t* flag, std::uint64_t value) const {
    if (one_gpu_) st_release_gpu(flag, value);
    else st_release_sys(flag, value);
  }

  // Fills the CTA's batch with the messages f(i, Item&) names (live[i]: named) and returns the
  // packets of the longest.
  template <class Item, class F>
  __device__ static std::uint64_t gather_batch(int n, F& f, Item* batch, int* live) {
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) live[i] = f(i, batch[i]) ? 1 : 0;
    __syncthreads();
    std::uint64_t packets = 0;
    for (int m = 0; m < n; ++m)
      if (live[m] && (batch[m].bytes + 7) / 8 > packets) packets = (batch[m].bytes + 7) / 8;
    return packets;
  }

  // push_each (Contribution false) and push_contributions (true).
  template <bool Contribution, class F>
  __device__ void push_batch(int n, F& f) const {
    __shared__ PacketPush batch[kMaxBatch];
    __shared__ int live[kMaxBatch];
    const std::uint64_t packets = gather_batch(n, f, batch, live);
    auto send = [&](auto&& transform) {
      for (std::uint64_t p = threadIdx.x; p < packets; p += blockDim.x) {
        const char* last = nullptr;
        std::uint64_t last_bytes = 0, v = 0;
        for (int m = 0; m < n; ++m) {
          if (!live[m] || p * 8 >= batch[m].bytes) continue;
          if (batch[m].src != last || batch[m].bytes != last_bytes) {
            last = batch[m].src;
            last_bytes = batch[m].bytes;
            v = transform(load_word(last, p, last_bytes));
          }
          st_packet(batch[m].dst + p, v, batch[m].q);
        }
      }
    };
    if constexpr (Contribution) {
      // The padding past a message's end is scaled too; its consumer never stores it.
      if (scales(op_))
        with_scaler(type_, op_, [&](const auto& sc) { send([&](std::uint64_t w) { return scale_word(sc, w); }); });
      else
        send([](std::uint64_t w) { return w; });
    } else {
      send([](std::uint64_t w) { return w; });
    }
    __syncthreads();
  }

  // 0 once the packet carries flag word q, or the Status that ended the wait. Inlined into every
  // typed fold of pull_reduce, so only the check of a packet that has arrived is inline; waiting
  // happens out of line (two H200 ranks, AllReduce of 1 KiB from a graph: 9.2 us with the whole
  // wait inlined, 7.7 us so, against 7.2 before the tag check).
  __device__ __forceinline__ int wait_packet(const Packet* packet, std::uint64_t q, const std::uint64_t* watch,
                                             std::uint64_t* v) const {
    std::uint64_t f;
    ld_packet(packet, v, &f);
    if (f == q) return 0;
    return spin_packet(packet, q, watch, v);
  }
  // Spins until the packet carries flag word q. A long wait also reads the watch word (see
  // PacketPull).
  __device__ __noinline__ int spin_packet(const Packet* packet, std::uint64_t q, const std::uint64_t* watch,
                                          std::uint64_t* v) const {
    std::uint32_t spins = 0;
    for (;;) {
      std::uint64_t f;
      ld_packet(packet, v, &f);
      const Arrival a = arrival(f, q);
      if (a == Arrival::arrived) return 0;
      if (a == Arrival::mismatch) return mismatch();
      if ((++spins & 1023) == 0) {
        if (watch && arrival(ld_relaxed_sys(watch), q) == Arrival::mismatch) return mismatch();
        if (int r = give_up()) return r;
      }
    }
  }
  // Spins until *word arrives at value: 0 then, else the status that ends the wait (a mismatch, also
  // one a long wait reads in the watch word, or give_up's).
  __device__ __forceinline__ int spin_flag(std::uint64_t* word, std::uint64_t value,
                                           const std::uint64_t* watch = nullptr) const {
    for (std::uint32_t spins = 0;;) {
      const Arrival a = arrival(acquire(word), value);
      if (a == Arrival::arrived) return 0;
      if (a == Arrival::mismatch) return mismatch();
      if ((++spins & 1023) == 0) {
        if (watch && arrival(ld_relaxed_sys(watch), value) == Arrival::mismatch) return mismatch();
        if (int r = give_up()) return r;
      }
    }
  }
  // This rank's call differs from a peer's. The kernel reports the status on the host when the role
  // ends (so do its sibling CTAs, which then stop), and snac::raise_fault tells the peers.
  __device__ static int mismatch() { return static_cast<int>(Status::invalid_usage); }
  // The CTA's common outcome of a step in which threads may have failed separately.
  __device__ Status agree(int result) const {
    __syncthreads();
    if (threadIdx.x == 0) cta_->status = 0;
    __syncthreads();
    if (result) atomicMax(&cta_->status, result);
    __syncthreads();
    Status s = static_cast<Status>(cta_->status);
    __syncthreads();
    return s;
  }

  // As cta_give_up and cta_stop, for this Atom's waits.
  __device__ int give_up() const { return cta_give_up(guard_, cta_, start_); }
  __device__ int stop(int s, bool report = true) const { return cta_stop(guard_, cta_, s, report); }

  DataType type_;
  ReduceOp op_;
  SmGuard guard_;
  SmCtaWords* cta_;
  std::uint64_t start_;
  bool one_gpu_;
};

static_assert(SnacAtom<SmAtom>, "the SM Atom keeps the contract of atom/contract.h");

}  // namespace purlin::atom
