// One collective call as one rank sees it: which buffers it passes (NCCL's in-place conventions
// included), what they hold before the call and what they must hold after, and the call itself.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "buffers.h"
#include "harness.h"
#include "reference.h"

namespace e2e {

enum class Coll { AllReduce, Broadcast, Bcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, SendRecv };

struct CollInfo {
  Coll coll;
  const char* name;
  bool reduces;
  bool rooted;
  bool out_of_place;  // has an out-of-place form
  bool in_place;      // has an in-place form
};

// Every collective; SendRecv is the grouped ring: send to rank+1, receive from rank-1.
inline constexpr CollInfo kColls[] = {
    {Coll::AllReduce, "AllReduce", true, false, true, true},
    {Coll::Broadcast, "Broadcast", false, true, true, true},
    {Coll::Bcast, "Bcast", false, true, false, true},
    {Coll::Reduce, "Reduce", true, true, true, true},
    {Coll::AllGather, "AllGather", false, false, true, true},
    {Coll::ReduceScatter, "ReduceScatter", true, false, true, true},
    {Coll::AlltoAll, "AlltoAll", false, false, true, true},
    {Coll::Gather, "Gather", false, true, true, true},
    {Coll::Scatter, "Scatter", false, true, true, true},
    {Coll::SendRecv, "SendRecv", false, false, true, false},
};

const CollInfo& info(Coll coll);

// The buffers of one rank in one call: region a holds the send buffer (or, in place, both),
// region b the receive buffer.
struct Plan {
  bool shared = false;
  RegionSpec a;
  RegionSpec b;
  std::size_t send_at = 0;  // element offset of sendbuff in a
  std::size_t recv_at = 0;  // element offset of recvbuff in b (in a when shared)
};

// Rank r of n, `count` as the API takes it (per rank for AllGather, ReduceScatter, AlltoAll,
// Gather, Scatter). Input element indices start at `from` in every rank's input.
Plan plan_for(Coll coll, int r, int n, std::size_t count, int root, bool in_place, std::size_t from = 0);

// The API call. SendRecv is a group of one ncclSend and one ncclRecv (the ring).
ncclResult_t issue(Coll coll, const void* send, void* recv, std::size_t count, ncclDataType_t dt, ncclRedOp_t op,
                   int root, ncclComm_t comm, int r, int n);

ncclRedOp_t builtin(Op op);

// A planned call with its buffers placed in a slab and prepared.
template <class T>
struct Staged {
  Coll coll;
  Plan plan;
  Content<T> content;
  std::byte* a = nullptr;
  std::byte* b = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;

  Staged(Slab& slab, Coll c, int r, int n, std::size_t count, int root, bool in_place, const Content<T>& what,
         std::uint64_t placement = 0, std::size_t from = 0)
      : coll(c), plan(plan_for(c, r, n, count, root, in_place, from)), content(what) {
    using S = typename T::Storage;
    a = slab.take(plan.a.elems * sizeof(S), (placement % 4) * sizeof(S));
    if (!plan.shared) b = slab.take(plan.b.elems * sizeof(S), ((placement >> 4) % 4) * sizeof(S));
    prepare<T>(a, plan.a, content);
    if (!plan.shared) prepare<T>(b, plan.b, content);
    send = a + plan.send_at * sizeof(S);
    recv = (plan.shared ? a : b) + plan.recv_at * sizeof(S);
  }

  bool check(Reporter& report, std::string_view label) const {
    const std::string l = label.empty() ? std::string() : std::string(label) + " ";
    bool ok = verify<T>(a, plan.a, content, l + (plan.shared ? "buffer" : "sendbuff"), report);
    if (!plan.shared) ok = verify<T>(b, plan.b, content, l + "recvbuff", report) && ok;
    return ok;
  }
};

}  // namespace e2e
