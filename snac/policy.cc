#include "snac/policy.h"

#include <algorithm>

#include "core/config.h"
#include "core/log.h"

namespace purlin::snac {

const char* name_of(DatapathKind d) {
  switch (d) {
    case DatapathKind::host: return "host";
    case DatapathKind::sm: return "sm";
    case DatapathKind::ce: return "ce";
  }
  return "?";
}

namespace {

// Channels when ranks share a GPU: their kernels split its SMs, and copies there are bound by HBM.
constexpr int kMaxChannels = 8;
// Channels when each rank has a GPU of its own: bytes cross NVLink, and the bandwidth grows with
// the CTAs moving them (two H200s, AllReduce of 1 GiB: 18.8 ms with 8 channels, 10.1 with 16,
// 5.7 with 32).
constexpr int kMaxChannelsAlone = 32;
// Staging of all channels together (both halves) stays within this; fewer, larger windows keep
// the table's size.
constexpr std::uint64_t kStagingBudget = 256ull << 20;

struct TableEntry {
  DatapathKind datapath;
  const char* name;
  std::uint64_t staging_half;
  std::uint64_t chunk_bytes;
  int slots;
  std::uint64_t latency_max_bytes;
  std::uint64_t channel_bytes;
  std::uint64_t direct_max_bytes;
  double sim_us_per_op;
  double sim_gbps;
};

// Defaults. The host datapath favours few, large chunks: every notification costs a scheduler
// round trip when ranks outnumber cores.
constexpr TableEntry kTable[] = {
    {DatapathKind::host, "host/default", 4u << 20, 512u << 10, 4, 8u << 10, 0, 8u << 10, 20.0, 5.0},
    {DatapathKind::sm, "sm/default", 8u << 20, 256u << 10, 4, 16u << 10, 16u << 10, 64u << 10, 5.0, 1000.0},
    {DatapathKind::ce, "ce/default", 8u << 20, 1u << 20, 4, 0, 0, 0, 10.0, 1000.0},
};

}  // namespace

Policy policy_for(DatapathKind datapath, int nranks, int sharing, int sms, int ctas_per_sm) {
  const TableEntry* e = &kTable[0];
  for (const auto& entry : kTable)
    if (entry.datapath == datapath) e = &entry;
  Policy p;
  p.name = e->name;
  p.staging_half = e->staging_half;
  p.chunk_bytes = e->chunk_bytes;
  p.slots = e->slots;
  p.latency_max_bytes = e->latency_max_bytes;
  p.channel_bytes = e->channel_bytes;
  p.direct_max_bytes = e->direct_max_bytes;
  p.sim_us_per_op = e->sim_us_per_op;
  p.sim_gbps = e->sim_gbps;
  const Config& c = config();
  if (c.staging_bytes) p.staging_half = std::max<std::uint64_t>(c.staging_bytes / 2, 4096);
  if (c.chunk_bytes) p.chunk_bytes = std::max<std::uint64_t>(c.chunk_bytes, 256);
  if (c.slots) p.slots = c.slots;
  if (c.direct_disabled) p.direct_max_bytes = 0;
  else if (c.direct_max_bytes) p.direct_max_bytes = c.direct_max_bytes;
  if (c.channel_bytes) p.channel_bytes = c.channel_bytes;
  if (c.latency_disabled) p.latency_max_bytes = 0;
  else if (c.latency_max_bytes) p.latency_max_bytes = c.latency_max_bytes;
  p.packets_per_pair = std::max<std::uint64_t>((p.latency_max_bytes + 7) / 8, 1);
  // Every lane of the widest call (a composition of two scattered phases) needs `slots` chunks of
  // at least 256 bytes.
  const std::uint64_t least = 2ull * static_cast<std::uint64_t>(std::max(nranks, 1)) * p.slots * 256;
  if (p.staging_half < least) {
    log::info(log::kTune, "staging raised from {} to {} B per half so every lane holds {} chunks", p.staging_half, least,
              p.slots);
    p.staging_half = least;
  }
  if (datapath == DatapathKind::sm) {
    // Up to three roles per channel; keep a quarter of the GPU's CTA slots free for the users' own
    // kernels. Every sharing rank's CTAs must fit at once (they spin on each other), so even an
    // explicit PURLIN_CHANNELS stays below the residency bound.
    const int per_sm = ctas_per_sm > 0 ? ctas_per_sm : 1;
    const int slots = std::max(1, sms * per_sm * 3 / 4);
    const int resident = std::max(1, sms * per_sm / (3 * std::max(1, sharing)));
    const int cap = sharing == 1 && nranks > 1 ? kMaxChannelsAlone : kMaxChannels;
    p.workers = std::clamp(slots / (3 * std::max(1, sharing)), 1, cap);
    if (c.channels) {
      p.workers = std::clamp(c.channels, 1, resident);
      if (p.workers != c.channels)
        log::warn("PURLIN_CHANNELS={} would not fit {} ranks' kernels on the GPU at once; using {}", c.channels,
                  sharing, p.workers);
    }
  }
  if (datapath == DatapathKind::sm && !c.staging_bytes) {
    const std::uint64_t fit =
        (kStagingBudget / (2ull * static_cast<std::uint64_t>(std::max(p.workers, 1)))) & ~((64ull << 10) - 1);
    p.staging_half = std::max(std::min(p.staging_half, fit), least);
  }
  if (c.staging_bytes || c.chunk_bytes || c.slots || c.latency_disabled || c.latency_max_bytes || c.channels ||
      c.direct_disabled || c.direct_max_bytes || c.channel_bytes)
    p.name += "+env";
  log::info(log::kTune,
            "policy {} for {} ranks ({} on this GPU): staging {} B x2, chunk {} B, {} slots, latency path up to {} B, "
            "{} channels (one per {} B of a call; {} CTAs fit an SM), AllReduce direct up to {} B",
            p.name, nranks, sharing, p.staging_half, p.chunk_bytes, p.slots, p.latency_max_bytes, p.workers,
            p.channel_bytes, ctas_per_sm, p.direct_max_bytes);
  return p;
}

}  // namespace purlin::snac
