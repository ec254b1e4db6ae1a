// The data movement a declaration implies: which elements of which rank's input end up where in
// which rank's output, derived from the layouts alone. Plain C++ with no CUDA and no I/O; it is the
// specification the orchestration is checked against, not the path it runs.
//
// The rules, with B[s][d] the block producer s contributes for consumer d (its whole input when
// the input is packed, its input partition d when scattered):
//  packed output, reduce: consumer d's output is the fold of B[s][d] over the producers s, in
//                         rank order;
//  packed output, copy:   consumer d's output is B[root][d] (the root is the only producer);
//  scattered, transposed: consumer d's output partition s is B[s][d], for each producer s.
// A composed declaration Compose<F, G> runs F into each rank's intermediate (Shape::mid) and G from
// it; its moves go straight from the original inputs to the final outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collectives/declaration.h"
#include "collectives/geometry.h"

namespace purlin::coll {

// count elements from src_rank's input buffer at src_offset to dst_rank's output buffer at
// dst_offset. Copies overwrite. The reduce moves that land on the same elements form one reduction:
// those elements become the fold of the moves' sources in the order the moves are listed (rank
// order); what the output held before takes no part.
struct Move {
  int src_rank = 0;
  std::uint64_t src_offset = 0;
  int dst_rank = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t count = 0;
  bool reduce = false;

  friend bool operator==(const Move&, const Move&) = default;
};

// The moves of one call, or why the shapes given do not fit together (then moves is empty).
// Moves of zero elements are left out.
struct Movement {
  std::vector<Move> moves;
  std::string error;

  bool ok() const { return error.empty(); }
};

namespace detail {

using Side = std::vector<Span> Shape::*;

inline std::string rank_text(int rank) { return "rank " + std::to_string(rank); }

// Checks that every rank taking part on a side has the spans its layout asks for.
template <Layout L>
bool check_side(int n, std::span<const Shape> shapes, Side side, const char* what, bool (*takes_part)(int, int),
                int root, std::string& error) {
  const std::size_t want = L == Layout::packed ? 1 : static_cast<std::size_t>(n);
  for (int r = 0; r < n; ++r) {
    const auto& spans = shapes[static_cast<std::size_t>(r)].*side;
    if (takes_part(r, root) && spans.size() != want) {
      error = rank_text(r) + ": " + what + " has " + std::to_string(spans.size()) + " partitions, the layout needs " +
              std::to_string(want);
      return false;
    }
  }
  return true;
}

// The moves of a plain declaration D from each rank's `in` side to its `out` side, destination by
// destination, sources in rank order.
template <class D>
bool plain_moves(int n, int root, std::span<const Shape> shapes, Side in, Side out, std::vector<Move>& moves,
                 std::string& error) {
  static_assert(!D::composed);
  if (!check_side<D::input>(n, shapes, in, "the input", &produces<D>, root, error)) return false;
  if (!check_side<D::output>(n, shapes, out, "the output", &consumes<D>, root, error)) return false;

  // B[s][d]: all of a packed input, or partition d of a scattered one.
  auto block = [&](int s, int d) {
    const auto& spans = shapes[static_cast<std::size_t>(s)].*in;
    if constexpr (D::input == Layout::packed) {
      return spans[0];
    } else {
      return spans[static_cast<std::size_t>(d)];
    }
  };
  // Where B[s][d] lands at d: all of a packed output, or partition s of a scattered or transposed one.
  auto slot = [&](int s, int d) {
    const auto& spans = shapes[static_cast<std::size_t>(d)].*out;
    if constexpr (D::output == Layout::packed) {
      return spans[0];
    } else {
      return spans[static_cast<std::size_t>(s)];
    }
  };
  auto add = [&](int s, int d) {
    const Span src = block(s, d);
    const Span dst = slot(s, d);
    if (src.count != dst.count) {
      error = rank_text(s) + " contributes " + std::to_string(src.count) + " elements for " + rank_text(d) +
              ", whose partition holds " + std::to_string(dst.count);
      return false;
    }
    if (src.count != 0) moves.push_back({s, src.offset, d, dst.offset, src.count, D::consume == Consume::reduce});
    return true;
  };

  // A packed copy output has the root as its only producer (declaration.h insists), so one loop
  // serves the fold, the single copy and the rank-indexed slots alike.
  for (int d = 0; d < n; ++d) {
    for (int s = 0; s < n; ++s) {
      if (consumes<D>(d, root) && produces<D>(s, root) && !add(s, d)) return false;
    }
  }
  return true;
}

// Chains F's moves (input -> intermediate) with G's (intermediate -> output): each element G reads
// from an intermediate is replaced by the moves that wrote it there, in their order.
inline std::vector<Move> chain(int n, const std::vector<Move>& first, const std::vector<Move>& second) {
  std::vector<std::vector<Move>> into(static_cast<std::size_t>(n));
  for (const Move& f : first) into[static_cast<std::size_t>(f.dst_rank)].push_back(f);

  std::vector<Move> moves;
  for (const Move& g : second) {
    for (const Move& f : into[static_cast<std::size_t>(g.src_rank)]) {
      const std::uint64_t lo = std::max(f.dst_offset, g.src_offset);
      const std::uint64_t hi = std::min(f.dst_offset + f.count, g.src_offset + g.count);
      if (lo >= hi) continue;
      moves.push_back({f.src_rank, f.src_offset + (lo - f.dst_offset), g.dst_rank, g.dst_offset + (lo - g.src_offset),
                       hi - lo, f.reduce || g.reduce});
    }
  }
  return moves;
}

}  // namespace detail

// The moves of one call of D on n ranks, given every rank's shape (indexed by rank) and the root.
template <class D>
Movement movement(int n, std::span<const Shape> shapes, int root = 0) {
  Movement m;
  if (n < 1 || shapes.size() != static_cast<std::size_t>(n)) {
    m.error = "expected one shape per rank for " + std::to_string(n) + " ranks, got " + std::to_string(shapes.size());
    return m;
  }
  if (rooted<D>() && (root < 0 || root >= n)) {
    m.error = "root " + std::to_string(root) + " is not a rank (nranks " + std::to_string(n) + ")";
    return m;
  }

  bool ok = true;
  if constexpr (!D::composed) {
    ok = detail::plain_moves<D>(n, root, shapes, &Shape::in, &Shape::out, m.moves, m.error);
  } else {
    using F = typename D::first;
    using G = typename D::second;
    // A fold of folds is not a flat rank-ordered fold, so only one part may reduce.
    static_assert(F::consume == Consume::copy || G::consume == Consume::copy,
                  "a composition reduces in one of its parts only");
    // G produces from the intermediate, so it may only produce where F has consumed.
    static_assert(F::root != Root::consumer || G::root == Root::producer,
                  "after a part consumed at the root alone, the next produces at the root alone");
    std::vector<Move> first;
    std::vector<Move> second;
    ok = detail::plain_moves<F>(n, root, shapes, &Shape::in, &Shape::mid, first, m.error) &&
         detail::plain_moves<G>(n, root, shapes, &Shape::mid, &Shape::out, second, m.error);
    if (ok) m.moves = detail::chain(n, first, second);
  }
  if (!ok) m.moves.clear();
  return m;
}

}  // namespace purlin::coll
