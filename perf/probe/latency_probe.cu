// latency_probe: what the kernel shapes of a small collective cost on the GPU, apart from the
// library. Ranks are processes forked before CUDA starts (several on one GPU need MPS), sharing one
// CUDA IPC region each; every shape is an AllReduce (bf16, sum, rank-ordered fp32 folds) timed as
// nccl-tests times a graph: `--calls` launches captured with programmatic dependent launch, the graph
// replayed `--reps` times, time per call of the slowest rank. Results are checked once per run.
//
// Shapes (--shape, comma separated):
//   flags   one CTA of 32 threads: an epoch into each peer's flag, a wait for all of its own (no
//           data): the synchronisation floor.
//   ll1     one-shot: a thread per 8-byte word; the word pushed as a 16-byte packet (two words of
//           {4 data bytes, 4-byte flag}) into every peer's box, every peer's packet of that word
//           awaited together, folded in rank order.
//   ll2     two-shot: the thread's word of each peer's shard pushed to that peer, the own shard
//           folded, the result pushed to every peer and stored; every thread independent of the
//           others (no barrier between the phases).
//   ll1padK ll1 with K (1k, 2k, 4k) more instructions executed per word: what code size costs.
//   direct  inputs read in place: a barrier (every CTA meets its peers'), each rank folds its
//           shard of every input and stores it into every output, a barrier again.
//
// Usage (built as perf/latency-probe; several ranks on one GPU need MPS, scripts/mps):
//   latency-probe --ranks N [--shape ll1,ll2] [--sizes 1K,16K,64K,256K] [--ctas C] [--threads T]
//                 [--calls 20] [--reps 20] [--pdl 1]
// C: CTAs per rank (default: one per T words of the rank's part, at most 128 / ranks); T: threads
// per CTA (default 256; flags: one warp). Prints one row per shape and size: us per call (slowest
// rank, mean of ranks) and the elements of the last call that differ from the expected sum.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf/probe/probe_util.h"

namespace {

constexpr int kMaxRanks = 8;
constexpr int kMaxCtas = 128;
constexpr std::uint64_t kMaxBytes = 1u << 20;                 // largest message
constexpr std::uint64_t kMaxWords = kMaxBytes / 8;
constexpr std::uint64_t kBoxBytes = kMaxWords * 16;           // one producer's box of one phase
// Region layout (every rank's, mapped by all): boxes [phase 2][parity 2][producer 8], flag words
// [kind 2][cta][rank], the epoch per CTA, the input, the output.
constexpr std::uint64_t kBoxesOff = 0;
constexpr std::uint64_t kFlagsOff = kBoxesOff + 2 * 2 * kMaxRanks * kBoxBytes;
constexpr std::uint64_t kEpochOff = kFlagsOff + 2 * kMaxCtas * kMaxRanks * 8;
constexpr std::uint64_t kInOff = kEpochOff + kMaxCtas * 8;
constexpr std::uint64_t kOutOff = kInOff + kMaxBytes;
constexpr std::uint64_t kRegionBytes = kOutOff + kMaxBytes;

struct Args {
  char* region[kMaxRanks];  // every rank's region as mapped here
  int rank;
  std::uint64_t words;      // 8-byte words of the buffer
  int ctas;
};

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void st_pkt(void* p, std::uint64_t lo, std::uint64_t hi) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
}
__device__ __forceinline__ void ld_pkt(const void* p, std::uint64_t* lo, std::uint64_t* hi) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*lo), "=l"(*hi) : "l"(p) : "memory");
}
__device__ __forceinline__ void st_release(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ std::uint64_t ld_acquire(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ char* box(char* region, int phase, std::uint64_t parity, int producer) {
  return region + kBoxesOff + (((static_cast<std::uint64_t>(phase) * 2 + parity) * kMaxRanks + producer) * kBoxBytes);
}
__device__ __forceinline__ std::uint64_t* flag_word(char* region, int kind, int cta, int from) {
  return reinterpret_cast<std::uint64_t*>(region + kFlagsOff) + (static_cast<std::uint64_t>(kind) * kMaxCtas + cta) * kMaxRanks + from;
}

// The call's epoch of this CTA, read after the previous kernel completed; the next kernel may
// launch once it is read.
__device__ __forceinline__ std::uint64_t enter(const Args& a, bool pdl) {
  __shared__ std::uint64_t e;
  if (pdl) pdl_wait();
  if (threadIdx.x == 0) e = reinterpret_cast<std::uint64_t*>(a.region[a.rank] + kEpochOff)[blockIdx.x] + 1;
  __syncthreads();
  const std::uint64_t v = e;
  if (pdl) pdl_launch();
  return v;
}
__device__ __forceinline__ void leave(const Args& a, std::uint64_t e) {
  if (threadIdx.x == 0) reinterpret_cast<std::uint64_t*>(a.region[a.rank] + kEpochOff)[blockIdx.x] = e;
}

// fp32 rank-ordered fold of four bf16 per word.
struct Acc {
  float f[4];
  __device__ void first(std::uint64_t w) {
#pragma unroll
    for (int k = 0; k < 4; ++k) f[k] = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w >> (16 * k))));
  }
  __device__ void add(std::uint64_t w) {
#pragma unroll
    for (int k = 0; k < 4; ++k) f[k] += __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w >> (16 * k))));
  }
  __device__ std::uint64_t word() const {
    std::uint64_t w = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) w |= static_cast<std::uint64_t>(__bfloat16_as_ushort(__float2bfloat16_rn(f[k]))) << (16 * k);
    return w;
  }
};

