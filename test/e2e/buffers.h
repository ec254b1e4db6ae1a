// Test buffers described by where each element comes from, before a call and after it.
//
// A region is one user buffer (or, in place, the one buffer that holds both the input and the
// output). Every element of it is poison (0xA5 bytes), some rank's seeded input element, or the
// reduction over ranks of an input element. `before` says what the test writes before the call,
// `after` what the call must leave; elements that no `after` segment covers must keep their
// `before` content. Around each region lie guard bytes of poison that the call must not touch.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness.h"
#include "reference.h"

namespace e2e {

inline constexpr unsigned char kPoison = 0xA5;
inline constexpr std::size_t kGuardBytes = 1024;

enum class Source { poison, input, reduced };

struct Segment {
  std::size_t at;    // first element of the region it covers
  std::size_t len;   // elements
  Source source;
  int rank;          // input: whose input
  std::size_t from;  // input, reduced: index of the first input element
};

inline Segment input_at(std::size_t at, std::size_t len, int rank, std::size_t from) {
  return {at, len, Source::input, rank, from};
}
inline Segment reduced_at(std::size_t at, std::size_t len, std::size_t from) {
  return {at, len, Source::reduced, 0, from};
}

struct RegionSpec {
  std::size_t elems = 0;
  std::vector<Segment> before;
  std::vector<Segment> after;
};

// What the sources mean in one case.
template <class T>
struct Content {
  Inputs inputs;
  int nranks;
  Op op;
  std::uint64_t scalars = 0;  // premulsum: the seed of the ranks' scalars (rank_scalar)

  typename T::Storage scalar(int rank) const { return rank_scalar<T>(scalars, rank); }
};

// Memory for the regions of one case, each with guards of its own: mapped once, reused by every
// case (reset), handed out front to back.
class Slab {
 public:
  explicit Slab(std::size_t capacity) : bytes_(capacity) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of a test slab failed");
    base_ = static_cast<std::byte*>(p);
  }
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;
  ~Slab() { ::munmap(base_, bytes_); }

  // Room a slab needs for regions of these sizes in bytes.
  static std::size_t room(std::initializer_list<std::size_t> region_bytes) {
    std::size_t total = 0;
    for (std::size_t b : region_bytes) total += b + kOverhead;
    return total;
  }

  void reset() { used_ = 0; }

  // The start of a new region of `bytes`, `misalign` bytes (a multiple of the element size, below
  // 64) past a 64-byte boundary, with kGuardBytes free on both sides.
  std::byte* take(std::size_t bytes, std::size_t misalign) {
    const std::size_t start = used_ + kGuardBytes + misalign;
    const std::size_t end = (start + bytes + kGuardBytes + 63) / 64 * 64;
    if (misalign >= 64 || end > bytes_) throw std::runtime_error("test slab too small");
    used_ = end;
    return base_ + start;
  }

 private:
  static constexpr std::size_t kOverhead = 2 * kGuardBytes + 128;
  std::size_t bytes_;
  std::byte* base_;
  std::size_t used_ = 0;
};

// Writes the guards, poison and the `before` content.
template <class T>
void prepare(std::byte* data, const RegionSpec& spec, const Content<T>& content) {
  using S = typename T::Storage;
  std::memset(data - kGuardBytes, kPoison, spec.elems * sizeof(S) + 2 * kGuardBytes);
  for (const Segment& s : spec.before) {
    if (s.source == Source::input) {
      content.inputs.template fill<T>(reinterpret_cast<S*>(data) + s.at, s.rank, s.from, s.len);
    } else if (s.source == Source::reduced) {
      reduce_reference<T>(reinterpret_cast<S*>(data) + s.at, content.inputs, content.nranks, content.op,
                          content.scalars, s.from, s.len);
    }
  }
}

