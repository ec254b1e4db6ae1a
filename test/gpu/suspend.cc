// ncclCommSuspend / ncclCommResume of a GPU communicator's memory, ranks as processes on the GPU(s).
//
// Each rank runs a set of calls that takes every path of the SM datapath it can (AllReduce of
// 1 KiB in the latency exchange, of 256 KiB through the staging window, of just over 4 MiB in
// place; AllGather of 256 KiB through the window), eager and from a CUDA graph captured once at the
// start, with int32 inputs new every round and every output element checked exactly (sums wrap).
// Then, for several cycles:
// - the memory statistics: total = persistent + suspendable, not suspended;
// - ncclCommSuspend, which must give back the suspendable memory: while every rank is suspended,
//   the device's free memory has grown by at least the suspendable bytes of all its ranks (with
//   ranks in several processes the window is suspendable, so there must be some);
// - a collective, refused with ncclInvalidUsage;
// - ncclCommResume, and the calls again, eager and from the graph captured before the first
//   suspend (its kernels' window addresses must name the memory mapped again).
// A graph captured after the last resume, and a communicator destroyed while suspended, end it.
//
// With --remap instead: a graph's zero-staged AllReduce on buffers of a cuMem allocator of the test's
// own, whose memory every rank gives back and maps anew at the same addresses between suspend and
// resume (as vLLM's allocator does in sleep mode); the graph replayed and the call run eager must
// both be exact. Then the same for a graph of zero-staged Send/Recv messages in a ring.
//
// Usage: test_suspend [--ranks N] [--cycles C] [--remap]
// Prints "N passed, N failed" (or a skip line without a GPU); exits non-zero on failure.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nccl_shim/nccl_next.h"
#include "test/common/comm_ranks.h"
#include "test/common/cuda_ok.h"
#include "test/common/loopback.h"
#include "test/common/rank_results.h"
#include "test/common/ranks.h"

namespace {

struct Options {
  int ranks = 2;
  int cycles = 3;
  bool remap = false;
};

// One call of the set: AllReduce or AllGather of `count` int32 per rank.
struct Call {
  bool gather;
  std::size_t count;
  std::int32_t* send = nullptr;
  std::int32_t* recv = nullptr;
  std::size_t out_count(int n) const { return gather ? count * n : count; }
};

std::int32_t value(int r, int round, std::size_t call, std::size_t i) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^
                    static_cast<std::uint32_t>(r * 40503 + round * 977 + static_cast<int>(call) * 131);
  x ^= x >> 15;
  return static_cast<std::int32_t>(x);
}

ncclResult_t issue(const Call& c, ncclComm_t comm, cudaStream_t stream) {
  return c.gather ? ncclAllGather(c.send, c.recv, c.count, ncclInt32, comm, stream)
                  : ncclAllReduce(c.send, c.recv, c.count, ncclInt32, ncclSum, comm, stream);
}

struct Rank {
  int me = 0;
  int n = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<Call> calls;
  int passed = 0;
  int failed = 0;
  int on_device = 1;                      // ranks on this rank's device, this one included
  pthread_barrier_t* outside = nullptr;   // every rank's, in memory shared by the processes

  void check(bool ok, const std::string& what) {
    if (ok) {
      ++passed;
      return;
    }
    ++failed;
    std::printf("FAIL rank %d: %s\n", me, what.c_str());
  }

  std::uint64_t stat(ncclCommMemStat_t which) {
    std::uint64_t v = 0;
    check(ncclCommMemStats(comm, which, &v) == ncclSuccess, "ncclCommMemStats");
    return v;
  }

  // New inputs, poisoned outputs, the calls (eager, or `graph`), every element checked.
  void round(int number, cudaGraphExec_t graph, const char* how) {
    for (std::size_t k = 0; k < calls.size(); ++k) {
      const Call& c = calls[k];
      std::vector<std::int32_t> in(c.count);
      for (std::size_t i = 0; i < c.count; ++i) in[i] = value(me, number, k, i);
      CUDA_OK(cudaMemcpyAsync(c.send, in.data(), c.count * 4, cudaMemcpyHostToDevice, stream));
      CUDA_OK(cudaMemsetAsync(c.recv, 0xA5, c.out_count(n) * 4, stream));
      CUDA_OK(cudaStreamSynchronize(stream));  // the pageable copy is done before `in` goes
    }
    if (graph) {
      CUDA_OK(cudaGraphLaunch(graph, stream));
    } else {
      for (const Call& c : calls) {
        const ncclResult_t r = issue(c, comm, stream);
        if (r != ncclSuccess) check(false, std::string(how) + ": a call returned " + ncclGetErrorString(r));
      }
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    for (std::size_t k = 0; k < calls.size(); ++k) {
      const Call& c = calls[k];
      std::vector<std::int32_t> got(c.out_count(n));
      CUDA_OK(cudaMemcpy(got.data(), c.recv, got.size() * 4, cudaMemcpyDeviceToHost));
      std::size_t wrong = 0, first = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        std::uint32_t want = 0;
        if (c.gather) {
          want = static_cast<std::uint32_t>(value(static_cast<int>(i / c.count), number, k, i % c.count));
        } else {
          for (int r = 0; r < n; ++r) want += static_cast<std::uint32_t>(value(r, number, k, i));
        }
        if (static_cast<std::uint32_t>(got[i]) != want && wrong++ == 0) first = i;
      }
      check(wrong == 0, std::string(how) + " round " + std::to_string(number) + ": " +
                            (c.gather ? "AllGather" : "AllReduce") + " of " + std::to_string(c.count) + ": " +
                            std::to_string(wrong) + " wrong elements, the first at " + std::to_string(first));
    }
  }

