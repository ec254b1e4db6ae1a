#include "snac/policy.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

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
// 5.7 with 32; since the Atom keeps more loads in flight, 3.87 ms with 32 and 3.75 with 64, and
// ReduceScatter 2.21 and 1.79).
constexpr int kMaxChannelsAlone = 64;
// The direct forms (snac's plan) on the SM datapath, from purlin-perf sweeps of one bound for all
// three (64K, 256K, 1M, 4M) over 64 KiB to 4 MiB, bf16, graph timing
// (perf/results/2026-11-30-direct-bounds/). Broadcast direct was faster at every size up to 4 MiB
// with 2, 4 and 8 ranks on one H200 and with one rank on each of two: 8 ranks at 4 MiB 48.2 us
// against 91.2. AllReduce and Reduce direct were faster up to 4 MiB with 2 ranks (two H200s,
// AllReduce of 4 MiB: 31.3 us against 51.2), slower from 256 KiB with 4 and 8.
constexpr std::uint64_t kTwoRankDirectMax = 4ull << 20;
// Staging of all channels together (both halves) stays within this; fewer, larger windows keep
// the table's size.
constexpr std::uint64_t kStagingBudget = 256ull << 20;
// The latency exchange's boxes on one rank (every channel, phase, parity and producer) stay within
// this; with many ranks the largest exchanged message shrinks to fit.
constexpr std::uint64_t kExchangeBudget = 32ull << 20;
constexpr std::uint64_t kExchangeMaxBytes = 256ull << 10;
constexpr std::uint64_t kExchangeChannelBytes = 2ull << 10;
constexpr int kExchangeCtas = 128;
// Calls of 1 MiB and more keep the generic kernels: with 8 ranks on one H200 the exchange took 91.7,
// 43.9, 55.4 and 50.9 us for AllReduce, AllGather, ReduceScatter and AlltoAll of 1 MiB where NCCL
// 2.30.7 took 62.3, 36.3, 36.1 and 26.2 (nccl-compare, bf16, graph;
// perf/results/2026-12-01-h200-exchange/).
constexpr std::uint64_t kExchangeCallBytes = 1ull << 20;

struct TableEntry {
  DatapathKind datapath;
  const char* name;
  std::uint64_t staging_half;
  std::uint64_t chunk_bytes;
  int slots;
  std::uint64_t latency_max_bytes;
  std::uint64_t channel_bytes;
  std::uint64_t direct_max_bytes;
  std::uint64_t broadcast_direct_max_bytes;
  double sim_us_per_op;
  double sim_gbps;
};

// Defaults. The host datapath favours few, large chunks: every notification costs a scheduler
// round trip when ranks outnumber cores. The SM datapath takes a channel per 4 KiB of a call: of
// 4, 8 and 16 KiB it was the fastest or level at every size from 1 to 256 KiB and every collective
// on one H200 (2 and 8 ranks) and on two (one rank each), e.g. AllReduce of 256 KiB with 8 ranks
// 33.3 us against 44.7 with 16 KiB (perf/results/2026-11-30-h200x2-r3/).
constexpr TableEntry kTable[] = {
    {DatapathKind::host, "host/default", 4u << 20, 512u << 10, 4, 8u << 10, 0, 8u << 10, 8u << 10, 20.0, 5.0},
    {DatapathKind::sm, "sm/default", 8u << 20, 256u << 10, 4, 16u << 10, 4u << 10, 64u << 10, 4u << 20, 5.0, 1000.0},
    {DatapathKind::ce, "ce/default", 8u << 20, 1u << 20, 4, 0, 0, 0, 0, 10.0, 1000.0},
};

// A field of a policy file's regime: `*` (-1) or a non-negative number, after an optional prefix.
bool regime_field(const std::string& word, const char* prefix, int* out) {
  if (word == "*") {
    *out = -1;
    return true;
  }
  std::string digits = word;
  if (prefix && digits.rfind(prefix, 0) == 0) digits = digits.substr(std::char_traits<char>::length(prefix));
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoi(digits);
  return true;
}

