// The flat form's list of a step's words (atom/word_list.h): every packet of every live message is
// exactly one item, in order, whatever the table.
#include <cstdint>
#include <random>
#include <set>
#include <utility>

#include "atom/word_list.h"
#include "test/catch.h"

namespace {

struct Msg {
  std::uint64_t bytes = 0;
};

template <int N>
void check_table(std::mt19937_64& rng) {
  Msg table[N];
  bool live[N];
  std::uint32_t want = 0;
  for (int s = 0; s < N; ++s) {
    live[s] = rng() % 3 != 0;
    const std::uint64_t pick = rng() % 4;
    table[s].bytes = pick == 0 ? 0 : pick == 1 ? 1 + rng() % 15 : 8 * (1 + rng() % 3000) + (pick == 3 ? rng() % 8 : 0);
    if (live[s]) want += table[s].bytes ? static_cast<std::uint32_t>((table[s].bytes + 7) / 8) : 1;
  }
  std::uint32_t end[N];
  const std::uint32_t total = purlin::atom::word_list_ends<N>(table, live, end);
  REQUIRE(total == want);
  std::set<std::pair<int, std::uint32_t>> seen;
  int last_s = 0;
  std::uint32_t last_q = 0;
  for (std::uint32_t i = 0; i < total; ++i) {
    int s = -1;
    std::uint32_t q = 0;
    purlin::atom::word_list_locate<N>(i, end, &s, &q);
    REQUIRE(s >= 0);
    REQUIRE(s < N);
    REQUIRE(live[s]);
    REQUIRE(q < purlin::atom::ll_packets(table[s].bytes));
    REQUIRE(seen.insert({s, q}).second);
    // In order: message after message, packets rising.
    if (i > 0) REQUIRE((s > last_s || (s == last_s && q == last_q + 1)));
    last_s = s;
    last_q = q;
  }
  CHECK(seen.size() == total);
}

}  // namespace

TEST_CASE("the flat list names every packet of every live message once, in order", "[atom][word_list]") {
  std::mt19937_64 rng(0x5eed1234u);
  for (int trial = 0; trial < 300; ++trial) {
    check_table<2>(rng);
    check_table<4>(rng);
    check_table<8>(rng);
  }
}

TEST_CASE("the flat list of no live message is empty, and one message is its packets", "[atom][word_list]") {
  Msg table[4] = {{64}, {0}, {9}, {16}};
  bool none[4] = {false, false, false, false};
  std::uint32_t end[4];
  CHECK(purlin::atom::word_list_ends<4>(table, none, end) == 0);
  bool one[4] = {false, false, true, false};
  REQUIRE(purlin::atom::word_list_ends<4>(table, one, end) == 2);
  int s = -1;
  std::uint32_t q = 9;
  purlin::atom::word_list_locate<4>(1, end, &s, &q);
  CHECK(s == 2);
  CHECK(q == 1);
  bool empty[4] = {false, true, false, false};
  REQUIRE(purlin::atom::word_list_ends<4>(table, empty, end) == 1);  // an empty message is one packet
  purlin::atom::word_list_locate<4>(0, end, &s, &q);
  CHECK(s == 1);
  CHECK(q == 0);
}
