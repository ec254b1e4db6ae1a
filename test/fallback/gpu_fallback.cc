// The hand-over to the real NCCL on a GPU, with the NCCL this machine has (PURLIN_NCCL_LIBRARY, or
// where Purlin looks by itself).
//
//   fallback_gpu --ranks 1            PURLIN_FALLBACK=all: every collective, the V collectives and a
//                                      Send/Recv to itself through the real NCCL, eager and
//                                      graph-captured, for several types and operators
//   fallback_gpu --ranks N --hosts 2  ranks as processes pretending to live on two hosts
//                                      (PURLIN_HOST_ID): the hierarchical AllReduce and Broadcast,
//                                      collectives forwarded whole, Send/Recv across and within hosts
//
// Ranks use GPU rank % (GPU count). Exits 77 (skipped) with the reason when no GPU is usable, no real
// NCCL is found, or ranks would share a GPU without NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL before 2.30
// refuses that, "Duplicate GPU detected"). Inputs are small integers, so every order of reduction
// gives the same bits and the results are checked exactly.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <purlin/purlin.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "reference.h"
#include "unique_id.h"
#include "test/common/cuda_ok.h"
#include "test/common/loopback.h"
#include "test/common/ranks.h"

namespace {

constexpr int kSkip = 77;

struct Rank {
  int rank = 0;
  int n = 1;
  std::vector<int> host_of;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int failures = 0;
  int passed = 0;
};

void fail(Rank& rk, const std::string& what) {
  if (rk.failures++ < 20) std::fprintf(stderr, "FAIL [rank %d/%d] %s\n", rk.rank, rk.n, what.c_str());
}

bool ok(Rank& rk, ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return true;
  fail(rk, what + " returned " + ncclGetErrorString(r) + ": " + ncclGetLastError(rk.comm));
  return false;
}

// A small integer as element type T (exact in every type).
template <class T>
typename T::Storage small(int v) {
  return T::store(static_cast<typename T::Acc>(v));
}

// Device buffers of `elems` elements of T, filled from a host vector, read back into one.
template <class T>
struct DevBuf {
  using S = typename T::Storage;
  S* ptr = nullptr;
  std::size_t elems = 0;
  explicit DevBuf(std::size_t n) : elems(n) {
    CUDA_OK(cudaMalloc(&ptr, std::max<std::size_t>(n, 1) * sizeof(S)));
    CUDA_OK(cudaMemset(ptr, 0xA5, std::max<std::size_t>(n, 1) * sizeof(S)));
  }
  ~DevBuf() { cudaFree(ptr); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  // cudaMemcpy from pageable memory may return before the copy lands, and the ranks' streams do
  // not wait for the legacy stream.
  void put(const std::vector<S>& v) {
    CUDA_OK(cudaMemcpy(ptr, v.data(), v.size() * sizeof(S), cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  std::vector<S> get(std::size_t n) const {
    std::vector<S> v(n);
    CUDA_OK(cudaMemcpy(v.data(), ptr, n * sizeof(S), cudaMemcpyDeviceToHost));
    return v;
  }
};

template <class T>
void expect_equal(Rank& rk, const std::vector<typename T::Storage>& got, const std::vector<typename T::Storage>& want,
                  const std::string& label) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(want[i])) != 0) {
      fail(rk, label + ": element " + std::to_string(i) + " is " + e2e::describe<T>(got[i]) + ", expected " +
                   e2e::describe<T>(want[i]));
      return;
    }
  ++rk.passed;
}

// NCCL 2.28.3 and 2.28.9 on one rank, ncclAvg or PreMulSum: with a count past a multiple of 2^20
// elements (1048579 here), the elements past the last whole 2^20 block keep the output's previous
// bytes; NCCL called directly, without Purlin, does the same. True when that is the only
// difference: everything before the block boundary right, everything after still the 0xA5 poison.
template <class T>
bool unwritten_tail(const std::vector<typename T::Storage>& got, const std::vector<typename T::Storage>& want) {
  using S = typename T::Storage;
  const std::size_t block = std::size_t{1} << 20;
  const std::size_t edge = want.size() / block * block;
  if (edge == 0 || edge == want.size()) return false;
  if (std::memcmp(got.data(), want.data(), edge * sizeof(S)) != 0) return false;
  const auto* tail = reinterpret_cast<const unsigned char*>(got.data() + edge);
  for (std::size_t b = 0; b < (want.size() - edge) * sizeof(S); ++b)
    if (tail[b] != 0xA5) return false;
  return true;
}

// Rank r's input element i: a small integer, different per rank and per element.
int value(int r, std::size_t i) { return 1 + static_cast<int>((static_cast<std::size_t>(r) * 3 + i) % 4); }

// ---- One rank, everything forwarded ------------------------------------------------------------------

template <class T>
void one_rank_type(Rank& rk, ncclDataType_t dt, std::size_t count, bool graph) {
  using S = typename T::Storage;
  const std::string tag = std::string(e2e::type_name(dt)) + "/count=" + std::to_string(count) + (graph ? "/graph" : "");
  std::vector<S> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = small<T>(value(0, i));
  DevBuf<T> send(count), recv(count);
  send.put(in);
  S two = small<T>(2);
  S* two_dev = nullptr;
  CUDA_OK(cudaMalloc(&two_dev, sizeof(S)));
  CUDA_OK(cudaMemcpy(two_dev, &two, sizeof(S), cudaMemcpyHostToDevice));
  CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  std::vector<S> doubled(count);
  for (std::size_t i = 0; i < count; ++i) doubled[i] = small<T>(2 * value(0, i));

  struct Call {
    std::string name;
    std::function<ncclResult_t()> issue;
    const std::vector<S>* want;
    bool may_decline = false;  // the real NCCL may reject it as an invalid argument
    bool tail_defect = false;  // see unwritten_tail below
  };
  // NCCL 2.28 rejects ncclAvg and PreMulSum on fp8 types (ncclInvalidArgument); a rejection leaves
  // the communicator usable, and the next call must still work.
  const bool fp8 = dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
  ncclRedOp_t pre_host = ncclSum, pre_dev = ncclSum;
  if (!ok(rk, ncclRedOpCreatePreMulSum(&pre_host, &two, dt, ncclScalarHostImmediate, rk.comm), "PreMulSum(host)") ||
      !ok(rk, ncclRedOpCreatePreMulSum(&pre_dev, two_dev, dt, ncclScalarDevice, rk.comm), "PreMulSum(device)"))
    return;
  const std::size_t halves[2] = {count / 2, count - count / 2};
  const std::size_t at[2] = {0, count / 2};
  std::vector<Call> calls;
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg})
    calls.push_back({"AllReduce/op=" + std::to_string(op),
                     [&, op] { return ncclAllReduce(send.ptr, recv.ptr, count, dt, op, rk.comm, rk.stream); }, &in,
                     fp8 && op == ncclAvg, op == ncclAvg});
  calls.push_back({"AllReduce/premulsum-host",
                   [&] { return ncclAllReduce(send.ptr, recv.ptr, count, dt, pre_host, rk.comm, rk.stream); }, &doubled,
                   fp8, true});
  calls.push_back({"AllReduce/premulsum-device",
                   [&] { return ncclAllReduce(send.ptr, recv.ptr, count, dt, pre_dev, rk.comm, rk.stream); }, &doubled,
                   fp8, true});
  calls.push_back({"Reduce", [&] { return ncclReduce(send.ptr, recv.ptr, count, dt, ncclSum, 0, rk.comm, rk.stream); }, &in});
  calls.push_back({"ReduceScatter", [&] { return ncclReduceScatter(send.ptr, recv.ptr, count, dt, ncclMax, rk.comm, rk.stream); }, &in});
  calls.push_back({"Broadcast", [&] { return ncclBroadcast(send.ptr, recv.ptr, count, dt, 0, rk.comm, rk.stream); }, &in});
  calls.push_back({"AllGather", [&] { return ncclAllGather(send.ptr, recv.ptr, count, dt, rk.comm, rk.stream); }, &in});
  calls.push_back({"AlltoAll", [&] { return ncclAlltoAll(send.ptr, recv.ptr, count, dt, rk.comm, rk.stream); }, &in});
  calls.push_back({"Gather", [&] { return ncclGather(send.ptr, recv.ptr, count, dt, 0, rk.comm, rk.stream); }, &in});
  calls.push_back({"Scatter", [&] { return ncclScatter(send.ptr, recv.ptr, count, dt, 0, rk.comm, rk.stream); }, &in});
  calls.push_back({"SendRecv/self", [&] {
                     ncclGroupStart();
                     ncclResult_t a = ncclSend(send.ptr, count, dt, 0, rk.comm, rk.stream);
                     ncclResult_t b = ncclRecv(recv.ptr, count, dt, 0, rk.comm, rk.stream);
                     ncclResult_t c = ncclGroupEnd();
                     return a != ncclSuccess ? a : b != ncclSuccess ? b : c;
                   }, &in});
  const std::size_t one = count;
  const std::size_t zero = 0;
  calls.push_back({"AllGatherV", [&] {
                     return ncclPurlinAllGatherV(send.ptr, count, recv.ptr, &one, &zero, dt, rk.comm, rk.stream);
                   }, &in});
  calls.push_back({"ReduceScatterV", [&] {
                     return ncclPurlinReduceScatterV(send.ptr, &one, &zero, recv.ptr, dt, ncclSum, rk.comm, rk.stream);
                   }, &in});
  calls.push_back({"AlltoAllV", [&] {
                     return ncclPurlinAlltoAllV(send.ptr, &one, &zero, recv.ptr, &one, &zero, dt, rk.comm, rk.stream);
                   }, &in});
  calls.push_back({"Grouped/two-halves", [&] {
                     ncclGroupStart();
                     ncclResult_t a = ncclAllReduce(send.ptr + at[0], recv.ptr + at[0], halves[0], dt, ncclSum, rk.comm, rk.stream);
                     ncclResult_t b = ncclAllReduce(send.ptr + at[1], recv.ptr + at[1], halves[1], dt, ncclMax, rk.comm, rk.stream);
                     ncclResult_t c = ncclGroupEnd();
                     return a != ncclSuccess ? a : b != ncclSuccess ? b : c;
                   }, &in});
  for (const Call& c : calls) {
    CUDA_OK(cudaMemset(recv.ptr, 0xA5, count * sizeof(S)));
    CUDA_OK(cudaStreamSynchronize(rk.stream));
    if (graph) {
      cudaGraph_t g = nullptr;
      cudaGraphExec_t exec = nullptr;
      CUDA_OK(cudaStreamBeginCapture(rk.stream, cudaStreamCaptureModeRelaxed));
      const ncclResult_t r = c.issue();
      CUDA_OK(cudaStreamEndCapture(rk.stream, &g));
      if (c.may_decline && r == ncclInvalidArgument) {
        std::printf("declined by the real NCCL (as documented for fp8 avg): %s %s (captured)\n", tag.c_str(),
                    c.name.c_str());
        cudaGraphDestroy(g);
        continue;
      }
      if (!ok(rk, r, tag + " " + c.name + " (captured)")) {
        cudaGraphDestroy(g);
        continue;
      }
      CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
      CUDA_OK(cudaGraphLaunch(exec, rk.stream));
      CUDA_OK(cudaGraphLaunch(exec, rk.stream));
      CUDA_OK(cudaStreamSynchronize(rk.stream));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(g);
    } else if (const ncclResult_t r = c.issue(); c.may_decline && r == ncclInvalidArgument) {
      std::printf("declined by the real NCCL (as documented for fp8 avg): %s %s\n", tag.c_str(), c.name.c_str());
      continue;
    } else if (!ok(rk, r, tag + " " + c.name)) {
      continue;
    }
    CUDA_OK(cudaStreamSynchronize(rk.stream));
    const std::vector<S> got = recv.get(count);
    if (c.tail_defect && unwritten_tail<T>(got, *c.want)) {
      std::printf("NCCL defect reproduced: %s %s left the elements past the last whole 2^20 block unwritten "
                  "(one rank, avg or PreMulSum; NCCL 2.28 does this without Purlin too)\n", tag.c_str(), c.name.c_str());
      continue;
    }
    expect_equal<T>(rk, got, *c.want, tag + " " + c.name);
  }
  ncclRedOpDestroy(pre_host, rk.comm);
  ncclRedOpDestroy(pre_dev, rk.comm);
  cudaFree(two_dev);
}

