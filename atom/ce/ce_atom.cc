#include "atom/ce/ce_atom.h"

#include <fmt/format.h>

namespace purlin::atom {

Status CeAtom::copy(char* dst, const char* src, std::uint64_t bytes) const {
  if (bytes == 0 || dst == src) return Status::ok;
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
  if (e == cudaSuccess) return Status::ok;
  cudaGetLastError();
  return fail(Status::cuda_error,
              fmt::format("cudaMemcpyAsync of {} bytes on the copy engines failed: {}", bytes, cudaGetErrorString(e)));
}

}  // namespace purlin::atom
