// The form a collective runs in on one communicator: what the shim hands SNAC (snac::Op) becomes the
// operation an executor runs.
//
// AllReduce, Broadcast and Reduce come whole: one part per side, the whole buffer (a side this rank
// has no buffer for is null, with the bytes it would hold, or none where it gives nothing: Broadcast's
// input away from the root). Within the policy's direct bound they run as one exchange of whole
// buffers (coll::AllReduceDirect, BroadcastDirect, ReduceDirect); otherwise as their composition, both
// sides cut into the shards coll::uniform_shape lays out (coll::kShardAlignBytes). Both forms fold in
// rank order, so the result is the same bits, and every rank sees the same sizes and policy, so all
// pick the same form. Every other kind runs as given.
#pragma once

#include <cstddef>
#include <vector>

#include "snac/op.h"
#include "snac/runtime/policy.h"

namespace purlin::snac {

// The n shards of `whole` (`elem_bytes`-byte elements), as coll::uniform_split cuts them, into *out
// (its capacity reused). A null `whole` gives null shards of the same sizes.
void cut_shards(const Part& whole, int n, std::size_t elem_bytes, std::vector<Part>* out);

// The operation to run for `op` at `rank` of `nranks`: `op` itself, or *scratch filled with its
// planned form (its vectors' capacity reused, so a repeated call allocates nothing).
const Op& plan(const Op& op, int rank, int nranks, const Policy& policy, Op* scratch);

// Whether `kind` is handed over whole and planned (AllReduce, Broadcast, Reduce).
bool planned_whole(CollKind kind);

}  // namespace purlin::snac