// Sets one KEY=VALUE of an entry; false (and *why) when the key or value is not known.
bool set_key(PolicyEntry& e, const std::string& key, const std::string& value, std::string* why) {
  auto bytes = [&](std::int64_t* field, bool none_allowed) {
    if (none_allowed && value == "none") {
      *field = 0;
      return true;
    }
    auto v = parse_bytes(value);
    if (!v || *v > (std::uint64_t(1) << 40)) {
      *why = fmt::format("{}={} is not a byte size", key, value);
      return false;
    }
    *field = static_cast<std::int64_t>(*v);
    return true;
  };
  auto count = [&](int* field, int most) {
    int v = -1;
    if (!regime_field(value, nullptr, &v) || v < 1 || v > most) {
      *why = fmt::format("{}={} is not a count from 1 to {}", key, value, most);
      return false;
    }
    *field = v;
    return true;
  };
  if (key == "staging_bytes") return bytes(&e.staging_bytes, false);
  if (key == "chunk_bytes") return bytes(&e.chunk_bytes, false);
  if (key == "latency_max_bytes") return bytes(&e.latency_max_bytes, true);
  if (key == "channel_bytes") return bytes(&e.channel_bytes, false);
  if (key == "direct_max_bytes") return bytes(&e.direct_max_bytes, true);
  if (key == "broadcast_direct_max_bytes") return bytes(&e.broadcast_direct_max_bytes, true);
  if (key == "slots") return count(&e.slots, 64);
  if (key == "channels") return count(&e.channels, 1024);
  *why = fmt::format("unknown key '{}'", key);
  return false;
}

// What the PURLIN_* variables set, as a policy file entry (-1: not set).
PolicyEntry env_entry(const Config& c) {
  auto bytes = [](std::uint64_t v) { return v ? static_cast<std::int64_t>(v) : std::int64_t{-1}; };
  PolicyEntry e;
  e.staging_bytes = bytes(c.staging_bytes);
  e.chunk_bytes = bytes(c.chunk_bytes);
  e.channel_bytes = bytes(c.channel_bytes);
  e.latency_max_bytes = c.latency_disabled ? 0 : bytes(c.latency_max_bytes);
  e.direct_max_bytes = c.direct_disabled ? 0 : bytes(c.direct_max_bytes);
  e.broadcast_direct_max_bytes = c.broadcast_direct_disabled ? 0 : bytes(c.broadcast_direct_max_bytes);
  e.slots = c.slots ? c.slots : -1;
  e.channels = c.channels ? c.channels : -1;
  return e;
}

// Whether entry `e` sets any key.
bool sets_anything(const PolicyEntry& e) {
  return e.staging_bytes >= 0 || e.chunk_bytes >= 0 || e.latency_max_bytes >= 0 || e.channel_bytes >= 0 ||
         e.direct_max_bytes >= 0 || e.broadcast_direct_max_bytes >= 0 || e.slots > 0 || e.channels > 0;
}

// Sets what entry `e` names; its channel count, which the residency bound still limits, goes to
// *channels.
void apply(const PolicyEntry& e, Policy& p, int* channels) {
  if (e.staging_bytes >= 0)
    p.staging_half = std::max<std::uint64_t>(static_cast<std::uint64_t>(e.staging_bytes) / 2, 4096);
  if (e.chunk_bytes >= 0) p.chunk_bytes = std::max<std::uint64_t>(static_cast<std::uint64_t>(e.chunk_bytes), 256);
  if (e.slots > 0) p.slots = e.slots;
  if (e.latency_max_bytes >= 0) p.latency_max_bytes = static_cast<std::uint64_t>(e.latency_max_bytes);
  if (e.channel_bytes >= 0) p.channel_bytes = static_cast<std::uint64_t>(e.channel_bytes);
  if (e.direct_max_bytes >= 0) p.direct_max_bytes = static_cast<std::uint64_t>(e.direct_max_bytes);
  if (e.broadcast_direct_max_bytes >= 0)
    p.broadcast_direct_max_bytes = static_cast<std::uint64_t>(e.broadcast_direct_max_bytes);
  if (e.channels > 0) *channels = e.channels;
}

