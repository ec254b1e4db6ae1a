#include "snac/runtime/plan.h"

#include "collectives/geometry.h"

namespace purlin::snac {

void cut_shards(const Part& whole, int n, std::size_t elem_bytes, std::vector<Part>* out) {
  const std::uint64_t count = whole.bytes / elem_bytes;
  const std::uint64_t align = coll::shard_align_elems(elem_bytes);
  out->resize(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) {
    const coll::Span s = coll::uniform_split(count, n, k, align);
    (*out)[static_cast<std::size_t>(k)] = Part{whole.ptr ? whole.ptr + s.offset * elem_bytes : nullptr, s.count * elem_bytes};
  }
}

bool planned_whole(CollKind kind) {
  return kind == CollKind::all_reduce || kind == CollKind::broadcast || kind == CollKind::reduce;
}

const Op& plan(const Op& op, int rank, int nranks, const Policy& policy, Op* scratch) {
  CollKind direct;
  DirectOf of;
  switch (op.kind) {
    case CollKind::all_reduce:
      direct = CollKind::all_reduce_direct;
      of = DirectOf::all_reduce;
      break;
    case CollKind::broadcast:
      direct = CollKind::broadcast_direct;
      of = DirectOf::broadcast;
      break;
    case CollKind::reduce:
      direct = CollKind::reduce_direct;
      of = DirectOf::reduce;
      break;
    default: return op;
  }
  if (op.in.size() != 1 || op.out.size() != 1) return op;
  // The whole buffer's size: the output's for Broadcast (the input is the root's only), the input's
  // for Reduce (the output is the root's only). Shard 0 is the largest.
  const std::size_t es = size_of(op.type);
  const std::uint64_t total = (op.kind == CollKind::reduce ? op.in : op.out).front().bytes;
  const std::uint64_t shard =
      coll::uniform_split(total / es, nranks, 0, coll::shard_align_elems(es)).count * es;
  Op& p = *scratch;
  p.root = op.root;
  p.type = op.type;
  p.op = op.op;
  p.copy_input = false;
  p.input_bytes = 0;
  p.ragged = op.ragged;
  if (runs_direct(policy, of, total, shard)) {
    p.kind = direct;
    p.in.assign(1, Part{op.in.front().ptr, total});
    p.out.assign(1, Part{op.out.front().ptr, total});
    p.mid_bytes = 0;
    return p;
  }
  p.kind = op.kind;
  cut_shards(op.in.front(), nranks, es, &p.in);
  cut_shards(op.out.front(), nranks, es, &p.out);
  // The intermediate: this rank's shard, in place in its output.
  p.mid_bytes = p.out[static_cast<std::size_t>(rank)].bytes;
  return p;
}

}  // namespace purlin::snac
