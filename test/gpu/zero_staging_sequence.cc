// Zero-staged collectives back to back on one stream, each reading the previous one's output, ranks
// as processes on the GPU(s).
//
// Each rank captures seven calls into one CUDA graph (or, with --eager, runs them outside any
// graph): AllReduce a -> b, ReduceScatter b -> c, AllGather c -> d, AllReduce d in place, Broadcast
// d -> f from rank 1 % n, Reduce f -> g to rank 0, all uint32 sums of just over 2 MiB (zero-staged
// with any number of ranks), then an AllReduce of f's first 64 KiB into h (the latency exchange,
// which launches early behind the zero-staging kernel), and replays the graph three times with new
// inputs. Every buffer is poisoned before each replay and checked after it against sums worked out
// here (exact: uint32 sums wrap alike). A call that read its input before the previous call had
// finished writing it, or wrote its output while a peer still read the previous contents, shows up
// as wrong elements.
// The ranks log their COLL lines to files, where each of the six large calls must say it ran in
// place.
//
// Captured zero-staging launches behind one another are joined by programmatic edges (the next
// launches while the previous one's CTAs leave), and so is the exchange's launch behind the last:
// where the device has programmatic dependent launch (compute capability 9.0 and later) and
// PURLIN_PDL=0 is not set, the graph holds exactly 6 of them, or 1 with PURLIN_ZERO_STAGING_PDL=0.
//
// Usage: test_zero_staging_sequence [--ranks N] [--eager] [--replays R]
// Prints "N passed, N failed" (or a skip line without a GPU); exits non-zero on failure.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  int replays = 3;
  bool eager = false;
};

constexpr int kLarge = 6;                       // the zero-staged calls
constexpr std::size_t kSmall = (64u << 10) / 4;  // the exchange's AllReduce, in elements

// Element i of rank r's input in replay `rep`.
std::uint32_t value(int r, int rep, std::size_t i) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 2246822519u ^ static_cast<std::uint32_t>(r * 7919 + rep * 104729 + 17);
  x ^= x >> 15;
  x *= 2654435761u;
  return x ^ (x >> 13);
}

struct Buffers {
  std::uint32_t *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr, *f = nullptr, *g = nullptr, *h = nullptr;
};

ncclResult_t sequence(const Buffers& m, std::size_t part, int n, ncclComm_t comm, cudaStream_t stream) {
  const std::size_t whole = part * static_cast<std::size_t>(n);
  const ncclResult_t steps[] = {
      ncclAllReduce(m.a, m.b, whole, ncclUint32, ncclSum, comm, stream),
      ncclReduceScatter(m.b, m.c, part, ncclUint32, ncclSum, comm, stream),
      ncclAllGather(m.c, m.d, part, ncclUint32, comm, stream),
      ncclAllReduce(m.d, m.d, whole, ncclUint32, ncclSum, comm, stream),
      ncclBroadcast(m.d, m.f, whole, ncclUint32, 1 % n, comm, stream),
      ncclReduce(m.f, m.g, whole, ncclUint32, ncclSum, 0, comm, stream),
      ncclAllReduce(m.f, m.h, kSmall, ncclUint32, ncclSum, comm, stream),
  };
  for (ncclResult_t e : steps)
    if (e != ncclSuccess) return e;
  return ncclSuccess;
}

bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") == 0;
}

// The programmatic edges the captured sequence must hold: the exchange's behind the last
// zero-staging launch, and one between each two zero-staging launches unless
// PURLIN_ZERO_STAGING_PDL=0; none without programmatic dependent launch.
std::size_t edges_expected(int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return 0;
  if (major < 9 || env_off("PURLIN_PDL")) return 0;
  return env_off("PURLIN_ZERO_STAGING_PDL") ? 1 : kLarge;
}

std::size_t programmatic_edges(cudaGraph_t graph) {
  std::size_t count = 0;
  CUDA_OK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  CUDA_OK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count));
  std::size_t programmatic = 0;
  for (std::size_t k = 0; k < count; ++k)
    if (data[k].type == cudaGraphDependencyTypeProgrammatic) ++programmatic;
  return programmatic;
}

// Compares `got` with `want` element by element; prints the first difference.
bool same(const char* what, int me, int rep, const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) {
      std::printf("FAIL rank %d replay %d: %s element %zu of %zu is %08x, want %08x\n", me, rep, what, i, want.size(),
                  got[i], want[i]);
      return false;
    }
  return true;
}

