#include "snac/runtime/hierarchy.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/config.h"
#include "snac/runtime/plan.h"

namespace purlin::snac {
namespace {

// core/config.h's PURLIN_FALLBACK bits follow the user kinds of snac/collective_list.h.
#define PURLIN_FALLBACK_BIT_user(kind) \
  static_assert(fallback_op::kind == 1u << static_cast<int>(CollKind::kind), "fallback bit of " #kind);
#define PURLIN_FALLBACK_BIT_plan(kind)
#define PURLIN_FALLBACK_BIT(kind, decl, name, forward) PURLIN_FALLBACK_BIT_##forward(kind)
PURLIN_COLLECTIVES(PURLIN_FALLBACK_BIT)
#undef PURLIN_FALLBACK_BIT
#undef PURLIN_FALLBACK_BIT_plan
#undef PURLIN_FALLBACK_BIT_user
static_assert(fallback_op::all == (1u << kUserCollKinds) - 1, "one fallback bit per user kind");

std::uint64_t total(const std::vector<Part>& parts) {
  std::uint64_t bytes = 0;
  for (const Part& p : parts) bytes += p.bytes;
  return bytes;
}

// The host's shards of `count` elements at `base`, one per local rank (the plan's cut).
std::vector<Part> shards(char* base, std::uint64_t count, int local_ranks, std::size_t es) {
  std::vector<Part> parts;
  cut_shards(Part{base, count * es}, local_ranks, es, &parts);
  return parts;
}

Op step_op(const Op& op, CollKind kind, int root) {
  Op s;
  s.kind = kind;
  s.type = op.type;
  s.op = op.op;
  s.root = root;
  return s;
}

// Within the host, the shards the ranks hold are gathered by all: in place, shard l is local rank
// l's contribution.
Step host_all_gather(const Op& op, const std::vector<Part>& out, int l) {
  Step s{Step::Where::host, step_op(op, CollKind::all_gather_v, -1)};
  s.op.in = {out[l]};
  s.op.out = out;
  return s;
}

Step rail_step(const Op& op, CollKind kind, const Part& shard, int root) {
  Step s{Step::Where::rail, step_op(op, kind, root)};
  s.op.in = {shard};
  s.op.out = {shard};
  return s;
}

}  // namespace

const char* name_of(Route r) {
  switch (r) {
    case Route::native: return "native";
    case Route::nccl: return "nccl";
    case Route::hierarchical: return "hierarchical";
  }
  return "?";
}

std::uint32_t fallback_bit(CollKind kind) { return 1u << static_cast<int>(kind); }

RouteChoice choose_route(const Op& op, const HostLayout& layout, std::uint32_t forced, const std::string& declined) {
  if (forced & fallback_bit(op.kind)) return {Route::nccl, fmt::format("PURLIN_FALLBACK names {}", name_of(op.kind))};
  if (!declined.empty()) return {Route::nccl, declined};
  if (layout.hosts() <= 1) return {Route::native, {}};
  const int any = 0;
  switch (op.kind) {
    case CollKind::send_recv:
      return {Route::hierarchical, "peers on other hosts are reached through NCCL"};
    case CollKind::all_reduce:
    case CollKind::broadcast:
      if (!layout.uniform())
        return {Route::nccl, fmt::format("the {} hosts hold different numbers of ranks: no rails", layout.hosts())};
      if (layout.local_size(any) == 1) return {Route::nccl, "one rank per host: nothing to share within a host"};
      if (op.kind == CollKind::all_reduce && op.op.kind == RedOpKind::avg)
        return {Route::nccl, "avg divides once by the whole rank count, which a hierarchy cannot"};
      return {Route::hierarchical, fmt::format("{} ranks on each of {} hosts", layout.local_size(any), layout.hosts())};
    default:
      return {Route::nccl, fmt::format("{} moves rank-addressed data between {} hosts", name_of(op.kind), layout.hosts())};
  }
}

std::vector<Step> hierarchical_plan(const Op& op, const HostLayout& layout, int rank) {
  const std::size_t es = size_of(op.type);
  const int L = layout.local_size(rank);
  const int l = layout.local_rank(rank);
  const int h = layout.host_of(rank);
  std::vector<Step> steps;
  if (op.kind == CollKind::all_reduce) {
    const std::uint64_t count = total(op.out) / es;
    const std::vector<Part> in = shards(op.in.front().ptr, count, L, es);
    const std::vector<Part> out = shards(op.out.front().ptr, count, L, es);
    Step rs{Step::Where::host, step_op(op, CollKind::reduce_scatter_v, -1)};
    rs.op.op.nranks = L;
    rs.op.in = in;
    rs.op.out = {out[l]};
    steps.push_back(rs);
    if (out[l].bytes) {
      Step ar = rail_step(op, CollKind::all_reduce, out[l], -1);
      // A PreMulSum scalar was applied within the host; the hosts' partial results only add up.
      if (op.op.kind == RedOpKind::premulsum) ar.op.op = ReduceOp{RedOpKind::sum, 0, nullptr, layout.hosts()};
      ar.op.op.nranks = layout.hosts();
      steps.push_back(ar);
    }
    steps.push_back(host_all_gather(op, out, l));
  } else if (op.kind == CollKind::broadcast) {
    const int root_host = layout.host_of(op.root);
    const int root_local = layout.local_rank(op.root);
    const std::uint64_t count = total(op.out) / es;
    const std::vector<Part> out = shards(op.out.front().ptr, count, L, es);
    if (h == root_host) {
      Step sc{Step::Where::host, step_op(op, CollKind::scatter, root_local)};
      sc.op.in = rank == op.root ? shards(op.in.front().ptr, count, L, es)
                                 : std::vector<Part>(static_cast<std::size_t>(L), Part{nullptr, 0});
      sc.op.out = {out[l]};
      sc.op.ragged = true;
      steps.push_back(sc);
    }
    if (out[l].bytes) steps.push_back(rail_step(op, CollKind::broadcast, out[l], root_host));
    steps.push_back(host_all_gather(op, out, l));
  }
  return steps;
}

}  // namespace purlin::snac