namespace detail {

inline const Segment* covering(const std::vector<Segment>& segs, std::size_t i) {
  const Segment* found = nullptr;
  for (const Segment& s : segs) {
    if (i >= s.at && i < s.at + s.len) found = &s;  // the last one wins
  }
  return found;
}

inline std::string source_text(const Segment* s, std::size_t i) {
  if (!s) return "poison (untouched)";
  const std::size_t idx = s->from + (i - s->at);
  if (s->source == Source::input) return "rank " + std::to_string(s->rank) + "'s input[" + std::to_string(idx) + "]";
  if (s->source == Source::reduced) return "reduction of input[" + std::to_string(idx) + "]";
  return "poison (untouched)";
}

template <class T>
bool same(typename T::Storage a, typename T::Storage b) {
  if (std::memcmp(&a, &b, sizeof a) == 0) return true;
  return std::isnan(T::value(a)) && std::isnan(T::value(b));  // NaN stays NaN, payload free
}

}  // namespace detail

// Checks every element of the region and its guards; reports the first mismatches under `label`.
// Returns true when everything matched.
template <class T>
bool verify(const std::byte* data, const RegionSpec& spec, const Content<T>& content, std::string_view label,
            Reporter& report) {
  using S = typename T::Storage;
  bool ok = true;
  const auto* got = reinterpret_cast<const S*>(data);

  // Intervals of uniform origin.
  std::vector<std::size_t> cuts{0, spec.elems};
  for (const auto* list : {&spec.before, &spec.after}) {
    for (const Segment& s : *list) {
      cuts.push_back(std::min(s.at, spec.elems));
      cuts.push_back(std::min(s.at + s.len, spec.elems));
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  constexpr std::size_t kChunk = 16384;
  static thread_local std::vector<S> expect;
  expect.resize(kChunk);
  std::size_t wrong = 0;
  std::string first;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::size_t lo = cuts[c], hi = cuts[c + 1];
    const Segment* seg = detail::covering(spec.after, lo);
    if (!seg) seg = detail::covering(spec.before, lo);
    for (std::size_t i = lo; i < hi; i += kChunk) {
      const std::size_t n = std::min(kChunk, hi - i);
      const std::size_t from = seg ? seg->from + (i - seg->at) : 0;
      if (!seg || seg->source == Source::poison) {
        std::memset(expect.data(), kPoison, n * sizeof(S));
      } else if (seg->source == Source::input) {
        content.inputs.template fill<T>(expect.data(), seg->rank, from, n);
      } else {
        reduce_reference<T>(expect.data(), content.inputs, content.nranks, content.op, content.scalars, from, n);
      }
      if (std::memcmp(expect.data(), got + i, n * sizeof(S)) == 0) continue;
      for (std::size_t j = 0; j < n; ++j) {
        if (detail::same<T>(expect[j], got[i + j])) continue;
        if (wrong < 3) {
          first += "\n    element " + std::to_string(i + j) + " (" + detail::source_text(seg, i + j) +
                   "): expected " + describe<T>(expect[j]) + ", got " + describe<T>(got[i + j]);
        }
        ++wrong;
      }
    }
  }
  if (wrong > 0) {
    report.fail(std::string(label) + ": " + std::to_string(wrong) + " of " + std::to_string(spec.elems) +
                " elements wrong" + first);
    ok = false;
  }

  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  const std::size_t region_bytes = spec.elems * sizeof(S);
  for (std::size_t k = 0; k < kGuardBytes; ++k) {
    if (bytes[-static_cast<std::ptrdiff_t>(kGuardBytes) + static_cast<std::ptrdiff_t>(k)] != kPoison) {
      report.fail(std::string(label) + ": guard byte " + std::to_string(kGuardBytes - k) +
                  " before the buffer was written");
      ok = false;
      break;
    }
  }
  for (std::size_t k = 0; k < kGuardBytes; ++k) {
    if (bytes[region_bytes + k] != kPoison) {
      report.fail(std::string(label) + ": guard byte " + std::to_string(k) + " after the buffer (" +
                  std::to_string(spec.elems) + " elements) was written");
      ok = false;
      break;
    }
  }
  return ok;
}

// One region placed in a slab and prepared.
template <class T>
struct Placed {
  std::byte* data;
  RegionSpec spec;

  Placed(Slab& slab, RegionSpec s, const Content<T>& content, std::uint64_t placement = 0) : spec(std::move(s)) {
    data = slab.take(spec.elems * sizeof(typename T::Storage), (placement % 4) * sizeof(typename T::Storage));
    prepare<T>(data, spec, content);
  }
  bool check(const Content<T>& content, std::string_view label, Reporter& report) const {
    return verify<T>(data, spec, content, label, report);
  }
};

}  // namespace e2e
