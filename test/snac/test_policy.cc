// Policy tables (snac/runtime/policy.h): parsing, the choice among matching entries, and a file given by
// PURLIN_POLICY_FILE (this test's meson entry points it at policy_example.txt).
#include <string>
#include <vector>

#include "snac/executors/datapaths.h"
#include "snac/runtime/policy.h"
#include "test/catch.h"

using purlin::snac::host_policy_recipe;
using purlin::snac::Regime;
using purlin::snac::sm_policy_recipe;
using purlin::snac::match_policy;
using purlin::snac::parse_policy_table;
using purlin::snac::policy_for;
using purlin::snac::PolicyEntry;

TEST_CASE("policy tables parse, and the most specific matching entry wins", "[policy]") {
  std::vector<std::string> errors;
  const auto table = parse_policy_table(
      "# comment\n"
      "sm * * * chunk_bytes=1M\n"
      "sm sm_90 * 8 channels=4 latency_max_bytes=none\n"
      "sm sm_90 2 8 slots=6   # a comment after an entry\n"
      "sm sm_90 * 8 channels=5\n"
      "\n"
      "gpu sm_90 1 2 slots=4\n"
      "sm sm_9x 1 2 slots=4\n"
      "sm sm_90 1\n"
      "sm sm_90 1 2 slots=0\n"
      "sm sm_90 1 2 colour=blue\n"
      "sm sm_90 1 2 chunk_bytes=lots\n",
      &errors);
  REQUIRE(table.size() == 4);
  CHECK(errors.size() == 6);
  CHECK(table[1].latency_max_bytes == 0);
  CHECK(table[0].chunk_bytes == (1 << 20));
  // sm_90, 8 ranks, 4 per GPU: lines 3 and 5 name three fields each; the later one wins.
  const PolicyEntry* e = match_policy(table, "sm", 90, 4, 8);
  REQUIRE(e);
  CHECK(e->line == 5);
  CHECK(e->channels == 5);
  // Two per GPU: line 4 names all four.
  e = match_policy(table, "sm", 90, 2, 8);
  REQUIRE(e);
  CHECK(e->slots == 6);
  // Another architecture: only the catch-all.
  e = match_policy(table, "sm", 100, 2, 8);
  REQUIRE(e);
  CHECK(e->line == 2);
  CHECK(match_policy(table, "host", 0, 1, 4) == nullptr);
}

TEST_CASE("PURLIN_POLICY_FILE overrides the built-in policy, and names the entry", "[policy]") {
  const auto four = policy_for(host_policy_recipe(), Regime{4, 1, 0});
  CHECK(four.chunk_bytes == (64u << 10));
  CHECK(four.slots == 4);  // one entry applies: line 3 sets no slots, so the built-in 4 stays
  CHECK(four.latency_max_bytes == 2048);
  CHECK(four.direct_max_bytes == 0);
  CHECK(four.broadcast_direct_max_bytes == (8u << 10));  // Broadcast has a bound of its own
  CHECK(four.name.find("policy_example.txt:3") != std::string::npos);
  const auto two = policy_for(host_policy_recipe(), Regime{2, 1, 0});
  CHECK(two.chunk_bytes == (128u << 10));
  CHECK(two.name.find("policy_example.txt:2") != std::string::npos);
  // Line 5 does not parse and line 6's slots=99 is out of range: both skipped.
  const auto sm = policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90});
  CHECK(sm.workers == 4);
  CHECK(sm.channel_bytes == (32u << 10));
}

TEST_CASE("the built-in SM policy caps channels by the ranks sharing a GPU", "[policy]") {
  // 132 multiprocessors of 2 CTAs each, up to three roles per channel, a quarter of the slots kept
  // free: 66 channels would fit one rank per GPU.
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 1, 132, 2, 90}).workers == 64);  // a GPU per rank: NVLink wants CTAs
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90}).workers == 8);   // ranks sharing a GPU
  CHECK(policy_for(sm_policy_recipe(), Regime{1, 1, 132, 2, 90}).workers == 8);   // one rank alone
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 1, 16, 2, 90}).workers == 8);    // a small GPU: what fits
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 1, 132, 2, 90}).channel_bytes == (4u << 10));  // a channel per 4 KiB
}