template <int N>
__device__ __forceinline__ void push(const Args& a, int phase, std::uint64_t e, std::uint64_t p, std::uint64_t w, int only = -1) {
  const std::uint64_t parity = e & 1;
  const std::uint64_t flag = static_cast<std::uint32_t>(e) | 1u;  // never 0
  const std::uint64_t lo = (flag << 32) | (w & 0xffffffffu), hi = (flag << 32) | (w >> 32);
#pragma unroll
  for (int d = 0; d < N; ++d) {
    if (d == a.rank || (only >= 0 && d != only)) continue;
    st_pkt(box(a.region[d], phase, parity, a.rank) + p * 16, lo, hi);
  }
}

// Word p of every peer's packet on `phase`, awaited together.
template <int N>
__device__ __forceinline__ void await_all(const Args& a, int phase, std::uint64_t e, std::uint64_t p, std::uint64_t* got) {
  const std::uint64_t parity = e & 1;
  const std::uint32_t flag = static_cast<std::uint32_t>(e) | 1u;
  unsigned pending = ((1u << N) - 1) & ~(1u << a.rank);
  while (pending) {
    std::uint64_t lo[N], hi[N];
#pragma unroll
    for (int s = 0; s < N; ++s)
      if (pending >> s & 1u) ld_pkt(box(a.region[a.rank], phase, parity, s) + p * 16, &lo[s], &hi[s]);
#pragma unroll
    for (int s = 0; s < N; ++s)
      if ((pending >> s & 1u) && static_cast<std::uint32_t>(lo[s] >> 32) == flag && static_cast<std::uint32_t>(hi[s] >> 32) == flag) {
        got[s] = (hi[s] << 32) | (lo[s] & 0xffffffffu);
        pending &= ~(1u << s);
      }
  }
}

template <int N>
__global__ void k_flags(Args a, bool pdl) {
  const std::uint64_t e = enter(a, pdl);
  const int t = threadIdx.x;
  if (t < N && t != a.rank) st_release(flag_word(a.region[t], 0, blockIdx.x, a.rank), e);
  if (t < N && t != a.rank)
    while (ld_acquire(flag_word(a.region[a.rank], 0, blockIdx.x, t)) < e) {
    }
  leave(a, e);
}

template <int N>
__global__ void k_ll1(Args a, bool pdl) {
  const std::uint64_t e = enter(a, pdl);
  const std::uint64_t per = (a.words + a.ctas - 1) / a.ctas;
  const std::uint64_t lo = per * blockIdx.x, hi = min(a.words, lo + per);
  const std::uint64_t* in = reinterpret_cast<const std::uint64_t*>(a.region[a.rank] + kInOff);
  std::uint64_t* out = reinterpret_cast<std::uint64_t*>(a.region[a.rank] + kOutOff);
  for (std::uint64_t p = lo + threadIdx.x; p < hi; p += blockDim.x) {
    const std::uint64_t own = in[p];
    push<N>(a, 0, e, p, own);
    std::uint64_t got[N];
    await_all<N>(a, 0, e, p, got);
    got[a.rank] = own;
    Acc acc;
    acc.first(got[0]);
#pragma unroll
    for (int s = 1; s < N; ++s) acc.add(got[s]);
    out[p] = acc.word();
  }
  leave(a, e);
}

