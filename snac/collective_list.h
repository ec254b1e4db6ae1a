// The one list of collectives SNAC runs. Each entry: the run-time kind, its declaration in
// collectives/ (coll::NAME), its display name, and whether a user can forward it to the real NCCL
// (PURLIN_FALLBACK: `user`; `plan` for the forms SNAC's own plan picks). The kinds (CollKind),
// their names (name_of), the dispatch from a kind to its declaration (snac/dispatch.h) and the
// check that core/config.h's fallback bits follow this order all derive from it. Adding a
// collective: its declaration, one line here (user kinds before the plan's), its entry point.
#pragma once

// X(kind, Declaration, "Name", forwardable)
#define PURLIN_COLLECTIVES(X)                                 \
  X(all_reduce, AllReduce, "AllReduce", user)                 \
  X(broadcast, Broadcast, "Broadcast", user)                  \
  X(reduce, Reduce, "Reduce", user)                           \
  X(all_gather, AllGather, "AllGather", user)                 \
  X(reduce_scatter, ReduceScatter, "ReduceScatter", user)     \
  X(all_to_all, AllToAll, "AllToAll", user)                   \
  X(gather, Gather, "Gather", user)                           \
  X(scatter, Scatter, "Scatter", user)                        \
  X(send_recv, SendRecv, "SendRecv", user)                    \
  X(all_gather_v, AllGatherV, "AllGatherV", user)             \
  X(reduce_scatter_v, ReduceScatterV, "ReduceScatterV", user) \
  X(all_to_all_v, AllToAllV, "AllToAllV", user)               \
  /* An AllReduce planned as one reduce of every rank's whole input (Communicator's plan). */ \
  X(all_reduce_direct, AllReduceDirect, "AllReduceDirect", plan) \
  /* A Broadcast planned as the root's whole buffer sent to every rank. */ \
  X(broadcast_direct, BroadcastDirect, "BroadcastDirect", plan) \
  /* A Reduce planned as one reduce of every rank's whole input at the root. */ \
  X(reduce_direct, ReduceDirect, "ReduceDirect", plan)
