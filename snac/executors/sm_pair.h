// The SM datapath's pair exchange (snac/protocol/pair_exchange.h): what one launch of a Send/Recv
// round takes, and its launcher. The executor (sm_executor.cc) routes each message of a round by its
// size: up to the exchange's bound here, the rest to the generic kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "atom/ll_packet.h"
#include "atom/sm/sm_guard.h"
#include "snac/call.h"
#include "snac/executors/sm_exchange.h"
#include "snac/window.h"

namespace purlin::snac {

// Ranks the pair kernels are compiled for, at most.
inline constexpr int kPairMaxRanks = 8;

struct PairArgs {
  int rank = 0;
  int nranks = 1;
  int channels = 1;                        // CTAs of this launch: the most any of its messages takes
  std::uint64_t box_packets = 0;
  atom::LLPacket* const* pbox = nullptr;   // [nranks], device
  std::uint64_t* const* acks = nullptr;    // [nranks], device
  std::uint64_t* sent = nullptr;           // [nranks][kExchangeMaxChannels], this rank's, device
  std::uint64_t* taken = nullptr;          // [nranks][kExchangeMaxChannels], this rank's, device
  const Window* win = nullptr;             // [nranks] channel-0 windows: the peers' fault words
  Part in[kPairMaxRanks]{};                // whole message to rank d (none: bytes 0)
  Part out[kPairMaxRanks]{};               // whole message from rank s (none: bytes 0)
  // Each message's channels (pair_channels) and a channel's share of it (exchange_slice's), worked
  // out here so that the kernel cuts its slices without a division.
  std::int32_t in_channels[kPairMaxRanks]{}, out_channels[kPairMaxRanks]{};
  std::uint32_t in_share[kPairMaxRanks]{}, out_share[kPairMaxRanks]{};
  bool aligned = false;                    // every message is whole 8-byte words at aligned addresses
  bool flat = false;                       // aligned, and a thread has more than a word of a step to move
  atom::SmGuard guard{};
  bool pdl = false;
  bool one_gpu = false;
};

// Launches a.channels CTAs of `threads` threads on `stream` (a.nranks <= kPairMaxRanks).
cudaError_t launch_pair(const PairArgs& a, int threads, cudaStream_t stream);

}  // namespace purlin::snac
