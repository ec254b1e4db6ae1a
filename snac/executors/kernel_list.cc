#include "snac/executors/kernel_list.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda_memory.h"
#include "core/log.h"

namespace purlin::snac {
namespace {

std::vector<const void*>& listed() {
  static std::vector<const void*> kernels;
  return kernels;
}

std::mutex& loads_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The devices whose kernels are loaded, with the least PTX version among them.
std::map<int, int>& loads() {
  static std::map<int, int> loaded;
  return loaded;
}

}  // namespace

bool list_kernel(const void* kernel) {
  // Called from load-time initialisers, one thread.
  listed().push_back(kernel);
  return true;
}

Status load_kernels(int device) {
  const std::lock_guard lock(loads_mutex());
  if (loads().contains(device)) return Status::ok;
  const auto start = std::chrono::steady_clock::now();
  std::size_t deepest = 0;
  int least_ptx = listed().empty() ? 0 : 1 << 30;
  for (const void* kernel : listed()) {
    cudaFuncAttributes attributes{};
    PURLIN_TRY(cuda::check(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes"));
    deepest = std::max(deepest, attributes.localSizeBytes);
    least_ptx = std::min(least_ptx, attributes.ptxVersion);
  }
  std::size_t stack = 0;
  PURLIN_TRY(cuda::check(cudaDeviceGetLimit(&stack, cudaLimitStackSize), "cudaDeviceGetLimit"));
  std::size_t free_before = 0, free_after = 0, total = 0;
  if (deepest > stack) {
    cudaMemGetInfo(&free_before, &total);
    PURLIN_TRY(cuda::check(cudaDeviceSetLimit(cudaLimitStackSize, deepest), "cudaDeviceSetLimit"));
    cudaMemGetInfo(&free_after, &total);
    stack = deepest;
  }
  loads()[device] = least_ptx;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  log::info(log::kInit, "SM datapath: {} kernels loaded on device {} in {:.1f} ms; deepest stack {} B, limit {} B "
            "(raising it took {} MiB); compiled for compute_{} and newer", listed().size(), device, ms, deepest, stack,
            (static_cast<long long>(free_before) - static_cast<long long>(free_after)) >> 20, least_ptx);
  return Status::ok;
}

int kernels_ptx_version(int device) {
  const std::lock_guard lock(loads_mutex());
  const auto it = loads().find(device);
  return it == loads().end() ? 0 : it->second;
}

}  // namespace purlin::snac
