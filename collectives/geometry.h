// Where each partition of a collective lies in a rank's buffers: spans of elements, the split of a
// count into shards, and the per-rank shape of a call. Plain C++ with no CUDA and no I/O.
//
// A shape follows from the declaration's layouts:
//  packed:                one span;
//  scattered, transposed: n spans indexed by rank (input: partition k is meant for rank k; output:
//                         partition s came from rank s).
// A rank that takes no part on one side (it is not the root where only the root produces or
// consumes) has no spans on that side.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/declaration.h"

namespace purlin::coll {

// A run of elements in one rank's buffer, counted in elements from the buffer's start.
struct Span {
  std::uint64_t offset = 0;
  std::uint64_t count = 0;

  constexpr std::uint64_t end() const { return offset + count; }
  friend constexpr bool operator==(const Span&, const Span&) = default;
};

// Shard k of count elements cut into n shards: every shard but the tail holds ceil(count / n)
// elements rounded up to a multiple of align_elems, so every non-empty shard starts on an aligned
// element (an align_elems of 0 counts as 1). Shards are contiguous and cover [0, count) exactly;
// the last ones may be empty, in which case they sit at offset count. Needs n >= 1, 0 <= k < n.
constexpr Span uniform_split(std::uint64_t count, int n, int k, std::uint64_t align_elems) {
  if (align_elems == 0) align_elems = 1;
  const auto ranks = static_cast<std::uint64_t>(n);
  const auto index = static_cast<std::uint64_t>(k);
  std::uint64_t per = count / ranks + (count % ranks != 0 ? 1 : 0);
  per = (per / align_elems + (per % align_elems != 0 ? 1 : 0)) * align_elems;
  // index * per written so that it cannot overflow when the shard lies past the end.
  const std::uint64_t offset = per == 0 || index > count / per ? count : std::min(index * per, count);
  return {offset, std::min(per, count - offset)};
}

// The alignment of the shards a composed collective cuts its buffers into (AllReduce, Broadcast,
// Reduce; within a host, the hierarchical plans): every non-empty shard starts on a 256-byte
// boundary, which suits the vector accesses of every datapath. In elements of `elem_bytes`.
inline constexpr std::uint64_t kShardAlignBytes = 256;
constexpr std::uint64_t shard_align_elems(std::uint64_t elem_bytes) {
  return elem_bytes == 0 || elem_bytes >= kShardAlignBytes ? 1 : kShardAlignBytes / elem_bytes;
}

// The partitions of one rank's buffers for one call. For a composed declaration Compose<F, G>,
// mid is F's output at this rank, which G consumes in place as its input; plain declarations leave
// it empty. Moves name offsets in the rank's input buffer (in) and its output buffer (out).
struct Shape {
  std::vector<Span> in;
  std::vector<Span> mid;
  std::vector<Span> out;
};

// The number of elements a buffer must hold to contain all of its spans.
inline std::uint64_t extent(std::span<const Span> spans) {
  std::uint64_t end = 0;
  for (const Span& s : spans) end = s.count != 0 && s.end() > end ? s.end() : end;
  return end;
}

// Partitions given at run time (V collectives, Send/Recv groups): counts[k] elements at offsets[k].
inline std::vector<Span> partitions(std::span<const std::uint64_t> counts,
                                    std::span<const std::uint64_t> offsets) {
  std::vector<Span> spans(counts.size());
  for (std::size_t k = 0; k < counts.size(); ++k) spans[k] = {offsets[k], counts[k]};
  return spans;
}

// Partitions laid end to end from offset 0, counts[k] elements each.
inline std::vector<Span> contiguous(std::span<const std::uint64_t> counts) {
  std::vector<Span> spans(counts.size());
  std::uint64_t offset = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    spans[k] = {offset, counts[k]};
    offset += counts[k];
  }
  return spans;
}

// Whether the root alone produces or consumes: Compose<F, G> produces where F does and consumes
// where G does.
template <class D>
constexpr bool produces(int rank, int root) {
  if constexpr (D::composed) {
    return produces<typename D::first>(rank, root);
  } else {
    return D::root != Root::producer || rank == root;
  }
}

template <class D>
constexpr bool consumes(int rank, int root) {
  if constexpr (D::composed) {
    return consumes<typename D::second>(rank, root);
  } else {
    return D::root != Root::consumer || rank == root;
  }
}

// Whether a call of D takes a root argument.
template <class D>
constexpr bool rooted() {
  if constexpr (D::composed) {
    return rooted<typename D::first>() || rooted<typename D::second>();
  } else {
    return D::root != Root::none;
  }
}

namespace detail {

// Plain uniform rule: each block holds count elements; a packed buffer is one block at offset 0,
// a scattered or transposed buffer lays n blocks end to end in rank order.
template <Layout L>
std::vector<Span> blocks(int n, std::uint64_t count) {
  if constexpr (L == Layout::packed) {
    return {Span{0, count}};
  } else {
    std::vector<Span> spans(static_cast<std::size_t>(n));
    for (int k = 0; k < n; ++k) spans[static_cast<std::size_t>(k)] = {static_cast<std::uint64_t>(k) * count, count};
    return spans;
  }
}

// Composed uniform rule: count elements cut into n shards; a scattered or transposed buffer holds
// shard k as partition k, and a packed buffer at rank r is shard r in place, at the shard's own
// offset (so the intermediate of AllReduce sits inside the output buffer where AllGather reads it).
template <Layout L>
std::vector<Span> shards(int n, int rank, std::uint64_t count, std::uint64_t align_elems) {
  if constexpr (L == Layout::packed) {
    return {uniform_split(count, n, rank, align_elems)};
  } else {
    std::vector<Span> spans(static_cast<std::size_t>(n));
    for (int k = 0; k < n; ++k) spans[static_cast<std::size_t>(k)] = uniform_split(count, n, k, align_elems);
    return spans;
  }
}

}  // namespace detail

// The shape of rank `rank` in a uniform call of D on n ranks (root ignored where D has no root).
//  plain D:    count is the count of one block, as NCCL counts it: AllGather's sendcount,
//              ReduceScatter's recvcount, AllToAll's per-peer count, Scatter's and Gather's
//              per-rank count.
//  composed D: count is the whole buffer (AllReduce, Broadcast, Reduce), cut into n shards by
//              uniform_split with align_elems.
template <class D>
Shape uniform_shape(int n, int rank, std::uint64_t count, int root = 0, std::uint64_t align_elems = 1) {
  static_assert(D::sizes == Sizes::uniform, "a V collective takes its partitions at run time");
  Shape shape;
  if constexpr (D::composed) {
    using F = typename D::first;
    using G = typename D::second;
    if (produces<F>(rank, root)) shape.in = detail::shards<F::input>(n, rank, count, align_elems);
    if (consumes<F>(rank, root)) shape.mid = detail::shards<F::output>(n, rank, count, align_elems);
    if (consumes<G>(rank, root)) shape.out = detail::shards<G::output>(n, rank, count, align_elems);
  } else {
    if (produces<D>(rank, root)) shape.in = detail::blocks<D::input>(n, count);
    if (consumes<D>(rank, root)) shape.out = detail::blocks<D::output>(n, count);
  }
  return shape;
}

// Every rank's shape, indexed by rank.
template <class D>
std::vector<Shape> uniform_shapes(int n, std::uint64_t count, int root = 0, std::uint64_t align_elems = 1) {
  std::vector<Shape> shapes;
  shapes.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) shapes.push_back(uniform_shape<D>(n, r, count, root, align_elems));
  return shapes;
}

}  // namespace purlin::coll
