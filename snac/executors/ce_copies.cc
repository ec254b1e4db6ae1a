#include "snac/executors/ce_copies.h"

#include "atom/ce/ce_atom.h"
#include "core/cuda_memory.h"

namespace purlin::snac {

Status run_ce_copies(ZeroStagingArgs a, cudaStream_t stream) {
  if (!zero_staging_copies_only(a.kind)) return fail(Status::internal_error, "the copy engines only copy: no reduction on them");
  if (a.pairs) return fail(Status::internal_error, "the copy engines only copy: no AlltoAll in pairs on them");
  a.ctas = 1;
  a.phase = ZeroStagingPhase::arrive;
  PURLIN_TRY(cuda::check(launch_zero_staging(a, stream), "launching the copy engines' arrival barrier"));
  // The protocol's copies of this rank, whole; the call number is the barriers' business only.
  const atom::CeAtom ce(stream);
  Status st = Status::ok;
  zero_staging_copies(zero_staging_view(a, 0), [&](char* dst, const char* src, std::uint64_t bytes) {
    if (st == Status::ok) st = ce.copy(dst, src, bytes);
  });
  PURLIN_TRY(st);
  a.phase = ZeroStagingPhase::leave;
  return cuda::check(launch_zero_staging(a, stream), "launching the copy engines' done barrier");
}

Status run_ce_legs(ZeroStagingLegArgs a, cudaStream_t stream) {
  a.phase = ZeroStagingPhase::arrive;
  PURLIN_TRY(cuda::check(launch_zero_staging_legs(a, stream), "launching the copy engines' arrival of the legs"));
  const atom::CeAtom ce(stream);
  for (int i = 0; i < a.count; ++i)
    if (a.legs[i].role == LegRole::move) PURLIN_TRY(ce.copy(a.legs[i].dst, a.legs[i].src, a.legs[i].bytes));
  a.phase = ZeroStagingPhase::leave;
  return cuda::check(launch_zero_staging_legs(a, stream), "launching the copy engines' end of the legs");
}

}  // namespace purlin::snac
