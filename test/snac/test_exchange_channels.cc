// The latency exchange (snac/protocol/exchange.h) on the host Atom, channel by channel as the GPU
// runs them in CTAs: every rank a thread, its boxes on the heap. Ranks that cut one call into the
// same channels exchange it intact; ranks whose sizes differ but whose first slices are equal (so
// they cut the call into different channel counts) stop with invalid_usage at once, instead of
// leaving the channels only one of them runs waiting for the timeout. Reduce in two shots keeps its
// intermediate in a box away from the root, call after call, and writes no non-root's output.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "atom/host/host_atom.h"
#include "collectives/all_gather.h"
#include "collectives/reduce.h"
#include "core/types.h"
#include "snac/protocol/exchange.h"
#include "test/catch.h"
#include "test/common/rng.h"

namespace {

using namespace purlin;
using namespace purlin::snac;
using u64 = std::uint64_t;

constexpr int kMostChannels = 4;
constexpr u64 kBoxPackets = 16;  // 128 bytes per box: a slice of up to 128 bytes

// Channel c's slice of p in `channels` equal 16-byte-aligned shares (the last ones what is left).
Part slice_of(const Part& p, int c, int channels) {
  u64 per = (p.bytes + static_cast<u64>(channels) - 1) / static_cast<u64>(channels);
  per = (per + 15) / 16 * 16;
  const u64 off = std::min<u64>(per * static_cast<u64>(c), p.bytes);
  return Part{p.ptr + off, std::min(per, p.bytes - off)};
}

struct World {
  int n;
  std::vector<std::vector<atom::LLPacket>> boxes;
  std::vector<atom::LLPacket*> inbox;
  std::atomic<bool> abort{false};

  explicit World(int ranks) : n(ranks) {
    for (int r = 0; r < n; ++r)
      boxes.emplace_back(static_cast<std::size_t>(kMostChannels) * exchange_boxes(n) * kBoxPackets, atom::LLPacket{0, 0});
    for (int r = 0; r < n; ++r) inbox.push_back(boxes[r].data());
  }

  // Rank `me`'s AllGather of `in` into out (n partitions of in's size), in `channels` channels, each
  // the first call on its channel. Stops at the first channel that fails.
  Status all_gather(int me, const std::vector<char>& in, std::vector<char>& out, int channels, double timeout_s) {
    std::atomic<bool> failed{false};
    atom::HostAtom a(DataType::uint8, ReduceOp{}, atom::WaitGuard{&abort, &failed, timeout_s, nullptr});
    const u64 bytes = in.size();
    for (int c = 0; c < channels; ++c) {
      const Part whole_in{const_cast<char*>(in.data()), bytes};
      const Part ins[1] = {slice_of(whole_in, c, channels)};
      std::vector<Part> outs;
      for (int s = 0; s < n; ++s) outs.push_back(slice_of(Part{out.data() + static_cast<u64>(s) * bytes, bytes}, c, channels));
      Call call;
      call.in = ins;
      call.out = outs.data();
      const ExchangeContext x{me, n, c, channels, 1, kBoxPackets, inbox.data()};
      PURLIN_TRY(exchange_call<coll::AllGather>(a, x, call));
    }
    return Status::ok;
  }
  // Rank `me`'s Reduce in two shots (ReduceScatter, then Gather at `root`) of `in` into out (int32
  // sums; out is the root's only), in `channels` channels, each at call `epoch`. The shards: n parts
  // of ceil(count / n) elements, the last ones shorter or empty.
  Status reduce(int me, int root, const std::vector<std::int32_t>& in, std::vector<std::int32_t>& out, int channels,
                u64 epoch) {
    std::atomic<bool> failed{false};
    atom::HostAtom a(DataType::int32, ReduceOp{}, atom::WaitGuard{&abort, &failed, 20, nullptr});
    const u64 count = in.size(), per = (count + static_cast<u64>(n) - 1) / static_cast<u64>(n);
    for (int c = 0; c < channels; ++c) {
      std::vector<Part> ins, outs;
      for (int k = 0; k < n; ++k) {
        const u64 first = std::min(per * static_cast<u64>(k), count), len = std::min(per, count - first);
        const Part whole_in{reinterpret_cast<char*>(const_cast<std::int32_t*>(in.data() + first)), len * 4};
        ins.push_back(slice_of(whole_in, c, channels));
        // Away from the root the output is null, with the bytes it would hold (as plan() cuts it).
        const Part o = slice_of(Part{reinterpret_cast<char*>(out.data() + first), len * 4}, c, channels);
        outs.push_back(me == root ? o : Part{nullptr, o.bytes});
      }
      Call call;
      call.root = root;
      call.type = DataType::int32;
      call.in = ins.data();
      call.out = outs.data();
      const ExchangeContext x{me, n, c, channels, epoch, kBoxPackets, inbox.data()};
      PURLIN_TRY(exchange_call<coll::Reduce>(a, x, call));
    }
    return Status::ok;
  }
};

std::vector<char> random_bytes(std::size_t n, u64 seed) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>(rng::splitmix(seed << 32 | i) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("exchange: ranks that cut a call into the same channels exchange it intact", "[snac][exchange]") {
  constexpr int n = 3;
  for (int channels = 1; channels <= kMostChannels; ++channels) {
    INFO(channels << " channels");
    World w(n);
    const u64 bytes = 64 * static_cast<u64>(channels) - 24;  // the last slice short
    std::vector<std::vector<char>> in, out;
    for (int r = 0; r < n; ++r) {
      in.push_back(random_bytes(bytes, 100 + static_cast<u64>(r)));
      out.emplace_back(bytes * n, static_cast<char>(0x5a));
    }
    std::vector<Status> status(n, Status::internal_error);
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) ranks.emplace_back([&, r] { status[r] = w.all_gather(r, in[r], out[r], channels, 20); });
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < n; ++r) {
      CHECK(status[r] == Status::ok);
      for (int s = 0; s < n; ++s)
        CHECK(std::equal(in[s].begin(), in[s].end(), out[r].begin() + static_cast<std::ptrdiff_t>(s * bytes)));
    }
  }
}