TEST_CASE("the exchange's channels fit two kernels of every rank sharing the GPU", "[policy]") {
  // 132 multiprocessors hold 264 exchange CTAs: 8 ranks of 16 channels, two kernels each.
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90}).exchange_channels == 16);
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90}).exchange_channels == 64);
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 1, 132, 2, 90}).exchange_channels == 64);
  // A GPU of 16 multiprocessors: 32 CTAs, two kernels of 8 ranks of 2 channels.
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 16, 2, 90}).exchange_channels == 2);
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 4, 16, 2, 90}).exchange_channels == 4);
}

TEST_CASE("zero-staging's CTAs of every rank sharing the GPU fit it at once", "[policy]") {
  // About 128 CTAs over the sharing ranks, at most what the GPU holds with them all resident.
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90}).zero_staging_ctas == 16);
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90}).zero_staging_ctas == 32);
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90}).zero_staging_ctas == 64);
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 1, 132, 2, 90}).zero_staging_ctas == 64);
  // At zero-staging's own residency (unknown: one per multiprocessor), not the generic kernels'.
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 16, 2, 90}).zero_staging_ctas == 2);
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 16, 2, 90, 2}).zero_staging_ctas == 4);
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 100, 4, 90, 1}).zero_staging_ctas == 12);
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90}).zero_staging_min_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90}).zero_staging_min_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90}).zero_staging_rooted_min_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{1, 1, 132, 2, 90}).zero_staging_min_bytes == 0);  // one rank: nothing to share
  // Broadcast and Reduce from 512 KiB with 5 or more ranks (the exchange takes them below 1 MiB
  // with fewer).
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90}).zero_staging_rooted_min_bytes == (512u << 10));
  CHECK(policy_for(sm_policy_recipe(), Regime{5, 1, 132, 2, 90}).zero_staging_rooted_min_bytes == (512u << 10));
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90}).zero_staging_rooted_min_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{1, 1, 132, 2, 90}).zero_staging_rooted_min_bytes == 0);
  // With more than 2 ranks calls below the zero-staging bound of 1 MiB (only Broadcast and Reduce
  // get there) run a quarter of the CTAs, calls below 8 MiB (up to 4 ranks) or 4 MiB (more) half.
  const auto eight = policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90});
  CHECK(eight.zero_staging_ctas == 16);
  CHECK(eight.zero_staging_below_ctas == 4);
  CHECK(eight.zero_staging_small_ctas == 8);
  CHECK(eight.zero_staging_full_bytes == (4u << 20));
  const auto small_gpu = policy_for(sm_policy_recipe(), Regime{8, 8, 16, 2, 90});
  CHECK(small_gpu.zero_staging_below_ctas == 1);
  CHECK(small_gpu.zero_staging_small_ctas == 1);
  const auto four = policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90});
  CHECK(four.zero_staging_ctas == 32);
  CHECK(four.zero_staging_below_ctas == 8);
  CHECK(four.zero_staging_small_ctas == 16);
  CHECK(four.zero_staging_full_bytes == (8u << 20));
  // With 2 ranks half of them below 8 MiB, below the bound too, on one GPU or two.
  for (const int sharing : {1, 2}) {
    const auto two = policy_for(sm_policy_recipe(), Regime{2, sharing, 132, 2, 90});
    CHECK(two.zero_staging_ctas == 64);
    CHECK(two.zero_staging_below_ctas == 32);
    CHECK(two.zero_staging_small_ctas == 32);
    CHECK(two.zero_staging_full_bytes == (8u << 20));
  }
}

TEST_CASE("AllReduce leaves the exchange for zero-staging past the exchange's message bound with 2 ranks", "[policy]") {
  // With 2 ranks the exchange runs AllReduce of more than 1 MiB as two exchanges in a row.
  const auto two = policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90});
  REQUIRE(two.exchange_max_bytes == (1u << 20));
  CHECK(two.zero_staging_all_reduce_min_bytes == (1u << 20) + 1);
  CHECK(two.zero_staging_min_bytes == (2u << 20));
  // With more ranks AllReduce keeps the bound of the others.
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90}).zero_staging_all_reduce_min_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90}).zero_staging_all_reduce_min_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{1, 1, 132, 2, 90}).zero_staging_all_reduce_min_bytes == 0);
}

