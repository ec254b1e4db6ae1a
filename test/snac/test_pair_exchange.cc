// The pair exchange's protocol (snac/protocol/pair_exchange.h) on the host Atom: every rank a thread
// of this process, its boxes and ack words on the heap where every rank reaches them, every channel a
// call of pair_call in turn (the GPU runs them as CTAs). Rounds of Send/Recv with random sizes
// (odd byte counts, several channels, messages to itself), buffered sends up to the depth before any
// receive, a send beyond the depth that completes once the receiver starts, and receives whose size
// differs from their send. Every message is checked byte for byte against what its sender wrote.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "atom/host/host_atom.h"
#include "core/types.h"
#include "snac/protocol/pair_exchange.h"
#include "test/catch.h"
#include "test/common/rng.h"

namespace {

using namespace purlin;
using namespace purlin::snac;
using u64 = std::uint64_t;

constexpr u64 kChannelBytes = 64;  // a channel per 64 bytes of a message, so small messages span several
constexpr int kMostChannels = 4;
constexpr u64 kBoxPackets = 16;    // 128 bytes per box: fits a slice of any message up to 512 bytes

// A channel's slice of a message, cut as the GPU cuts it (equal 16-byte-aligned shares, the last ones
// what is left): computed here apart from the executor's exchange_slice.
Part slice_of(const Part& p, int c, int channels) {
  u64 per = (p.bytes + channels - 1) / channels;
  per = (per + 15) / 16 * 16;
  const u64 off = std::min<u64>(per * static_cast<u64>(c), p.bytes);
  return Part{p.ptr ? p.ptr + off : nullptr, std::min(per, p.bytes - off)};
}

struct World {
  int n;
  std::vector<std::vector<atom::LLPacket>> boxes;  // per rank
  std::vector<std::vector<u64>> acks;              // per rank
  std::vector<atom::LLPacket*> pbox;
  std::vector<u64*> ack_ptr;
  std::vector<std::vector<u64>> sent, taken;       // per rank: [peer][channel]
  std::atomic<bool> abort{false};

  explicit World(int ranks) : n(ranks) {
    for (int r = 0; r < n; ++r) {
      boxes.emplace_back(static_cast<std::size_t>(kMostChannels) * pair_boxes(n) * kBoxPackets, atom::LLPacket{0, 0});
      acks.emplace_back(static_cast<std::size_t>(kMostChannels) * n, 0);
      sent.emplace_back(static_cast<std::size_t>(n) * kMostChannels, 0);
      taken.emplace_back(static_cast<std::size_t>(n) * kMostChannels, 0);
    }
    for (int r = 0; r < n; ++r) {
      pbox.push_back(boxes[r].data());
      ack_ptr.push_back(acks[r].data());
    }
  }

