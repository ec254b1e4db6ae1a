#include "atom/ce/ce_atom.h"

#include <fmt/format.h>

namespace purlin::atom {

Status CeAtom::copy(char* dst, const char* src, std::uint64_t bytes) const {
  if (bytes == 0 || dst == src) return Status::ok;
  for (std::uint64_t done = 0; done < bytes; done += kCePieceBytes) {
    const std::uint64_t piece = bytes - done < kCePieceBytes ? bytes - done : kCePieceBytes;
    const cudaError_t e = cudaMemcpyAsync(dst + done, src + done, piece, cudaMemcpyDeviceToDevice, stream_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(Status::cuda_error, fmt::format("cudaMemcpyAsync of {} bytes on the copy engines failed: {}", piece,
                                                  cudaGetErrorString(e)));
    }
  }
  return Status::ok;
}

}  // namespace purlin::atom
