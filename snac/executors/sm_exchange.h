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
  // What slice() needs, worked out on the host by prepare(): the distance between parts' starts
  // (blocks: a block; shards: a full shard), and a channel's share of a full part and of the one
  // shorter shard (0 where there is none).
  std::uint32_t stride = 0, share = 0, tail_share = 0;

  PURLIN_HD int parts(int n) const { return form == Form::packed ? 1 : n; }
  // In 32-bit arithmetic: the exchange's calls are below kExchangeCallBytes, and a 64-bit division
  // is dozens of instructions in every kernel that cuts its parts.
  PURLIN_HD Part part(int k, int n) const {
    const auto at = [this](std::uint32_t off) {
      return reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(base) + off);
    };
    const std::uint32_t b = static_cast<std::uint32_t>(bytes);
    if (form == Form::packed) return Part{base, b};
    if (form == Form::blocks) return Part{at(static_cast<std::uint32_t>(k) * b), b};
    // uniform_split in bytes: ceil(count / n) elements rounded up to the alignment, the tail shorter.
    const std::uint32_t count = b / elem, ranks = static_cast<std::uint32_t>(n), index = static_cast<std::uint32_t>(k);
    const std::uint32_t align = static_cast<std::uint32_t>(align_elems);
    std::uint32_t per = (count + ranks - 1) / ranks;
    per = (per + align - 1) / align * align;
    const std::uint32_t off = per == 0 ? count : index * per < count ? index * per : count;
    const std::uint32_t len = per < count - off ? per : count - off;
    return Part{at(off * elem), static_cast<std::uint64_t>(len) * elem};
  }

  // Channel c's slice of part k, exactly exchange_slice(part(k, n), c, channels), without a
  // division: every part is full, empty or (shards) the one shorter shard, whose shares prepare()
  // computed.
  PURLIN_HD Part slice(int k, int c) const {
    const std::uint32_t b = static_cast<std::uint32_t>(bytes);
    std::uint32_t off = 0, len = b, full = b;
    if (form == Form::blocks) {
      off = static_cast<std::uint32_t>(k) * b;
    } else if (form == Form::shards) {
      const std::uint32_t first = static_cast<std::uint32_t>(k) * stride;
      off = first < b ? first : b;
      len = stride < b - off ? stride : b - off;
      full = stride;
    }
    const std::uint32_t per = len == full ? share : len == 0 ? 0 : tail_share;
    const std::uint32_t first = per * static_cast<std::uint32_t>(c);
    const std::uint32_t soff = first < len ? first : len;
    const std::uint32_t slen = per < len - soff ? per : len - soff;
    return Part{base ? reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(base) + off + soff) : nullptr, slen};
  }

  // Fills stride, share and tail_share for n parts cut into `channels` slices (host).
  void prepare(int n, int channels);
};

// Channel c's slice of a message: every channel takes the same 16-byte-aligned share, the last
// ones what is left (possibly nothing). Both ends of a message cut it alike.
PURLIN_HD Part exchange_slice(const Part& p, int c, int channels) {
  // 32-bit, as UniformSide::part: a message of the exchange is below 4 GiB.
  const std::uint32_t bytes = static_cast<std::uint32_t>(p.bytes), ch = static_cast<std::uint32_t>(channels);
  std::uint32_t per = (bytes + ch - 1) / ch;
  per = (per + 15) / 16 * 16;
  const std::uint32_t first = per * static_cast<std::uint32_t>(c);
  const std::uint32_t off = first < bytes ? first : bytes;
  const std::uint32_t len = per < bytes - off ? per : bytes - off;
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
  int word = 0;                       // 2, 4, 8: the word kernel for that many ranks (exchange_word_ranks), first
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

// The word kernels (atom::WordAtom, snac/executors/sm_word_kernel.cuh): compiled per rank bound N
// (2, 4, 8), for the same declarations and Reducers as the lean ones; any slice size (a thread takes
// every blockDim.x-th word).
template <class D, class Fixed, int N>
cudaError_t launch_word(const ExchangeArgs& a, int threads, cudaStream_t stream);

// The rank bound of the word kernel for a launch of `kind` (its type, operator and ranks in a); 0
// where none is compiled or PURLIN_EXCHANGE_WORD=0.
int exchange_word_ranks(CollKind kind, const ExchangeArgs& a);

// The slots of the lean kernel for a launch of `kind` (its type and operator in a) whose largest
// slice is `slice_packets` packets, with `threads` threads; 0 where the kernel of every form runs.
int exchange_lean_slots(CollKind kind, const ExchangeArgs& a, std::uint64_t slice_packets, int threads);

// The same for the run-time kind (one of those exchange_serves() accepts).
cudaError_t launch_exchange(CollKind kind, const ExchangeArgs& a, int threads, cudaStream_t stream);

// Whether the exchange has a kernel for `kind`.
bool exchange_serves(CollKind kind);

}  // namespace purlin::snac
