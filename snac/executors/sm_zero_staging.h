// The SM datapath's zero-staging kernel (snac/protocol/zero_staging.h): what one launch takes, and
// the launcher. The executor (sm_executor.cc) maps the peers' buffers and fills the arguments.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "atom/sm/sm_guard.h"
#include "core/hd.h"
#include "core/types.h"
#include "snac/protocol/zero_staging.h"
#include "snac/window.h"

namespace purlin::snac {

inline constexpr int kZeroStagingThreads = 512;
// With PURLIN_STAMPS: each CTA's globaltimer stamps of a call (entry, after the wait for the
// previous kernel where it launched early; arrival barrier passed; its share moved; exit) in a ring
// of this many calls, by call number (perf/zs_stamps.py reads them).
inline constexpr int kZeroStagingStampCalls = 256;
inline constexpr int kZeroStagingStamps = 4;

struct ZeroStagingArgs {
  ZeroStagingKind kind = ZeroStagingKind::all_reduce;
  int rank = 0;
  int nranks = 1;
  int root = 0;
  int ctas = 1;
  std::uint64_t bytes = 0, elem = 1, align_elems = 1;
  std::uint64_t tag = 0;
  DataType type = DataType::uint8;
  ReduceOp op{};
  atom::SmGuard guard{};
  bool one_gpu = false;
  std::uint64_t* calls = nullptr;  // [kZeroStagingMaxCtas]: this rank's call numbers per CTA, device
  std::uint64_t* stamps = nullptr; // [kZeroStagingStampCalls][kZeroStagingMaxCtas][kZeroStagingStamps], or none
  // What the launch does of the call: all of it, or (the copy engines move the bytes between) only
  // the arrival barrier, or only the done barrier, which closes the call.
  ZeroStagingPhase phase = ZeroStagingPhase::whole;
  // Launched behind the previous kernel of the stream with programmatic dependent launch (the
  // executor allows it only where that kernel is a whole zero-staging launch); every CTA then waits
  // for it to finish before it reads anything.
  bool pdl = false;
  // A whole launch lets the stream's next kernel launch once each CTA has passed the done barrier
  // (griddepcontrol.launch_dependents): every peer's CTA has then signalled it, so none of them needs
  // a multiprocessor that the next kernel's early CTAs could take.
  bool release = false;
  bool pairs = false;              // AlltoAll in pairs (ZeroStagingCall::pairs)
  const Window* win = nullptr;     // [nranks] channel-0 windows: the peers' fault words
  const char* in[kMaxRanks];
  char* out[kMaxRanks];
  std::uint64_t* words[kMaxRanks];
};

// The call as the protocol sees it, with call number `call`.
PURLIN_HD ZeroStagingCall zero_staging_view(const ZeroStagingArgs& a, std::uint64_t call) {
  ZeroStagingCall z;
  z.kind = a.kind;
  z.rank = a.rank;
  z.nranks = a.nranks;
  z.root = a.root;
  z.bytes = a.bytes;
  z.elem = a.elem;
  z.align_elems = a.align_elems;
  z.in = a.in;
  z.out = a.out;
  z.words = a.words;
  z.call = call;
  z.tag = a.tag;
  z.pairs = a.pairs;
  return z;
}

// Launches a.ctas CTAs of kZeroStagingThreads on `stream`, in stream order unless a.pdl (every
// peer's CTAs spin on this rank's, so a previous kernel that could still need multiprocessors must
// be gone before these take theirs).
cudaError_t launch_zero_staging(const ZeroStagingArgs& a, cudaStream_t stream);
// How many CTAs of the zero-staging kernels (both forms) one multiprocessor of the current device
// holds at once; 0 where that cannot be found.
int zero_staging_ctas_per_sm();

// A Send/Recv round's zero-staged messages (ZeroStagingLegs), each in `shares` shares.
struct ZeroStagingLegArgs {
  int rank = 0;
  int nranks = 1;
  int shares = 1;
  int count = 0;
  ZeroStagingPhase phase = ZeroStagingPhase::whole;  // arrive and leave: one CTA (the copy engines move)
  atom::SmGuard guard{};
  bool one_gpu = false;
  std::uint64_t* counters = nullptr;  // [kZeroStagingLegCounters]: this rank's leg call numbers, device
  const Window* win = nullptr;     // [nranks] channel-0 windows: the peers' fault words
  std::uint64_t* words[kMaxRanks];  // every rank's leg words as mapped here
  ZeroStagingLeg legs[kZeroStagingMaxLegs];
};

// Launches the legs as launch_zero_staging launches a call: `shares` CTAs where this rank moves some
// message in a whole launch, else one.
cudaError_t launch_zero_staging_legs(const ZeroStagingLegArgs& a, cudaStream_t stream);
int zero_staging_legs_ctas_per_sm();

}  // namespace purlin::snac