// The real NCCL, as this process mapped it (any libnccl other than the one this binary linked).
std::string real_nccl_mapped() {
  Dl_info info{};
  struct stat ours {};
  if (::dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || ::stat(info.dli_fname, &ours) != 0) return {};
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos || line.find("libnccl", slash) == std::string::npos) continue;
    const std::string path = line.substr(slash);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_ino != ours.st_ino || st.st_dev != ours.st_dev)) return path;
  }
  return {};
}

void one_rank(Rank& rk) {
  const std::string real = real_nccl_mapped();
  if (real.empty()) fail(rk, "PURLIN_FALLBACK=all, yet no NCCL other than Purlin is mapped in this process");
  else std::printf("forwarding to the NCCL at %s\n", real.c_str());
  for (bool graph : {false, true})
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{(1 << 20) + 3}}) {
      one_rank_type<e2e::Float32Type>(rk, ncclFloat32, count, graph);
      one_rank_type<e2e::Bf16>(rk, ncclBfloat16, count, graph);
      one_rank_type<e2e::Half>(rk, ncclFloat16, count, graph);
      one_rank_type<e2e::Int32>(rk, ncclInt32, count, graph);
      one_rank_type<e2e::Float64Type>(rk, ncclFloat64, count, graph);
      one_rank_type<e2e::Uint8>(rk, ncclUint8, count, graph);
      one_rank_type<e2e::E4m3>(rk, ncclFloat8e4m3, count, graph);
    }
}