// ll1 with `Pad` more instructions executed once per word (eight independent chains of fused
// multiply-adds whose result is stored only if it is a value they never reach): whether a larger
// kernel costs more where more rank processes share the GPU (each fetches its own code).
template <int N, int Pad>
__global__ void k_ll1pad(Args a, bool pdl) {
  const std::uint64_t e = enter(a, pdl);
  const std::uint64_t per = (a.words + a.ctas - 1) / a.ctas;
  const std::uint64_t lo = per * blockIdx.x, hi = min(a.words, lo + per);
  const std::uint64_t* in = reinterpret_cast<const std::uint64_t*>(a.region[a.rank] + kInOff);
  std::uint64_t* out = reinterpret_cast<std::uint64_t*>(a.region[a.rank] + kOutOff);
  for (std::uint64_t p = lo + threadIdx.x; p < hi; p += blockDim.x) {
    const std::uint64_t own = in[p];
    float x[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = static_cast<float>((own >> (8 * k)) & 0xff);
#pragma unroll
    for (int i = 0; i < Pad / 8; ++i)
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = fmaf(x[k], 0.999f + 1e-6f * i, 0.25f * k);
    float sum = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) sum += x[k];
    if (sum == -1.5f) out[p] = 0;
    push<N>(a, 0, e, p, own);
    std::uint64_t got[N];
    await_all<N>(a, 0, e, p, got);
    got[a.rank] = own;
    Acc acc;
    acc.first(got[0]);
#pragma unroll
    for (int s = 1; s < N; ++s) acc.add(got[s]);
    out[p] = acc.word();
  }
  leave(a, e);
}

template <int N>
__global__ void k_ll2(Args a, bool pdl) {
  const std::uint64_t e = enter(a, pdl);
  const std::uint64_t shard = a.words / N;
  const std::uint64_t per = (shard + a.ctas - 1) / a.ctas;
  const std::uint64_t lo = per * blockIdx.x, hi = min(shard, lo + per);
  const std::uint64_t* in = reinterpret_cast<const std::uint64_t*>(a.region[a.rank] + kInOff);
  std::uint64_t* out = reinterpret_cast<std::uint64_t*>(a.region[a.rank] + kOutOff);
  for (std::uint64_t q = lo + threadIdx.x; q < hi; q += blockDim.x) {
    std::uint64_t v[N];
#pragma unroll
    for (int d = 0; d < N; ++d) v[d] = in[d * shard + q];
#pragma unroll
    for (int d = 0; d < N; ++d)
      if (d != a.rank) push<N>(a, 0, e, q, v[d], d);
    std::uint64_t got[N];
    await_all<N>(a, 0, e, q, got);
    got[a.rank] = v[a.rank];
    Acc acc;
    acc.first(got[0]);
#pragma unroll
    for (int s = 1; s < N; ++s) acc.add(got[s]);
    const std::uint64_t r = acc.word();
    push<N>(a, 1, e, q, r);
    out[a.rank * shard + q] = r;
    await_all<N>(a, 1, e, q, got);
#pragma unroll
    for (int s = 0; s < N; ++s)
      if (s != a.rank) out[s * shard + q] = got[s];
  }
  leave(a, e);
}

// CTA c meets CTA c of every peer: signal `v`, wait for >= v.
template <int N>
__device__ __forceinline__ void meet(const Args& a, std::uint64_t v) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < N && t != a.rank) st_release(flag_word(a.region[t], 1, blockIdx.x, a.rank), v);
  if (t < N && t != a.rank)
    while (ld_acquire(flag_word(a.region[a.rank], 1, blockIdx.x, t)) < v) {
    }
  __syncthreads();
}

