// The run-time side of one collective on one rank: buffers split into the partitions the layouts
// name, the element type and reduction, the root; plus the rank's view of every peer's window.
// Trivially copyable so a GPU kernel can take it as an argument.
#pragma once

#include <cstdint>

#include "core/types.h"
#include "snac/window.h"

namespace purlin::snac {

struct Part {
  char* ptr;
  std::uint64_t bytes;
};

struct Call {
  int root = -1;
  DataType type = DataType::uint8;
  ReduceOp op{};
  const Part* in = nullptr;    // scattered input: nranks parts; packed input: 1
  const Part* out = nullptr;   // scattered/transposed output: nranks parts; packed output: 1
  std::uint64_t mid_bytes = 0; // composed: this rank's intermediate (F's packed output)
};

// Everything the roles of one rank need, identical for every call on the communicator.
struct Context {
  int rank = 0;
  int nranks = 1;
  WindowGeometry geo{};
  const Window* win = nullptr;  // [nranks], as mapped in this process
  LocalState* state = nullptr;  // this rank's persistent counters
  char* scratch = nullptr;      // local: (nranks + 1) * latency_max bytes for the latency path
  std::uint64_t latency_max = 0;
  std::uint64_t chunk_cap = 0;
  int slots = 1;
};

// How one call divides a staging half: nphases x maxlanes regions, each a ring of `slots` chunks.
struct Lanes {
  int nphases = 1;
  std::uint64_t region = 0;
  std::uint64_t chunk = 0;
  int slots = 1;
};

}  // namespace purlin::snac
