// fan_probe: how fast one GPU's memory takes AllGather's in-place traffic (every rank's input read
// once and stored into every rank's output), apart from the library and its barriers. One process,
// one kernel per call whose CTAs are cut into `ranks` groups of `ctas`; group r pushes its input into
// block r of every group's output. Shapes (--shape, comma separated):
//   fan     what the zero-staging Atom does: U 16-byte loads in flight per thread, each stored to
//           every output (512 threads per CTA).
//   fancs   fan with streaming (evict-first) stores.
//   fan1k   fan with 1,024 threads per CTA and 4 loads in flight.
//   fancsld fancs with streaming loads too.
//   fancs1k fancs with 1,024 threads per CTA and 4 loads in flight.
//   fancsdyn fancs whose CTAs claim 256 KiB chunks of their rank's input as they go (no static shares).
//   fancsw  fancs with each warp's vectors contiguous (a warp stores 32 x 8 vectors in a row).
//   fancsi  fancs whose CTAs of a rank take its input's tiles in turn (tile t on CTA t mod ctas), so
//           that the rank's stores advance side by side through each output, not in ctas far-apart runs.
//   fancsk  fancs storing a tile destination by destination (all its vectors to one output, then the
//           next) instead of vector by vector.
//   fancsik fancsi and fancsk together.
//   step    per 64 KiB step, one copy to each output in turn (the input read again from L2).
//   tma     the bulk-copy engine of each multiprocessor: one thread loads chunks into shared memory
//           (a ring of stages) and stores each chunk to every output with bulk copies.
//   tmaef   tma whose stores carry an L2 evict-first policy.
//   memset  cudaMemsetAsync over every output: the write-only rate.
//   copy    cudaMemcpyAsync device to device of the outputs' size: the copy roofline.
// Every shape's time per call is the mean of --reps calls after a warm-up; the share of the
// roofline is the minimal bytes (inputs read once, outputs written once) at the copy's rate.
// Results of the kernel shapes are checked against the inputs once per shape.
//
// Usage: fan-probe [--ranks 8] [--ctas 16] [--sizes 32M,128M] [--shape fan,tma] [--reps 20]
//        (--sizes: each rank's input; --ctas: CTAs per rank)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf/probe/probe_util.h"

namespace {

constexpr int kMaxRanks = 8;

struct Fan {
  const uint4* in[kMaxRanks];
  uint4* out[kMaxRanks];
  int ranks = 1;
  int ctas = 1;
  std::uint64_t vecs = 0;  // each rank's input in 16-byte vectors
  // fancsdyn: each rank's claim counter, and what it stood at when this launch began.
  unsigned long long* claims = nullptr;
  unsigned long long base = 0;
};

// fancsdyn: a rank's chunks (kDynVecs vectors each) go to whichever of its CTAs asks next.
constexpr std::uint64_t kDynVecs = (256u << 10) / 16;

__device__ __forceinline__ void share(const Fan& f, std::uint64_t* first, std::uint64_t* count) {
  const int c = blockIdx.x % f.ctas;
  const std::uint64_t per = (f.vecs + f.ctas - 1) / f.ctas;
  const std::uint64_t a = per * c < f.vecs ? per * c : f.vecs;
  *first = a;
  *count = per < f.vecs - a ? per : f.vecs - a;
}

// Stores the U vectors of w to every output, vector u at index base + at(u): vector by vector (each
// to every output), or (kDestMajor) output by output; streaming (evict-first) stores with kStream.
template <int U, bool kStream, bool kDestMajor, class At>
__device__ __forceinline__ void store_fan(uint4* const* dst, int ranks, const uint4 (&w)[U], std::uint64_t base,
                                          At at) {
  auto put = [&](int k, int u) {
    if constexpr (kStream) __stcs(&dst[k][base + at(u)], w[u]);
    else dst[k][base + at(u)] = w[u];
  };
  if constexpr (kDestMajor) {
#pragma unroll
    for (int k = 0; k < kMaxRanks; ++k)
      if (k < ranks)
#pragma unroll
        for (int u = 0; u < U; ++u) put(k, u);
  } else {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int k = 0; k < kMaxRanks; ++k)
        if (k < ranks) put(k, u);
  }
}

