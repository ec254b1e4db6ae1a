// The SM datapath's Atom: every thread of a CTA calls each method (the protocol's control flow is
// uniform); the method splits the bytes among the threads and synchronises the CTA where the
// protocol needs it.
//
// Memory ordering:
//  - signal: CTA barrier, then thread 0 issues a release store at system scope. The barrier plus
//    the cumulativity of release make every thread's earlier writes visible to whoever acquires.
//  - wait: thread 0 spins with acquire loads at system scope, then a CTA barrier publishes the
//    result (and the ordering) to every thread.
//  - push: one 16-byte store per packet {8 data bytes, 8-byte epoch}; pull spins on the packet's
//    epoch with 16-byte volatile loads.
// Every spin checks the communicator's abort word and a time budget every 1024 iterations.
#pragma once

#include <cstddef>
#include <cstdint>

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

// The reduction for a type and operator chosen at run time: one switch per chunk, then a typed loop
// over the elements this thread owns.
__device__ __forceinline__ void reduce_strided(DataType type, const ReduceOp& op, void* dst, const void* const* srcs,
                                               int nsrc, std::size_t count) {
  const std::size_t tid = threadIdx.x, stride = blockDim.x;
  auto run = [&](auto tag_t, auto tag_k) {
    constexpr DataType T = decltype(tag_t)::value;
    constexpr RedOpKind K = decltype(tag_k)::value;
    using R = Reducer<T, K>;
    using S = typename R::S;
    const R r(op);
    S* out = static_cast<S*>(dst);
    for (std::size_t i = tid; i < count; i += stride) out[i] = r.element(srcs, nsrc, i);
  };
  auto by_op = [&](auto tag_t) {
    switch (op.kind) {
      case RedOpKind::sum: return run(tag_t, std::integral_constant<RedOpKind, RedOpKind::sum>{});
      case RedOpKind::prod: return run(tag_t, std::integral_constant<RedOpKind, RedOpKind::prod>{});
      case RedOpKind::max: return run(tag_t, std::integral_constant<RedOpKind, RedOpKind::max>{});
      case RedOpKind::min: return run(tag_t, std::integral_constant<RedOpKind, RedOpKind::min>{});
      case RedOpKind::avg: return run(tag_t, std::integral_constant<RedOpKind, RedOpKind::avg>{});
      case RedOpKind::premulsum: return run(tag_t, std::integral_constant<RedOpKind, RedOpKind::premulsum>{});
    }
  };
  switch (type) {
#define PURLIN_TYPE_CASE(t) \
  case DataType::t: return by_op(std::integral_constant<DataType, DataType::t>{});
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

class SmAtom {
 public:
  __device__ SmAtom(DataType type, const ReduceOp& op, SmGuard guard, int* shared_status)
      : type_(type), op_(op), guard_(guard), shared_status_(shared_status), start_(global_ns()) {}

  // Vectorised when source and destination share 16-byte alignment; any alignment and tail works.
  __device__ void copy(void* dst, const void* src, std::size_t bytes) const {
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
        // Four loads in flight per thread before the stores.
        for (; i + 3 * stride < vecs; i += 4 * stride) {
          uint4 a = vs[i], b = vs[i + stride], c = vs[i + 2 * stride], e = vs[i + 3 * stride];
          vd[i] = a;
          vd[i + stride] = b;
          vd[i + 2 * stride] = c;
          vd[i + 3 * stride] = e;
        }
        for (; i < vecs; i += stride) vd[i] = vs[i];
        for (std::size_t k = head + vecs * 16 + tid; k < bytes; k += stride) d[k] = s[k];
      } else {
        for (std::size_t i = tid; i < bytes; i += stride) d[i] = s[i];
      }
    }
    __syncthreads();
  }

  __device__ void reduce(void* dst, const char* const* srcs, int n, std::size_t bytes) const {
    reduce_strided(type_, op_, dst, reinterpret_cast<const void* const*>(srcs), n, bytes / size_of(type_));
    __syncthreads();
  }

  __device__ void signal(std::uint64_t* flag, std::uint64_t value) const {
    __syncthreads();
    if (threadIdx.x == 0) st_release_sys(flag, value);
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
    if (threadIdx.x == 0) {
      int result = static_cast<int>(Status::ok);
      std::uint32_t spins = 0;
      while (ld_acquire_sys(flag) < value) {
        if ((++spins & 1023) == 0 && (result = give_up()) != 0) break;
      }
      *shared_status_ = result;
    }
    __syncthreads();
    Status s = static_cast<Status>(*shared_status_);
    __syncthreads();
    return s;
  }

  __device__ void push(Packet* dst, const char* src, std::size_t bytes, std::uint64_t q) const {
    const std::size_t packets = (bytes + 7) / 8;
    for (std::size_t i = threadIdx.x; i < packets; i += blockDim.x) {
      std::uint64_t v = 0;
      if ((i + 1) * 8 <= bytes && (reinterpret_cast<std::uintptr_t>(src) & 7) == 0) {
        v = reinterpret_cast<const std::uint64_t*>(src)[i];
      } else {
        for (std::size_t b = 0; b < 8 && i * 8 + b < bytes; ++b)
          v |= static_cast<std::uint64_t>(static_cast<unsigned char>(src[i * 8 + b])) << (8 * b);
      }
      st_packet(dst + i, v, q);
    }
    __syncthreads();
  }

  __device__ Status pull(char* dst, Packet* src, std::size_t bytes, std::uint64_t q) const {
    const std::size_t packets = (bytes + 7) / 8;
    int result = 0;
    for (std::size_t i = threadIdx.x; i < packets && result == 0; i += blockDim.x) {
      std::uint64_t v, f;
      std::uint32_t spins = 0;
      for (;;) {
        ld_packet(src + i, &v, &f);
        if (f >= q) break;
        if ((++spins & 1023) == 0 && (result = give_up()) != 0) break;
      }
      if (result) break;
      if ((i + 1) * 8 <= bytes && (reinterpret_cast<std::uintptr_t>(dst) & 7) == 0) {
        reinterpret_cast<std::uint64_t*>(dst)[i] = v;
      } else {
        for (std::size_t b = 0; b < 8 && i * 8 + b < bytes; ++b) dst[i * 8 + b] = static_cast<char>(v >> (8 * b));
      }
    }
    if (threadIdx.x == 0) *shared_status_ = 0;
    __syncthreads();
    if (result) atomicMax(shared_status_, result);
    __syncthreads();
    Status s = static_cast<Status>(*shared_status_);
    __syncthreads();
    return s;
  }

 private:
  // Non-zero (a Status) when the wait must end: abort requested, a sibling failed, or time is up.
  __device__ int give_up() const {
    if (*guard_.abort) return static_cast<int>(Status::remote_error);
    if (*guard_.error) return static_cast<int>(Status::remote_error);
    if (global_ns() - start_ > guard_.timeout_ns) {
      *guard_.error = static_cast<int>(Status::remote_error);
      __threadfence_system();
      return static_cast<int>(Status::remote_error);
    }
    return 0;
  }

  DataType type_;
  ReduceOp op_;
  SmGuard guard_;
  int* shared_status_;
  std::uint64_t start_;
};

}  // namespace purlin::atom
