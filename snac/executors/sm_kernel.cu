// The generic kernels by collective: launch_snac and the occupancy query dispatch on the kind to
// launch_generic<D>, whose instantiations live in snac/executors/generic/ (compiled apart, in
// parallel).
#include <cuda_runtime.h>

#include <algorithm>

#include "snac/dispatch.h"
#include "snac/executors/sm_kernel.h"

namespace purlin::snac {

cudaError_t launch_snac(CollKind kind, const KernelArgs& args, cudaStream_t stream) {
  return dispatch(kind, [&]<class D>() { return launch_generic<D>(args, stream); });
}

int snac_ctas_per_sm() {
  int least = 1 << 30;
  for (int k = 0; k < kCollKinds; ++k) {
    int blocks = 0;
    const cudaError_t e = dispatch(static_cast<CollKind>(k), [&]<class D>() { return generic_ctas_per_sm<D>(&blocks); });
    if (e != cudaSuccess) return 0;
    least = std::min(least, blocks);
  }
  return least;
}

}  // namespace purlin::snac
