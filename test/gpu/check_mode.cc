// NCCL 2.30.7's checks of buffers on a GPU communicator: under NCCL_CHECK_MODE=DEBUG_LOCAL or
// DEBUG_GLOBAL (or NCCL_CHECK_POINTERS=1, read as NCCL reads an integer) every collective asks the
// driver about its buffers, whatever its count (a Send's or Recv's only when it has elements), and
// refuses memory no device can address with ncclInvalidArgument; ncclCommRegister asks too. Without
// it, an empty collective takes any pointer. ncclCommRegister with cuMem on refuses what the driver
// knows as no CUDA memory (ncclUnhandledCudaError), registers cudaMalloc memory of any size and
// cuMem memory only within its mappings, and leaves host memory unregistered (a NULL handle); with
// NCCL_LOCAL_REGISTER=0 it registers nothing, with cuMem off (PURLIN_CUMEM=0) anything. Windows take
// any flags. The modes are read when a communicator is made; each setting runs in a child of its own
// on a one-rank communicator, the library's environment being read once per process.
//
// Usage: test_check_mode
// Prints "N passed, N failed" (or a skip line without a GPU); exits non-zero on failure.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "test/common/loopback.h"
#include "test/common/rank_results.h"
#include "test/common/ranks.h"
#include "test/common/tally.h"

namespace {

constexpr std::size_t kCount = 4096;

using tally::check;

std::string code(ncclResult_t r) { return std::string(ncclGetErrorString(r)) + " (" + std::to_string(r) + ")"; }

bool last_error_has(const char* text) {
  const char* last = ncclGetLastError(nullptr);
  return last && std::strstr(last, text);
}

// What one child holds: a one-rank communicator on device 0, a stream, device buffers, pageable and
// pinned host memory.
struct Setup {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int* send = nullptr;
  int* recv = nullptr;
  int* pinned = nullptr;
  std::vector<int> host = std::vector<int>(kCount, 1);

