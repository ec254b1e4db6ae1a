#include "plans.h"

#include <vector>

namespace e2e {

const CollInfo& info(Coll coll) {
  for (const CollInfo& ci : kColls) {
    if (ci.coll == coll) return ci;
  }
  return kColls[0];
}

// NCCL's in-place conventions: AllGather sendbuff = recvbuff + rank*count; ReduceScatter
// recvbuff = sendbuff + rank*recvcount; Gather at the root sendbuff = recvbuff + root*count;
// Scatter at the root recvbuff = sendbuff + root*count; the others sendbuff == recvbuff. A
// non-root rank of Gather or Scatter has no in-place form and uses separate buffers.
Plan plan_for(Coll coll, int r, int n, std::size_t c, int root, bool in_place, std::size_t from) {
  Plan p;
  const std::size_t nc = c * static_cast<std::size_t>(n);
  const std::size_t my_part = c * static_cast<std::size_t>(r);
  const Segment mine = input_at(0, c, r, from);
  const Segment mine_all = input_at(0, nc, r, from);
  std::vector<Segment> gathered, exchanged;
  for (int k = 0; k < n; ++k) {
    const std::size_t at = c * static_cast<std::size_t>(k);
    gathered.push_back(input_at(at, c, k, from));
    exchanged.push_back(input_at(at, c, k, from + my_part));
  }
  switch (coll) {
    case Coll::AllReduce:
      if (in_place) {
        p.shared = true;
        p.a = {c, {mine}, {reduced_at(0, c, from)}};
      } else {
        p.a = {c, {mine}, {}};
        p.b = {c, {}, {reduced_at(0, c, from)}};
      }
      break;
    case Coll::Broadcast:
    case Coll::Bcast:
      if (in_place) {
        p.shared = true;
        p.a.elems = c;
        if (r == root) p.a.before = {mine};
        p.a.after = {input_at(0, c, root, from)};
      } else {
        p.a = {c, {mine}, {}};  // ignored by a non-root
        p.b = {c, {}, {input_at(0, c, root, from)}};
      }
      break;
    case Coll::Reduce: {
      std::vector<Segment> out;
      if (r == root) out.push_back(reduced_at(0, c, from));  // a non-root's recvbuff stays as it was
      if (in_place) {
        p.shared = true;
        p.a = {c, {mine}, out};
      } else {
        p.a = {c, {mine}, {}};
        p.b = {c, {}, out};
      }
      break;
    }
    case Coll::AllGather:
      if (in_place) {
        p.shared = true;
        p.a = {nc, {input_at(my_part, c, r, from)}, gathered};
        p.send_at = my_part;
      } else {
        p.a = {c, {mine}, {}};
        p.b = {nc, {}, gathered};
      }
      break;
    case Coll::ReduceScatter:
      if (in_place) {
        p.shared = true;
        p.a = {nc, {mine_all}, {reduced_at(my_part, c, from + my_part)}};
        p.recv_at = my_part;
      } else {
        p.a = {nc, {mine_all}, {}};
        p.b = {c, {}, {reduced_at(0, c, from + my_part)}};
      }
      break;
    case Coll::AlltoAll:
      if (in_place) {
        p.shared = true;
        p.a = {nc, {mine_all}, exchanged};
      } else {
        p.a = {nc, {mine_all}, {}};
        p.b = {nc, {}, exchanged};
      }
      break;
    case Coll::Gather:
      if (in_place && r == root) {
        p.shared = true;
        p.a = {nc, {input_at(my_part, c, r, from)}, gathered};
        p.send_at = my_part;
      } else {
        p.a = {c, {mine}, {}};
        p.b = {nc, {}, r == root ? gathered : std::vector<Segment>{}};
      }
      break;
    case Coll::Scatter:
      if (in_place && r == root) {
        p.shared = true;
        p.a = {nc, {mine_all}, {input_at(my_part, c, root, from + my_part)}};
        p.recv_at = my_part;
      } else {
        // A non-root's sendbuff is ignored: it passes poison, which must stay as it is.
        p.a = {nc, r == root ? std::vector<Segment>{mine_all} : std::vector<Segment>{}, {}};
        p.b = {c, {}, {input_at(0, c, root, from + my_part)}};
      }
      break;
    case Coll::SendRecv:
      p.a = {c, {mine}, {}};
      p.b = {c, {}, {input_at(0, c, (r + n - 1) % n, from)}};
      break;
  }
  return p;
}

ncclResult_t issue(Coll coll, const void* send, void* recv, std::size_t c, ncclDataType_t dt, ncclRedOp_t op,
                   int root, ncclComm_t comm, int r, int n) {
  const cudaStream_t s = static_cast<cudaStream_t>(0);
  switch (coll) {
    case Coll::AllReduce: return ncclAllReduce(send, recv, c, dt, op, comm, s);
    case Coll::Broadcast: return ncclBroadcast(send, recv, c, dt, root, comm, s);
    case Coll::Bcast: return ncclBcast(recv, c, dt, root, comm, s);
    case Coll::Reduce: return ncclReduce(send, recv, c, dt, op, root, comm, s);
    case Coll::AllGather: return ncclAllGather(send, recv, c, dt, comm, s);
    case Coll::ReduceScatter: return ncclReduceScatter(send, recv, c, dt, op, comm, s);
    case Coll::AlltoAll: return ncclAlltoAll(send, recv, c, dt, comm, s);
    case Coll::Gather: return ncclGather(send, recv, c, dt, root, comm, s);
    case Coll::Scatter: return ncclScatter(send, recv, c, dt, root, comm, s);
    case Coll::SendRecv: {
      ncclResult_t rc = ncclGroupStart();
      if (rc != ncclSuccess) return rc;
      const ncclResult_t sent = ncclSend(send, c, dt, (r + 1) % n, comm, s);
      const ncclResult_t received = ncclRecv(recv, c, dt, (r + n - 1) % n, comm, s);
      rc = ncclGroupEnd();
      return sent != ncclSuccess ? sent : received != ncclSuccess ? received : rc;
    }
  }
  return ncclInternalError;
}

ncclRedOp_t builtin(Op op) {
  switch (op) {
    case Op::sum: return ncclSum;
    case Op::prod: return ncclProd;
    case Op::max: return ncclMax;
    case Op::min: return ncclMin;
    case Op::avg: return ncclAvg;
    case Op::premulsum: break;
  }
  return ncclSum;
}

}  // namespace e2e