TEST_CASE("the copy engines move AlltoAll, Gather, Scatter and Send/Recv where measured faster", "[policy]") {
  // 8 ranks on one GPU: from 256 MiB, 2 to 7 ranks: from 64 MiB; AllGather and Broadcast never
  // (they read their input per destination).
  const auto eight = policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90});
  CHECK(eight.ce_all_to_all_min_bytes == (256u << 20));
  CHECK(eight.ce_gather_scatter_min_bytes == (256u << 20));
  const auto four = policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90});
  CHECK(four.ce_all_to_all_min_bytes == (64u << 20));
  CHECK(four.ce_gather_scatter_min_bytes == (64u << 20));
  const auto two = policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90});
  CHECK(two.ce_all_to_all_min_bytes == (64u << 20));
  CHECK(two.ce_gather_scatter_min_bytes == (64u << 20));
  // Send/Recv's moved messages: from 64 MiB with 4 or more ranks on a GPU, from 256 MiB with 2 or 3.
  CHECK(eight.ce_send_recv_min_bytes == (64u << 20));
  CHECK(four.ce_send_recv_min_bytes == (64u << 20));
  CHECK(two.ce_send_recv_min_bytes == (256u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{3, 3, 132, 2, 90}).ce_send_recv_min_bytes == (256u << 20));
  for (const auto& p : {eight, four, two}) {
    CHECK(p.ce_all_gather_min_bytes == 0);
    CHECK(p.ce_broadcast_min_bytes == 0);
  }
  // Ranks each on a GPU of their own, or one rank: the SM path.
  for (const Regime& r : {Regime{8, 1, 132, 2, 90}, Regime{1, 1, 132, 2, 90}}) {
    const auto p = policy_for(sm_policy_recipe(), r);
    CHECK(p.ce_all_to_all_min_bytes == 0);
    CHECK(p.ce_all_gather_min_bytes == 0);
    CHECK(p.ce_broadcast_min_bytes == 0);
    CHECK(p.ce_gather_scatter_min_bytes == 0);
    CHECK(p.ce_send_recv_min_bytes == 0);
  }
}

TEST_CASE("the built-in SM policy bounds the direct forms by collective and rank count", "[policy]") {
  const auto two = policy_for(sm_policy_recipe(), Regime{2, 1, 132, 2, 90});
  CHECK(two.direct_max_bytes == (4u << 20));  // two ranks reduce directly up to 4 MiB
  CHECK(two.broadcast_direct_max_bytes == (4u << 20));
  const auto four = policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90});
  CHECK(four.direct_max_bytes == (64u << 10));
  CHECK(four.broadcast_direct_max_bytes == (4u << 20));
  const auto host = policy_for(host_policy_recipe(), Regime{2, 1, 0});
  CHECK(host.direct_max_bytes == (8u << 10));
  CHECK(host.broadcast_direct_max_bytes == (8u << 10));
}

