// One collective handed to SNAC: which declaration, and the run-time values (the buffers as the
// declaration partitions them, type, reduction, root). The shim fills it, handing AllReduce, Broadcast
// and Reduce over whole (one part per side); SNAC's plan gives them their form (snac/runtime/plan.h);
// an executor runs it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.h"
#include "snac/call.h"
#include "snac/collective_list.h"

namespace purlin::snac {

#define PURLIN_KIND(kind, decl, name, forward) kind,
enum class CollKind : int { PURLIN_COLLECTIVES(PURLIN_KIND) };
#undef PURLIN_KIND
#define PURLIN_COUNT(kind, decl, name, forward) +1
inline constexpr int kCollKinds = 0 PURLIN_COLLECTIVES(PURLIN_COUNT);
#undef PURLIN_COUNT
// The kinds a user may forward to the real NCCL (PURLIN_FALLBACK) come first.
#define PURLIN_USER(kind, decl, name, forward) +(#forward[0] == 'u' ? 1 : 0)
inline constexpr int kUserCollKinds = 0 PURLIN_COLLECTIVES(PURLIN_USER);
#undef PURLIN_USER
const char* name_of(CollKind k);

struct Op {
  CollKind kind = CollKind::all_reduce;
  int root = -1;
  DataType type = DataType::uint8;
  ReduceOp op{};
  std::vector<Part> in;     // scattered input: nranks parts; packed: 1
  std::vector<Part> out;    // scattered/transposed output: nranks parts; packed: 1
  std::uint64_t mid_bytes = 0;  // composed forms: this rank's intermediate (set by the plan)
  // The input overlaps the output where partitions may land before they are read (in-place
  // AllToAll): the executor reads the input from a private copy.
  bool copy_input = false;
  std::uint64_t input_bytes = 0;  // with copy_input: the input's extent from in[0].ptr
  // The ranks' parts may differ in size where NCCL's would not (the hierarchical Broadcast's Scatter
  // of unequal shards), so no rank can tell the others' sizes from its own: never zero-staged,
  // whose ranks decide from their own sizes whether to meet.
  bool ragged = false;

  Call call() const {
    Call c;
    c.root = root;
    c.type = type;
    c.op = op;
    c.in = in.data();
    c.out = out.data();
    c.mid_bytes = mid_bytes;
    return c;
  }
};

}  // namespace purlin::snac
