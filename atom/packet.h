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

}  // namespace purlin::atom