int run_rank(int me, const Options& o, int device, ncclComm_t comm, cudaStream_t stream, int* passed) {
  const int n = o.ranks;
  const std::size_t un = static_cast<std::size_t>(n);
  // Each rank's block of just over 2 MiB / n, so that every call's larger side is past the
  // zero-staging bound (1 MiB, 2 MiB with 2 ranks).
  const std::size_t part = (2u << 20) / 4 / un + 5;
  const std::size_t whole = part * un;
  const std::size_t bytes = whole * sizeof(std::uint32_t);
  Buffers m;
  for (std::uint32_t** p : {&m.a, &m.b, &m.c, &m.d, &m.f, &m.g, &m.h}) CUDA_OK(cudaMalloc(reinterpret_cast<void**>(p), bytes));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int failed = 0;
  if (!o.eager) {
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const ncclResult_t e = sequence(m, part, n, comm, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    if (e != ncclSuccess) {
      std::printf("FAIL rank %d: capture: %s\n", me, ncclGetErrorString(e));
      return 1;
    }
    const std::size_t edges = programmatic_edges(graph), want_edges = edges_expected(device);
    if (edges != want_edges) {
      std::printf("FAIL rank %d: the captured sequence holds %zu programmatic edges, want %zu\n", me, edges, want_edges);
      failed = 1;
    } else {
      ++*passed;
    }
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  }

  std::vector<std::uint32_t> in(whole), got(whole), sum(whole), want(whole);
  for (int rep = 0; rep < o.replays && !failed; ++rep) {
    for (std::size_t i = 0; i < whole; ++i) {
      in[i] = value(me, rep, i);
      std::uint32_t s = 0;
      for (int r = 0; r < n; ++r) s += value(r, rep, i);
      sum[i] = s;
    }
    for (std::uint32_t* p : {m.b, m.c, m.d, m.f, m.g, m.h}) CUDA_OK(cudaMemsetAsync(p, 0xA5, bytes, stream));
    CUDA_OK(cudaMemcpyAsync(m.a, in.data(), bytes, cudaMemcpyHostToDevice, stream));
    if (o.eager) {
      const ncclResult_t e = sequence(m, part, n, comm, stream);
      if (e != ncclSuccess) {
        std::printf("FAIL rank %d replay %d: %s\n", me, rep, ncclGetErrorString(e));
        return 1;
      }
    } else {
      CUDA_OK(cudaGraphLaunch(exec, stream));
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto fetch = [&](const std::uint32_t* p, std::size_t elems) {
      got.assign(elems, 0);
      CUDA_OK(cudaMemcpy(got.data(), p, elems * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
    };
    const std::uint32_t un32 = static_cast<std::uint32_t>(n);
    bool ok = true;
    // b: the sum of every rank's a.
    fetch(m.b, whole);
    ok = ok && same("AllReduce", me, rep, got, sum);
    // c: this rank's block of n b's.
    want.assign(part, 0);
    for (std::size_t i = 0; i < part; ++i) want[i] = un32 * sum[static_cast<std::size_t>(me) * part + i];
    fetch(m.c, part);
    ok = ok && same("ReduceScatter", me, rep, got, want);
    // d after the AllGather is n b everywhere, after the in-place AllReduce n * n b; f is d.
    want.assign(whole, 0);
    for (std::size_t i = 0; i < whole; ++i) want[i] = un32 * un32 * sum[i];
    fetch(m.d, whole);
    ok = ok && same("AllGather then AllReduce in place", me, rep, got, want);
    fetch(m.f, whole);
    ok = ok && same("Broadcast", me, rep, got, want);
    // h: n times f's first kSmall elements.
    std::vector<std::uint32_t> small(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(kSmall));
    for (std::uint32_t& x : small) x *= un32;
    fetch(m.h, kSmall);
    ok = ok && same("AllReduce (exchange)", me, rep, got, small);
    // g at rank 0: n f.
    if (me == 0) {
      for (std::size_t i = 0; i < whole; ++i) want[i] *= un32;
      fetch(m.g, whole);
      ok = ok && same("Reduce", me, rep, got, want);
    }
    if (ok) ++*passed;
    else failed = 1;
  }
  if (exec) CUDA_OK(cudaGraphExecDestroy(exec));
  if (graph) CUDA_OK(cudaGraphDestroy(graph));
  for (std::uint32_t* p : {m.a, m.b, m.c, m.d, m.f, m.g, m.h}) CUDA_OK(cudaFree(p));
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  loopback::use();
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) o.ranks = std::atoi(argv[++i]);
    else if (a == "--replays" && i + 1 < argc) o.replays = std::atoi(argv[++i]);
    else if (a == "--eager") o.eager = true;
    else {
      std::fprintf(stderr, "usage: test_zero_staging_sequence [--ranks N] [--eager] [--replays R]\n");
      return 2;
    }
  }
  if (o.ranks < 2 || o.replays < 1) {
    std::fprintf(stderr, "test_zero_staging_sequence: --ranks 2 or more, --replays 1 or more\n");
    return 2;
  }
  // Where the ranks' COLL lines go (one file per process).
  const coll_log::Files logs("zs-sequence");
  rank_results::Totals totals = comm_ranks::run(o.ranks, 600, [&](const comm_ranks::Rank& R, int* passed) {
    return run_rank(R.rank, o, R.device, R.comm, R.stream, passed);
  });
  // Every large call in place: captured once, or run outside a graph in every replay.
  int in_place = 0, staged = 0;
  for (const std::string& line : logs.lines("zero-staging: rank")) {
    if (line.find(" in place") != std::string::npos) ++in_place;
    else if ((line.find("staged") != std::string::npos || line.find("could not") != std::string::npos) && staged++ < 3)
      std::printf("FAIL: %s\n", line.c_str());
  }
  if (totals.skipped) return rank_results::finish(totals);
  const int want_in_place = kLarge * o.ranks * (o.eager ? o.replays : 1);
  if (staged || in_place != want_in_place) {
    std::printf("FAIL: %d COLL lines of calls run in place, want %d; %d of others\n", in_place, want_in_place, staged);
    ++totals.failed;
  } else {
    ++totals.passed;
  }
  return rank_results::finish(totals);
}
