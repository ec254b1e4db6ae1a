// ncclCommAbort ends a wait of the copy-engine datapath, ranks as processes on the GPU(s).
//
// The copy engines cannot wait on a flag themselves: a zero-staged call on them is bracketed by
// one-CTA barrier kernels (snac/executors/ce_copies.h), and a barrier whose peer never comes would
// spin until PURLIN_TIMEOUT. This test makes that happen and ends it with ncclCommAbort. Both ranks
// capture an AlltoAll that the policy (PURLIN_CE_MIN_BYTES=1, set here) sends to the copy engines,
// replay it once together and check every element; then rank 0 replays it alone, and a second
// thread aborts its communicator while the first waits in cudaStreamSynchronize. Rank 1 replays it
// alone after that: rank 0 had arrived at that call before its abort, so rank 1 passes the arrival,
// makes its copies and waits at the done barrier, which rank 0 never reaches: ended there by the
// library's watch over a peer that left, or by its own abort, which a second thread makes as for
// rank 0. What must hold: the ranks' COLL lines say that the call ran
// on the copy engines, the joint replay is exact, each lone replay's stream ends without a CUDA
// error within a few seconds of the abort, and rank 0's only after it (its peer never came, so
// only the abort can end it: PURLIN_TIMEOUT is set far beyond).
//
// Usage: test_ce_abort [--count ELEMS]   (ELEMS: floats each rank sends to each peer)
// Prints "N passed, N failed" (or a skip line without a GPU); exits non-zero on failure.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "test/common/cuda_ok.h"
#include "test/common/loopback.h"
#include "test/common/rank_results.h"
#include "test/common/ranks.h"

namespace {

constexpr int kRanks = 2;
constexpr double kAbortAfterS = 0.5;  // how long the lone replay waits before its abort
constexpr double kEndWithinS = 10;    // ... and how soon after the abort its stream must end

float value(int from, int to, std::size_t i) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(from) * 131 + static_cast<std::size_t>(to) * 17) % 1021) /
         3.0f;
}

