#include "collective.h"

#include <algorithm>

namespace perf {

using K = CollectiveKind;

std::size_t Counts::inplace_elements() const {
  return std::max(inplace_send + send, inplace_recv + recv);
}

Counts Collective::counts(std::size_t elements, int nranks, int rank) const {
  const std::size_t n = static_cast<std::size_t>(nranks);
  const std::size_t r = static_cast<std::size_t>(rank);
  const std::size_t part = elements / n;
  switch (kind) {
    case K::all_gather: case K::gather:  // one part in, n parts out; in place the input is part r
      return {part, part * n, part, r * part, 0};
    case K::reduce_scatter: case K::scatter:  // n parts in, one part out; in place it is part r
      return {part * n, part, part, 0, r * part};
    case K::alltoall:
      return {part * n, part * n, part, 0, 0};
    default:  // all_reduce, broadcast, reduce, sendrecv: one buffer's worth each way
      return {elements, elements, elements, 0, 0};
  }
}

std::size_t Collective::row_bytes(const Counts& c, std::size_t element_size) const {
  return std::max(c.send, c.recv) * element_size;
}

double Collective::bus_factor(int nranks) const {
  const double n = nranks;
  switch (kind) {
    case K::all_reduce: return 2.0 * (n - 1) / n;
    // nccl-tests counts gather and scatter like all_gather: the root's own part does not move.
    case K::all_gather: case K::reduce_scatter: case K::alltoall: case K::gather: case K::scatter:
      return (n - 1) / n;
    default: return 1.0;
  }
}

bool Collective::reads_input(int rank, int root) const {
  return (kind == K::broadcast || kind == K::scatter) ? rank == root : true;
}

bool Collective::writes_output(int rank, int root) const {
  return (kind == K::reduce || kind == K::gather) ? rank == root : true;
}

bool Collective::checks_in_place() const { return kind != K::sendrecv; }

Source Collective::source(std::size_t i, const Counts& c, int rank, int nranks, int root) const {
  const std::size_t part = c.param;
  const std::size_t r = static_cast<std::size_t>(rank);
  auto part_of = [&](std::size_t index) { return part == 0 ? 0 : static_cast<int>(index / part); };
  switch (kind) {
    case K::all_reduce: case K::reduce: return {Source::kAllRanks, i};
    case K::reduce_scatter: return {Source::kAllRanks, r * part + i};
    case K::all_gather: case K::gather: return {part_of(i), i % part};
    case K::alltoall: return {part_of(i), r * part + i % part};
    case K::broadcast: return {root, i};
    case K::scatter: return {root, r * part + i};
    case K::sendrecv: return {(rank + nranks - 1) % nranks, i};
  }
  return {Source::kAllRanks, i};
}

ncclResult_t Collective::issue(const void* send, void* recv, const CallArgs& a) const {
  switch (kind) {
    case K::all_reduce:
      return ncclAllReduce(send, recv, a.count, a.type, a.op, a.comm, a.stream);
    case K::all_gather:
      return ncclAllGather(send, recv, a.count, a.type, a.comm, a.stream);
    case K::reduce_scatter:
      return ncclReduceScatter(send, recv, a.count, a.type, a.op, a.comm, a.stream);
    case K::alltoall:
      return ncclAlltoAll(send, recv, a.count, a.type, a.comm, a.stream);
    case K::broadcast:
      return ncclBroadcast(send, recv, a.count, a.type, a.root, a.comm, a.stream);
    case K::reduce:
      return ncclReduce(send, recv, a.count, a.type, a.op, a.root, a.comm, a.stream);
    case K::gather:
      return ncclGather(send, recv, a.count, a.type, a.root, a.comm, a.stream);
    case K::scatter:
      return ncclScatter(send, recv, a.count, a.type, a.root, a.comm, a.stream);
    case K::sendrecv: {  // a ring: send to the next rank, receive from the previous one
      const int next = (a.rank + 1) % a.nranks;
      const int prev = (a.rank + a.nranks - 1) % a.nranks;
      ncclResult_t result = ncclGroupStart();
      if (result != ncclSuccess) return result;
      ncclResult_t sent = ncclSend(send, a.count, a.type, next, a.comm, a.stream);
      ncclResult_t received = ncclRecv(recv, a.count, a.type, prev, a.comm, a.stream);
      result = ncclGroupEnd();  // always closes the group, even after an error inside it
      if (sent != ncclSuccess) return sent;
      return received != ncclSuccess ? received : result;
    }
  }
  return ncclInvalidArgument;
}

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> list = {
      {K::all_reduce, "all_reduce", "AllReduce", true, false},
      {K::all_gather, "all_gather", "AllGather", false, false},
      {K::reduce_scatter, "reduce_scatter", "ReduceScatter", true, false},
      {K::alltoall, "alltoall", "AlltoAll", false, false},
      {K::broadcast, "broadcast", "Broadcast", false, true},
      {K::reduce, "reduce", "Reduce", true, true},
      {K::gather, "gather", "Gather", false, true},
      {K::scatter, "scatter", "Scatter", false, true},
      {K::sendrecv, "sendrecv", "SendRecv", false, false},
  };
  return list;
}

const Collective* find_collective(std::string_view name) {
  for (const auto& c : all_collectives()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

}  // namespace perf