template <int N>
__global__ void k_direct(Args a, bool pdl) {
  const std::uint64_t e = enter(a, pdl);
  meet<N>(a, 2 * e - 1);
  const std::uint64_t shard = a.words / N;
  const std::uint64_t per = (shard + a.ctas - 1) / a.ctas;
  const std::uint64_t lo = per * blockIdx.x, hi = min(shard, lo + per);
  for (std::uint64_t q = lo + threadIdx.x; q < hi; q += blockDim.x) {
    const std::uint64_t p = a.rank * shard + q;
    std::uint64_t v[N];
#pragma unroll
    for (int s = 0; s < N; ++s) v[s] = reinterpret_cast<const std::uint64_t*>(a.region[s] + kInOff)[p];
    Acc acc;
    acc.first(v[0]);
#pragma unroll
    for (int s = 1; s < N; ++s) acc.add(v[s]);
    const std::uint64_t r = acc.word();
#pragma unroll
    for (int d = 0; d < N; ++d) reinterpret_cast<std::uint64_t*>(a.region[d] + kOutOff)[p] = r;
  }
  meet<N>(a, 2 * e);
  leave(a, e);
}

// ---- host ----

struct Shared {
  std::atomic<int> arrived;
  std::atomic<int> generation;
  cudaIpcMemHandle_t handle[kMaxRanks];
  double us[kMaxRanks];
  long wrong[kMaxRanks];
};

void barrier(Shared* s, int n) {
  const int g = s->generation.load();
  if (s->arrived.fetch_add(1) + 1 == n) {
    s->arrived.store(0);
    s->generation.fetch_add(1);
  } else {
    while (s->generation.load() == g) usleep(20);
  }
}

unsigned short bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
// Element i of rank r: small values whose sums are exact in bf16 for the check (any fold order
// would pass it: the probe times shapes, the library's tests check orders).
float value(int r, std::uint64_t i) { return static_cast<float>(static_cast<int>((r * 7 + i * 3) % 17) - 8); }

template <int N>
void* kernel_of(const std::string& shape) {
  if (shape == "flags") return reinterpret_cast<void*>(k_flags<N>);
  if (shape == "ll1") return reinterpret_cast<void*>(k_ll1<N>);
  if (shape == "ll2") return reinterpret_cast<void*>(k_ll2<N>);
  if (shape == "ll1pad1k") return reinterpret_cast<void*>(k_ll1pad<N, 1024>);
  if (shape == "ll1pad2k") return reinterpret_cast<void*>(k_ll1pad<N, 2048>);
  if (shape == "ll1pad4k") return reinterpret_cast<void*>(k_ll1pad<N, 4096>);
  if (shape == "direct") return reinterpret_cast<void*>(k_direct<N>);
  return nullptr;
}
void* kernel_for(int n, const std::string& shape) {
  switch (n) {
    case 2: return kernel_of<2>(shape);
    case 4: return kernel_of<4>(shape);
    case 8: return kernel_of<8>(shape);
    default: return nullptr;
  }
}

struct Run {
  std::string shape;
  std::uint64_t bytes;
  int ctas, threads;
};