// One rank's part: `gone` carries rank 0's word that its lone replay ended to rank 1, `back` rank
// 1's that its own did to rank 0, which keeps its process (and so its memory) until then. Returns
// the checks that failed, and counts those that passed in *passed.
int run_rank(int me, const ncclUniqueId& id, std::size_t count, int gone[2], int back[2], int* passed) {
  int n = 0;
  CUDA_OK(cudaGetDeviceCount(&n));
  CUDA_OK(cudaSetDevice(me % n));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, kRanks, id, me) != ncclSuccess) {
    std::printf("FAIL rank %d: ncclCommInitRank\n", me);
    return 1;
  }
  const std::size_t bytes = count * kRanks * sizeof(float);
  float* send = nullptr;
  float* recv = nullptr;
  CUDA_OK(cudaMalloc(&send, bytes));
  CUDA_OK(cudaMalloc(&recv, bytes));
  std::vector<float> host(count * kRanks);
  for (int to = 0; to < kRanks; ++to)
    for (std::size_t i = 0; i < count; ++i) host[to * count + i] = value(me, to, i);
  CUDA_OK(cudaMemcpy(send, host.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(recv, 0xA5, bytes));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const ncclResult_t captured = ncclAlltoAll(send, recv, count, ncclFloat, comm, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  if (captured != ncclSuccess) {
    std::printf("FAIL rank %d: capturing the AlltoAll: %s\n", me, ncclGetErrorString(captured));
    return 1;
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  // Together: every block from its sender.
  int failed = 0;
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), recv, bytes, cudaMemcpyDeviceToHost));
  std::size_t wrong = 0;
  for (int from = 0; from < kRanks; ++from)
    for (std::size_t i = 0; i < count; ++i) wrong += host[from * count + i] != value(from, me, i);
  if (wrong) {
    std::printf("FAIL rank %d: the joint replay left %zu elements wrong\n", me, wrong);
    ++failed;
  } else {
    ++*passed;
  }

  // Alone: rank 0 first, rank 1 once rank 0 is gone.
  if (me == 1) {
    char word = 0;
    if (read(gone[0], &word, 1) != 1) {
      std::printf("FAIL rank 1: rank 0 never said it was done\n");
      return failed + 1;
    }
  }
  CUDA_OK(cudaGraphLaunch(exec, stream));
  using Clock = std::chrono::steady_clock;
  Clock::time_point aborted_at{};
  ncclResult_t abort_result = ncclSuccess;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(kAbortAfterS));
    aborted_at = Clock::now();
    abort_result = ncclCommAbort(comm);
  });
  const cudaError_t synced = cudaStreamSynchronize(stream);
  const Clock::time_point ended_at = Clock::now();
  aborter.join();
  const double after = std::chrono::duration<double>(ended_at - aborted_at).count();
  if (abort_result != ncclSuccess) {
    std::printf("FAIL rank %d: ncclCommAbort: %s\n", me, ncclGetErrorString(abort_result));
    ++failed;
  } else if (synced != cudaSuccess) {
    std::printf("FAIL rank %d: the lone replay's stream ended with %s\n", me, cudaGetErrorString(synced));
    ++failed;
  } else if (me == 0 && after < 0) {
    std::printf("FAIL rank 0: the lone replay's stream ended before the abort: its barrier did not wait for rank 1\n");
    ++failed;
  } else if (after > kEndWithinS) {
    std::printf("FAIL rank %d: the lone replay's stream ended %.1f s after the abort\n", me, after);
    ++failed;
  } else {
    ++*passed;
  }
  char word = 'x';
  if (me == 0 && (write(gone[1], &word, 1) != 1 || read(back[0], &word, 1) != 1)) ++failed;
  if (me == 1 && write(back[1], &word, 1) != 1) ++failed;
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  loopback::use();
  std::size_t count = (1u << 20) / sizeof(float);  // 1 MiB to each peer: zero-staged
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--count" && i + 1 < argc) count = static_cast<std::size_t>(std::atoll(argv[++i]));
    else {
      std::fprintf(stderr, "usage: test_ce_abort [--count ELEMS]\n");
      return 2;
    }
  }
  // Every zero-staged copy on the copy engines; a barrier ends only by the abort (or this timeout,
  // which the test would report as too late).
  setenv("PURLIN_CE_MIN_BYTES", "1", 1);
  setenv("PURLIN_TIMEOUT", "120", 1);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("purlin-ce-abort-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
  setenv("NCCL_DEBUG_FILE", (dir / "rank.%p").c_str(), 1);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  rank_results::Pipe results;
  int gone[2], back[2];
  if (!results.ok() || pipe(gone) != 0 || pipe(back) != 0) return 1;
  // Only ranks touch CUDA: a process that initialised CUDA cannot hand it to the children it forks.
  ranks::Group group(kRanks, [&](int r) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      results.report_skipped();
      return 0;
    }
    int passed = 0;
    const int failed = run_rank(r, id, count, gone, back, &passed);
    results.report(passed, failed);
    return failed ? 1 : 0;
  });
  group.wait(ranks::Clock::now() + ranks::seconds(300));
  rank_results::Totals totals = results.collect(kRanks, group);
  if (totals.skipped) {
    std::filesystem::remove_all(dir);
    return rank_results::finish(totals);
  }
  // The call ran on the copy engines: the ranks' COLL lines say so.
  int ce_lines = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);)
      ce_lines += line.find("zero-staging:") != std::string::npos && line.find("on the copy engines") != std::string::npos;
  }
  std::filesystem::remove_all(dir);
  if (ce_lines == 0) {
    std::printf("FAIL: no COLL line says a call ran on the copy engines\n");
    ++totals.failed;
  } else {
    ++totals.passed;
  }
  return rank_results::finish(totals);
}