// ---- Several ranks on two pretended hosts ----------------------------------------------------------

template <class T>
void hosts_type(Rank& rk, ncclDataType_t dt, std::size_t count) {
  using S = typename T::Storage;
  const int n = rk.n, me = rk.rank;
  const std::string tag = std::string(e2e::type_name(dt)) + "/count=" + std::to_string(count);
  std::vector<S> mine(count), sum(count);
  for (std::size_t i = 0; i < count; ++i) {
    mine[i] = small<T>(value(me, i));
    int s = 0;
    for (int r = 0; r < n; ++r) s += value(r, i);
    sum[i] = small<T>(s);
  }
  DevBuf<T> send(count * n), recv(count * n);
  send.put(mine);
  auto sync = [&] { CUDA_OK(cudaStreamSynchronize(rk.stream)); };
  // AllReduce, out of place and in place (hierarchical).
  if (ok(rk, ncclAllReduce(send.ptr, recv.ptr, count, dt, ncclSum, rk.comm, rk.stream), tag + " AllReduce")) {
    sync();
    expect_equal<T>(rk, recv.get(count), sum, tag + " AllReduce");
  }
  recv.put(mine);
  if (ok(rk, ncclAllReduce(recv.ptr, recv.ptr, count, dt, ncclSum, rk.comm, rk.stream), tag + " AllReduce in place")) {
    sync();
    expect_equal<T>(rk, recv.get(count), sum, tag + " AllReduce in place");
  }
  // Broadcast from the first and the last rank (hierarchical).
  for (int root : {0, n - 1}) {
    std::vector<S> theirs(count);
    for (std::size_t i = 0; i < count; ++i) theirs[i] = small<T>(value(root, i));
    CUDA_OK(cudaMemset(recv.ptr, 0xA5, count * sizeof(S)));
    if (ok(rk, ncclBroadcast(send.ptr, recv.ptr, count, dt, root, rk.comm, rk.stream), tag + " Broadcast")) {
      sync();
      expect_equal<T>(rk, recv.get(count), theirs, tag + " Broadcast root=" + std::to_string(root));
    }
  }
  // AllGather (NCCL whole).
  std::vector<S> gathered(count * n);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) gathered[r * count + i] = small<T>(value(r, i));
  if (ok(rk, ncclAllGather(send.ptr, recv.ptr, count, dt, rk.comm, rk.stream), tag + " AllGather")) {
    sync();
    expect_equal<T>(rk, recv.get(count * n), gathered, tag + " AllGather");
  }
  // Send/Recv ring: the neighbours sit on this host or the other.
  std::vector<S> from_left(count);
  for (std::size_t i = 0; i < count; ++i) from_left[i] = small<T>(value((me + n - 1) % n, i));
  ncclGroupStart();
  ncclResult_t a = ncclSend(send.ptr, count, dt, (me + 1) % n, rk.comm, rk.stream);
  ncclResult_t b = ncclRecv(recv.ptr, count, dt, (me + n - 1) % n, rk.comm, rk.stream);
  ncclResult_t c = ncclGroupEnd();
  if (ok(rk, a != ncclSuccess ? a : b != ncclSuccess ? b : c, tag + " Send/Recv ring")) {
    sync();
    expect_equal<T>(rk, recv.get(count), from_left, tag + " Send/Recv ring");
  }
}

