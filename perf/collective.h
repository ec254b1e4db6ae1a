// The collectives purlin-perf measures, with nccl-tests' definitions of size, count, in-place
// layout and bus bandwidth, and where each output element comes from (for the host reference).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace perf {

enum class CollectiveKind {
  all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, gather, scatter, sendrecv
};

// Element counts of one call on one rank. `param` is the count argument of the call. In place,
// one buffer of `inplace_elements()` holds both areas: the send area starts at `inplace_send` and
// the receive area at `inplace_recv` (nccl-tests' offsets, already multiplied by the rank).
struct Counts {
  std::size_t send = 0;
  std::size_t recv = 0;
  std::size_t param = 0;
  std::size_t inplace_send = 0;
  std::size_t inplace_recv = 0;
  std::size_t inplace_elements() const;
};

// Where output element i of a rank comes from: element `index` of rank `rank`'s input, or, for
// reductions (rank == kAllRanks), element `index` of every rank's input reduced in rank order.
struct Source {
  static constexpr int kAllRanks = -1;
  int rank;
  std::size_t index;
};

// What one call needs besides the buffers.
struct CallArgs {
  std::size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int rank;
  int nranks;
  ncclComm_t comm;
  cudaStream_t stream;
};

struct Collective {
  CollectiveKind kind;
  const char* name;  // command-line name: "all_reduce"
  const char* api;   // NCCL's name: "AllReduce"
  bool reduces;
  bool rooted;

  // `elements` is the row's size divided by the element size.
  Counts counts(std::size_t elements, int nranks, int rank) const;
  // The size column: the larger of the send and receive buffers, in bytes.
  std::size_t row_bytes(const Counts& c, std::size_t element_size) const;
  // algbw = bytes / time with bytes = row_bytes; busbw = algbw * factor.
  double bus_factor(int nranks) const;
  // Whether `rank`'s send buffer is read, and whether its receive buffer is written.
  bool reads_input(int rank, int root) const;
  bool writes_output(int rank, int root) const;
  // False for SendRecv, as in nccl-tests: in place, each rank sends from the buffer its peer is
  // writing into, so the result depends on timing. The call is timed but not checked.
  bool checks_in_place() const;
  Source source(std::size_t i, const Counts& c, int rank, int nranks, int root) const;
  // Issues the call through the NCCL API.
  ncclResult_t issue(const void* send, void* recv, const CallArgs& args) const;
};

const std::vector<Collective>& all_collectives();
const Collective* find_collective(std::string_view name);

}  // namespace perf