// PURLIN_POLICY_FILE, read once.
const std::vector<PolicyEntry>& file_table() {
  static const std::vector<PolicyEntry> table = [] {
    std::vector<PolicyEntry> t;
    const std::string& path = config().policy_file;
    if (path.empty()) return t;
    std::ifstream in(path);
    if (!in) {
      log::warn("PURLIN_POLICY_FILE={}: cannot be read; the built-in policies apply", path);
      return t;
    }
    std::stringstream text;
    text << in.rdbuf();
    std::vector<std::string> errors;
    t = parse_policy_table(text.str(), &errors);
    for (const std::string& e : errors) log::warn("PURLIN_POLICY_FILE={}: line {}; skipped", path, e);
    log::info(log::kTune, "policy file {}: {} entries", path, t.size());
    return t;
  }();
  return table;
}

}  // namespace

std::vector<PolicyEntry> parse_policy_table(const std::string& text, std::vector<std::string>* errors) {
  std::vector<PolicyEntry> out;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    PolicyEntry e;
    e.line = number;
    std::string why;
    bool ok = w.size() >= 4;
    if (!ok) why = "expected DATAPATH ARCH SHARING NRANKS KEY=VALUE...";
    if (ok && w[0] != "sm" && w[0] != "host" && w[0] != "*") {
      ok = false;
      why = fmt::format("unknown datapath '{}'", w[0]);
    }
    if (ok) e.datapath = w[0];
    if (ok && !regime_field(w[1], "sm_", &e.arch)) {
      ok = false;
      why = fmt::format("architecture '{}' is not sm_XY or *", w[1]);
    }
    if (ok && (!regime_field(w[2], nullptr, &e.sharing) || !regime_field(w[3], nullptr, &e.nranks))) {
      ok = false;
      why = fmt::format("ranks per GPU '{}' and rank count '{}' must be numbers or *", w[2], w[3]);
    }
    for (std::size_t i = 4; ok && i < w.size(); ++i) {
      const auto eq = w[i].find('=');
      if (eq == std::string::npos || eq == 0) {
        ok = false;
        why = fmt::format("'{}' is not KEY=VALUE", w[i]);
        break;
      }
      ok = set_key(e, w[i].substr(0, eq), w[i].substr(eq + 1), &why);
    }
    if (ok) out.push_back(e);
    else if (errors) errors->push_back(fmt::format("{}: {}", number, why));
  }
  return out;
}

const PolicyEntry* match_policy(const std::vector<PolicyEntry>& table, DatapathKind datapath, int arch, int sharing,
                                int nranks) {
  const PolicyEntry* best = nullptr;
  int best_named = -1;
  for (const PolicyEntry& e : table) {
    if (e.datapath != "*" && e.datapath != name_of(datapath)) continue;
    if ((e.arch >= 0 && e.arch != arch) || (e.sharing >= 0 && e.sharing != sharing) ||
        (e.nranks >= 0 && e.nranks != nranks))
      continue;
    const int named = (e.datapath != "*") + (e.arch >= 0) + (e.sharing >= 0) + (e.nranks >= 0);
    if (named >= best_named) {
      best = &e;
      best_named = named;
    }
  }
  return best;
}

