// The bootstrap's internals shared by its parts (core/bootstrap/): what goes over the wire, the
// limits, and the names it uses. Not for use outside core/bootstrap/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/bootstrap.h"
#include "core/log.h"
#include "core/socket.h"

namespace purlin::boot {

using net::AbortFlags;
using net::Address;
using net::Clock;
using net::Deadline;
using net::Io;
using net::Socket;

constexpr unsigned kLog = log::kInit | log::kNet;

// ---- wire formats (host byte order: every rank of a job shares one architecture) ---------------

// Every connection, to the root or within the mesh, opens with a Hello followed by `addr_len`
// bytes of the sender's listening address (root hellos only; mesh hellos carry none).
enum : std::uint32_t {
  kHelloRoot = 0x544f4f52,  // "ROOT"
  kHelloMesh = 0x4853454d,  // "MESH"
};
struct Hello {
  std::uint64_t magic;   // kUniqueIdMagic
  std::uint64_t secret;  // the id's secret
  std::uint32_t kind;    // kHelloRoot or kHelloMesh
  std::uint32_t rank;
  std::uint32_t nranks;
  std::uint32_t addr_len;
};
static_assert(sizeof(Hello) == 32);

// One entry of the root's answer, which is a uint64 byte count followed by nranks entries.
struct WireAddr {
  std::uint32_t len;
  std::uint8_t bytes[Address::kMaxBytes];
};
static_assert(sizeof(WireAddr) == 32);

// Mesh traffic: frames of a header and `len` payload bytes. Point-to-point and collective frames
// queue separately, so a send that overtakes a collective on the same connection is never
// mistaken for the collective's contribution.
enum : std::uint32_t { kFrameP2p = 1, kFrameColl = 2, kFrameFarewell = 3 };
struct FrameHeader {
  std::uint32_t kind;
  std::uint32_t seq;  // collectives: the call's index, to catch ranks out of step
  std::uint64_t len;
};
static_assert(sizeof(FrameHeader) == 16);

constexpr std::uint32_t kMaxRanks = 1u << 20;
// The largest frame a peer may send; a longer header is taken for corruption.
constexpr std::uint64_t kMaxFrameBytes = std::uint64_t(1) << 32;
// A frame's buffer grows by at most this much ahead of the bytes received.
constexpr std::size_t kFrameGrowBytes = std::size_t(1) << 20;
// A connection must deliver its whole hello this soon after it is accepted.
constexpr double kHelloWindowS = 10.0;
// Connections waiting for their hello; beyond this the oldest is dropped to make room.
constexpr std::size_t kMaxPendingHellos = 512;
// leave() waits at most this long for room to send its farewells.
constexpr double kFarewellWaitS = 0.2;

inline std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The secret of every id made from NCCL_COMM_ID: the same in every process.
inline std::uint64_t comm_id_secret(const std::string& comm_id) { return fnv1a("NCCL_COMM_ID=" + comm_id); }

}  // namespace purlin::boot
