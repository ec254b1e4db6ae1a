// How one collective runs on a communicator that spans hosts or forwards operations to the real
// NCCL: natively by Purlin, wholly by NCCL, or hierarchically, Purlin within each host and NCCL
// across hosts on the rails (the ranks with one local rank, one per host).
//
// Hierarchical AllReduce: ReduceScatterV within the host (local rank l keeps shard l of the host's
// partial result), AllReduce of shard l on rail l, AllGatherV within the host. Hierarchical
// Broadcast: Scatter of the root's shards within the root's host, Broadcast of shard l on rail l
// from the root's host, AllGatherV within every host. The other collectives move rank-addressed
// data between hosts and are served by NCCL whole; Send/Recv goes through Purlin to a peer on the
// same host and through NCCL to any other.
//
// Every rank must reach the same choice for a call: it depends only on values common to all ranks
// (the layout, the operation, PURLIN_FALLBACK, and the datapath's answer for the operation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snac/runtime/hosts.h"
#include "snac/op.h"

namespace purlin::snac {

enum class Route { native, nccl, hierarchical };
const char* name_of(Route r);

struct RouteChoice {
  Route route = Route::native;
  std::string why;  // why not natively (the INFO line); empty for Route::native
};

// `forced`: PURLIN_FALLBACK's operations (core/config.h's fallback_op bits). `declined`: why Purlin's
// datapath does not serve this operation on this host, or empty when it does. For send_recv,
// Route::hierarchical means: peers on this host through Purlin, the others through NCCL.
RouteChoice choose_route(const Op& op, const HostLayout& layout, std::uint32_t forced, const std::string& declined);

// The fallback_op bit of an operation kind.
std::uint32_t fallback_bit(CollKind kind);

// One step of a hierarchical plan. A host step runs among the ranks of this rank's host (roots are
// local ranks); a rail step runs among the ranks of its rail (roots are host indices) and is always
// an in-place AllReduce or Broadcast of in[0] == out[0].
struct Step {
  enum class Where { host, rail };
  Where where;
  Op op;
};

// The steps rank `rank` takes for `op` (a collective for which choose_route said hierarchical).
// Empty steps are left out; a rank whose host has no part in a step skips it.
std::vector<Step> hierarchical_plan(const Op& op, const HostLayout& layout, int rank);

}  // namespace purlin::snac
