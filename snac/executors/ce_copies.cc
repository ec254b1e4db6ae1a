#include "snac/executors/ce_copies.h"

#include "atom/ce/ce_atom.h"
#include "core/cuda_memory.h"

namespace purlin::snac {

Status run_ce_copies(ZeroStagingArgs a, cudaStream_t stream) {
  if (a.kind != ZeroStagingKind::all_gather && a.kind != ZeroStagingKind::all_to_all)
    return fail(Status::internal_error, "the copy engines only copy: no reduction on them");
  a.ctas = 1;
  a.phase = ZeroStagingPhase::arrive;
  PURLIN_TRY(cuda::check(launch_zero_staging(a, stream), "launching the copy engines' arrival barrier"));
  // Block `me` of every rank's output: AllGather's from this rank's input, AlltoAll's from block p
  // of it. The peers in turn from the next rank on, this rank's own last, so that the ranks' copies
  // spread over the destinations.
  const atom::CeAtom ce(stream);
  const int n = a.nranks, me = a.rank;
  for (int k = 1; k <= n; ++k) {
    const int p = (me + k) % n;
    const char* src = a.in[me] + (a.kind == ZeroStagingKind::all_to_all ? static_cast<std::uint64_t>(p) * a.bytes : 0);
    PURLIN_TRY(ce.copy(a.out[p] + static_cast<std::uint64_t>(me) * a.bytes, src, a.bytes));
  }
  a.phase = ZeroStagingPhase::leave;
  return cuda::check(launch_zero_staging(a, stream), "launching the copy engines' done barrier");
}

}  // namespace purlin::snac
