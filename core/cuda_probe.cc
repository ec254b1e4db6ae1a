#include "core/cuda_probe.h"

#if defined(PURLIN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "core/log.h"

namespace purlin {

int cuda_device_count() {
#if defined(PURLIN_HAVE_CUDA)
  static const int count = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      log::info(log::kInit, "no CUDA device usable ({}): the host datapath serves", cudaGetErrorString(e));
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

int cuda_current_device() {
#if defined(PURLIN_HAVE_CUDA)
  if (cuda_device_count() == 0) return -1;
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
#else
  return -1;
#endif
}

}  // namespace purlin
