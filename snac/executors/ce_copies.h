// The copy-engine datapath (atom/ce) bound to zero-staging (snac/protocol/zero_staging.h): a
// collective that only copies (AllGather, AlltoAll, Broadcast, Gather, Scatter) whose buffers every
// rank has mapped, or a Send/Recv round's messages in place, its bytes moved by the copy engines.
// The call keeps the protocol's two barriers, each a launch of the zero-staging kernel with one CTA
// that only meets the peers (arrival, then done, on CTA 0's growing call number, which the SM form
// of the call shares; the legs' words for Send/Recv); between them this rank makes its copies (those
// zero_staging_copies names, or its moved legs) with cudaMemcpyAsync. Every wait is a kernel's, so
// it ends at ncclCommAbort or at PURLIN_TIMEOUT, and a graph replays the call as it was captured:
// the call numbers grow in device memory.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "snac/executors/sm_zero_staging.h"

namespace purlin::snac {

// Runs a Send/Recv round's legs (snac/protocol/zero_staging.h) whose moved messages the copy engines
// copy: one CTA meets the peers' arrivals, the engines copy each moved message whole, and one CTA
// signals done and awaits the legs this rank waits on (`a.phase` is set here).
Status run_ce_legs(ZeroStagingLegArgs a, cudaStream_t stream);

// Runs `a`, a collective that only copies (kind and buffers as for launch_zero_staging; ctas and phase
// are set here), on `stream`.
Status run_ce_copies(ZeroStagingArgs a, cudaStream_t stream);

}  // namespace purlin::snac
