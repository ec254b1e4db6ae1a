// One collective handed to SNAC: which declaration, and the run-time values (buffers split into
// partitions, type, reduction, root). The shim fills it; an executor runs it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.h"
#include "snac/call.h"

namespace purlin::snac {

enum class CollKind : int {
  all_reduce,
  broadcast,
  reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  gather,
  scatter,
  send_recv,
  all_gather_v,
  reduce_scatter_v,
  all_to_all_v,
  all_reduce_direct,  // an AllReduce planned as one reduce of every rank's whole input (Communicator's plan)
  broadcast_direct,   // a Broadcast planned as the root's whole buffer sent to every rank
  reduce_direct,      // a Reduce planned as one reduce of every rank's whole input at the root
};
inline constexpr int kCollKinds = static_cast<int>(CollKind::reduce_direct) + 1;
const char* name_of(CollKind k);

struct Op {
  CollKind kind = CollKind::all_reduce;
  int root = -1;
  DataType type = DataType::uint8;
  ReduceOp op{};
  std::vector<Part> in;     // scattered input: nranks parts; packed: 1
  std::vector<Part> out;    // scattered/transposed output: nranks parts; packed: 1
  std::uint64_t mid_bytes = 0;
  // The input overlaps the output where partitions may land before they are read (in-place
  // AllToAll): the executor reads the input from a private copy.
  bool copy_input = false;
  std::uint64_t input_bytes = 0;  // with copy_input: the input's extent from in[0].ptr

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
