// Resuming suspended memory: the peers' cuMem allocations this rank mapped (user buffers of
// zero-staged calls) mapped again at the same addresses, on the memory each owner has at that base
// now, so graphs captured on them replay on the owner's memory of now (a cuMem allocator may have
// given the memory back and mapped new memory there while the communicator was suspended).
#pragma once

#include <cstdint>
#include <vector>

#include "core/bootstrap.h"
#include "core/cuda_memory.h"
#include "core/status.h"

namespace purlin::snac {

struct Remap {
  int owner = -1;               // the rank whose allocation it is
  std::uint64_t base = 0;       // the allocation as its owner sees it
  std::uint64_t bytes = 0;
  cuda::VmmMapping* at = nullptr;  // this rank's mapping of it, unmapped (vmm_unmap), its range kept
};

// Collective over `boot` (every rank calls it, with its own `wants`, maybe none): each owner
// exports what it has at each base asked of it, if that is one cuMem allocation of the same size,
// and each rank maps it at the range it kept. One the owner does not have stays unmapped, with a
// WARN line naming `what` (graphs that use it must be captured again). Descriptors travel through
// a mailbox of this call's own.
Status remap_peer_allocations(Bootstrap& boot, int device, double timeout_s, const std::vector<Remap>& wants,
                              const char* what);

}  // namespace purlin::snac