void rank_main(int rank, int n, Shared* sh, const std::vector<Run>& runs, int calls, int reps, bool pdl) {
  CHECK(cudaSetDevice(0));
  char* region = nullptr;
  CHECK(cudaMalloc(&region, kRegionBytes));
  CHECK(cudaMemset(region, 0, kRegionBytes));
  CHECK(cudaIpcGetMemHandle(&sh->handle[rank], region));
  CHECK(cudaDeviceSynchronize());
  barrier(sh, n);
  Args a{};
  a.rank = rank;
  for (int r = 0; r < n; ++r) {
    if (r == rank) a.region[r] = region;
    else CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&a.region[r]), sh->handle[r], cudaIpcMemLazyEnablePeerAccess));
  }
  std::vector<unsigned short> host(kMaxBytes / 2);
  for (std::uint64_t i = 0; i < host.size(); ++i) host[i] = bf16_bits(value(rank, i));
  CHECK(cudaMemcpy(region + kInOff, host.data(), kMaxBytes, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  int index = 0;
  for (const Run& run : runs) {
    ++index;
    // A fresh epoch base per run: no packet or flag of an earlier run matches this one's.
    std::vector<std::uint64_t> base(kMaxCtas, static_cast<std::uint64_t>(index) << 24);
    CHECK(cudaMemcpy(region + kEpochOff, base.data(), base.size() * 8, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(region + kOutOff, 0xff, kMaxBytes));
    CHECK(cudaDeviceSynchronize());
    a.words = run.bytes / 8;
    a.ctas = run.ctas;
    void* fn = kernel_for(n, run.shape);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(run.ctas));
    cfg.blockDim = dim3(static_cast<unsigned>(run.threads));
    cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = pdl ? 1 : 0;
    void* params[] = {&a, &pdl};
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    barrier(sh, n);
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int c = 0; c < calls; ++c) CHECK(cudaLaunchKernelExC(&cfg, fn, params));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int w = 0; w < 3; ++w) CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    barrier(sh, n);
    CHECK(cudaEventRecord(t0, stream));
    for (int r = 0; r < reps; ++r) CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(t1, stream));
    CHECK(cudaStreamSynchronize(stream));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    sh->us[rank] = 1000.0 * ms / (static_cast<double>(reps) * calls);
    // Check the output of the last call (flags: nothing to check).
    long wrong = 0;
    if (run.shape != "flags") {
      std::vector<unsigned short> got(run.bytes / 2);
      CHECK(cudaMemcpy(got.data(), region + kOutOff, run.bytes, cudaMemcpyDeviceToHost));
      for (std::uint64_t i = 0; i < got.size(); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += value(r, i);
        if (got[i] != bf16_bits(want)) ++wrong;
      }
    }
    sh->wrong[rank] = wrong;
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    barrier(sh, n);
    if (rank == 0) {
      double most = 0, sum = 0;
      long bad = 0;
      for (int r = 0; r < n; ++r) {
        most = std::max(most, sh->us[r]);
        sum += sh->us[r];
        bad += sh->wrong[r];
      }
      std::printf("%-7s ranks %d  %8llu B  ctas %3d  threads %4d  pdl %d  %8.2f us (mean %8.2f)  wrong %ld\n", run.shape.c_str(), n,
                  static_cast<unsigned long long>(run.bytes), run.ctas, run.threads, pdl ? 1 : 0, most, sum / n, bad);
      std::fflush(stdout);
    }
    barrier(sh, n);
  }
  for (int r = 0; r < n; ++r)
    if (r != rank) CHECK(cudaIpcCloseMemHandle(a.region[r]));
  CHECK(cudaFree(region));
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2, calls = 20, reps = 20, ctas = 0, threads = 0;
  bool pdl = true;
  std::string shapes = "flags,ll1,ll2,direct", sizes = "1K,16K,64K,256K";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ranks") n = std::atoi(v.c_str());
    else if (k == "--shape") shapes = v;
    else if (k == "--sizes") sizes = v;
    else if (k == "--ctas") ctas = std::atoi(v.c_str());
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--calls") calls = std::atoi(v.c_str());
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--pdl") pdl = std::atoi(v.c_str()) != 0;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (n != 2 && n != 4 && n != 8) {
    std::fprintf(stderr, "--ranks: 2, 4 or 8\n");
    return 2;
  }
  std::vector<Run> runs;
  for (const std::string& shape : probe::split(shapes)) {
    for (const std::string& size : probe::split(sizes)) {
      Run r{shape, probe::parse_size(size), 1, 32};
      if (r.bytes > kMaxBytes || r.bytes % (8 * n) != 0) {
        std::fprintf(stderr, "size %s: at most 1M, a multiple of 8 * ranks\n", size.c_str());
        return 2;
      }
      if (shape != "flags") {
        const std::uint64_t words = shape.rfind("ll1", 0) == 0 ? r.bytes / 8 : r.bytes / 8 / n;
        r.threads = threads ? threads : 256;
        // Default: a thread per word, CTAs as many as that takes, at most 128 / ranks.
        const std::uint64_t want = (words + r.threads - 1) / r.threads;
        r.ctas = ctas ? ctas : static_cast<int>(std::min<std::uint64_t>(std::max<std::uint64_t>(want, 1), 128 / n));
      }
      if (r.ctas > kMaxCtas) return 2;
      runs.push_back(r);
    }
  }
  auto* sh = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (sh) Shared{};
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      rank_main(r, n, sh, runs, calls, reps, pdl);
      std::_Exit(0);
    }
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed ? 1 : 0;
}