Policy policy_for(DatapathKind datapath, int nranks, int sharing, int sms, int ctas_per_sm, int arch) {
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
  p.broadcast_direct_max_bytes = e->broadcast_direct_max_bytes;
  // Two ranks reduce directly up to 4 MiB: each then reads both inputs, no more than the composed
  // form moves between them. With more ranks the direct reduce reads n inputs on every rank and
  // loses from 256 KiB (one H200, 4 and 8 ranks).
  if (datapath == DatapathKind::sm && nranks == 2) p.direct_max_bytes = kTwoRankDirectMax;
  p.sim_us_per_op = e->sim_us_per_op;
  p.sim_gbps = e->sim_gbps;
  // The policy file's entry, then the environment's single entries over it.
  int wanted = 0;
  if (const PolicyEntry* f = match_policy(file_table(), datapath, arch, sharing, nranks)) {
    p.name = fmt::format("{}:{}", config().policy_file, f->line);
    apply(*f, p, &wanted);
  }
  const Config& c = config();
  const PolicyEntry env = env_entry(c);
  apply(env, p, &wanted);
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
    if (wanted) {
      p.workers = std::clamp(wanted, 1, resident);
      if (p.workers != wanted)
        log::warn("{} channels (from {}) would not fit {} ranks' kernels on the GPU at once; using {}", wanted,
                  c.channels ? "PURLIN_CHANNELS" : "the policy file", sharing, p.workers);
    }
  }
  if (datapath == DatapathKind::sm) {
    p.exchange_channel_bytes = c.exchange_channel_bytes ? std::max<std::uint64_t>(c.exchange_channel_bytes, 16) : kExchangeChannelBytes;
    // The channels of all sharing ranks together stay near kExchangeCtas.
    p.exchange_channels = c.exchange_channels ? c.exchange_channels : std::clamp(kExchangeCtas / std::max(1, sharing), 1, 64);
    p.exchange_max_bytes = c.exchange_disabled ? 0 : c.exchange_max_bytes ? c.exchange_max_bytes : kExchangeMaxBytes;
    p.exchange_call_bytes = kExchangeCallBytes;
    // A box holds one channel's slice of the largest message, as LL packets (16 bytes per 8).
    const std::uint64_t boxes = static_cast<std::uint64_t>(p.exchange_channels) * 4ull * static_cast<std::uint64_t>(std::max(nranks, 1));
    const std::uint64_t slice_fit = (kExchangeBudget / boxes / 2) & ~std::uint64_t{15};
    p.exchange_channel_bytes = std::min(p.exchange_channel_bytes, slice_fit);
    p.exchange_max_bytes = std::min(p.exchange_max_bytes, slice_fit * static_cast<std::uint64_t>(p.exchange_channels));
    if (nranks < 2) p.exchange_max_bytes = 0;
  } else if (datapath == DatapathKind::host) {
    // One channel; off unless PURLIN_EXCHANGE_MAX_BYTES asks for it.
    p.exchange_channels = 1;
    p.exchange_max_bytes = c.exchange_disabled || nranks < 2 ? 0 : c.exchange_max_bytes;
  }
  if (datapath == DatapathKind::sm && !c.staging_bytes) {
    const std::uint64_t fit =
        (kStagingBudget / (2ull * static_cast<std::uint64_t>(std::max(p.workers, 1)))) & ~((64ull << 10) - 1);
    p.staging_half = std::max(std::min(p.staging_half, fit), least);
  }
  if (sets_anything(env)) p.name += "+env";
  log::info(log::kTune,
            "policy {} for {} ranks ({} on this GPU): staging {} B x2, chunk {} B, {} slots, latency path up to {} B, "
            "{} channels (one per {} B of a call; {} CTAs fit an SM), AllReduce and Reduce direct up to {} B, "
            "Broadcast direct up to {} B, latency exchange up to {} B ({} B per channel, at most {} channels)",
            p.name, nranks, sharing, p.staging_half, p.chunk_bytes, p.slots, p.latency_max_bytes, p.workers,
            p.channel_bytes, ctas_per_sm, p.direct_max_bytes, p.broadcast_direct_max_bytes, p.exchange_max_bytes,
            p.exchange_channel_bytes, p.exchange_channels);
  return p;
}

}  // namespace purlin::snac
