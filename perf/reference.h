// Seeded inputs and host-computed expected outputs for one call of a collective on one rank.
// Every rank can regenerate every other rank's input from the seed, so each rank checks its own
// output without any data moving outside the library under test.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collective.h"
#include "element.h"

namespace perf {

// splitmix64: a counter-based generator, so element i of rank k costs one hash to recompute.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
class Reference {
 public:
  using E = Element<T>;

  // `seed` distinguishes rows and the in-place and out-of-place calls of a row.
  Reference(const Collective& coll, const Counts& counts, Op op, int rank, int nranks, int root,
            std::uint64_t seed)
      : coll_(coll), counts_(counts), op_(op), rank_(rank), nranks_(nranks), root_(root),
        seed_(seed) {}

  // Element i of rank k's send buffer.
  T input(int k, std::size_t i) const {
    return E::make(mix(seed_ ^ (static_cast<std::uint64_t>(k) << 48) ^ i), op_, nranks_);
  }

  // This rank's send buffer. With `distinct` smaller than the buffer, its first `distinct`
  // elements repeat: enough for timing alone, and far cheaper to build for large buffers.
  std::vector<T> inputs(std::size_t distinct = SIZE_MAX) const {
    std::vector<T> values(counts_.send);
    const std::size_t generated = std::min(std::max<std::size_t>(distinct, 1), values.size());
    for (std::size_t i = 0; i < generated; ++i) values[i] = input(rank_, i);
    for (std::size_t i = generated; i < values.size(); ++i) values[i] = values[i - generated];
    return values;
  }

  // This rank's receive buffer after a correct call (empty when the call writes none).
  std::vector<T> expected() const {
    if (!coll_.writes_output(rank_, root_)) return {};
    std::vector<T> values(counts_.recv);
    for (std::size_t i = 0; i < values.size(); ++i) {
      Source s = coll_.source(i, counts_, rank_, nranks_, root_);
      values[i] = s.rank == Source::kAllRanks ? reduced(s.index) : input(s.rank, s.index);
    }
    return values;
  }

  // The library's order: rank 0 first, accumulating in E::Acc, avg dividing at the end. A
  // PreMulSum contribution is rank k's input times rank k's own scalar, rounded to T.
  T reduced(std::size_t index) const {
    auto contribution = [&](int k) {
      auto v = E::load(input(k, index));
      return op_ == Op::premulsum ? E::load(E::store(E::combine(Op::prod, v, E::load(E::premul_scalar(k))))) : v;
    };
    auto acc = contribution(0);
    for (int k = 1; k < nranks_; ++k) acc = E::combine(op_, acc, contribution(k));
    if (op_ == Op::avg) acc = E::divide(acc, nranks_);
    return E::store(acc);
  }

 private:
  const Collective& coll_;
  Counts counts_;
  Op op_;
  int rank_, nranks_, root_;
  std::uint64_t seed_;
};

// The number of elements of `got` that differ from `want`. Copies, max and min must be bit-exact;
// sums, products and averages of floats over nranks inputs may differ within the type's tolerance
// for that many (Element<T>::close).
template <class T>
std::uint64_t count_wrong(const std::vector<T>& got, const std::vector<T>& want, Op op, int nranks) {
  const bool exact = op == Op::none || op == Op::max || op == Op::min;
  std::uint64_t wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool right = exact ? std::memcmp(&got[i], &want[i], sizeof(T)) == 0
                             : Element<T>::close(got[i], want[i], nranks);
    if (!right) ++wrong;
  }
  return wrong;
}

}  // namespace perf