template <int U, bool kStream, bool kLoadStream = false, bool kWarp = false, bool kDestMajor = false>
__global__ void fan_kernel(const Fan f) {
  const int me = blockIdx.x / f.ctas;
  std::uint64_t first = 0, count = 0;
  share(f, &first, &count);
  const uint4* src = f.in[me] + first;
  uint4* dst[kMaxRanks];
  for (int k = 0; k < f.ranks; ++k) dst[k] = f.out[(me + k) % f.ranks] + static_cast<std::uint64_t>(me) * f.vecs + first;
  const std::uint64_t tid = threadIdx.x, stride = blockDim.x, step = stride * U;
  // Vector u of this thread: strided over the CTA (u * stride + tid), or (kWarp) within its warp's
  // contiguous run of 32 * U vectors.
  const std::uint64_t lane = tid % 32, warp_base = (tid / 32) * 32 * U;
  auto at = [&](int u) { return kWarp ? warp_base + u * 32 + lane : u * stride + tid; };
  std::uint64_t base = 0;
  for (; base + step <= count; base += step) {
    uint4 w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) w[u] = kLoadStream ? __ldcs(&src[base + at(u)]) : src[base + at(u)];
    store_fan<U, kStream, kDestMajor>(dst, f.ranks, w, base, at);
  }
  for (std::uint64_t i = base + tid; i < count; i += stride) {
    const uint4 v = src[i];
    for (int k = 0; k < f.ranks; ++k) dst[k][i] = v;
  }
}

// fancsi / fancsik: tiles of U vectors per thread, tile t of the rank's input on its CTA t mod ctas.
template <bool kDestMajor>
__global__ void inter_kernel(const Fan f) {
  constexpr int U = 8;
  const int me = blockIdx.x / f.ctas, c = blockIdx.x % f.ctas;
  const uint4* src = f.in[me];
  uint4* dst[kMaxRanks];
  for (int k = 0; k < f.ranks; ++k) dst[k] = f.out[(me + k) % f.ranks] + static_cast<std::uint64_t>(me) * f.vecs;
  const std::uint64_t tid = threadIdx.x, stride = blockDim.x, step = stride * U;
  std::uint64_t base = c * step;
  for (; base + step <= f.vecs; base += step * f.ctas) {
    uint4 w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) w[u] = src[base + u * stride + tid];
    store_fan<U, true, kDestMajor>(dst, f.ranks, w, base, [&](int u) { return u * stride + tid; });
  }
  // The partial last tile, on the CTA whose turn it is.
  if (base < f.vecs)
    for (std::uint64_t i = base + tid; i < f.vecs; i += stride) {
      const uint4 v = src[i];
      for (int k = 0; k < f.ranks; ++k) dst[k][i] = v;
    }
}

__global__ void dyn_kernel(const Fan f) {
  constexpr int U = 8;
  __shared__ unsigned long long claim;
  const int me = blockIdx.x / f.ctas;
  const std::uint64_t chunks = (f.vecs + kDynVecs - 1) / kDynVecs;
  const uint4* in = f.in[me];
  uint4* dst[kMaxRanks];
  for (int k = 0; k < f.ranks; ++k) dst[k] = f.out[(me + k) % f.ranks] + static_cast<std::uint64_t>(me) * f.vecs;
  const std::uint64_t tid = threadIdx.x, stride = blockDim.x, step = stride * U;
  for (;;) {
    __syncthreads();
    if (threadIdx.x == 0) claim = atomicAdd(&f.claims[me], 1ull) - f.base;
    __syncthreads();
    const std::uint64_t c = claim;
    if (c >= chunks) return;
    const std::uint64_t first = c * kDynVecs, count = f.vecs - first < kDynVecs ? f.vecs - first : kDynVecs;
    std::uint64_t base = 0;
    for (; base + step <= count; base += step) {
      uint4 w[U];
#pragma unroll
      for (int u = 0; u < U; ++u) w[u] = in[first + base + u * stride + tid];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int k = 0; k < kMaxRanks; ++k)
          if (k < f.ranks) __stcs(&dst[k][first + base + u * stride + tid], w[u]);
    }
    for (std::uint64_t i = base + tid; i < count; i += stride) {
      const uint4 v = in[first + i];
      for (int k = 0; k < f.ranks; ++k) dst[k][first + i] = v;
    }
  }
}

