// A group of Send/Recv: an AllToAllV whose partitions are mostly empty. Partition k of the input is
// what this rank sends to k; partition s of the output is what it receives from s. One group is one
// fused execution; the k-th send to a peer matches that peer's k-th receive from this rank.
#pragma once
#include "collectives/all_to_all.h"

namespace purlin::coll {
using SendRecv = AllToAllV;
}  // namespace purlin::coll
