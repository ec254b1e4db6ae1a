// The unit of the latency path: 8 bytes of payload and the 8-byte epoch that says they are there.
// A consumer that sees flag == q knows the payload of message q is complete (the producer writes
// the payload before the flag, with release ordering, or both in one 16-byte store on a GPU).
#pragma once

#include <cstdint>

namespace purlin::atom {

struct alignas(16) Packet {
  std::uint64_t data;
  std::uint64_t flag;
};
static_assert(sizeof(Packet) == 16);

// Messages handled together by the batched operations (push_each, pull_each, pull_reduce): at most
// one per peer of a communicator.
inline constexpr int kMaxBatch = 64;

// One message of packets to push: `bytes` from `src` into the packet buffer `dst`, epoch `q`.
struct PacketPush {
  Packet* dst;
  const char* src;
  std::uint64_t bytes;
  std::uint64_t q;
};

// One message of packets to receive: wait for epoch `q` in `src`, write `bytes` to `dst`.
struct PacketPull {
  char* dst;
  const Packet* src;
  std::uint64_t bytes;
  std::uint64_t q;
};

// One source of a reduction read straight from packets.
struct PacketSource {
  const Packet* src;
  std::uint64_t q;
};

}  // namespace purlin::atom
