// p2p-depth: how many separate ncclSend calls to one peer a library lets finish before the peer has
// posted the matching receives, per message size. Two rank processes on GPU 0 (several ranks on one
// GPU need MPS, and NCCL 2.30 needs NCCL_MULTI_RANK_GPU_ENABLE=1); it reaches the library only
// through nccl.h, so the same binary measures ours and NCCL (LD_LIBRARY_PATH picks libnccl.so.2).
//
// For each size and k = 1, 2, ...: rank 0 issues k sends to rank 1 on its stream and watches the
// stream for --wait seconds; then rank 1 posts its k receives, both streams drain, and rank 1
// checks every message's content. A size's depth is the largest k whose sends all finished before
// the receives were posted. Exit status 1 if any received byte is wrong or a stream never drains.
//
// Usage: p2p-depth [--max K] [--wait SECONDS] [SIZE ...]   (sizes in bytes; default 1K 64K 1M 4M)
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nccl_check.h"
#include "reference.h"

namespace {

struct Shared {
  ncclUniqueId id;
  std::atomic<int> id_ready;
  std::atomic<int> step[2];  // the last step each rank has reached
  std::atomic<int> failed;
  std::atomic<int> stop;     // rank 0's verdict: this size's probe is over
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Waits until the peer has reached `step` (or a rank failed).
bool meet(Shared* sh, int me, int step) {
  sh->step[me].store(step);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (sh->step[1 - me].load() < step) {
    if (sh->failed.load() || std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

// Whether the stream drained within `seconds`.
bool drains(cudaStream_t s, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return ok(e, "cudaStreamQuery");
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

std::uint8_t content(std::size_t message, std::size_t i) {
  return static_cast<std::uint8_t>(perf::mix(static_cast<std::uint64_t>(message) << 40 | i));
}

int run_rank(Shared* sh, int me, const std::vector<std::size_t>& sizes, int most, double wait_s) {
  if (me == 0) {
    perf::check_nccl(ncclGetUniqueId(&sh->id), "ncclGetUniqueId");
    sh->id_ready.store(1);
  }
  while (!sh->id_ready.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!ok(cudaSetDevice(0), "cudaSetDevice")) return 1;
  ncclComm_t comm;
  perf::check_nccl(ncclCommInitRank(&comm, 2, sh->id, me), "ncclCommInitRank");
  cudaStream_t stream;
  if (!ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate")) return 1;
  std::size_t largest = 0;
  for (std::size_t s : sizes) largest = s > largest ? s : largest;
  char* buf = nullptr;
  const std::size_t room = largest * static_cast<std::size_t>(most);
  if (!ok(cudaMalloc(&buf, room), "cudaMalloc")) return 1;
  std::vector<std::uint8_t> host(room);
  int step = 0, status = 0;
  if (me == 0) std::printf("| bytes | sends finished before the receives (of k = 1..%d) | depth |\n| --- | --- | --- |\n", most);
  for (std::size_t bytes : sizes) {
    // Warm up the pair in both directions (connections are set up on first use).
    for (int dir = 0; dir < 2; ++dir) {
      const bool send = (dir == 0) == (me == 0);
      perf::check_nccl(send ? ncclSend(buf, bytes, ncclInt8, 1 - me, comm, stream)
                            : ncclRecv(buf, bytes, ncclInt8, 1 - me, comm, stream), "warm-up", comm);
      if (!drains(stream, 60)) return 1;
    }
    int depth = 0;
    std::string seen;
    for (int k = 1; k <= most; ++k) {
      if (!meet(sh, me, ++step)) return 1;
      bool finished = false;
      if (me == 0) {
        for (int m = 0; m < k; ++m) {
          for (std::size_t i = 0; i < bytes; ++i) host[static_cast<std::size_t>(m) * bytes + i] = content(m, i);
        }
        if (!ok(cudaMemcpy(buf, host.data(), bytes * static_cast<std::size_t>(k), cudaMemcpyHostToDevice), "cudaMemcpy"))
          return 1;
        for (int m = 0; m < k; ++m)
          perf::check_nccl(ncclSend(buf + static_cast<std::size_t>(m) * bytes, bytes, ncclInt8, 1, comm, stream),
                           "ncclSend", comm);
        finished = drains(stream, wait_s);
      }
      if (!meet(sh, me, ++step)) return 1;
      if (me == 1) {
        // On the rank's stream: a cudaMemset would not be ordered before the receives of a
        // non-blocking stream.
        if (!ok(cudaMemsetAsync(buf, 0xa5, bytes * static_cast<std::size_t>(k), stream), "cudaMemsetAsync")) return 1;
        for (int m = 0; m < k; ++m)
          perf::check_nccl(ncclRecv(buf + static_cast<std::size_t>(m) * bytes, bytes, ncclInt8, 0, comm, stream),
                           "ncclRecv", comm);
      }
      if (!drains(stream, 60)) {
        std::fprintf(stderr, "rank %d: %zu B, k = %d: the stream did not drain after the receives were posted\n", me,
                     bytes, k);
        sh->failed.store(1);
        return 1;
      }
      if (me == 1) {
        if (!ok(cudaMemcpy(host.data(), buf, bytes * static_cast<std::size_t>(k), cudaMemcpyDeviceToHost), "cudaMemcpy"))
          return 1;
        for (int m = 0; m < k; ++m)
          for (std::size_t i = 0; i < bytes; ++i)
            if (host[static_cast<std::size_t>(m) * bytes + i] != content(m, i)) {
              std::fprintf(stderr, "%zu B, k = %d: message %d byte %zu wrong\n", bytes, k, m, i);
              status = 1;
              break;
            }
      }
      if (me == 0) {
        seen += finished ? "+" : "-";
        if (finished && depth == k - 1) depth = k;
      }
      // Once sends stop finishing early, one more k confirms it; rank 0 decides for both.
      if (me == 0) sh->stop.store(!finished && k > depth + 1 ? 1 : 0);
      if (!meet(sh, me, ++step)) return 1;
      if (sh->stop.load()) break;
    }
    if (me == 0) std::printf("| %zu | %s | %d |\n", bytes, seen.c_str(), depth);
    std::fflush(stdout);
  }
  cudaFree(buf);
  ncclCommDestroy(comm);
  return status;
}

// One rank; a failed NCCL call ends it with its message and stops the peer's waits.
int rank_main(Shared* sh, int me, const std::vector<std::size_t>& sizes, int most, double wait_s) {
  try {
    return run_rank(sh, me, sizes, most, wait_s);
  } catch (const perf::NcclError& e) {
    std::fprintf(stderr, "rank %d: %s\n", me, e.what());
    sh->failed.store(1);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int most = 16;
  double wait_s = 2.0;
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max" && i + 1 < argc) most = std::atoi(argv[++i]);
    else if (a == "--wait" && i + 1 < argc) wait_s = std::atof(argv[++i]);
    else if (a == "--help") {
      std::printf("usage: p2p-depth [--max K] [--wait SECONDS] [SIZE ...]\n");
      return 0;
    } else sizes.push_back(std::strtoull(a.c_str(), nullptr, 0));
  }
  if (sizes.empty()) sizes = {1024, 64 << 10, 1 << 20, 4 << 20};
  if (most < 1) most = 1;
  auto* sh = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) return 1;
  new (sh) Shared{};
  pid_t pid[2];
  for (int r = 0; r < 2; ++r) {
    pid[r] = fork();
    if (pid[r] == 0) _exit(rank_main(sh, r, sizes, most, wait_s));
  }
  int status = 0;
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) status = 1;
  }
  return status;
}
