// Zero-staging's mappings across capture and destroy cycles, ranks as processes on the GPU(s).
//
// Every cycle each rank allocates fresh buffers (cudaMalloc and ncclMemAlloc in turn, at an odd
// offset into the allocation), captures an AllReduce of int32 sums into a graph, replays it twice
// with new inputs, checks every element, then destroys the graph and frees the buffers, so the next
// cycle's buffers often lie at the same addresses in new allocations. With --eager the cycle runs
// the AllReduce twice outside any graph instead (the mappings of calls outside graphs are held for
// the last few allocations of each rank and given back as later ones come). What must hold: every
// result is exact (a stale mapping of a freed allocation would read old data or none), and the
// device's free memory after the last cycle is within a margin of what it was after the first few
// (the peers' mappings of every freed buffer were given back, not kept). With --eager, also that
// every call ran in place: the ranks log the library's COLL lines to files, where no line may say
// that a call was staged for want of a mapping (a fresh cudaMalloc allocation where a freed one's
// mapping is still open is the case CUDA IPC refuses).
//
// With --sendrecv the call is a Send/Recv round instead (messages zero-staged one by one, the end
// that comes second moving each): each rank sends the first half of its input to the next rank and,
// with three ranks or more, the second half to the previous one, and receives the halves of its
// output from them. Messages between processes go in place only from ncclMemAlloc buffers (cuMem);
// those of the cudaMalloc cycles are staged.
//
// Usage: test_zero_staging_cycles [--ranks N] [--cycles C] [--count ELEMS] [--eager] [--sendrecv]
// Prints "N passed, N failed" (or a skip line without a GPU); exits non-zero on failure.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "test/common/coll_log.h"
#include "test/common/comm_ranks.h"
#include "test/common/cuda_ok.h"
#include "test/common/loopback.h"
#include "test/common/rank_results.h"
#include "test/common/ranks.h"

namespace {

struct Options {
  int ranks = 2;
  int cycles = 1000;
  std::size_t count = (1u << 20) / 4 + 3;  // just over 1 MiB of int32: the zero-staging bound
  bool eager = false;
  bool sendrecv = false;
};

// The call of a cycle: AllReduce, or the Send/Recv round (send and recv hold 2 * count elements).
ncclResult_t call(const Options& o, int me, const std::int32_t* send, std::int32_t* recv, ncclComm_t comm,
                  cudaStream_t stream) {
  if (!o.sendrecv) return ncclAllReduce(send, recv, o.count, ncclInt32, ncclSum, comm, stream);
  const int next = (me + 1) % o.ranks, prev = (me + o.ranks - 1) % o.ranks;
  ncclGroupStart();
  ncclSend(send, o.count, ncclInt32, next, comm, stream);
  ncclRecv(recv, o.count, ncclInt32, prev, comm, stream);
  if (o.ranks >= 3) {
    ncclSend(send + o.count, o.count, ncclInt32, prev, comm, stream);
    ncclRecv(recv + o.count, o.count, ncclInt32, next, comm, stream);
  }
  return ncclGroupEnd();
}

// Element i of rank r's input in replay `rep` of cycle `cycle`.
std::int32_t value(int r, int cycle, int rep, std::size_t i) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ static_cast<std::uint32_t>(r * 40503 + cycle * 977 + rep * 31);
  x ^= x >> 13;
  return static_cast<std::int32_t>(x);
}

