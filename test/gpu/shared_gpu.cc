// Ranks of one host on one GPU, as NCCL 2.30 answers them: without NCCL_MULTI_RANK_GPU_ENABLE (or
// with it 0) every rank's ncclCommInitRank returns ncclInvalidUsage, with NCCL's WARN text in its
// last error, and no rank is left waiting; with it 1 the communicator is made and an AllReduce on it
// is exact. Where the machine has two GPUs or more, two ranks on different GPUs are accepted without
// the variable. The library reads its environment once per process, so each case is a process of
// its own that sets the variable, makes the id and forks its two ranks.
//
// Usage: test_shared_gpu
// Prints "N passed, N failed" (or a skip line without a GPU); exits non-zero on failure.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "test/common/cuda_ok.h"
#include "test/common/loopback.h"
#include "test/common/rank_results.h"
#include "test/common/ranks.h"

namespace {

constexpr int kRanks = 2;
constexpr std::size_t kCount = 4099;
constexpr int kNoGpu = 77;       // a case's exit: no CUDA device here
constexpr int kTooFewGpus = 78;  // ... fewer GPUs than its ranks need

struct Case {
  const char* name;
  const char* multi;   // NCCL_MULTI_RANK_GPU_ENABLE (nullptr: unset)
  bool apart;          // rank r on GPU r (needs two GPUs); else both on GPU 0
  bool accepted;       // what ncclCommInitRank must answer
};

constexpr Case kCases[] = {
    {"one GPU, variable unset", nullptr, false, false},
    {"one GPU, NCCL_MULTI_RANK_GPU_ENABLE=0", "0", false, false},
    {"one GPU, NCCL_MULTI_RANK_GPU_ENABLE=1", "1", false, true},
    {"two GPUs, variable unset", nullptr, true, true},
};

std::int64_t value(int rank, std::size_t i) {
  return static_cast<std::int64_t>((i * 2654435761u + static_cast<std::size_t>(rank) * 97u) % 100003u) - 50000;
}

// One rank: checks counted into *passed, failures returned.
int run_rank(const Case& c, int me, const ncclUniqueId& id, int* passed) {
  CUDA_OK(cudaSetDevice(c.apart ? me : 0));
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&comm, kRanks, id, me);
  if (!c.accepted) {
    const std::string last = ncclGetLastError(nullptr);
    if (rc != ncclInvalidUsage) {
      std::printf("FAIL %s, rank %d: ncclCommInitRank returned %d, not ncclInvalidUsage\n", c.name, me, rc);
      if (rc == ncclSuccess) ncclCommDestroy(comm);
      return 1;
    }
    if (last.find("Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1") ==
        std::string::npos) {
      std::printf("FAIL %s, rank %d: the last error \"%s\" is not NCCL's\n", c.name, me, last.c_str());
      return 1;
    }
    ++*passed;
    return 0;
  }
  if (rc != ncclSuccess) {
    std::printf("FAIL %s, rank %d: ncclCommInitRank returned %d (%s)\n", c.name, me, rc, ncclGetLastError(nullptr));
    return 1;
  }
  std::vector<std::int64_t> host(kCount);
  for (std::size_t i = 0; i < kCount; ++i) host[i] = value(me, i);
  std::int64_t* buf = nullptr;
  CUDA_OK(cudaMalloc(&buf, kCount * sizeof(std::int64_t)));
  CUDA_OK(cudaMemcpy(buf, host.data(), kCount * sizeof(std::int64_t), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int failed = 0;
  const ncclResult_t ar = ncclAllReduce(buf, buf, kCount, ncclInt64, ncclSum, comm, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), buf, kCount * sizeof(std::int64_t), cudaMemcpyDeviceToHost));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i) wrong += host[i] != value(0, i) + value(1, i);
  if (ar != ncclSuccess || wrong) {
    std::printf("FAIL %s, rank %d: the AllReduce returned %d with %zu of %zu elements wrong\n", c.name, me, ar, wrong,
                kCount);
    ++failed;
  } else {
    ++*passed;
  }
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(buf));
  if (ncclCommDestroy(comm) != ncclSuccess) {
    std::printf("FAIL %s, rank %d: ncclCommDestroy\n", c.name, me);
    ++failed;
  }
  return failed;
}

// The case's process: its environment, its id, its ranks. Exits 0 when every rank passed, kNoGpu
// or kTooFewGpus when the machine lacks the GPUs it needs.
int run_case(const Case& c) {
  if (c.multi) ::setenv("NCCL_MULTI_RANK_GPU_ENABLE", c.multi, 1);
  else ::unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  rank_results::Pipe results;
  if (!results.ok()) return 1;
  // Only ranks touch CUDA: a process that initialised CUDA cannot hand it to the children it forks.
  ranks::Group group(kRanks, [&](int r) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || (c.apart && n < kRanks)) {
      results.report_skipped();
      return n == 0 ? kNoGpu : kTooFewGpus;
    }
    int passed = 0;
    const int failed = run_rank(c, r, id, &passed);
    results.report(passed, failed);
    return failed ? 1 : 0;
  });
  group.wait(ranks::Clock::now() + ranks::seconds(120));
  for (const ranks::Outcome& o : group.outcomes())
    if (o.exit_code() == kNoGpu || o.exit_code() == kTooFewGpus) return o.exit_code();
  const rank_results::Totals t = results.collect(kRanks, group);
  std::printf("%s: %d passed, %d failed\n", c.name, t.passed, t.failed);
  return t.failed == 0 && t.passed == kRanks ? 0 : 1;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  ::setenv("PURLIN_TIMEOUT", "30", 1);
  rank_results::Totals totals;
  for (const Case& c : kCases) {
    ranks::Wait w;
    w.deadline = ranks::Clock::now() + ranks::seconds(150);
    const ranks::Outcome o = ranks::run(1, [&](int) { return run_case(c); }, w)[0];
    if (o.exit_code() == kNoGpu) {
      totals.skipped = true;
      break;
    }
    if (o.exit_code() == kTooFewGpus) {
      std::printf("not run: %s (this machine has one GPU)\n", c.name);
    } else if (o.ok()) {
      ++totals.passed;
    } else {
      std::printf("FAIL %s: %s\n", c.name, ranks::describe(o).c_str());
      ++totals.failed;
    }
  }
  return rank_results::finish(totals);
}
