#include "snac/runtime/policy.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/config.h"
#include "core/log.h"
#include "snac/executors/datapaths.h"

namespace purlin::snac {

namespace {

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
  if (key == "exchange_direct_max_bytes") return bytes(&e.exchange_direct_max_bytes, true);
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
// A copy-engine bound as the policy's log line says it.
std::string ce_bound(std::uint64_t from) {
  return from ? fmt::format("from {} B", from) : std::string("never (the SM path measured faster)");
}

bool sets_anything(const PolicyEntry& e) {
  return e.staging_bytes >= 0 || e.chunk_bytes >= 0 || e.latency_max_bytes >= 0 || e.channel_bytes >= 0 ||
         e.direct_max_bytes >= 0 || e.exchange_direct_max_bytes >= 0 || e.broadcast_direct_max_bytes >= 0 ||
         e.slots > 0 || e.channels > 0;
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
  if (e.direct_max_bytes >= 0)
    p.direct_max_bytes = p.exchange_direct_max_bytes = p.exchange_reduce_direct_max_bytes =
        static_cast<std::uint64_t>(e.direct_max_bytes);
  if (e.exchange_direct_max_bytes >= 0)
    p.exchange_direct_max_bytes = p.exchange_reduce_direct_max_bytes = static_cast<std::uint64_t>(e.exchange_direct_max_bytes);
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
    if (ok && w[0] != "*" && !find_datapath(w[0])) {
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

const PolicyEntry* match_policy(const std::vector<PolicyEntry>& table, std::string_view datapath, int arch,
                                int sharing, int nranks) {
  const PolicyEntry* best = nullptr;
  int best_named = -1;
  for (const PolicyEntry& e : table) {
    if (e.datapath != "*" && e.datapath != datapath) continue;
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

Policy policy_for(const PolicyRecipe& recipe, const Regime& r) {
  Policy p = recipe.defaults(r);
  // The policy file's entry, then the environment's single entries over it.
  int wanted = 0;
  if (const PolicyEntry* f = match_policy(file_table(), recipe.datapath, r.arch, r.sharing, r.nranks)) {
    p.name = fmt::format("{}:{}", config().policy_file, f->line);
    apply(*f, p, &wanted);
  }
  const PolicyEntry env = env_entry(config());
  apply(env, p, &wanted);
  p.packets_per_pair = std::max<std::uint64_t>((p.latency_max_bytes + 7) / 8, 1);
  // Every lane of the widest call (a composition of two scattered phases) needs `slots` chunks of
  // at least 256 bytes.
  const std::uint64_t least = least_staging_half(r.nranks, p.slots);
  if (p.staging_half < least) {
    log::info(log::kTune, "staging raised from {} to {} B per half so every lane holds {} chunks", p.staging_half, least,
              p.slots);
    p.staging_half = least;
  }
  if (recipe.derive) recipe.derive(r, wanted, &p);
  if (sets_anything(env)) p.name += "+env";
  log::info(log::kTune,
            "policy {} for {} ranks ({} on this GPU): staging {} B x2, chunk {} B, {} slots, latency path up to {} B, "
            "{} channels (one per {} B of a call; {} CTAs fit an SM), AllReduce and Reduce direct up to {} B "
            "(in the latency exchange AllReduce up to {} B, Reduce up to {} B), Broadcast direct up to {} B, latency exchange up to {} B "
            "a message in calls below {} B ({} B per channel, at most {} channels, {} ns between empty polls; Send/Recv's pair exchange up to {} B), zero-staging of captured{} calls from {} B "
            "(Broadcast and Reduce from {} B, AllReduce from {} B) with {} CTAs ({} below {} B, {} below {} B); copy engines for AllGather {}, for AlltoAll {}, for Broadcast {}, for Gather and Scatter {}, for Send/Recv {}",
            p.name, r.nranks, r.sharing, p.staging_half, p.chunk_bytes, p.slots, p.latency_max_bytes, p.workers,
            p.channel_bytes, r.ctas_per_sm, p.direct_max_bytes, p.exchange_direct_max_bytes,
            p.exchange_reduce_direct_max_bytes,
            p.broadcast_direct_max_bytes, p.exchange_max_bytes, p.exchange_call_bytes,
            p.exchange_channel_bytes, p.exchange_channels, p.exchange_poll_ns, p.pair_max_bytes,
            p.zero_staging_eager ? " and eager" : "", p.zero_staging_min_bytes,
            p.zero_staging_rooted_min_bytes, p.zero_staging_all_reduce_min_bytes, p.zero_staging_ctas,
            p.zero_staging_small_ctas, p.zero_staging_full_bytes, p.zero_staging_below_ctas,
            p.zero_staging_min_bytes,
            ce_bound(p.ce_all_gather_min_bytes), ce_bound(p.ce_all_to_all_min_bytes),
            ce_bound(p.ce_broadcast_min_bytes), ce_bound(p.ce_gather_scatter_min_bytes),
            ce_bound(p.ce_send_recv_min_bytes));
  return p;
}

std::uint64_t least_staging_half(int nranks, int slots) {
  return 2ull * static_cast<std::uint64_t>(std::max(nranks, 1)) * static_cast<std::uint64_t>(std::max(slots, 1)) * 256;
}

}  // namespace purlin::snac