  cudaGraphExec_t capture() {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    ncclResult_t r = ncclSuccess;
    for (const Call& c : calls)
      if (r == ncclSuccess) r = issue(c, comm, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &g));
    check(r == ncclSuccess, std::string("capture: ") + ncclGetErrorString(r));
    CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_OK(cudaGraphDestroy(g));
    return exec;
  }
};

// --remap: buffers whose memory the owner gives back and maps anew at the same address, as a cuMem
// allocator does across a sleep (vLLM's). The driver's cuMem functions, found at run time.
struct Driver {
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemSetAccess) access = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemRelease) release = nullptr;

  template <class F>
  static void get(const char* name, F* f) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_OK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q));
    *f = reinterpret_cast<F>(p);
  }
  Driver() {
    get("cuMemGetAllocationGranularity", &granularity);
    get("cuMemAddressReserve", &reserve);
    get("cuMemCreate", &create);
    get("cuMemMap", &map);
    get("cuMemSetAccess", &access);
    get("cuMemUnmap", &unmap);
    get("cuMemRelease", &release);
  }
};

struct Remappable {
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
};

#define CU_OK(x)                                                                 \
  do {                                                                           \
    if (CUresult r_ = (x); r_ != CUDA_SUCCESS) {                                 \
      std::fprintf(stderr, "FAIL %s:%d %s: CUDA driver error %d\n", __FILE__, __LINE__, #x, static_cast<int>(r_)); \
      std::_Exit(3);                                                             \
    }                                                                            \
  } while (0)

// New physical memory (exportable as a descriptor, as a cuMem allocator's) mapped at m.base.
void back(const Driver& d, Remappable& m) {
  int device = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CU_OK(d.create(&m.handle, m.bytes, &prop, 0));
  CU_OK(d.map(m.base, m.bytes, 0, m.handle, 0));
  CUmemAccessDesc a{};
  a.location = prop.location;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_OK(d.access(m.base, m.bytes, &a, 1));
}

Remappable remappable(const Driver& d, std::size_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUDA_OK(cudaGetDevice(&prop.location.id));
  std::size_t grain = 0;
  CU_OK(d.granularity(&grain, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  Remappable m;
  m.bytes = (bytes + grain - 1) / grain * grain;
  CU_OK(d.reserve(&m.base, m.bytes, 0, 0, 0));
  back(d, m);
  return m;
}

// The same for a ring of Send/Recv messages large enough to be zero-staged (above the staged path's
// two halves, 16 MiB where ranks share a GPU): each rank sends to the next and receives from the
// previous, from a graph captured before the memory is mapped anew.
void remap_sendrecv(Rank& R, const Driver& d) {
  const std::size_t count = (std::size_t{20} << 20) / 4 + 3;
  Remappable send = remappable(d, count * 4), recv = remappable(d, count * 4);
  auto* sbuf = reinterpret_cast<std::int32_t*>(send.base);
  auto* rbuf = reinterpret_cast<std::int32_t*>(recv.base);
  const int next = (R.me + 1) % R.n, prev = (R.me + R.n - 1) % R.n;
  auto ring = [&] {
    ncclGroupStart();
    ncclSend(sbuf, count, ncclInt32, next, R.comm, R.stream);
    ncclRecv(rbuf, count, ncclInt32, prev, R.comm, R.stream);
    return ncclGroupEnd();
  };
  cudaGraph_t g = nullptr;
  cudaGraphExec_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(R.stream, cudaStreamCaptureModeThreadLocal));
  const ncclResult_t captured = ring();
  CUDA_OK(cudaStreamEndCapture(R.stream, &g));
  R.check(captured == ncclSuccess, std::string("remap: Send/Recv capture: ") + ncclGetErrorString(captured));
  CUDA_OK(cudaGraphInstantiate(&graph, g, 0));
  CUDA_OK(cudaGraphDestroy(g));
  auto replay = [&](int number, const char* how) {
    std::vector<std::int32_t> in(count), got(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = value(R.me, number, 7, i);
    // On the stream the graph runs on (a non-blocking one: the legacy stream's copies would not be
    // ordered before it), and landed before `in` goes.
    CUDA_OK(cudaMemcpyAsync(sbuf, in.data(), count * 4, cudaMemcpyHostToDevice, R.stream));
    CUDA_OK(cudaMemsetAsync(rbuf, 0xA5, count * 4, R.stream));
    CUDA_OK(cudaStreamSynchronize(R.stream));
    CUDA_OK(cudaGraphLaunch(graph, R.stream));
    CUDA_OK(cudaStreamSynchronize(R.stream));
    CUDA_OK(cudaMemcpy(got.data(), rbuf, count * 4, cudaMemcpyDeviceToHost));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += got[i] != value(prev, number, 7, i);
    R.check(wrong == 0, std::string(how) + ": Send/Recv of " + std::to_string(count) + ": " + std::to_string(wrong) +
                            " wrong elements");
  };
  replay(200, "remap: Send/Recv graph before");
  R.check(ncclCommSuspend(R.comm, NCCL_SUSPEND_MEM) == ncclSuccess, "remap: ncclCommSuspend (Send/Recv)");
  for (Remappable* m : {&send, &recv}) {
    CU_OK(d.unmap(m->base, m->bytes));
    CU_OK(d.release(m->handle));
    back(d, *m);
  }
  pthread_barrier_wait(R.outside);
  R.check(ncclCommResume(R.comm) == ncclSuccess, "remap: ncclCommResume (Send/Recv)");
  replay(201, "remap: Send/Recv graph captured before the memory was mapped anew");
  CUDA_OK(cudaGraphExecDestroy(graph));
  CUDA_OK(cudaDeviceSynchronize());
}

// A graph's zero-staged AllReduce on cuMem buffers; every rank's memory given back and mapped anew
// at the same addresses (between ncclCommSuspend and ncclCommResume); the graph replayed, then the
// same call eager. What must hold: both results exact.
void remap(Rank& R) {
  const Driver d;
  Call c{false, (std::size_t{1} << 20) + 3};
  Remappable send = remappable(d, c.count * 4), recv = remappable(d, c.count * 4);
  c.send = reinterpret_cast<std::int32_t*>(send.base);
  c.recv = reinterpret_cast<std::int32_t*>(recv.base);
  R.calls = {c};
  int number = 100;
  cudaGraphExec_t graph = R.capture();
  R.round(number++, graph, "remap: graph before");
  R.check(ncclCommSuspend(R.comm, NCCL_SUSPEND_MEM) == ncclSuccess, "remap: ncclCommSuspend");
  for (Remappable* m : {&send, &recv}) {
    CU_OK(d.unmap(m->base, m->bytes));
    CU_OK(d.release(m->handle));
    back(d, *m);
  }
  pthread_barrier_wait(R.outside);  // every rank's memory is new
  R.check(ncclCommResume(R.comm) == ncclSuccess, "remap: ncclCommResume");
  R.round(number++, graph, "remap: graph captured before the memory was mapped anew");
  R.round(number++, nullptr, "remap: eager after the memory was mapped anew");
  CUDA_OK(cudaGraphExecDestroy(graph));
  CUDA_OK(cudaDeviceSynchronize());
  R.calls.clear();
  if (R.n > 1) remap_sendrecv(R, d);
}

void run_rank(Rank& R, const Options& o) {
  if (o.remap) return remap(R);
  for (const auto& [gather, count] : {std::pair{false, std::size_t{256}}, std::pair{false, std::size_t{64} << 10},
                                      std::pair{false, (std::size_t{1} << 20) + 3}, std::pair{true, std::size_t{64} << 10}}) {
    Call c{gather, count};
    CUDA_OK(cudaMalloc(&c.send, c.count * 4));
    CUDA_OK(cudaMalloc(&c.recv, c.out_count(R.n) * 4));
    R.calls.push_back(c);
  }
  int number = 0;
  R.round(number++, nullptr, "eager");
  cudaGraphExec_t before = R.capture();
  R.round(number++, before, "graph");
  // Whether the window must be suspendable: ranks in several processes share it by cuMem descriptors,
  // unless PURLIN_CUMEM=0 says otherwise.
  const char* cumem = std::getenv("PURLIN_CUMEM");
  const bool expect_some = R.n > 1 && !(cumem && std::string(cumem) == "0");
  for (int cycle = 0; cycle < o.cycles; ++cycle) {
    const std::uint64_t total = R.stat(ncclStatGpuMemTotal), persist = R.stat(ncclStatGpuMemPersist),
                        suspendable = R.stat(ncclStatGpuMemSuspend);
    R.check(total == persist + suspendable && total > 0,
            "total " + std::to_string(total) + " is not persistent " + std::to_string(persist) + " + suspendable " +
                std::to_string(suspendable));
    R.check(!expect_some || suspendable > 0, "nothing can be suspended");
    R.check(R.stat(ncclStatGpuMemSuspended) == 0, "suspended before ncclCommSuspend");
    std::size_t free_before = 0, free_after = 0, free_resumed = 0, all = 0;
    CUDA_OK(cudaMemGetInfo(&free_before, &all));
    const auto t0 = std::chrono::steady_clock::now();
    R.check(ncclCommSuspend(R.comm, NCCL_SUSPEND_MEM) == ncclSuccess,
            std::string("ncclCommSuspend: ") + ncclGetLastError(R.comm));
    const auto t1 = std::chrono::steady_clock::now();
    R.check(R.stat(ncclStatGpuMemSuspended) == 1, "not suspended after ncclCommSuspend");
    // Every rank's window is free while all of them are suspended (the windows are alike): the
    // ranks meet before and after the measurement, outside the communicator.
    pthread_barrier_wait(R.outside);
    CUDA_OK(cudaMemGetInfo(&free_after, &all));
    pthread_barrier_wait(R.outside);
    R.check(free_after >= free_before + suspendable * R.on_device,
            "free device memory went from " + std::to_string(free_before) + " to " + std::to_string(free_after) +
                " bytes, with " + std::to_string(suspendable) + " suspendable on each of " +
                std::to_string(R.on_device) + " ranks of this device");
    R.check(ncclAllReduce(R.calls[0].send, R.calls[0].recv, R.calls[0].count, ncclInt32, ncclSum, R.comm, R.stream) ==
                ncclInvalidUsage,
            "an AllReduce while suspended was not refused with ncclInvalidUsage");
    const auto t2 = std::chrono::steady_clock::now();
    R.check(ncclCommResume(R.comm) == ncclSuccess, std::string("ncclCommResume: ") + ncclGetLastError(R.comm));
    const auto t3 = std::chrono::steady_clock::now();
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    CUDA_OK(cudaMemGetInfo(&free_resumed, &all));
    R.check(R.stat(ncclStatGpuMemSuspended) == 0, "suspended after ncclCommResume");
    if (R.me == 0)
      std::printf("cycle %d: total %llu B, suspendable %llu B; free device memory %zu MiB, suspended %zu MiB, "
                  "resumed %zu MiB; ncclCommSuspend took %.1f ms, ncclCommResume %.1f ms\n",
                  cycle, static_cast<unsigned long long>(total), static_cast<unsigned long long>(suspendable),
                  free_before >> 20, free_after >> 20, free_resumed >> 20, ms(t0, t1), ms(t2, t3));
    R.round(number++, nullptr, "eager after resume");
    R.round(number++, before, "graph captured before the suspend");
  }
  cudaGraphExec_t after = R.capture();
  R.round(number++, after, "graph captured after the last resume");
  R.round(number++, before, "graph captured before the suspends");
  CUDA_OK(cudaGraphExecDestroy(before));
  CUDA_OK(cudaGraphExecDestroy(after));
  for (const Call& c : R.calls) {
    CUDA_OK(cudaFree(c.send));
    CUDA_OK(cudaFree(c.recv));
  }
  // Destroyed while suspended: what is left of the window goes too.
  R.check(ncclCommSuspend(R.comm, NCCL_SUSPEND_MEM) == ncclSuccess,
          std::string("the last ncclCommSuspend: ") + ncclGetLastError(R.comm));
}

}  // namespace

int main(int argc, char** argv) {
  loopback::use();
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) o.ranks = std::atoi(argv[++i]);
    else if (a == "--cycles" && i + 1 < argc) o.cycles = std::atoi(argv[++i]);
    else if (a == "--remap") o.remap = true;
    else {
      std::fprintf(stderr, "usage: test_suspend [--ranks N] [--cycles C] [--remap]\n");
      return 2;
    }
  }
  void* shared = ::mmap(nullptr, sizeof(pthread_barrier_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  auto* outside = static_cast<pthread_barrier_t*>(shared);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (pthread_barrier_init(outside, &attr, static_cast<unsigned>(o.ranks)) != 0) return 1;
  const rank_results::Totals totals = comm_ranks::run(o.ranks, 600, [&](const comm_ranks::Rank& cr, int* passed) {
    Rank R;
    R.me = cr.rank;
    R.n = cr.nranks;
    R.comm = cr.comm;
    R.stream = cr.stream;
    R.outside = outside;
    R.on_device = 0;
    for (int p = 0; p < o.ranks; ++p) R.on_device += p % cr.devices == cr.device;
    run_rank(R, o);
    *passed = R.passed;
    return R.failed;
  });
  return rank_results::finish(totals);
}
