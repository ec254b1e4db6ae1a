// The model of chains of separate Send/Recv calls (test/common/chains.h): which chains it completes,
// at which buffering depth, and that the generator only yields chains it completes.
#include "test/catch.h"
#include "test/common/chains.h"

TEST_CASE("chains: the deep chain needs exactly its depth of buffered sends", "[chains]") {
  for (int n : {2, 3, 8}) {
    const chains::Chain eight = chains::deep_chain(n);
    CHECK(chains::completes(eight));
    CHECK(!chains::completes(eight, chains::kBufferedBytes, chains::kBufferedDepth - 1));
    CHECK(!chains::completes(chains::deep_chain(n, chains::kBufferedDepth + 1)));
    CHECK(chains::needs_buffering(eight));
  }
}

TEST_CASE("chains: nothing completes a chain whose large send is never received", "[chains]") {
  chains::Chain c(2);
  c[0] = {{true, 1, (std::size_t{8} << 20) / 4, 0}, {false, 1, 300, 1}};
  c[1] = {{true, 0, (std::size_t{8} << 20) / 4, 1}, {false, 0, 300, 0}};
  CHECK(!chains::completes(c));
  // Small sends are buffered: the same exchange of 300 elements completes.
  c[0][0].count = 300;
  c[1][0].count = 300;
  CHECK(chains::completes(c));
}

TEST_CASE("chains: the fixed chains and every generated chain complete under the model", "[chains]") {
  CHECK(chains::completes(chains::readme_chain(4)));
  CHECK(!chains::completes(chains::readme_chain(4), 300 * 4));
  CHECK(chains::completes(chains::two_buffered_chain(3)));
  int needing = 0;
  for (int n : {2, 3, 4, 8})
    for (std::uint64_t seed = 1; seed < 200; ++seed) {
      const chains::Chain c = chains::random_chain(seed, n);
      REQUIRE(chains::completes(c));
      needing += chains::needs_buffering(c) ? 1 : 0;
    }
  CHECK(needing > 50);
}
