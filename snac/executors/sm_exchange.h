// The SM datapath's latency exchange (snac/protocol/exchange.h): what one launch takes, and the
// launchers. The executor (sm_executor.cc) fills the arguments; one kernel per declaration runs
// the exchange (snac/executors/exchange/*.cu, one translation unit per collective).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "atom/ll_packet.h"
#include "atom/sm/sm_guard.h"
#include "collectives/declaration.h"
#include "core/config.h"
#include "core/hd.h"
#include "core/types.h"
#include "snac/call.h"
#include "snac/op.h"
#include "snac/window.h"

namespace purlin::snac {

inline constexpr int kExchangeMaxThreads = 256;
inline constexpr int kExchangeMaxChannels = 64;
// With PURLIN_STAMPS: globaltimer stamps of channel 0 per call (entry, start of work, the end of each
// Atom step: the start, then per phase thread 0's pushes, its receive or fold and the whole CTA's;
// the end; then atom::LLAtom's finer stamps of the one-word form, three per phase), in a ring of the
// last kExchangeStampCalls calls.
inline constexpr int kExchangeStamps = 16;
inline constexpr int kExchangeEndStamp = 9;
inline constexpr int kExchangeStampCalls = 4096;

// One side (input or output) of a uniform call, from which the kernel derives part k of n: a
// packed buffer, n blocks of `bytes` end to end, or a buffer of `bytes` cut into n shards as
// coll::uniform_split cuts it (`elem`-byte elements, shards aligned to `align_elems`).
struct UniformSide {
  enum class Form : std::uint8_t { packed, blocks, shards };
  char* base = nullptr;
  std::uint64_t bytes = 0;
  std::uint64_t align_elems = 1;
  std::uint32_t elem = 1;
  Form form = Form::packed;

  PURLIN_HD int parts(int n) const { return form == Form::packed ? 1 : n; }
  PURLIN_HD Part part(int k, int n) const {
    const auto at = [this](std::uint64_t off) {
      return reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(base) + off);
    };
    if (form == Form::packed) return Part{base, bytes};
    if (form == Form::blocks) return Part{at(static_cast<std::uint64_t>(k) * bytes), bytes};
    // uniform_split in bytes: ceil(count / n) elements rounded up to the alignment, the tail shorter.
    const std::uint64_t count = bytes / elem, ranks = static_cast<std::uint64_t>(n), index = static_cast<std::uint64_t>(k);
    std::uint64_t per = count / ranks + (count % ranks != 0 ? 1 : 0);
    per = (per + align_elems - 1) / align_elems * align_elems;
    const std::uint64_t off = per == 0 || index > count / per ? count : (index * per < count ? index * per : count);
    const std::uint64_t len = per < count - off ? per : count - off;
    return Part{at(off * elem), len * elem};
  }
};

// Channel c's slice of a message: every channel takes the same 16-byte-aligned share, the last
// ones what is left (possibly nothing). Both ends of a message cut it alike.
PURLIN_HD Part exchange_slice(const Part& p, int c, int channels) {
  std::uint64_t per = (p.bytes + static_cast<std::uint64_t>(channels) - 1) / static_cast<std::uint64_t>(channels);
  per = (per + 15) / 16 * 16;
  const std::uint64_t off = per * static_cast<std::uint64_t>(c) < p.bytes ? per * static_cast<std::uint64_t>(c) : p.bytes;
  const std::uint64_t len = per < p.bytes - off ? per : p.bytes - off;
  return Part{p.ptr ? p.ptr + off : nullptr, len};
}

struct ExchangeArgs {
  int rank = 0;
  int nranks = 1;
  int channels = 1;                   // CTAs of this launch, one per channel
  std::uint64_t box_packets = 0;
  atom::LLPacket* const* inbox = nullptr;  // [nranks], device
  std::uint64_t* epoch = nullptr;     // [kExchangeMaxChannels], this rank's, device
  const Window* win = nullptr;        // [nranks] channel-0 windows: the peers' fault words
  UniformSide in, out;
  int root = -1;
  DataType type = DataType::uint8;
  ReduceOp op{};
  atom::SmGuard guard{};
  bool pdl = false;
  PdlTrigger trigger = PdlTrigger::start;  // where the next kernel may launch
  int slots = 0;                      // 0: the kernel of every form; 2, 4, 8: the lean one (exchange_lean_slots)
  std::uint64_t* stamps = nullptr;    // [kExchangeStampCalls][kExchangeStamps], or none
};

// The reductions the exchange has kernels compiled for one type and operator (the common ones of
// inference: sum of bf16, f16 and f32); every other pair runs a kernel that dispatches at run time.
enum class ExchangeFold { any, bf16_sum, f16_sum, f32_sum };
ExchangeFold exchange_fold(DataType type, const ReduceOp& op);

// Launches the exchange of declaration D: a.channels CTAs of `threads` threads on `stream`. `Fixed`
// as for atom::LLAtom.
template <class D, class Fixed>
cudaError_t launch_exchange(const ExchangeArgs& a, int threads, cudaStream_t stream);

// The lean kernels (atom::LLAtom's `Slots`): the one-word form alone, for a launch with a thread per
// word of its largest slice and at most `Slots` ranks. They exist for the kernels that have the
// one-word form (one type and operator, or a copy) and, for copies, up to 4 slots: a copy's kernel
// with more keeps the batched form.
inline constexpr int kExchangeLeanMaxSlots = 8;
template <class D, class Fixed>
constexpr bool exchange_has_lean() {
  return !(D::consume == coll::Consume::reduce && std::is_void_v<Fixed>);
}
template <class D, class Fixed, int Slots>
cudaError_t launch_lean(const ExchangeArgs& a, int threads, cudaStream_t stream);

// The slots of the lean kernel for a launch of `kind` (its type and operator in a) whose largest
// slice is `slice_packets` packets, with `threads` threads; 0 where the kernel of every form runs.
int exchange_lean_slots(CollKind kind, const ExchangeArgs& a, std::uint64_t slice_packets, int threads);

// The same for the run-time kind (one of those exchange_serves() accepts).
cudaError_t launch_exchange(CollKind kind, const ExchangeArgs& a, int threads, cudaStream_t stream);

// Whether the exchange has a kernel for `kind`.
bool exchange_serves(CollKind kind);

}  // namespace purlin::snac
