// The SM datapath's entry and policy recipe. Compiled in every build (its policy is tested without a
// GPU); its executor is sm_executor.cc, or sm_unavailable.cc in builds without the CUDA toolkit.
#include <algorithm>

#include <fmt/format.h>

#include "core/config.h"
#include "core/cuda_probe.h"
#include "core/log.h"
#include "snac/executors/datapaths.h"
#include "snac/protocol/pair_exchange.h"

namespace purlin::snac {
namespace {

// Channels when ranks share a GPU: their kernels split its SMs, and copies there are bound by HBM.
constexpr int kMaxChannels = 8;
// Channels when each rank has a GPU of its own: bytes cross NVLink, and the bandwidth grows with
// the CTAs moving them (two H200s, AllReduce of 1 GiB: 18.8 ms with 8 channels, 10.1 with 16,
// 5.7 with 32; since the Atom keeps more loads in flight, 3.87 ms with 32 and 3.75 with 64, and
// ReduceScatter 2.21 and 1.79).
constexpr int kMaxChannelsAlone = 64;
// The direct forms (snac's plan), from purlin-perf sweeps of one bound for all three (64K, 256K,
// 1M, 4M) over 64 KiB to 4 MiB, bf16, graph timing (perf/results/2026-11-30-direct-bounds/).
// Broadcast direct was faster at every size up to 4 MiB with 2, 4 and 8 ranks on one H200 and with
// one rank on each of two: 8 ranks at 4 MiB 48.2 us against 91.2. AllReduce and Reduce direct were
// faster up to 4 MiB with 2 ranks (two H200s, AllReduce of 4 MiB: 31.3 us against 51.2), slower from
// 256 KiB with 4 and 8.
constexpr std::uint64_t kTwoRankDirectMax = 4ull << 20;
// Where the latency exchange would take the two-shot form, AllReduce runs one-shot up to this size:
// with the word kernels (perf/results/2026-12-04-h200-word/, one H200, nccl-tests all_reduce_perf,
// bf16, graph, us per call, one-shot against two-shot) 2 ranks at 256 KiB 3.60 / 6.20, 4 ranks
// 8.20 / 12.64; 8 ranks at 64 KiB 20.76 / 12.64, level at 16 KiB. With 2 and 4 ranks the bound is
// what was then the largest message the exchange took (larger one-shot calls were not measured).
constexpr std::uint64_t exchange_direct_max(int nranks) { return nranks <= 4 ? 256ull << 10 : 32ull << 10; }
// Reduce in the exchange runs one-shot (every input to the root, folded there) up to this size, then
// in two shots (ReduceScatter, then Gather at the root). One H100, nccl-tests reduce_perf, bf16,
// graph, us per call, one-shot against two-shot (perf/results/2026-12-06-h100-bars/): 8 ranks at
// 64 KiB 7.97 / 10.72, 128 KiB 10.01 / 11.28, 256 KiB 14.67 / 12.05; 4 ranks at 256 KiB 6.83 / 6.92,
// 512 KiB 10.16 / 9.70. With 2 ranks two shots took 6.40 at 512 KiB against NCCL's 6.53 and 9.90
// at 1 MiB against 11.26, where one shot had taken 4.99 against 6.36 at 512 KiB (an earlier run the
// same day) and 8.40 against 12.09 at 1 MiB (perf/results/2026-12-05-h100-two-rank-bound/): 2 ranks
// keep the whole buffer in one shot.
constexpr std::uint64_t exchange_reduce_direct_max(int nranks) {
  return nranks == 2 ? kTwoRankDirectMax : nranks <= 4 ? 256ull << 10 : 128ull << 10;
}
// Staging of all channels together (both halves) stays within this; fewer, larger windows keep
// the table's size.
constexpr std::uint64_t kStagingBudget = 256ull << 20;
// The latency exchange's boxes on one rank (every channel, phase, parity and producer) stay within
// this; with many ranks the largest exchanged message shrinks to fit.
constexpr std::uint64_t kExchangeBudget = 32ull << 20;
// The largest message the latency exchange takes. With up to 4 ranks 1 MiB, so that Broadcast and
// Reduce below the call bound (kExchangeCallBytes) take it whole: nccl-tests, bf16, graph, one H100,
// us per call, 512 KiB with 1 MiB against 256 KiB (perf/results/2026-12-05-h100-mid-sizes/): 2 ranks
// Broadcast 6.29 / 19.39, Reduce 6.43 / 24.05; 4 ranks Broadcast 10.91 / 23.69, Reduce 12.55 / 37.21.
// Other collectives below the call bound already fit 256 KiB messages. (Reduce with 3 and 4 ranks
// has since run in two shots from 512 KiB, exchange_reduce_direct_max, whose shards fit either way.)
constexpr std::uint64_t exchange_max(int nranks) { return nranks <= 4 ? 1ull << 20 : 256ull << 10; }
constexpr std::uint64_t kExchangeChannelBytes = 2ull << 10;
// Send/Recv messages up to this size take the pair exchange (its boxes on one rank, every channel and
// kDepth per producer, stay within kPairBudget: 2 MiB with up to 4 ranks, 1 MiB with 8). nccl-tests
// sendrecv_perf, bf16, graph, one H100, us per call (perf/results/2026-12-05-h100-pair-flat/): the
// pair exchange in its flat form against the staged path, 8 ranks 18.6 / 38.6 at 512 KiB and 31.4 /
// 43.9 at 1 MiB, 4 ranks 16.6 / 28.2 at 1 MiB and 27.4 / 38.4 at 2 MiB; with 2 ranks at 2 MiB,
// flat 14.2 against the word form's 22.9.
constexpr std::uint64_t pair_max_bytes(int nranks) { return nranks <= 4 ? 2ull << 20 : 1ull << 20; }
// 128 MiB a rank: with 64 MiB, 8 ranks stopped at 512 KiB, and 1 MiB staged took 1.21 of NCCL's time.
constexpr std::uint64_t kPairBudget = 128ull << 20;
constexpr int kExchangeCtas = 128;
// Exchange CTAs one multiprocessor holds (the kernel's __launch_bounds__, snac/executors/
// sm_exchange_kernel.cuh). With programmatic dependent launch a rank has two exchange kernels
// resident at once (the next one waits early), and every sharing rank's current kernel must be
// resident for any to finish: 8 ranks on one H200 with 32 channels each (512 CTAs where 264 fit)
// stopped at PURLIN_TIMEOUT in nccl-tests all_reduce_perf from a graph.
constexpr int kExchangeCtasPerSm = 2;
// Calls of 1 MiB and more keep the generic kernels: with 8 ranks on one H200 the exchange took 91.7,
// 43.9, 55.4 and 50.9 us for AllReduce, AllGather, ReduceScatter and AlltoAll of 1 MiB where NCCL
// 2.30.7 took 62.3, 36.3, 36.1 and 26.2 (nccl-compare, bf16, graph;
// perf/results/2026-12-01-h200-exchange/).
constexpr std::uint64_t kExchangeCallBytes = 1ull << 20;
// With 2 ranks the exchange takes calls below 2 MiB, and zero-staging starts there. One H100, 2 ranks,
// nccl-tests, bf16, graph, us per call at 1 MiB, the exchange against zero-staging (NCCL 2.30.7 in
// the same run; perf/results/2026-12-05-h100-two-rank-bound/): AllReduce 13.09 / 14.42 (13.13),
// AllGather 8.13 / 10.37 (9.98), ReduceScatter 8.13 / 13.11 (9.24), Reduce 8.40 / 13.73 (12.09),
// AlltoAll 8.91 / 10.91 (17.04); eager ReduceScatter 7.36 / 13.09 (8.82).
constexpr std::uint64_t exchange_call(int nranks) { return nranks == 2 ? 2ull << 20 : kExchangeCallBytes; }
// Zero-staged calls below these sizes run half the CTAs, with up to 4 ranks and with more (derive()).
constexpr std::uint64_t kFullBytesFew = 8ull << 20;
constexpr std::uint64_t kFullBytesMany = 4ull << 20;
// Broadcast and Reduce with 5 or more ranks, whose whole buffer beyond the exchange's bound went to
// the generic kernels, zero-staged from 512 KiB, with a quarter of the CTAs below
// the zero-staging bound. One H100, 8 ranks, 512 KiB, nccl-tests, bf16, graph, us per call
// (perf/results/2026-12-05-h100-mid-sizes/): generic 34.14 and 48.37, exchange at 512 KiB 26.23 and
// 32.93, zero-staging with 8 CTAs 17.67 and 21.01, with 4 16.73 and 18.11, NCCL 2.30.7 20.69 and
// 17.70 in the same run; with 16 CTAs Reduce took 53-247 us from 128 KiB to 1 MiB in another run.
constexpr std::uint64_t kZeroStagingRootedMinBytes = 512ull << 10;
// Zero-staging CTAs of all ranks sharing a GPU together: about one per multiprocessor of an H200.
constexpr int kZeroStagingCtas = 128;
// AlltoAll, Gather and Scatter on the copy engines from these sizes where 8 or more, or 2 to 7,
// ranks share a GPU (derive()).
constexpr std::uint64_t kCeCopyMinBytes8 = 256ull << 20;
constexpr std::uint64_t kCeCopyMinBytes2 = 64ull << 20;
// Send/Recv messages moved in place go to the copy engines from these sizes where 4 or more, or 2
// and 3, ranks share a GPU (derive()).
constexpr std::uint64_t kCeSendRecvMinBytes4 = 64ull << 20;
constexpr std::uint64_t kCeSendRecvMinBytes2 = 256ull << 20;

// A channel per 4 KiB of a call: of 4, 8 and 16 KiB it was the fastest or level at every size from
// 1 to 256 KiB and every collective on one H200 (2 and 8 ranks) and on two (one rank each), e.g.
// AllReduce of 256 KiB with 8 ranks 33.3 us against 44.7 with 16 KiB
// (perf/results/2026-11-30-h200x2-r3/).
Policy defaults(const Regime& r) {
  Policy p;
  p.name = "sm/default";
  p.staging_half = 8u << 20;
  p.chunk_bytes = 256u << 10;
  p.slots = 4;
  p.latency_max_bytes = 16u << 10;
  p.channel_bytes = 4u << 10;
  // Two ranks reduce directly up to 4 MiB: each then reads both inputs, no more than the composed
  // form moves between them. With more ranks the direct reduce reads n inputs on every rank and
  // loses from 256 KiB (one H200, 4 and 8 ranks).
  p.direct_max_bytes = r.nranks == 2 ? kTwoRankDirectMax : 64u << 10;
  p.exchange_direct_max_bytes = exchange_direct_max(r.nranks);
  p.exchange_reduce_direct_max_bytes = exchange_reduce_direct_max(r.nranks);
  p.broadcast_direct_max_bytes = 4u << 20;
  p.sim_us_per_op = 5.0;
  p.sim_gbps = 1000.0;
  return p;
}

void derive(const Regime& r, int wanted, Policy* p) {
  const Config& c = config();
  // Up to three roles per channel; keep a quarter of the GPU's CTA slots free for the users' own
  // kernels. Every sharing rank's CTAs must fit at once (they spin on each other), so even an
  // explicit PURLIN_CHANNELS stays below the residency bound.
  const int sharing = std::max(1, r.sharing);
  const int per_sm = r.ctas_per_sm > 0 ? r.ctas_per_sm : 1;
  const int slots = std::max(1, r.sms * per_sm * 3 / 4);
  const int resident = std::max(1, r.sms * per_sm / (3 * sharing));
  const int cap = sharing == 1 && r.nranks > 1 ? kMaxChannelsAlone : kMaxChannels;
  p->workers = std::clamp(slots / (3 * sharing), 1, cap);
  if (wanted) {
    p->workers = std::clamp(wanted, 1, resident);
    if (p->workers != wanted)
      log::warn("{} channels (from {}) would not fit {} ranks' kernels on the GPU at once; using {}", wanted,
                c.channels ? "PURLIN_CHANNELS" : "the policy file", sharing, p->workers);
  }
  p->exchange_channel_bytes =
      c.exchange_channel_bytes ? std::max<std::uint64_t>(c.exchange_channel_bytes, 16) : kExchangeChannelBytes;
  // The channels of all sharing ranks together stay near kExchangeCtas, and two kernels of every
  // sharing rank fit the GPU at once (even when PURLIN_EXCHANGE_CHANNELS asks for more).
  p->exchange_channels = c.exchange_channels ? c.exchange_channels : std::clamp(kExchangeCtas / sharing, 1, 64);
  if (r.sms > 0) {
    const int fit = std::max(1, r.sms * kExchangeCtasPerSm / (2 * sharing));
    if (p->exchange_channels > fit) {
      if (c.exchange_channels)
        log::warn("PURLIN_EXCHANGE_CHANNELS={} would not fit two exchange kernels of {} ranks on the GPU at once; "
                  "using {}", c.exchange_channels, sharing, fit);
      p->exchange_channels = fit;
    }
  }
  p->exchange_max_bytes = c.exchange_disabled ? 0 : c.exchange_max_bytes ? c.exchange_max_bytes : exchange_max(r.nranks);
  p->exchange_call_bytes = c.exchange_call_bytes ? c.exchange_call_bytes : exchange_call(r.nranks);
  // Zero-staging from the size where the generic kernels would take over from the exchange.
  p->zero_staging_min_bytes = c.zero_staging_disabled ? 0 : c.zero_staging_min_bytes ? c.zero_staging_min_bytes
                                                                                      : exchange_call(r.nranks);
  // Every sharing rank's CTAs spin on each other's, so all of them must fit the GPU at once, at the
  // zero-staging kernels' own residency (one CTA per multiprocessor where their registers fill it: 8
  // ranks of 24 CTAs each stopped at PURLIN_TIMEOUT on a GPU of 132 multiprocessors).
  const int zs_per_sm = r.zero_staging_ctas_per_sm > 0 ? r.zero_staging_ctas_per_sm : 1;
  const int zs_fit = std::max(1, r.sms * zs_per_sm / sharing);
  p->zero_staging_ctas = std::clamp(c.zero_staging_ctas ? c.zero_staging_ctas : kZeroStagingCtas / sharing, 1,
                                    std::min(zs_fit, 64));
  if (c.zero_staging_ctas && p->zero_staging_ctas != c.zero_staging_ctas)
    log::warn("PURLIN_ZERO_STAGING_CTAS={} would not fit {} ranks' kernels on the GPU at once; using {}",
              c.zero_staging_ctas, sharing, p->zero_staging_ctas);
  if (r.nranks < 2) p->zero_staging_min_bytes = 0;
  p->zero_staging_rooted_min_bytes =
      r.nranks > 4 && !c.zero_staging_min_bytes ? std::min(p->zero_staging_min_bytes, kZeroStagingRootedMinBytes)
                                                : p->zero_staging_min_bytes;
  // Zero-staged calls below zero_staging_full_bytes run half the CTAs: 8 MiB with up to 4 ranks,
  // 4 MiB with more. One H100 shared by the ranks, nccl-tests, bf16, graph, us per call, half the CTAs
  // against all (perf/results/2026-12-06-h100-two-rank-ctas/, perf/results/2026-12-06-h100-tails/):
  // 2 ranks, 32 against 64: AllReduce 2 MiB 13.44 / 15.71, ReduceScatter 11.74 / 14.20, AllGather
  // 10.23 / 10.71, AlltoAll 11.07 / 11.89, Broadcast 10.45 / 11.32, Reduce 12.07 / 14.39; at 4 MiB
  // 15.45 / 15.50, 13.41 / 13.99, 10.94 / 11.89, 11.19 / 12.79, 11.35 / 12.33, 14.10 / 13.86; at
  // 16 MiB 40.63 / 39.79, 34.42 / 32.72, 29.57 / 27.93, 33.90 / 33.57. 4 ranks, 16 against 32:
  // AllReduce 2 MiB 20.91 / 25.04, ReduceScatter 17.72 / 18.99, AllGather 13.51 / 15.08, AlltoAll
  // 17.27 / 18.34; at 4 MiB 32.44 / 35.20, 22.56 / 25.62, 17.09 / 19.04, 23.58 / 24.49; at 8 MiB
  // 45.33 / 45.92, 34.04 / 34.44, 26.56 / 26.14, 35.16 / 35.90. 8 ranks, 8 against 16: AllReduce
  // 1 MiB 28.76 / 32.47, 2 MiB 36.89 / 42.52, AllGather 17.92 / 18.65, 20.04 / 21.05, AlltoAll
  // 26.17 / 25.82, 28.30 / 29.27; at 4 MiB AllReduce 50.22 / 52.95, AllGather 30.24 / 27.90.
  // Below the zero-staging bound (Broadcast and Reduce get there, and AllReduce with 2 ranks) a
  // quarter of them with more than 2 ranks (kZeroStagingRootedMinBytes), half with 2.
  const bool two = r.nranks == 2;
  p->zero_staging_small_ctas = std::max(1, p->zero_staging_ctas / 2);
  p->zero_staging_below_ctas = two ? p->zero_staging_small_ctas : std::max(1, p->zero_staging_ctas / 4);
  p->zero_staging_full_bytes = c.zero_staging_full_bytes
                                   ? c.zero_staging_full_bytes
                                   : std::max(r.nranks <= 4 ? kFullBytesFew : kFullBytesMany, p->zero_staging_min_bytes);
  p->zero_staging_eager = p->zero_staging_min_bytes && !c.zero_staging_eager_disabled;
  // The copy engines where they measured within 5% of the SM path or faster, graph and eager, on
  // one H200 shared by the ranks (perf/results/2026-12-04-h200-copy-engine/): AlltoAll with 8 ranks
  // from 256 MiB (1 GiB: 4.03 ms against 4.31, graph; at 64 MiB eager 6% slower), with 4 from
  // 64 MiB (1 GiB: 2.03 against 2.17; 64 MiB eager 3% slower). Gather and Scatter alike
  // (perf/results/2026-12-04-h200-rooted-zero-staging/, graph): with 8 ranks 1 GiB 0.52 ms against
  // 0.56, 64 MiB 5% slower; with 4 ranks 1 GiB 0.51 against 0.55, 64 MiB 1.5% slower. With 2 ranks
  // (copies in pieces of at most atom::kCePieceBytes) from 64 MiB too: AlltoAll 1 GiB 1.01 ms against
  // 1.09, Gather 0.51 against 0.55, at 64 MiB within 1% or faster, at 16 MiB 13-18% slower. Not
  // AllGather or Broadcast: the engines read the input once per destination where the SM path reads
  // it once for all (0.55-0.56 of the copy roofline against 0.86 with 8 ranks). Send/Recv's moved
  // messages (perf/results/2026-12-04-h200-sendrecv-ce/, nccl-tests sendrecv_perf, share of the copy
  // roofline, engines against SMs, graph and eager): 8 ranks from 64 MiB (64 MiB 0.90 against
  // 0.84 and 0.81, 1 GiB 1.00 and 0.99 against 0.89 and 0.91), 4 ranks from 64 MiB (graph 0.86
  // against 0.75, eager level at 0.85; 1 GiB 0.99 against 0.80), 2 ranks from 256 MiB (0.93 against
  // 0.87; at 64 MiB 0.78 and 0.75 against 0.80 and 0.81). Ranks each on a GPU of their own: not
  // measured, SMs.
  if (c.ce_min_bytes) {
    p->ce_all_gather_min_bytes = p->ce_all_to_all_min_bytes = p->ce_broadcast_min_bytes =
        p->ce_gather_scatter_min_bytes = p->ce_send_recv_min_bytes = c.ce_min_bytes;
  } else if (!c.ce_disabled) {
    p->ce_all_to_all_min_bytes = p->ce_gather_scatter_min_bytes =
        sharing >= 8 ? kCeCopyMinBytes8 : sharing >= 2 ? kCeCopyMinBytes2 : 0;
    p->ce_send_recv_min_bytes = sharing >= 4 ? kCeSendRecvMinBytes4 : sharing >= 2 ? kCeSendRecvMinBytes2 : 0;
  }
  if (!p->zero_staging_min_bytes)
    p->ce_all_gather_min_bytes = p->ce_all_to_all_min_bytes = p->ce_broadcast_min_bytes =
        p->ce_gather_scatter_min_bytes = p->ce_send_recv_min_bytes = 0;
  p->exchange_poll_ns = c.exchange_poll_ns >= 0 ? static_cast<unsigned>(c.exchange_poll_ns) : 0;
  // A box holds one channel's slice of the largest message, as LL packets (16 bytes per 8).
  const std::uint64_t boxes =
      static_cast<std::uint64_t>(p->exchange_channels) * 4ull * static_cast<std::uint64_t>(std::max(r.nranks, 1));
  const std::uint64_t slice_fit = (kExchangeBudget / boxes / 2) & ~std::uint64_t{15};
  p->exchange_channel_bytes = std::min(p->exchange_channel_bytes, slice_fit);
  p->exchange_max_bytes = std::min(p->exchange_max_bytes, slice_fit * static_cast<std::uint64_t>(p->exchange_channels));
  if (r.nranks < 2) p->exchange_max_bytes = 0;
  // With up to 4 ranks, a Broadcast or Reduce whose buffer is too large for one exchange message
  // is zero-staged even below the zero-staging bound (2 ranks: from 1 MiB and a byte to 2 MiB),
  // rather than left to the generic kernels.
  // With 2 ranks AllReduce also leaves the exchange past its message bound: there it runs two-shot,
  // two exchanges in a row. One H100, nccl-tests, bf16, graph, us per call at 1.5 MiB: exchange 17.98,
  // zero-staging 14.94 (NCCL 2.30.7 17.64 in the same run); at 1 MiB 14.09 against 13.93 (13.17),
  // and 13.09 against 14.42 in an earlier run (perf/results/2026-12-06-h100-two-rank-ctas/).
  p->zero_staging_all_reduce_min_bytes = p->zero_staging_min_bytes;
  const auto past_exchange = [&](bool applies, std::uint64_t* bound) {
    if (applies && !c.zero_staging_min_bytes && p->exchange_max_bytes && *bound)
      *bound = std::min(*bound, p->exchange_max_bytes + 1);
  };
  past_exchange(r.nranks <= 4, &p->zero_staging_rooted_min_bytes);
  past_exchange(r.nranks == 2, &p->zero_staging_all_reduce_min_bytes);
  // The pair exchange's boxes are its own: one channel's slice of its largest message each.
  if (p->exchange_max_bytes) {
    const std::uint64_t pair_all = pair_boxes(r.nranks) * static_cast<std::uint64_t>(p->exchange_channels);
    const std::uint64_t pair_fit = (kPairBudget / pair_all / 2) & ~std::uint64_t{15};
    p->pair_max_bytes = std::min(c.exchange_max_bytes ? c.exchange_max_bytes : pair_max_bytes(r.nranks),
                                 pair_fit * static_cast<std::uint64_t>(p->exchange_channels));
  }
  if (!c.staging_bytes) {
    const std::uint64_t fit =
        (kStagingBudget / (2ull * static_cast<std::uint64_t>(std::max(p->workers, 1)))) & ~((64ull << 10) - 1);
    p->staging_half = std::max(std::min(p->staging_half, fit), least_staging_half(r.nranks, p->slots));
  }
}

bool applies(const Site& site, std::string* why) {
  if (site.device >= 0) return true;
  *why = "the communicator has no CUDA device (host buffers)";
  return false;
}

Policy policy(const Site& site) {
  return policy_for(sm_policy_recipe(), Regime{site.nranks, site.sharing, gpu_sm_count(site.device),
                                               sm_resident_ctas_per_sm(site.device), gpu_arch(site.device),
                                               zero_staging_resident_ctas_per_sm(site.device)});
}

}  // namespace

const PolicyRecipe& sm_policy_recipe() {
  static const PolicyRecipe recipe{"sm", defaults, derive};
  return recipe;
}

const Datapath& sm_datapath() {
  static const Datapath entry{"sm", applies, policy, make_sm_executor};
  return entry;
}

}  // namespace purlin::snac
