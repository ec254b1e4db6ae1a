// ncclMemFree on memory ncclMemAlloc did not return, answered as NCCL 2.30.7 answers it: a cuMem
// mapping made by another allocator is unmapped, released and its range given back (ncclSuccess);
// a pointer inside a mapping, a cudaMalloc pointer, host memory and a pointer freed already give
// ncclUnhandledCudaError and leave the memory as it was; with cuMem off (PURLIN_CUMEM=0, NCCL's
// NCCL_CUMEM_ENABLE=0) a cudaMalloc pointer is freed with cudaFree. The library reads its
// environment once per process, so each setting runs in a child forked before CUDA starts.
//
// Usage: test_mem_free
// Prints "N passed, N failed" (or a skip line without a GPU); exits non-zero on failure.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "test/common/loopback.h"
#include "test/common/rank_results.h"
#include "test/common/ranks.h"
#include "test/common/tally.h"

namespace {

using tally::check;

template <class Fn>
Fn driver(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(p);
}

// Whether the driver still knows an allocation at `p`.
bool live(void* p) {
  cudaPointerAttributes a{};
  const bool known = cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
  cudaGetLastError();
  return known;
}

// Whether 4 bytes at `p` can be written and read back.
bool usable(void* p) {
  if (cudaMemset(p, 0x5A, 4) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::uint32_t v = 0;
  const bool ok = cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost) == cudaSuccess && v == 0x5A5A5A5Au;
  cudaGetLastError();
  return ok;
}

// A cuMem mapping made the way NCCL makes one (the creator keeps its handle), not by the library.
void* foreign_cumem(std::size_t* bytes) {
  auto granularity = driver<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  auto create = driver<decltype(&cuMemCreate)>("cuMemCreate");
  auto reserve = driver<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  auto map = driver<decltype(&cuMemMap)>("cuMemMap");
  auto set_access = driver<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  if (!granularity || !create || !reserve || !map || !set_access) return nullptr;
  int device = 0;
  cudaGetDevice(&device);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  std::size_t g = 0;
  if (granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) return nullptr;
  *bytes = 2 * g;
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr at = 0;
  if (create(&handle, *bytes, &prop, 0) != CUDA_SUCCESS || reserve(&at, *bytes, g, 0, 0) != CUDA_SUCCESS ||
      map(at, *bytes, 0, handle, 0) != CUDA_SUCCESS)
    return nullptr;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (set_access(at, *bytes, &access, 1) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<void*>(at);
}

int with_cumem() {
  check(ncclMemFree(nullptr) == ncclSuccess, "ncclMemFree(NULL)");

  std::size_t bytes = 0;
  void* f = foreign_cumem(&bytes);
  check(f != nullptr && usable(f), "a cuMem mapping made by the test");
  if (f) {
    const ncclResult_t inside = ncclMemFree(static_cast<char*>(f) + 4096);
    check(inside == ncclUnhandledCudaError && usable(f),
          "ncclMemFree inside a foreign mapping: " + std::to_string(inside) + ", and the mapping kept");
    const ncclResult_t whole = ncclMemFree(f);
    check(whole == ncclSuccess && !live(f), "ncclMemFree of a foreign cuMem mapping: " + std::to_string(whole) +
                                                (live(f) ? ", still mapped" : ", gone"));
    check(ncclMemFree(f) == ncclUnhandledCudaError, "ncclMemFree of the foreign mapping again");
  }

  void* ours = nullptr;
  check(ncclMemAlloc(&ours, 1 << 20) == ncclSuccess && ours && usable(ours), "ncclMemAlloc of 1 MiB");
  if (ours) {
    check(ncclMemFree(static_cast<char*>(ours) + 256) == ncclUnhandledCudaError && usable(ours),
          "ncclMemFree inside an ncclMemAlloc buffer refused, the buffer kept");
    check(ncclMemFree(ours) == ncclSuccess && !live(ours), "ncclMemFree of an ncclMemAlloc buffer");
    check(ncclMemFree(ours) == ncclUnhandledCudaError, "ncclMemFree of an ncclMemAlloc buffer again");
  }

  void* plain = nullptr;
  check(cudaMalloc(&plain, 1 << 20) == cudaSuccess, "cudaMalloc");
  if (plain) {
    check(ncclMemFree(plain) == ncclUnhandledCudaError && usable(plain), "ncclMemFree of cudaMalloc memory refused");
    check(cudaFree(plain) == cudaSuccess, "cudaFree after the refusal");
  }
  int host = 0;
  check(ncclMemFree(&host) == ncclUnhandledCudaError, "ncclMemFree of host memory");
  std::printf("cuMem on: %d passed, %d failed\n", tally::passed, tally::failed);
  return tally::failed ? 1 : 0;
}

int without_cumem() {
  void* plain = nullptr;
  check(cudaMalloc(&plain, 1 << 20) == cudaSuccess, "cudaMalloc");
  if (plain) check(ncclMemFree(plain) == ncclSuccess && !live(plain), "PURLIN_CUMEM=0: ncclMemFree of cudaMalloc memory");
  void* ours = nullptr;
  check(ncclMemAlloc(&ours, 1 << 20) == ncclSuccess && ours && usable(ours), "PURLIN_CUMEM=0: ncclMemAlloc");
  if (ours) check(ncclMemFree(ours) == ncclSuccess && !live(ours), "PURLIN_CUMEM=0: ncclMemFree");
  std::printf("cuMem off: %d passed, %d failed\n", tally::passed, tally::failed);
  return tally::failed ? 1 : 0;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  return rank_results::run_children(
      2,
      [](int i) {
        const bool cumem = i == 0;
        if (!cumem) ::setenv("PURLIN_CUMEM", "0", 1);
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return rank_results::kNoDevice;
        return cumem ? with_cumem() : without_cumem();
      },
      [](int i) { return i == 0 ? "the child with cuMem on" : "the child with cuMem off"; });
}