  bool open() {
    const int device = 0;
    if (ncclCommInitAll(&comm, 1, &device) != ncclSuccess) return false;
    return cudaStreamCreate(&stream) == cudaSuccess && cudaMalloc(&send, kCount * sizeof(int)) == cudaSuccess &&
           cudaMalloc(&recv, kCount * sizeof(int)) == cudaSuccess &&
           cudaMallocHost(&pinned, kCount * sizeof(int)) == cudaSuccess;
  }
  ~Setup() {
    if (comm) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
    cudaFree(send);
    cudaFree(recv);
    cudaFreeHost(pinned);
  }
};

// An AllReduce of seeded values from `from` (device or pinned memory) into the device buffer, exact.
bool exact_all_reduce(Setup& s, int* from, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> values(kCount), back(kCount, -1);
  for (int& v : values) v = static_cast<int>(rng() % 2000001) - 1000000;
  if (cudaMemcpy(from, values.data(), kCount * sizeof(int), cudaMemcpyDefault) != cudaSuccess) return false;
  if (cudaMemset(s.recv, 0xA5, kCount * sizeof(int)) != cudaSuccess) return false;  // poisoned
  if (ncclAllReduce(from, s.recv, kCount, ncclInt32, ncclSum, s.comm, s.stream) != ncclSuccess) return false;
  if (cudaStreamSynchronize(s.stream) != cudaSuccess) return false;
  if (cudaMemcpy(back.data(), s.recv, kCount * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  return back == values;  // one rank: the sum is its own input
}

// Checks that hold in every mode that asks about buffers.
void asked(Setup& s, const std::string& mode) {
  ncclResult_t r = ncclAllReduce(s.host.data(), s.recv, 16, ncclInt32, ncclSum, s.comm, s.stream);
  check(r == ncclInvalidArgument && last_error_has("not a valid pointer"),
        mode + ": AllReduce from pageable host memory: " + code(r) + ", " + ncclGetLastError(nullptr));
  r = ncclAllReduce(nullptr, nullptr, 0, ncclInt32, ncclSum, s.comm, s.stream);
  check(r == ncclInvalidArgument, mode + ": an AllReduce of 0 elements on NULL buffers: " + code(r));
  r = ncclAllReduce(s.send, s.recv, 0, ncclInt32, ncclSum, s.comm, s.stream);
  check(r == ncclSuccess, mode + ": an AllReduce of 0 elements on device buffers: " + code(r));
  r = ncclSend(nullptr, 0, ncclInt32, 0, s.comm, s.stream);
  check(r == ncclSuccess, mode + ": a Send of 0 elements from NULL (not asked about): " + code(r));
  r = ncclRecv(s.host.data(), 16, ncclInt32, 0, s.comm, s.stream);
  check(r == ncclInvalidArgument, mode + ": a Recv into pageable host memory: " + code(r));
  void* handle = nullptr;
  r = ncclCommRegister(s.comm, s.host.data(), 64, &handle);
  check(r == ncclInvalidArgument && handle == nullptr, mode + ": ncclCommRegister of pageable host memory: " + code(r));
  check(exact_all_reduce(s, s.pinned, 11), mode + ": AllReduce from pinned host memory, exact");
  check(exact_all_reduce(s, s.send, 12), mode + ": AllReduce on device buffers after the refusals, exact");
}

// Without a check mode an empty collective takes any pointer.
void not_asked(Setup& s, const std::string& mode) {
  const ncclResult_t r = ncclAllReduce(nullptr, nullptr, 0, ncclInt32, ncclSum, s.comm, s.stream);
  check(r == ncclSuccess, mode + ": an AllReduce of 0 elements on NULL buffers: " + code(r));
  check(exact_all_reduce(s, s.send, 13), mode + ": AllReduce on device buffers, exact");
}

// Whether the driver counts `p` as legacy CUDA IPC memory (cudaMalloc), not cuMem.
bool legacy_ipc(const void* p) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return true;
  int legacy = 1;
  reinterpret_cast<decltype(&cuPointerGetAttribute)>(fn)(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                                         reinterpret_cast<CUdeviceptr>(p));
  return legacy != 0;
}

bool registers(Setup& s, void* p, std::size_t bytes, const std::string& what) {
  void* handle = nullptr;
  const ncclResult_t r = ncclCommRegister(s.comm, p, bytes, &handle);
  check(r == ncclSuccess && handle != nullptr, "ncclCommRegister of " + what + ": " + code(r));
  if (handle) check(ncclCommDeregister(s.comm, handle) == ncclSuccess, "ncclCommDeregister of " + what);
  return r == ncclSuccess;
}

void refused(Setup& s, void* p, std::size_t bytes, const std::string& what) {
  void* handle = nullptr;
  const ncclResult_t r = ncclCommRegister(s.comm, p, bytes, &handle);
  check(r == ncclUnhandledCudaError && handle == nullptr, "ncclCommRegister of " + what + ": " + code(r));
}

// ncclCommRegister with cuMem on, no check mode, and windows.
void registration(Setup& s) {
  refused(s, s.host.data(), 64, "pageable host memory");
  refused(s, nullptr, 64, "NULL");
  registers(s, s.send, 0, "0 bytes of device memory");
  registers(s, s.send, std::size_t(1) << 30, "cudaMalloc memory past its end (one allocation, as NCCL sees it)");
  void* m = nullptr;
  check(ncclMemAlloc(&m, 1 << 20) == ncclSuccess && m, "ncclMemAlloc of 1 MiB");
  if (m) {
    registers(s, m, 1 << 20, "an ncclMemAlloc buffer");
    if (!legacy_ipc(m)) refused(s, m, std::size_t(1) << 40, "a cuMem buffer past its mappings");
    else std::printf("ncclMemAlloc returned cudaMalloc memory here: the cuMem span case is not run\n");
    check(ncclMemFree(m) == ncclSuccess, "ncclMemFree");
  }
  void* handle = reinterpret_cast<void*>(0x1);
  const ncclResult_t r = ncclCommRegister(s.comm, s.pinned, 64, &handle);
  check((r == ncclSuccess && handle == nullptr) || r == ncclUnhandledCudaError,
        "ncclCommRegister of pinned host memory: registered nothing (" + code(r) + ")");
  for (const int flags : {NCCL_WIN_COLL_SYMMETRIC | 0x2, 0x40}) {
    ncclWindow_t win = nullptr;
    const ncclResult_t w = ncclCommWindowRegister(s.comm, s.send, kCount * sizeof(int), &win, flags);
    check(w == ncclSuccess && win != nullptr, "ncclCommWindowRegister with flags " + std::to_string(flags) + ": " + code(w));
    if (win) check(ncclCommWindowDeregister(s.comm, win) == ncclSuccess, "ncclCommWindowDeregister");
  }
  check(exact_all_reduce(s, s.send, 14), "AllReduce after the registrations, exact");
}

struct Child {
  const char* name;
  std::vector<std::pair<const char*, const char*>> env;
  std::function<void(Setup&)> body;
};

const std::vector<Child>& children() {
  static const std::vector<Child> all = {
      {"NCCL_CHECK_MODE=debug_local", {{"NCCL_CHECK_MODE", "debug_local"}}, [](Setup& s) { asked(s, "DEBUG_LOCAL"); }},
      {"NCCL_CHECK_MODE=DEBUG_GLOBAL", {{"NCCL_CHECK_MODE", "DEBUG_GLOBAL"}}, [](Setup& s) { asked(s, "DEBUG_GLOBAL"); }},
      {"NCCL_CHECK_POINTERS=0x1", {{"NCCL_CHECK_POINTERS", "0x1"}}, [](Setup& s) { asked(s, "NCCL_CHECK_POINTERS=0x1"); }},
      {"NCCL_CHECK_POINTERS=2", {{"NCCL_CHECK_POINTERS", "2"}}, [](Setup& s) { not_asked(s, "NCCL_CHECK_POINTERS=2"); }},
      {"NCCL_CHECK_MODE=DEBUG", {{"NCCL_CHECK_MODE", "DEBUG"}}, [](Setup& s) { not_asked(s, "NCCL_CHECK_MODE=DEBUG"); }},
      {"no check mode", {}, [](Setup& s) {
         not_asked(s, "no check mode");
         registration(s);
       }},
      {"NCCL_LOCAL_REGISTER=0", {{"NCCL_LOCAL_REGISTER", "0"}}, [](Setup& s) {
         void* handle = reinterpret_cast<void*>(0x1);
         const ncclResult_t r = ncclCommRegister(s.comm, s.host.data(), 64, &handle);
         check(r == ncclSuccess && handle == nullptr, "NCCL_LOCAL_REGISTER=0: nothing registered: " + code(r));
       }},
      {"PURLIN_CUMEM=0", {{"PURLIN_CUMEM", "0"}}, [](Setup& s) {
         registers(s, nullptr, 64, "NULL with cuMem off (NCCL asks the driver nothing)");
         registers(s, s.host.data(), 64, "pageable host memory with cuMem off");
       }},
  };
  return all;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  return rank_results::run_children(
      static_cast<int>(children().size()),
      [](int i) {
        const Child& child = children()[static_cast<std::size_t>(i)];
        for (const auto& [name, value] : child.env) ::setenv(name, value, 1);
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return rank_results::kNoDevice;
        Setup s;
        check(s.open(), "a one-rank communicator and its buffers");
        if (tally::failed == 0) child.body(s);
        std::printf("%s: %d passed, %d failed\n", child.name, tally::passed, tally::failed);
        return tally::failed ? 1 : 0;
      },
      [](int i) { return children()[static_cast<std::size_t>(i)].name; });
}
