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
      std::size_t tiled = 0;
      switch (nsrc) {
        case 2: tiled = reduce_tiles<R, 2, 4>(r, out, srcs, vecs); break;
        case 3: tiled = reduce_tiles<R, 3, 4>(r, out, srcs, vecs); break;
        case 4: tiled = reduce_tiles<R, 4, 4>(r, out, srcs, vecs); break;
        case 5: tiled = reduce_tiles<R, 5, 2>(r, out, srcs, vecs); break;
        case 6: tiled = reduce_tiles<R, 6, 2>(r, out, srcs, vecs); break;
        case 7: tiled = reduce_tiles<R, 7, 2>(r, out, srcs, vecs); break;
        default: tiled = reduce_tiles<R, 8, 2>(r, out, srcs, vecs); break;
      }
      const std::size_t tid = threadIdx.x, stride = blockDim.x;
      for (std::size_t i = tiled + tid; i < vecs; i += stride) {
        WordFold<R, 16> f;
        f.first(r, static_cast<const uint4*>(srcs[0])[i]);
        for (int s = 1; s < nsrc; ++s) f.next(r, static_cast<const uint4*>(srcs[s])[i]);
        out[i] = f.template finish<uint4>(r);
      }
      S* o = static_cast<S*>(dst);
      for (std::size_t i = vecs * V + tid; i < count; i += stride) o[i] = r.element(srcs, nsrc, i);
      return;
    }
  }
  reduce_block(r, dst, srcs, nsrc, count);
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

 private:
  DataType type_;
  ReduceOp op_;
};

static_assert(SnacAtom<SmWideAtom>, "the wide SM Atom keeps the contract of atom/contract.h");

}  // namespace purlin::atom
