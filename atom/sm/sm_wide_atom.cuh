// The SM Atom for reductions over many sources read where they lie (zero-staging): the same Atom,
// whose reduce keeps every source's load of a tile in flight before the first fold, for any number
// of sources up to kWideSources (the SM Atom tiles two). With 8 ranks on one H200, folding four
// sources' words at a time reached 51% of the copy roofline on ReduceScatter's minimal bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "atom/sm/sm_atom.cuh"

namespace purlin::atom {

inline constexpr int kWideSources = 8;

// Whether reducer R gets tiles: the sums of types wider than a byte (the reductions of training and
// inference); every other reducer folds as SmAtom's reduce does, which keeps the build small.
template <class R>
inline constexpr bool kWideTiles = sizeof(typename R::S) > 1 && std::is_same_v<typename R::Fn, RedFn<RedOpKind::sum, typename R::A>>;

// dst = rank-ordered fold of srcs over `count` elements, by every thread of the CTA: whole tiles of
// NS sources' vectors (NS * U loads in flight per thread), then what is left vector by vector, then
// element by element (and everything element by element when some pointer is not 16-byte aligned).
template <class R>
__device__ __forceinline__ void reduce_block_wide(const R& r, void* dst, const void* const* srcs, int nsrc,
                                                  std::size_t count) {
  using S = typename R::S;
  constexpr int V = 16 / static_cast<int>(sizeof(S));
  std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(dst);
  for (int s = 0; s < nsrc; ++s) bits |= reinterpret_cast<std::uintptr_t>(srcs[s]);
  if constexpr (kWideTiles<R>) {
    if ((bits & 15) == 0 && nsrc >= 2 && nsrc <= kWideSources) {
      const std::size_t vecs = count / V;
      uint4* out = static_cast<uint4*>(dst);
      // Bounded tiles: every whole vector is folded here, only the elements past them are left.
      switch (nsrc) {
        case 2: reduce_tiles<R, 2, 4, true>(r, out, srcs, vecs); break;
        case 3: reduce_tiles<R, 3, 4, true>(r, out, srcs, vecs); break;
        case 4: reduce_tiles<R, 4, 4, true>(r, out, srcs, vecs); break;
        case 5: reduce_tiles<R, 5, 2, true>(r, out, srcs, vecs); break;
        case 6: reduce_tiles<R, 6, 2, true>(r, out, srcs, vecs); break;
        case 7: reduce_tiles<R, 7, 2, true>(r, out, srcs, vecs); break;
        default: reduce_tiles<R, 8, 2, true>(r, out, srcs, vecs); break;
      }
      const std::size_t tid = threadIdx.x, stride = blockDim.x;
      S* o = static_cast<S*>(dst);
      for (std::size_t i = vecs * V + tid; i < count; i += stride) o[i] = r.element(srcs, nsrc, i);
      return;
    }
  }
  reduce_block(r, dst, srcs, nsrc, count);
}

// One tile of reduce_fan_tiles from vector `base`, each load and store behind its bound (as a
// Bounded reduce_tile).
template <class R, int N, int U>
__device__ __forceinline__ void reduce_fan_tile(const R& r, uint4* const* dst, const uint4* const* src,
                                                std::size_t base, std::size_t vecs) {
  uint4 w[N][U];
  load_tile<N, U, true>(w, src, base, vecs);
  fold_tile<R, N, U, true>(r, w, base, vecs, [&](std::size_t i, const uint4& v) {
#pragma unroll
    for (int k = 0; k < N; ++k) __stcs(&dst[k][i], v);
  });
}

// Every dsts[d] = the rank-ordered fold of N sources, N = the number of destinations (AllReduce's
// shard of the result, stored into every rank's output straight from registers), in tiles as
// reduce_tiles loads them, the last one partial; returns the vectors done: all of them.
template <class R, int N, int U>
__device__ __forceinline__ std::size_t reduce_fan_tiles(const R& r, uint4* const* dsts, const void* const* srcs,
                                                        std::size_t vecs) {
  const std::size_t step = static_cast<std::size_t>(blockDim.x) * U;
  const uint4* src[N];
  uint4* dst[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    src[k] = static_cast<const uint4*>(srcs[k]);
    dst[k] = dsts[k];
  }
  for (std::size_t base = 0; base < vecs; base += step) reduce_fan_tile<R, N, U>(r, dst, src, base, vecs);
  return vecs;
}

// One tile of copy_fan_tiles from vector `base`, each load and store behind its bound.
template <int N, int U>
__device__ __forceinline__ void copy_fan_tile(uint4* const* dst, const uint4* src, std::size_t base, std::size_t vecs) {
  uint4 w[1][U];
  load_tile<1, U, true>(w, &src, base, vecs);
  const std::size_t tid = threadIdx.x, stride = blockDim.x;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const std::size_t i = base + u * stride + tid;
    if (i >= vecs) continue;
#pragma unroll
    for (int k = 0; k < N; ++k) __stcs(&dst[k][i], w[0][u]);
  }
}