TEST_CASE("AllReduce is one-shot where the exchange takes it up to its bound per rank count (256 KiB with 2 and 4 ranks, 32 KiB with 8)", "[policy]") {
  using purlin::snac::DirectOf;
  using purlin::snac::runs_direct;
  const auto two = policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90});
  REQUIRE(two.exchange_max_bytes == (1u << 20));
  REQUIRE(two.exchange_call_bytes == (2u << 20));
  // Zero-staging from the exchange's call bound, Broadcast and Reduce from past its message bound.
  CHECK(two.zero_staging_min_bytes == (2u << 20));
  CHECK(two.zero_staging_rooted_min_bytes == (1u << 20) + 1);
  auto ar = [&](const purlin::snac::Policy& p, std::uint64_t total, int n) {
    return runs_direct(p, DirectOf::all_reduce, total, (total / n + 255) / 256 * 256);
  };
  CHECK(ar(two, 64u << 10, 2));
  CHECK(ar(two, 256u << 10, 2));
  CHECK_FALSE(ar(two, (256u << 10) + 256, 2));
  CHECK_FALSE(ar(two, 512u << 10, 2));          // shards of 256 KiB: the two-shot exchange
  CHECK_FALSE(ar(two, 1u << 20, 2));             // shards of 512 KiB: the two-shot exchange
  CHECK_FALSE(ar(two, (2u << 20) - 1024, 2));    // up to the call bound
  CHECK(ar(two, 2u << 20, 2));                   // a call at the call bound: the direct kernels
  CHECK(ar(two, 4u << 20, 2));
  CHECK_FALSE(ar(two, (4u << 20) + 256, 2));
  CHECK_FALSE(ar(two, 0, 2));
  // Reduce has a two-shot form in the exchange too, with its own bound: with 2 ranks the whole buffer
  // runs in one shot. Broadcast keeps its bound.
  CHECK(two.exchange_reduce_direct_max_bytes == (4u << 20));
  CHECK(runs_direct(two, DirectOf::reduce, 256u << 10, 128u << 10));
  CHECK(runs_direct(two, DirectOf::reduce, 1u << 20, 512u << 10));
  CHECK(runs_direct(two, DirectOf::reduce, 2u << 20, 1u << 20));
  CHECK(runs_direct(two, DirectOf::broadcast, 256u << 10, 128u << 10));
  CHECK(runs_direct(two, DirectOf::broadcast, 1u << 20, 512u << 10));
  // With up to four ranks the exchange takes messages up to 1 MiB; with more, up to 256 KiB.
  const auto four_x = policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90});
  CHECK(four_x.exchange_max_bytes == (1u << 20));
  CHECK(four_x.exchange_reduce_direct_max_bytes == (256u << 10));
  CHECK(runs_direct(four_x, DirectOf::reduce, 256u << 10, 64u << 10));
  CHECK_FALSE(runs_direct(four_x, DirectOf::reduce, 512u << 10, 128u << 10));
  CHECK_FALSE(runs_direct(four_x, DirectOf::reduce, (1u << 20) - 1024, 256u << 10));
  CHECK_FALSE(runs_direct(four_x, DirectOf::reduce, 1u << 20, 256u << 10));
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 1, 132, 2, 90}).exchange_max_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{5, 5, 132, 2, 90}).exchange_max_bytes == (256u << 10));
  // With four ranks the exchange runs one-shot beyond the generic kernels' direct bound.
  const auto four = policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90});
  CHECK(ar(four, 256u << 10, 4));
  CHECK_FALSE(ar(four, 512u << 10, 4));
  CHECK_FALSE(runs_direct(four, DirectOf::broadcast, (4u << 20) + 256, 64u << 10));
  // With eight ranks the exchange's bound is below the direct bound.
  const auto eight = policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90});
  CHECK(ar(eight, 32u << 10, 8));
  CHECK_FALSE(ar(eight, 64u << 10, 8));
  CHECK_FALSE(ar(eight, 128u << 10, 8));
  // Reduce runs one-shot up to 128 KiB, then two-shot in the exchange.
  REQUIRE(eight.exchange_max_bytes == (256u << 10));
  CHECK(runs_direct(eight, DirectOf::reduce, 32u << 10, 4u << 10));
  CHECK(runs_direct(eight, DirectOf::reduce, 128u << 10, 16u << 10));
  CHECK_FALSE(runs_direct(eight, DirectOf::reduce, (128u << 10) + 256, 16u << 10));
  CHECK_FALSE(runs_direct(eight, DirectOf::reduce, 256u << 10, 32u << 10));
  CHECK_FALSE(runs_direct(eight, DirectOf::reduce, (256u << 10) + 256, 32u << 10));
  CHECK_FALSE(runs_direct(eight, DirectOf::reduce, 1u << 20, 128u << 10));
  // The host datapath keeps one bound for all.
  const auto host = policy_for(host_policy_recipe(), Regime{2, 1, 0});
  CHECK(host.exchange_direct_max_bytes == host.direct_max_bytes);
  CHECK(host.exchange_reduce_direct_max_bytes == host.direct_max_bytes);
}

TEST_CASE("Send/Recv's pair exchange takes messages up to 2 MiB with up to 4 ranks, 1 MiB with 5 to 8", "[policy]") {
  // Where it measured faster than the staged path; its boxes (8 per producer and channel) hold one
  // channel's slice each, 128 MiB on a rank at most.
  CHECK(policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90}).pair_max_bytes == (2u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{3, 3, 132, 2, 90}).pair_max_bytes == (2u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{4, 4, 132, 2, 90}).pair_max_bytes == (2u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{5, 5, 132, 2, 90}).pair_max_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90}).pair_max_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{8, 1, 132, 2, 90}).pair_max_bytes == (1u << 20));
  CHECK(policy_for(sm_policy_recipe(), Regime{16, 16, 132, 2, 90}).pair_max_bytes <= (512u << 10));
  CHECK(policy_for(sm_policy_recipe(), Regime{1, 1, 132, 2, 90}).pair_max_bytes == 0);  // one rank: nothing to send
  for (int n : {2, 4, 8}) {
    const auto p = policy_for(sm_policy_recipe(), Regime{n, n, 132, 2, 90});
    const std::uint64_t boxes = 8ull * static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(p.exchange_channels);
    // A box of one channel's slice, as packets of 16 bytes per 8.
    CHECK(boxes * 2 * (p.pair_max_bytes / static_cast<std::uint64_t>(p.exchange_channels)) <= (128u << 20));
  }
}