int run_rank(int me, const Options& o, ncclComm_t comm, cudaStream_t stream, int* passed) {
  const std::size_t elems = o.sendrecv ? 2 * o.count : o.count;
  const std::size_t bytes = elems * sizeof(std::int32_t);
  const std::size_t offset = 4 * 37;  // the buffer starts inside its allocation
  std::vector<std::int32_t> in(elems), got(elems);
  std::size_t free_early = 0, free_late = 0, total = 0;
  int failed = 0;
  for (int cycle = 0; cycle < o.cycles && !failed; ++cycle) {
    const bool cumem = cycle % 2 == 1;
    void* send_alloc = nullptr;
    void* recv_alloc = nullptr;
    if (cumem) {
      if (ncclMemAlloc(&send_alloc, bytes + offset) != ncclSuccess || ncclMemAlloc(&recv_alloc, bytes + offset) != ncclSuccess) {
        std::printf("FAIL rank %d cycle %d: ncclMemAlloc\n", me, cycle);
        return 1;
      }
    } else {
      CUDA_OK(cudaMalloc(&send_alloc, bytes + offset));
      CUDA_OK(cudaMalloc(&recv_alloc, bytes + offset));
    }
    auto* send = reinterpret_cast<std::int32_t*>(static_cast<char*>(send_alloc) + offset);
    auto* recv = reinterpret_cast<std::int32_t*>(static_cast<char*>(recv_alloc) + offset);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (!o.eager) {
      CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const ncclResult_t e = call(o, me, send, recv, comm, stream);
      CUDA_OK(cudaStreamEndCapture(stream, &graph));
      if (e != ncclSuccess) {
        std::printf("FAIL rank %d cycle %d: capture: %s\n", me, cycle, ncclGetErrorString(e));
        return 1;
      }
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    }
    for (int rep = 0; rep < 2 && !failed; ++rep) {
      for (std::size_t i = 0; i < elems; ++i) in[i] = value(me, cycle, rep, i);
      CUDA_OK(cudaMemsetAsync(recv, 0xA5, bytes, stream));
      CUDA_OK(cudaMemcpyAsync(send, in.data(), bytes, cudaMemcpyHostToDevice, stream));
      if (o.eager) {
        const ncclResult_t e = call(o, me, send, recv, comm, stream);
        if (e != ncclSuccess) {
          std::printf("FAIL rank %d cycle %d: %s\n", me, cycle, ncclGetErrorString(e));
          return 1;
        }
      } else {
        CUDA_OK(cudaGraphLaunch(exec, stream));
      }
      CUDA_OK(cudaMemcpyAsync(got.data(), recv, bytes, cudaMemcpyDeviceToHost, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      const int next = (me + 1) % o.ranks, prev = (me + o.ranks - 1) % o.ranks;
      const std::size_t checked = o.sendrecv && o.ranks < 3 ? o.count : elems;
      for (std::size_t i = 0; i < checked; ++i) {
        std::uint32_t want = 0;  // int32 sums wrap
        if (!o.sendrecv)
          for (int r = 0; r < o.ranks; ++r) want += static_cast<std::uint32_t>(value(r, cycle, rep, i));
        else if (i < o.count)
          want = static_cast<std::uint32_t>(value(prev, cycle, rep, i));  // prev's first half
        else
          want = static_cast<std::uint32_t>(value(next, cycle, rep, i));  // next's second half
        if (static_cast<std::uint32_t>(got[i]) != want) {
          std::printf("FAIL rank %d cycle %d (%s) replay %d: element %zu is %d, want %d\n", me, cycle,
                      cumem ? "ncclMemAlloc" : "cudaMalloc", rep, i, got[i], static_cast<std::int32_t>(want));
          failed = 1;
          break;
        }
      }
      if (!failed) ++*passed;
    }
    if (exec) CUDA_OK(cudaGraphExecDestroy(exec));
    if (graph) CUDA_OK(cudaGraphDestroy(graph));
    // Every rank is done with this cycle's buffers before any frees them (the graph's barriers
    // say as much; the synchronisation above makes it plain).
    if (cumem) {
      ncclMemFree(send_alloc);
      ncclMemFree(recv_alloc);
    } else {
      CUDA_OK(cudaFree(send_alloc));
      CUDA_OK(cudaFree(recv_alloc));
    }
    if (cycle == 3) CUDA_OK(cudaMemGetInfo(&free_early, &total));
  }
  if (failed) return 1;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemGetInfo(&free_late, &total));
  // Every rank's last few cycles may still be held by graphs whose destruction the library has not
  // processed yet (it gives mappings back at its next capture); a leak of every cycle's buffers
  // would be about cycles * 4 * bytes per rank.
  const std::size_t margin = 64 * bytes + (64u << 20);
  if (o.cycles > 8 && free_late + margin < free_early) {
    std::printf("FAIL rank %d: free device memory fell from %zu to %zu bytes over %d cycles\n", me, free_early,
                free_late, o.cycles);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  loopback::use();
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) o.ranks = std::atoi(argv[++i]);
    else if (a == "--cycles" && i + 1 < argc) o.cycles = std::atoi(argv[++i]);
    else if (a == "--count" && i + 1 < argc) o.count = static_cast<std::size_t>(std::atoll(argv[++i]));
    else if (a == "--eager") o.eager = true;
    else if (a == "--sendrecv") o.sendrecv = true;
    else {
      std::fprintf(stderr, "usage: test_zero_staging_cycles [--ranks N] [--cycles C] [--count ELEMS] [--eager] [--sendrecv]\n");
      return 2;
    }
  }
  // Where the ranks' COLL lines go with --eager (one file per process).
  std::optional<coll_log::Files> logs;
  if (o.eager) logs.emplace("zs-cycles");
  rank_results::Totals totals = comm_ranks::run(o.ranks, 1200, [&](const comm_ranks::Rank& R, int* passed) {
    return run_rank(R.rank, o, R.comm, R.stream, passed);
  });
  if (o.eager && !totals.skipped) {
    // Every eager call in place: mappings were made, and none was refused.
    int mapped = 0, staged = 0;
    for (const std::string& line : logs->lines("zero-staging:")) {
      if (line.find("more peer allocations") != std::string::npos || line.find("Send/Recv buffer") != std::string::npos) ++mapped;
      if (line.find("staged") != std::string::npos && staged++ < 3) std::printf("FAIL: %s\n", line.c_str());
    }
    if (staged || mapped == 0) {
      std::printf("FAIL: %d log lines of staged calls, %d of mappings made\n", staged, mapped);
      ++totals.failed;
    }
  }
  return rank_results::finish(totals);
}