// Every dsts[d] = src over `vecs` 16-byte vectors: U loads in flight per thread, each stored N times,
// the last tile partial; returns the vectors done: all of them.
// The fans' stores are streaming (evict first): nothing reads them in this call, and a fan writes
// N times what it reads, so the stores' lines leave L2 first. With 8 ranks on one H200 that took
// AllGather's traffic from 0.82 to 0.89 of the copy roofline (perf/probe/fan_probe.cu).
template <int N, int U>
__device__ __forceinline__ std::size_t copy_fan_tiles(uint4* const* dsts, const uint4* src, std::size_t vecs) {
  const std::size_t step = static_cast<std::size_t>(blockDim.x) * U;
  uint4* dst[N];
#pragma unroll
  for (int k = 0; k < N; ++k) dst[k] = dsts[k];
  for (std::size_t base = 0; base < vecs; base += step) copy_fan_tile<N, U>(dst, src, base, vecs);
  return vecs;
}

// Whether every pointer of a fan is 16-byte aligned.
__device__ __forceinline__ bool fan_aligned(char* const* dsts, const char* const* srcs, int ndst, int nsrc) {
  std::uintptr_t bits = 0;
  for (int k = 0; k < ndst; ++k) bits |= reinterpret_cast<std::uintptr_t>(dsts[k]);
  for (int k = 0; k < nsrc; ++k) bits |= reinterpret_cast<std::uintptr_t>(srcs[k]);
  return (bits & 15) == 0;
}

class SmWideAtom : public SmAtom {
 public:
  __device__ SmWideAtom(DataType type, const ReduceOp& op, SmGuard guard, SmCtaWords* cta, bool one_gpu)
      : SmAtom(type, op, guard, cta, one_gpu), type_(type), op_(op) {}

  // dst = the consumer's fold of srcs, as SmAtom's, with wide tiles.
  __device__ void reduce(void* dst, const char* const* srcs, int n, std::size_t bytes) const {
    const std::size_t count = bytes / size_of(type_);
    with_reducer(type_, op_, [&](const auto& r) {
      reduce_block_wide(r, dst, reinterpret_cast<const void* const*>(srcs), n, count);
    });
    __syncthreads();
  }

