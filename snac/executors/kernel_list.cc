#include "snac/executors/kernel_list.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <vector>

#include "core/cuda_memory.h"
#include "core/log.h"

namespace purlin::snac {
namespace {

std::vector<const void*>& listed() {
  static std::vector<const void*> kernels;
  return kernels;
}

}  // namespace

bool list_kernel(const void* kernel) {
  // Called from load-time initialisers, one thread.
  listed().push_back(kernel);
  return true;
}

Status load_kernels(int device) {
  static std::mutex mutex;
  static std::set<int> loaded;
  const std::lock_guard lock(mutex);
  if (loaded.contains(device)) return Status::ok;
  const auto start = std::chrono::steady_clock::now();
  std::size_t deepest = 0;
  for (const void* kernel : listed()) {
    cudaFuncAttributes attributes{};
    PURLIN_TRY(cuda::check(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes"));
    deepest = std::max(deepest, attributes.localSizeBytes);
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
  loaded.insert(device);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  log::info(log::kInit, "SM datapath: {} kernels loaded on device {} in {:.1f} ms; deepest stack {} B, limit {} B "
            "(raising it took {} MiB)", listed().size(), device, ms, deepest, stack,
            (static_cast<long long>(free_before) - static_cast<long long>(free_after)) >> 20);
  return Status::ok;
}

}  // namespace purlin::snac