void two_hosts(Rank& rk) {
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{(1 << 20) + 3}}) {
    hosts_type<e2e::Float32Type>(rk, ncclFloat32, count);
    hosts_type<e2e::Bf16>(rk, ncclBfloat16, count);
    hosts_type<e2e::Int32>(rk, ncclInt32, count);
  }
}

// ---- Processes ---------------------------------------------------------------------------------------

int child(int rank, int n, int gpus, const ncclUniqueId& id) {
  Rank rk;
  rk.rank = rank;
  rk.n = n;
  CUDA_OK(cudaSetDevice(rank % gpus));
  CUDA_OK(cudaStreamCreateWithFlags(&rk.stream, cudaStreamNonBlocking));
  const ncclResult_t r = ncclCommInitRank(&rk.comm, n, id, rank);
  if (r != ncclSuccess) {
    const std::string why = ncclGetLastError(nullptr);
    const bool absent = why.find("no NCCL library found") != std::string::npos ||
                        why.find("is not a usable NCCL") != std::string::npos;
    const bool shared = why.find("Duplicate GPU") != std::string::npos;
    if (absent || shared) {
      std::printf("SKIP: %s\n", why.c_str());
      return kSkip;
    }
    std::fprintf(stderr, "FAIL [rank %d/%d] ncclCommInitRank: %s\n", rank, n, why.c_str());
    return 1;
  }
  if (n == 1) one_rank(rk);
  else two_hosts(rk);
  if (ncclCommDestroy(rk.comm) != ncclSuccess) fail(rk, "ncclCommDestroy");
  cudaStreamDestroy(rk.stream);
  std::printf("[rank %d/%d] %d passed, %d failed\n", rank, n, rk.passed, rk.failures);
  return rk.failures == 0 && rk.passed > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The caller's NCCL_MULTI_RANK_GPU_ENABLE, before loopback::use() sets it: NCCL decides with it.
  const char* multi_env = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  const std::string multi = multi_env ? multi_env : "";
  loopback::use();
  int nranks = 1, hosts = 1, child_rank = -1;
  std::string ids;
  // Four flags, each with a value, read by hand: not worth a parser library as a dependency of
  // the test binaries.
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ranks") nranks = std::atoi(argv[i + 1]);
    else if (a == "--hosts") hosts = std::atoi(argv[i + 1]);
    else if (a == "--child-rank") child_rank = std::atoi(argv[i + 1]);
    else if (a == "--child-id") ids = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--ranks N] [--hosts H]\n", argv[0]);
      return 2;
    }
  }
  if (nranks < 1 || hosts < 1 || hosts > nranks || (nranks > 1 && hosts < 2)) {
    std::fprintf(stderr, "usage: %s --ranks 1 | --ranks N --hosts H (2 <= H <= N)\n", argv[0]);
    return 2;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("SKIP: no CUDA device is usable here\n");
    return kSkip;
  }
  if (child_rank >= 0) return child(child_rank, nranks, gpus, id_of(ids));

  if (nranks > gpus && multi != "1") {
    std::printf("SKIP: %d ranks on %d GPU(s): NCCL before 2.30 refuses several ranks on one GPU (\"Duplicate GPU "
                "detected\"); run with NCCL 2.30 or later and NCCL_MULTI_RANK_GPU_ENABLE=1, or on %d GPUs\n",
                nranks, gpus, nranks);
    return kSkip;
  }
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::fprintf(stderr, "FAIL ncclGetUniqueId\n");
    return 1;
  }
  const std::string hex = hex_of(id);
  const auto outcomes = ranks::run(nranks, [&](int r) {
    if (nranks == 1) ::setenv("PURLIN_FALLBACK", "all", 1);
    const std::string host = "pretend-host-" + std::to_string(r * hosts / nranks);
    if (nranks > 1) ::setenv("PURLIN_HOST_ID", host.c_str(), 1);
    const std::string rank = std::to_string(r), n = std::to_string(nranks), h = std::to_string(hosts);
    const char* args[] = {argv[0], "--ranks", n.c_str(), "--hosts", h.c_str(), "--child-rank", rank.c_str(),
                          "--child-id", hex.c_str(), nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(args));
    std::perror("execv");
    return 3;
  });
  int failed = 0, skipped = 0;
  for (const ranks::Outcome& o : outcomes) {
    if (o.exit_code() == kSkip) ++skipped;
    else if (!o.ok()) ++failed;
  }
  if (failed) {
    std::printf("%d of %d ranks failed\n", failed, nranks);
    return 1;
  }
  if (skipped) return kSkip;
  std::printf("%d ranks on %d pretended host(s): all passed\n", nranks, hosts);
  return 0;
}