__global__ void step_kernel(const Fan f) {
  const int me = blockIdx.x / f.ctas;
  std::uint64_t first = 0, count = 0;
  share(f, &first, &count);
  constexpr std::uint64_t kStep = (64u << 10) / 16;
  for (std::uint64_t at = 0; at < count; at += kStep) {
    const std::uint64_t n = count - at < kStep ? count - at : kStep;
    const uint4* src = f.in[me] + first + at;
    for (int k = 0; k < f.ranks; ++k) {
      uint4* dst = f.out[(me + k) % f.ranks] + static_cast<std::uint64_t>(me) * f.vecs + first + at;
      for (std::uint64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }
  }
}

// Bulk copies: kStages chunks of kChunk bytes in shared memory, loaded by the copy engine of the
// multiprocessor and stored from there to every output.
constexpr int kStages = 4;
constexpr std::uint32_t kChunk = 32u << 10;

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

template <bool kEvictFirst>
__global__ void tma_kernel(const Fan f) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) std::uint64_t full[kStages];
  if (threadIdx.x != 0) return;
  const int me = blockIdx.x / f.ctas;
  std::uint64_t first = 0, count = 0;
  share(f, &first, &count);
  const char* src = reinterpret_cast<const char*>(f.in[me] + first);
  char* dst[kMaxRanks];
  for (int k = 0; k < f.ranks; ++k)
    dst[k] = reinterpret_cast<char*>(f.out[(me + k) % f.ranks] + static_cast<std::uint64_t>(me) * f.vecs + first);
  const std::uint64_t bytes = count * 16;
  const std::uint64_t chunks = (bytes + kChunk - 1) / kChunk;
  std::uint64_t policy = 0;
  if constexpr (kEvictFirst) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  for (int s = 0; s < kStages; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto load = [&](std::uint64_t i) {
    const int s = static_cast<int>(i % kStages);
    const std::uint64_t at = i * kChunk;
    const std::uint32_t n = static_cast<std::uint32_t>(bytes - at < kChunk ? bytes - at : kChunk);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&full[s])), "r"(n) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(ring + s * kChunk)),
                 "l"(src + at), "r"(n), "r"(smem_addr(&full[s]))
                 : "memory");
  };
  for (std::uint64_t i = 0; i < chunks && i < kStages; ++i) load(i);
  for (std::uint64_t i = 0; i < chunks; ++i) {
    const int s = static_cast<int>(i % kStages);
    const std::uint32_t parity = static_cast<std::uint32_t>((i / kStages) & 1);
    std::uint32_t done = 0;
    while (!done)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(smem_addr(&full[s])), "r"(parity)
          : "memory");
    const std::uint64_t at = i * kChunk;
    const std::uint32_t n = static_cast<std::uint32_t>(bytes - at < kChunk ? bytes - at : kChunk);
    for (int k = 0; k < f.ranks; ++k) {
      if constexpr (kEvictFirst)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(dst[k] + at),
                     "r"(smem_addr(ring + s * kChunk)), "r"(n), "l"(policy)
                     : "memory");
      else
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst[k] + at),
                     "r"(smem_addr(ring + s * kChunk)), "r"(n)
                     : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // The stage of chunk i - 1 is free once its stores have read it: refill it with chunk i - 1 + S.
    if (i >= 1 && i - 1 + kStages < chunks) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(i - 1 + kStages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

__global__ void fill(std::uint32_t* p, std::uint64_t words, std::uint32_t seed) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<std::uint32_t>(i * 2654435761u) ^ seed;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 8, ctas = 16, reps = 20;
  std::string sizes = "32M,128M", shapes = "copy,memset,fan,fancs,fan1k,step,tma";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ranks") ranks = std::atoi(v.c_str());
    else if (k == "--ctas") ctas = std::atoi(v.c_str());
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--sizes") sizes = v;
    else if (k == "--shape") shapes = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (ranks < 1 || ranks > kMaxRanks) return 2;
  CHECK(cudaFuncSetAttribute(tma_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kChunk));
  CHECK(cudaFuncSetAttribute(tma_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kChunk));
  std::printf("# ranks %d, ctas per rank %d, reps %d\n", ranks, ctas, reps);
  std::printf("%-8s %10s %12s %10s %8s\n", "shape", "in/rank", "us/call", "roofline", "wrong");
  for (const std::string& sz : probe::split(sizes)) {
    const std::uint64_t in_bytes = probe::parse_size(sz), out_bytes = in_bytes * ranks;
    std::vector<void*> ins(ranks), outs(ranks);
    for (int r = 0; r < ranks; ++r) {
      CHECK(cudaMalloc(&ins[r], in_bytes));
      CHECK(cudaMalloc(&outs[r], out_bytes));
      fill<<<264, 512>>>(static_cast<std::uint32_t*>(ins[r]), in_bytes / 4, 0x9e3779b9u * (r + 1));
    }
    void* scratch = nullptr;
    CHECK(cudaMalloc(&scratch, out_bytes));
    CHECK(cudaDeviceSynchronize());
    Fan f;
    f.ranks = ranks;
    f.ctas = ctas;
    f.vecs = in_bytes / 16;
    for (int r = 0; r < ranks; ++r) {
      f.in[r] = static_cast<const uint4*>(ins[r]);
      f.out[r] = static_cast<uint4*>(outs[r]);
    }
    CHECK(cudaMalloc(&f.claims, kMaxRanks * sizeof(unsigned long long)));
    CHECK(cudaMemset(f.claims, 0, kMaxRanks * sizeof(unsigned long long)));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    double copy_rate = 0;  // bytes read + written per second by the device copy
    for (const std::string& shape : probe::split(shapes)) {
      auto once = [&] {
        const dim3 grid(static_cast<unsigned>(ranks * ctas));
        if (shape == "copy") CHECK(cudaMemcpyAsync(scratch, outs[0], out_bytes, cudaMemcpyDeviceToDevice));
        else if (shape == "memset")
          for (int r = 0; r < ranks; ++r) CHECK(cudaMemsetAsync(outs[r], r + 1, out_bytes));
        else if (shape == "fan") fan_kernel<8, false><<<grid, 512>>>(f);
        else if (shape == "fancs") fan_kernel<8, true><<<grid, 512>>>(f);
        else if (shape == "fan1k") fan_kernel<4, false><<<grid, 1024>>>(f);
        else if (shape == "step") step_kernel<<<grid, 512>>>(f);
        else if (shape == "fancsld") fan_kernel<8, true, true><<<grid, 512>>>(f);
        else if (shape == "fancs1k") fan_kernel<4, true><<<grid, 1024>>>(f);
        else if (shape == "fancsdyn") {
          dyn_kernel<<<grid, 512>>>(f);
          // Every CTA claims once past the last chunk.
          f.base += (f.vecs + kDynVecs - 1) / kDynVecs + static_cast<unsigned long long>(ctas);
        }
        else if (shape == "fancsw") fan_kernel<8, true, false, true><<<grid, 512>>>(f);
        else if (shape == "fancsk") fan_kernel<8, true, false, false, true><<<grid, 512>>>(f);
        else if (shape == "fancsi") inter_kernel<false><<<grid, 512>>>(f);
        else if (shape == "fancsik") inter_kernel<true><<<grid, 512>>>(f);
        else if (shape == "tma") tma_kernel<false><<<grid, 32, kStages * kChunk>>>(f);
        else if (shape == "tmaef") tma_kernel<true><<<grid, 32, kStages * kChunk>>>(f);
        else {
          std::fprintf(stderr, "unknown shape %s\n", shape.c_str());
          std::exit(2);
        }
        CHECK(cudaGetLastError());
      };
      for (int r = 0; r < ranks; ++r) CHECK(cudaMemset(outs[r], 0xff, out_bytes));
      once();
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaEventRecord(t0));
      for (int i = 0; i < reps; ++i) once();
      CHECK(cudaEventRecord(t1));
      CHECK(cudaEventSynchronize(t1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, t0, t1));
      const double us = 1e3 * ms / reps;
      std::uint64_t wrong = 0;
      const bool kernel = shape != "copy" && shape != "memset";
      if (kernel) {
        std::vector<std::uint32_t> host(out_bytes / 4), want(in_bytes / 4);
        for (int r = 0; r < ranks; ++r) {
          CHECK(cudaMemcpy(host.data(), outs[r], out_bytes, cudaMemcpyDeviceToHost));
          for (int p = 0; p < ranks; ++p) {
            CHECK(cudaMemcpy(want.data(), ins[p], in_bytes, cudaMemcpyDeviceToHost));
            wrong += std::memcmp(host.data() + p * (in_bytes / 4), want.data(), in_bytes) != 0;
          }
        }
      }
      if (shape == "copy") copy_rate = 2.0 * out_bytes / (us * 1e-6);
      const double minimal = static_cast<double>(ranks) * in_bytes + static_cast<double>(ranks) * out_bytes;
      const double share = copy_rate > 0 && shape != "copy" && shape != "memset" ? minimal / copy_rate / (us * 1e-6) : 0;
      std::printf("%-8s %10s %12.1f %10.3f %8llu", shape.c_str(), sz.c_str(), us, share,
                  static_cast<unsigned long long>(wrong));
      if (shape == "copy") std::printf("   (%.2f TB/s read + written)", copy_rate / 1e12);
      if (shape == "memset") std::printf("   (%.2f TB/s written)", static_cast<double>(ranks) * out_bytes / (us * 1e-6) / 1e12);
      std::printf("\n");
      std::fflush(stdout);
    }
    for (int r = 0; r < ranks; ++r) {
      CHECK(cudaFree(ins[r]));
      CHECK(cudaFree(outs[r]));
    }
    CHECK(cudaFree(scratch));
    CHECK(cudaFree(f.claims));
  }
  return 0;
}
