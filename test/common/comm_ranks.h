// The launcher of a GPU test whose ranks are processes with one communicator each: rank r runs on
// device r % (devices), with a non-blocking stream and a communicator of all the ranks, made before
// and destroyed after the test's body. A rank that finds no CUDA device reports itself skipped.
//
//   rank_results::Totals t = comm_ranks::run(n, 600, [&](const comm_ranks::Rank& R, int* passed) {
//     ...; return failed_checks;
//   });
//   return rank_results::finish(t);
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <functional>

#include "test/common/cuda_ok.h"
#include "test/common/rank_results.h"
#include "test/common/ranks.h"

namespace comm_ranks {

struct Rank {
  int rank = 0;
  int nranks = 0;
  int device = 0;
  int devices = 0;  // CUDA devices this process sees
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

// The body returns the rank's failed checks and adds its passed ones to *passed.
using Body = std::function<int(const Rank&, int* passed)>;

// Runs the ranks to their end (or until the limit, past which they are killed) and collects their
// records. The unique id is made here, before any rank exists: only ranks touch CUDA, since a
// process that initialised CUDA cannot hand it to the children it forks.
inline rank_results::Totals run(int nranks, int limit_seconds, const Body& body) {
  rank_results::Totals failed_to_start;
  failed_to_start.failed = 1;
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::printf("FAIL ncclGetUniqueId\n");
    return failed_to_start;
  }
  rank_results::Pipe results;
  if (!results.ok()) {
    std::printf("FAIL no pipe for the ranks' results\n");
    return failed_to_start;
  }
  ranks::Group group(nranks, [&](int r) {
    Rank R;
    if (cudaGetDeviceCount(&R.devices) != cudaSuccess || R.devices == 0) {
      results.report_skipped();
      return 0;
    }
    R.rank = r;
    R.nranks = nranks;
    R.device = r % R.devices;
    CUDA_OK(cudaSetDevice(R.device));
    CUDA_OK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
    if (ncclCommInitRank(&R.comm, nranks, id, r) != ncclSuccess) {
      std::printf("FAIL init rank %d\n", r);
      return 2;
    }
    int passed = 0;
    int failed = body(R, &passed);
    if (ncclCommDestroy(R.comm) != ncclSuccess) {
      std::printf("FAIL rank %d: ncclCommDestroy\n", r);
      ++failed;
    }
    CUDA_OK(cudaStreamDestroy(R.stream));
    results.report(passed, failed);
    return failed ? 1 : 0;
  });
  group.wait(ranks::Clock::now() + ranks::seconds(limit_seconds));
  return results.collect(nranks, group);
}

}  // namespace comm_ranks
