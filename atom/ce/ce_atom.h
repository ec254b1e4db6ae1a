// The copy-engine datapath's Atom: copies between device buffers (this rank's and the peers' as
// mapped here) by the GPU's copy engines, in stream order, with no SM. It has no reduction: it
// serves the collectives that only copy. Signals and waits are not the copy engines' either: its
// executor brackets a call's copies with a one-CTA barrier kernel on the protocol's growing call
// numbers (snac/executors/ce_copies.h), which ends at ncclCommAbort like every kernel's wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace purlin::atom {

// The largest piece one cudaMemcpyAsync moves. With 2 ranks on one H200, copies of 512 MiB ran at
// 0.64 of the copy roofline where copies of up to 256 MiB reached 0.93-0.98
// (perf/results/2026-12-04-h200-rooted-zero-staging/).
inline constexpr std::uint64_t kCePieceBytes = 128ull << 20;

class CeAtom {
 public:
  explicit CeAtom(cudaStream_t stream) : stream_(stream) {}

  // Copies `bytes` from src to dst after the stream's earlier work, in pieces of at most
  // kCePieceBytes (nothing where dst is src).
  Status copy(char* dst, const char* src, std::uint64_t bytes) const;

 private:
  cudaStream_t stream_;
};

}  // namespace purlin::atom