  // Every dsts[d] (d < n) = the rank-ordered fold of the n srcs over `bytes`, in one pass: each
  // vector of the result goes from registers to every destination (AllReduce's shard of the result
  // into every rank's output), in tiles for the sums of reduce_block_wide, vector by vector for the
  // other reducers or more sources, element by element when some pointer is not 16-byte aligned.
  __device__ void reduce_fan(char* const* dsts, const char* const* srcs, int n, std::size_t bytes) const {
    with_reducer(type_, op_, [&](const auto& r) {
      using R = std::decay_t<decltype(r)>;
      using S = typename R::S;
      constexpr int V = 16 / static_cast<int>(sizeof(S));
      const std::size_t count = bytes / sizeof(S), tid = threadIdx.x, stride = blockDim.x;
      const void* const* ins = reinterpret_cast<const void* const*>(srcs);
      std::size_t vecs = 0, tiled = 0;
      if (fan_aligned(dsts, srcs, n, n)) {
        vecs = count / V;
        uint4* const* outs = reinterpret_cast<uint4* const*>(dsts);
        if constexpr (kWideTiles<R>) {
          switch (n) {
            case 2: tiled = reduce_fan_tiles<R, 2, 4>(r, outs, ins, vecs); break;
            case 3: tiled = reduce_fan_tiles<R, 3, 4>(r, outs, ins, vecs); break;
            case 4: tiled = reduce_fan_tiles<R, 4, 4>(r, outs, ins, vecs); break;
            case 5: tiled = reduce_fan_tiles<R, 5, 2>(r, outs, ins, vecs); break;
            case 6: tiled = reduce_fan_tiles<R, 6, 2>(r, outs, ins, vecs); break;
            case 7: tiled = reduce_fan_tiles<R, 7, 2>(r, outs, ins, vecs); break;
            case 8: tiled = reduce_fan_tiles<R, 8, 2>(r, outs, ins, vecs); break;
            default: break;
          }
        }
        for (std::size_t i = tiled + tid; i < vecs; i += stride) {
          WordFold<R, 16> f;
          f.first(r, static_cast<const uint4*>(ins[0])[i]);
          for (int s = 1; s < n; ++s) f.next(r, static_cast<const uint4*>(ins[s])[i]);
          const uint4 v = f.template finish<uint4>(r);
          for (int d = 0; d < n; ++d) __stcs(&outs[d][i], v);
        }
      }
      for (std::size_t i = vecs * V + tid; i < count; i += stride) {
        const S v = r.element(ins, n, i);
        for (int d = 0; d < n; ++d) reinterpret_cast<S*>(dsts[d])[i] = v;
      }
    });
    __syncthreads();
  }

  // SmAtom's copy with the partial last tile loaded at once (SmAtom::copy_with).
  __device__ void copy(void* dst, const void* src, std::size_t bytes) const { copy_with<true>(dst, src, bytes); }

  // Every dsts[d] (d < n) = src over `bytes`, in one pass: each vector loaded once and stored to
  // every destination (AllGather's input into every rank's output), in tiles for 1..kWideSources
  // destinations (one: in-place AllGather and Broadcast with 2 ranks), byte by byte when some pointer
  // is not 16-byte aligned.
  __device__ void copy_fan(char* const* dsts, int n, const char* src, std::size_t bytes) const {
    const std::size_t tid = threadIdx.x, stride = blockDim.x;
    std::size_t vecs = 0;
    if (fan_aligned(dsts, &src, n, 1)) {
      vecs = bytes / 16;
      uint4* const* outs = reinterpret_cast<uint4* const*>(dsts);
      const uint4* in = reinterpret_cast<const uint4*>(src);
      std::size_t tiled = 0;
      switch (n) {
        case 1: tiled = copy_fan_tiles<1, 8>(outs, in, vecs); break;
        case 2: tiled = copy_fan_tiles<2, 8>(outs, in, vecs); break;
        case 3: tiled = copy_fan_tiles<3, 8>(outs, in, vecs); break;
        case 4: tiled = copy_fan_tiles<4, 8>(outs, in, vecs); break;
        case 5: tiled = copy_fan_tiles<5, 8>(outs, in, vecs); break;
        case 6: tiled = copy_fan_tiles<6, 8>(outs, in, vecs); break;
        case 7: tiled = copy_fan_tiles<7, 8>(outs, in, vecs); break;
        case 8: tiled = copy_fan_tiles<8, 8>(outs, in, vecs); break;
        default: break;
      }
      for (std::size_t i = tiled + tid; i < vecs; i += stride) {
        const uint4 v = in[i];
        for (int d = 0; d < n; ++d) __stcs(&outs[d][i], v);
      }
    }
    for (std::size_t i = vecs * 16 + tid; i < bytes; i += stride) {
      const char v = src[i];
      for (int d = 0; d < n; ++d) dsts[d][i] = v;
    }
    __syncthreads();
  }

 private:
  DataType type_;
  ReduceOp op_;
};

static_assert(SnacAtom<SmWideAtom>, "the wide SM Atom keeps the contract of atom/contract.h");

}  // namespace purlin::atom