TEST_CASE("exchange: ranks whose sizes give equal first slices in other channel counts stop with invalid_usage at once",
          "[snac][exchange][mismatch]") {
  // Rank 0 gathers 128 bytes per rank in 2 channels of 64, the others 256 in 4 of 64: the slices of
  // channels 0 and 1 are equal, and nothing would ever arrive on the others' channels 2 and 3.
  constexpr int n = 3;
  World w(n);
  std::vector<std::vector<char>> in, out;
  for (int r = 0; r < n; ++r) {
    const u64 bytes = r == 0 ? 128 : 256;
    in.push_back(random_bytes(bytes, 200 + static_cast<u64>(r)));
    out.emplace_back(bytes * n, static_cast<char>(0x5a));
  }
  std::vector<Status> status(n, Status::ok);
  std::vector<double> took(n, 0.0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      status[r] = w.all_gather(r, in[r], out[r], r == 0 ? 2 : 4, 20);
      took[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " after " << took[r] << " s");
    CHECK(status[r] == Status::invalid_usage);
    CHECK(took[r] < 5.0);  // found by the tags, not by the 20 s timeout
  }
}

TEST_CASE("exchange: Reduce in two shots sums at the root call after call, non-roots' intermediate in their own box",
          "[snac][exchange][reduce]") {
  // 4 ranks, calls on alternate parities (the intermediate's box is each call's parity), every root in
  // turn; shards of up to 64 elements cut into up to 2 channels of at most 128 bytes (a box's slice).
  constexpr int n = 4;
  World w(n);
  u64 epoch = 0;
  for (const u64 count : {u64{1}, u64{37}, u64{128}, u64{255}}) {
    const int channels = count > 128 ? 2 : 1;
    for (int root = 0; root < n; ++root) {
      ++epoch;
      INFO(count << " elements, root " << root << ", call " << epoch);
      std::vector<std::vector<std::int32_t>> in(n), out(n);
      std::vector<std::int64_t> want(count, 0);
      for (int r = 0; r < n; ++r) {
        for (u64 i = 0; i < count; ++i) {
          const auto v = static_cast<std::int32_t>(rng::splitmix(epoch << 40 | static_cast<u64>(r) << 32 | i) & 0x7fffff) - 0x400000;
          in[r].push_back(v);
          want[i] += v;
        }
        out[r].assign(count, 0x5a5a5a5a);
      }
      std::vector<Status> status(n, Status::internal_error);
      std::vector<std::thread> ranks;
      for (int r = 0; r < n; ++r)
        ranks.emplace_back([&, r] { status[r] = w.reduce(r, root, in[r], out[r], channels, epoch); });
      for (std::thread& t : ranks) t.join();
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        CHECK(status[r] == Status::ok);
        for (u64 i = 0; i < count; ++i) {
          if (r == root) {
            REQUIRE(out[r][i] == want[i]);
          } else {
            REQUIRE(out[r][i] == 0x5a5a5a5a);
          }
        }
      }
    }
  }
}