TEST_CASE("a policy entry's direct_max_bytes sets the exchange's direct bound too, unless it names it", "[policy]") {
  std::vector<std::string> errors;
  const auto table = parse_policy_table("sm * * 2 direct_max_bytes=1M\n"
                                        "sm * * 4 direct_max_bytes=1M exchange_direct_max_bytes=16K\n",
                                        &errors);
  REQUIRE(errors.empty());
  REQUIRE(table.size() == 2);
  CHECK(table[0].exchange_direct_max_bytes == -1);
  CHECK(table[1].exchange_direct_max_bytes == (16 << 10));
}

TEST_CASE("the exchange's call bound gives every rank of a rooted call the same answer", "[policy]") {
  using purlin::snac::exchange_call_size;
  const std::uint64_t part = 128u << 10;
  // Scatter of 8 parts: the root holds every input part, the others empty ones and their output.
  const std::uint64_t root = exchange_call_size(8 * part, part, part, 8, true);
  const std::uint64_t other = exchange_call_size(0, part, part, 8, true);
  CHECK(root == 8 * part);
  CHECK(other == root);
  // Gather: the root's output is 8 parts, and so is every other rank's (empty-pointer parts that
  // keep their sizes); a rank whose output parts were empty would still count 8 parts.
  CHECK(exchange_call_size(part, 8 * part, part, 8, true) == 8 * part);
  CHECK(exchange_call_size(part, 0, part, 8, true) == 8 * part);
  // Packed sides (the direct forms) count their totals alone.
  CHECK(exchange_call_size(part, part, part, 8, false) == part);
}

// Run by the meson test snac_policy_env, with PURLIN_EXCHANGE_CALL_BYTES=2M (and
// PURLIN_ZERO_STAGING_FULL_BYTES=4M) in the environment.
TEST_CASE("PURLIN_EXCHANGE_CALL_BYTES moves the exchange's call bound, and AllReduce's two-shot form with it", "[.][env]") {
  using purlin::snac::DirectOf;
  using purlin::snac::runs_direct;
  const auto two = policy_for(sm_policy_recipe(), Regime{2, 2, 132, 2, 90});
  const auto eight = policy_for(sm_policy_recipe(), Regime{8, 8, 132, 2, 90});
  REQUIRE(two.exchange_call_bytes == (2u << 20));
  REQUIRE(eight.exchange_call_bytes == (2u << 20));
  // The message bound stays the policy's.
  CHECK(two.exchange_max_bytes == (1u << 20));
  // 2 ranks, AllReduce of 1 MiB: shards of 512 KiB, within the call bound, so the two-shot exchange
  // (not the generic kernels' direct form, which takes up to 4 MiB at the call bound and beyond).
  CHECK_FALSE(runs_direct(two, DirectOf::all_reduce, 1u << 20, 512u << 10));
  CHECK(runs_direct(two, DirectOf::all_reduce, 2u << 20, 1u << 20));
  // Reduce of 1 MiB: the exchange takes it whole, direct.
  CHECK(runs_direct(two, DirectOf::reduce, 1u << 20, 0));
}

// Run by the meson test snac_policy_env, with PURLIN_ZERO_STAGING_FULL_BYTES=4M in the environment.
TEST_CASE("PURLIN_ZERO_STAGING_FULL_BYTES moves the size from which zero-staging runs all its CTAs", "[.][env]") {
  for (const int n : {2, 4, 8}) {
    const auto p = policy_for(sm_policy_recipe(), Regime{n, n, 132, 2, 90});
    CHECK(p.zero_staging_full_bytes == (4u << 20));
    CHECK(p.zero_staging_small_ctas == p.zero_staging_ctas / 2);
  }
}
