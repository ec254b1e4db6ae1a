// The tests' one seeded generator: splitmix64, counter-based, so element i of a seeded input costs
// one hash to recompute anywhere (a rank, its peers' checkers, a host reference).
#pragma once

#include <cstdint>

namespace rng {

// splitmix64's finaliser: a bijection of 64-bit words that mixes every input bit into every output bit.
inline std::uint64_t finalise(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The generator's output for counter x.
inline std::uint64_t splitmix(std::uint64_t x) { return finalise(x + 0x9E3779B97F4A7C15ull); }

}  // namespace rng