  // One round on rank `me`: in[d] / out[s] the whole messages (bytes 0: none), channel by channel.
  Status round(int me, const std::vector<Part>& in, const std::vector<Part>& out, double timeout_s = 20) {
    std::atomic<bool> failed{false};
    atom::HostAtom a(DataType::uint8, ReduceOp{}, atom::WaitGuard{&abort, &failed, timeout_s, nullptr});
    // Each message's channels; the round runs as many as its widest message.
    int channels = 0;
    std::vector<std::int32_t> in_channels(n), out_channels(n);
    for (int p = 0; p < n; ++p) {
      in_channels[p] = pair_channels(in[p].bytes, kChannelBytes, kMostChannels);
      out_channels[p] = pair_channels(out[p].bytes, kChannelBytes, kMostChannels);
      if (in[p].bytes) channels = std::max(channels, in_channels[p]);
      if (out[p].bytes) channels = std::max(channels, out_channels[p]);
    }
    for (int c = 0; c < channels; ++c) {
      std::vector<Part> ins(n, Part{nullptr, 0}), outs(n, Part{nullptr, 0});
      std::vector<u64> s(n), t(n);
      PairContext x;
      x.rank = me;
      x.nranks = n;
      x.channel = c;
      x.box_packets = kBoxPackets;
      x.pbox = pbox.data();
      x.acks = ack_ptr.data();
      x.in_channels = in_channels.data();
      x.out_channels = out_channels.data();
      for (int p = 0; p < n; ++p) {
        const int ci = in_channels[p], co = out_channels[p];
        if (in[p].bytes && c < ci) {
          ins[p] = slice_of(in[p], c, ci);
          x.sends |= 1u << p;
        }
        if (out[p].bytes && c < co) {
          outs[p] = slice_of(out[p], c, co);
          x.recvs |= 1u << p;
        }
        s[p] = sent[me][static_cast<std::size_t>(p) * kMostChannels + c];
        t[p] = taken[me][static_cast<std::size_t>(p) * kMostChannels + c];
      }
      x.sent = s.data();
      x.taken = t.data();
      Call call;
      call.in = ins.data();
      call.out = outs.data();
      PURLIN_TRY(pair_call(a, x, call));
      for (int p = 0; p < n; ++p) {
        if (x.sends >> p & 1u) ++sent[me][static_cast<std::size_t>(p) * kMostChannels + c];
        if (x.recvs >> p & 1u) ++taken[me][static_cast<std::size_t>(p) * kMostChannels + c];
      }
    }
    return Status::ok;
  }
};

// Message m of a schedule: `bytes` from `from` to `to` in round `round`, its content seeded by its id.
struct Message {
  int round, from, to;
  u64 bytes, id;
};

std::vector<char> content(const Message& m) {
  std::vector<char> v(m.bytes);
  for (u64 i = 0; i < m.bytes; ++i) v[i] = static_cast<char>(rng::splitmix(m.id * 1000003 + i));
  return v;
}

// Runs every rank's rounds of `messages` on its own thread; returns the number of bytes that differ.
u64 run(World& w, const std::vector<Message>& messages, int rounds) {
  std::atomic<u64> wrong{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int me = 0; me < w.n; ++me) {
    ranks.emplace_back([&, me] {
      for (int r = 0; r < rounds; ++r) {
        std::vector<Part> in(w.n, Part{nullptr, 0}), out(w.n, Part{nullptr, 0});
        std::vector<std::vector<char>> data, got;
        std::vector<const Message*> mine;
        data.reserve(w.n);
        got.reserve(w.n);
        for (const Message& m : messages) {
          if (m.round != r) continue;
          if (m.from == me) {
            data.push_back(content(m));
            in[m.to] = Part{data.back().data(), m.bytes};
          }
          if (m.to == me) {
            got.emplace_back(m.bytes, static_cast<char>(0x5a));  // poisoned
            out[m.from] = Part{got.back().data(), m.bytes};
            mine.push_back(&m);
          }
        }
        if (w.round(me, in, out) != Status::ok) {
          ++failures;
          return;
        }
        for (const Message* m : mine) {
          const std::vector<char> want = content(*m);
          const char* have = out[m->from].ptr;
          for (u64 i = 0; i < m->bytes; ++i) wrong += have[i] != want[i];
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  CHECK(failures == 0);
  return wrong;
}

}  // namespace

TEST_CASE("pair exchange: random rounds of Send/Recv arrive intact", "[snac][pair]") {
  for (int n : {2, 3, 4}) {
    std::mt19937_64 gen(1234 + n);
    std::vector<Message> messages;
    constexpr int kRounds = 40;
    u64 id = 1;
    for (int r = 0; r < kRounds; ++r)
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b)
          if (gen() % 3 == 0) messages.push_back(Message{r, a, b, 1 + gen() % 512, id++});
    World w(n);
    CHECK(run(w, messages, kRounds) == 0);
  }
}

TEST_CASE("pair exchange: kDepth sends complete before any receive, and one more once the receiver starts",
          "[snac][pair]") {
  World w(2);
  std::vector<std::vector<char>> data;
  for (int k = 0; k <= kDepth; ++k) data.push_back(content(Message{k, 0, 1, 200 + static_cast<u64>(k), static_cast<u64>(k + 1)}));
  for (int k = 0; k < kDepth; ++k) {
    std::vector<Part> in(2, Part{nullptr, 0}), out(2, Part{nullptr, 0});
    in[1] = Part{data[k].data(), data[k].size()};
    REQUIRE(w.round(0, in, out) == Status::ok);  // rank 1 has not received anything yet
  }
  // The next send waits for the receiver's first receive; the receiver starts later.
  std::atomic<bool> sent_last{false};
  std::thread sender([&] {
    std::vector<Part> in(2, Part{nullptr, 0}), out(2, Part{nullptr, 0});
    in[1] = Part{data[kDepth].data(), data[kDepth].size()};
    CHECK(w.round(0, in, out) == Status::ok);
    sent_last = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(sent_last.load());
  for (int k = 0; k <= kDepth; ++k) {
    std::vector<char> got(data[k].size(), 0x5a);
    std::vector<Part> in(2, Part{nullptr, 0}), out(2, Part{nullptr, 0});
    out[0] = Part{got.data(), got.size()};
    REQUIRE(w.round(1, in, out) == Status::ok);
    CHECK(got == data[k]);
  }
  sender.join();
  CHECK(sent_last.load());
}

TEST_CASE("pair exchange: a receive whose size differs from its send stops with invalid_usage", "[snac][pair]") {
  World w(2);
  std::vector<char> data(100, 1), got(120, 0);
  Status s0 = Status::ok, s1 = Status::ok;
  std::thread a([&] {
    std::vector<Part> in(2, Part{nullptr, 0}), out(2, Part{nullptr, 0});
    in[1] = Part{data.data(), data.size()};
    s0 = w.round(0, in, out, 5);
  });
  std::thread b([&] {
    std::vector<Part> in(2, Part{nullptr, 0}), out(2, Part{nullptr, 0});
    out[0] = Part{got.data(), got.size()};
    s1 = w.round(1, in, out, 5);
  });
  a.join();
  b.join();
  CHECK(s0 == Status::ok);
  CHECK(s1 == Status::invalid_usage);
}

TEST_CASE("pair exchange: a receive cut in more channels than its send stops with invalid_usage at once", "[snac][pair]") {
  // 128 bytes travel in 2 channels of 64, 256 in 4 of 64: the first two slices have equal sizes, and
  // the receiver's last two channels have no sender.
  World w(2);
  std::vector<char> data(128, 1), got(256, 0);
  Status s0 = Status::ok, s1 = Status::ok;
  const auto t0 = std::chrono::steady_clock::now();
  double took = 0;
  std::thread a([&] {
    std::vector<Part> in(2, Part{nullptr, 0}), out(2, Part{nullptr, 0});
    in[1] = Part{data.data(), data.size()};
    s0 = w.round(0, in, out, 20);
  });
  std::thread b([&] {
    std::vector<Part> in(2, Part{nullptr, 0}), out(2, Part{nullptr, 0});
    out[0] = Part{got.data(), got.size()};
    s1 = w.round(1, in, out, 20);
    took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  a.join();
  b.join();
  CHECK(s0 == Status::ok);
  CHECK(s1 == Status::invalid_usage);
  CHECK(took < 5.0);  // found by the tag, not by the 20 s timeout
}
