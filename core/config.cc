#include "core/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <strings.h>

#include "core/log.h"

namespace purlin {
namespace {

std::mutex g_read_mutex;
std::vector<EnvVariable>& read_variables() {
  static auto* v = new std::vector<EnvVariable>();
  return *v;
}

// What the configuration files set, for log_config(): nothing may log while they are read, since
// the logger reads the environment after them.
std::mutex g_file_mutex;
std::vector<std::string>& file_settings() {
  static auto* v = new std::vector<std::string>();
  return *v;
}

// The variable's value ("" when unset); the first reading of each name is kept for env_variables().
std::string env(const char* name) {
  const std::optional<std::string> v = env_now(name);
  std::lock_guard<std::mutex> g(g_read_mutex);
  auto& all = read_variables();
  if (std::none_of(all.begin(), all.end(), [&](const EnvVariable& e) { return e.name == name; }))
    all.push_back(EnvVariable{name, v.value_or(""), v.has_value()});
  return v.value_or("");
}

double parse_seconds(const char* name, const std::string& text, double fallback) {
  if (text.empty()) return fallback;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0)) {
    log::warn("{}={} is not a positive number of seconds; using {}", name, text, fallback);
    return fallback;
  }
  return v;
}

std::uint64_t bytes_or(const char* name, const std::string& text) {
  if (text.empty()) return 0;
  auto v = parse_bytes(text);
  if (!v) {
    log::warn("{}={} is not a byte size (e.g. 4096, 64K, 2M); ignored", name, text);
    return 0;
  }
  return *v;
}

// A size bound that `none` (or 0) turns off: sets *disabled, else *bytes.
void bound_or_none(const char* name, std::uint64_t* bytes, bool* disabled) {
  const std::string text = env(name);
  if (text == "none" || text == "0") *disabled = true;
  else *bytes = bytes_or(name, text);
}

struct FallbackName {
  const char* name;
  std::uint32_t bit;
};
// In bit order; fallback_names() prints the first name of each bit.
constexpr FallbackName kFallbackNames[] = {
    {"allreduce", fallback_op::all_reduce},
    {"broadcast", fallback_op::broadcast},
    {"bcast", fallback_op::broadcast},
    {"reduce", fallback_op::reduce},
    {"allgather", fallback_op::all_gather},
    {"reducescatter", fallback_op::reduce_scatter},
    {"alltoall", fallback_op::all_to_all},
    {"gather", fallback_op::gather},
    {"scatter", fallback_op::scatter},
    {"sendrecv", fallback_op::send_recv},
    {"send", fallback_op::send_recv},
    {"recv", fallback_op::send_recv},
    {"allgatherv", fallback_op::all_gather_v},
    {"reducescatterv", fallback_op::reduce_scatter_v},
    {"alltoallv", fallback_op::all_to_all_v},
};

// A count from lo to hi in variable `name`, into *out when set; any other value is ignored with a
// WARN.
void count_in(const char* name, int lo, int hi, int* out) {
  const std::string text = env(name);
  if (text.empty()) return;
  const int v = std::atoi(text.c_str());
  if (v >= lo && v <= hi) *out = v;
  else log::warn("{}={} is not in {}..{}; ignored", name, text, lo, hi);
}

Config read_config() {
  Config c;
  c.debug = env("NCCL_DEBUG");
  c.debug_subsys = env("NCCL_DEBUG_SUBSYS");
  c.debug_file = env("NCCL_DEBUG_FILE");
  c.comm_id = env("NCCL_COMM_ID");
  if (const std::string b = env("NCCL_COMM_BLOCKING"); b == "0" || b == "1") c.comm_blocking = b == "1";
  else if (!b.empty()) log::warn("NCCL_COMM_BLOCKING={} is not 0 or 1; ignored", b);
  c.socket_ifname = env("NCCL_SOCKET_IFNAME");
  c.nvls_disabled = env("NCCL_NVLS_ENABLE") == "0";
  // Integers as NCCL reads them: "0x1" is 1, "1abc" is 1, text that is no number reads as 0.
  c.check_pointers = nccl_int(env("NCCL_CHECK_POINTERS"), 0) == 1;
  c.local_register = nccl_int(env("NCCL_LOCAL_REGISTER"), 1) != 0;
  c.mem_manager_disabled = nccl_int(env("NCCL_DISABLE_MEM_MANAGER"), 0) != 0;
  c.multi_rank_gpu = nccl_int(env("NCCL_MULTI_RANK_GPU_ENABLE"), 0) != 0;
  c.nvls_requested = env("PURLIN_NVLS") == "1" && !c.nvls_disabled;  // NCCL_NVLS_ENABLE=0 is a hard off

  std::string dp = env("PURLIN_DATAPATH");
  if (dp == "sm") c.datapath = DatapathChoice::sm;
  else if (dp == "host") c.datapath = DatapathChoice::host;
  else if (dp == "ce")
    c.datapath_refused =
        "PURLIN_DATAPATH=ce: the copy engines move calls of the SM datapath, not a communicator of their own "
        "(datapaths: sm, host, auto)";
  else if (!dp.empty() && dp != "auto")
    c.datapath_refused = fmt::format("PURLIN_DATAPATH={} names no datapath (datapaths: sm, host, auto)", dp);
  if (!c.datapath_refused.empty()) log::warn("{}; communicators fail to initialise", c.datapath_refused);

  c.timeout_s = parse_seconds("PURLIN_TIMEOUT", env("PURLIN_TIMEOUT"), c.timeout_s);
  c.bootstrap_timeout_s = parse_seconds("PURLIN_BOOTSTRAP_TIMEOUT", env("PURLIN_BOOTSTRAP_TIMEOUT"), c.bootstrap_timeout_s);
  c.host_id = env("PURLIN_HOST_ID");
  c.nccl_library = env("PURLIN_NCCL_LIBRARY");
  std::string fallback = env("PURLIN_FALLBACK");
  if (!fallback.empty()) {
    std::string bad;
    if (auto ops = parse_fallback(fallback, &bad)) c.fallback_ops = *ops;
    else log::warn("PURLIN_FALLBACK={}: '{}' is not an operation (allreduce, ..., sendrecv, all, none); ignored", fallback, bad);
  }
  c.chunk_bytes = bytes_or("PURLIN_CHUNK_BYTES", env("PURLIN_CHUNK_BYTES"));
  c.staging_bytes = bytes_or("PURLIN_STAGING_BYTES", env("PURLIN_STAGING_BYTES"));
  bound_or_none("PURLIN_LATENCY_MAX_BYTES", &c.latency_max_bytes, &c.latency_disabled);
  bound_or_none("PURLIN_DIRECT_MAX_BYTES", &c.direct_max_bytes, &c.direct_disabled);
  bound_or_none("PURLIN_BROADCAST_DIRECT_MAX_BYTES", &c.broadcast_direct_max_bytes, &c.broadcast_direct_disabled);
  c.channel_bytes = bytes_or("PURLIN_CHANNEL_BYTES", env("PURLIN_CHANNEL_BYTES"));
  bound_or_none("PURLIN_EXCHANGE_MAX_BYTES", &c.exchange_max_bytes, &c.exchange_disabled);
  c.exchange_channel_bytes = bytes_or("PURLIN_EXCHANGE_CHANNEL_BYTES", env("PURLIN_EXCHANGE_CHANNEL_BYTES"));
  c.exchange_call_bytes = bytes_or("PURLIN_EXCHANGE_CALL_BYTES", env("PURLIN_EXCHANGE_CALL_BYTES"));
  bound_or_none("PURLIN_ZERO_STAGING_MIN_BYTES", &c.zero_staging_min_bytes, &c.zero_staging_disabled);
  c.zero_staging_full_bytes = bytes_or("PURLIN_ZERO_STAGING_FULL_BYTES", env("PURLIN_ZERO_STAGING_FULL_BYTES"));
  bound_or_none("PURLIN_CE_MIN_BYTES", &c.ce_min_bytes, &c.ce_disabled);
  c.zero_staging_eager_disabled = env("PURLIN_ZERO_STAGING_EAGER") == "0";
  c.pdl_disabled = env("PURLIN_PDL") == "0";
  c.zero_staging_pdl_disabled = env("PURLIN_ZERO_STAGING_PDL") == "0";
  c.exchange_lean_disabled = env("PURLIN_EXCHANGE_LEAN") == "0";
  c.exchange_word_disabled = env("PURLIN_EXCHANGE_WORD") == "0";
  c.pair_flat_disabled = env("PURLIN_PAIR_FLAT") == "0";
  if (const std::string t = env("PURLIN_PDL_TRIGGER"); !t.empty()) {
    if (t == "start") c.pdl_trigger = PdlTrigger::start;
    else if (t == "last") c.pdl_trigger = PdlTrigger::last;
    else if (t == "exit") c.pdl_trigger = PdlTrigger::exit;
    else log::warn("PURLIN_PDL_TRIGGER={}: not start, last or exit; ignored", t);
  }
  c.cumem_disabled = env("PURLIN_CUMEM") == "0";
  c.policy_file = env("PURLIN_POLICY_FILE");
  c.stamps_path = env("PURLIN_STAMPS");
  count_in("PURLIN_SLOTS", 1, 64, &c.slots);
  count_in("PURLIN_CHANNELS", 1, 64, &c.channels);
  count_in("PURLIN_EXCHANGE_POLL_NS", 0, 100000, &c.exchange_poll_ns);
  count_in("NCCL_LSA_TEAM_SIZE", 0, 1 << 20, &c.lsa_team_size);
  count_in("PURLIN_EXCHANGE_CHANNELS", 1, 64, &c.exchange_channels);
  count_in("PURLIN_ZERO_STAGING_CTAS", 1, 64, &c.zero_staging_ctas);
  return c;
}

void log_config(const Config& c) {
  {
    std::lock_guard<std::mutex> g(g_file_mutex);
    for (const std::string& line : file_settings()) log::info(log::kEnv, "{}", line);
  }
  log::info(log::kEnv, "Purlin {}: PURLIN_DATAPATH={} PURLIN_TIMEOUT={}s PURLIN_BOOTSTRAP_TIMEOUT={}s "
            "NCCL_NVLS_ENABLE={} PURLIN_NVLS={}",
            PURLIN_VERSION,
            c.datapath == DatapathChoice::sm ? "sm" : c.datapath == DatapathChoice::host ? "host" : "auto",
            c.timeout_s, c.bootstrap_timeout_s, c.nvls_disabled ? "0" : "(unset)", c.nvls_requested ? 1 : 0);
  if (!c.comm_id.empty()) log::info(log::kEnv, "NCCL_COMM_ID set by environment to {}", c.comm_id);
  if (c.comm_blocking >= 0) log::info(log::kEnv, "NCCL_COMM_BLOCKING set by environment to {}", c.comm_blocking);
  if (!c.socket_ifname.empty()) log::info(log::kEnv, "NCCL_SOCKET_IFNAME set by environment to {}", c.socket_ifname);
  if (c.multi_rank_gpu) log::info(log::kEnv, "NCCL_MULTI_RANK_GPU_ENABLE set by environment: ranks may share a GPU");
  if (c.check_pointers) log::info(log::kEnv, "NCCL_CHECK_POINTERS set by environment to 1");
  if (!c.local_register) log::info(log::kEnv, "NCCL_LOCAL_REGISTER set by environment to 0: ncclCommRegister registers nothing");
  if (!c.host_id.empty()) log::info(log::kEnv, "PURLIN_HOST_ID set by environment to {}", c.host_id);
  if (!c.nccl_library.empty()) log::info(log::kEnv, "PURLIN_NCCL_LIBRARY set by environment to {}", c.nccl_library);
  if (c.fallback_ops)
    log::info(log::kEnv, "PURLIN_FALLBACK: {} forwarded to NCCL on every communicator", fallback_names(c.fallback_ops));
  if (c.chunk_bytes) log::info(log::kEnv, "PURLIN_CHUNK_BYTES set by environment to {}", c.chunk_bytes);
  if (c.staging_bytes) log::info(log::kEnv, "PURLIN_STAGING_BYTES set by environment to {}", c.staging_bytes);
  if (c.latency_disabled) log::info(log::kEnv, "PURLIN_LATENCY_MAX_BYTES=none: latency path disabled");
  else if (c.latency_max_bytes) log::info(log::kEnv, "PURLIN_LATENCY_MAX_BYTES set by environment to {}", c.latency_max_bytes);
  if (c.direct_disabled) log::info(log::kEnv, "PURLIN_DIRECT_MAX_BYTES=none: AllReduce and Reduce always composed");
  else if (c.direct_max_bytes) log::info(log::kEnv, "PURLIN_DIRECT_MAX_BYTES set by environment to {}", c.direct_max_bytes);
  if (c.broadcast_direct_disabled) log::info(log::kEnv, "PURLIN_BROADCAST_DIRECT_MAX_BYTES=none: Broadcast always composed");
  else if (c.broadcast_direct_max_bytes)
    log::info(log::kEnv, "PURLIN_BROADCAST_DIRECT_MAX_BYTES set by environment to {}", c.broadcast_direct_max_bytes);
  if (c.channel_bytes) log::info(log::kEnv, "PURLIN_CHANNEL_BYTES set by environment to {}", c.channel_bytes);
  if (c.exchange_disabled) log::info(log::kEnv, "PURLIN_EXCHANGE_MAX_BYTES=none: latency exchange disabled");
  else if (c.exchange_max_bytes)
    log::info(log::kEnv, "PURLIN_EXCHANGE_MAX_BYTES set by environment to {}", c.exchange_max_bytes);
  if (c.exchange_channel_bytes)
    log::info(log::kEnv, "PURLIN_EXCHANGE_CHANNEL_BYTES set by environment to {}", c.exchange_channel_bytes);
  if (c.exchange_call_bytes)
    log::info(log::kEnv, "PURLIN_EXCHANGE_CALL_BYTES set by environment to {}", c.exchange_call_bytes);
  if (c.exchange_channels) log::info(log::kEnv, "PURLIN_EXCHANGE_CHANNELS set by environment to {}", c.exchange_channels);
  if (c.exchange_poll_ns >= 0)
    log::info(log::kEnv, "PURLIN_EXCHANGE_POLL_NS set by environment to {}", c.exchange_poll_ns);
  if (c.pdl_disabled) log::info(log::kEnv, "PURLIN_PDL=0: kernels launch without programmatic dependent launch");
  if (c.zero_staging_pdl_disabled)
    log::info(log::kEnv, "PURLIN_ZERO_STAGING_PDL=0: zero-staging kernels launch in plain stream order");
  if (c.exchange_word_disabled) log::info(log::kEnv, "PURLIN_EXCHANGE_WORD=0: the latency exchange runs no word kernels");
  if (c.pair_flat_disabled) log::info(log::kEnv, "PURLIN_PAIR_FLAT=0: the pair exchange moves a word of every message at a time");
  if (c.exchange_lean_disabled) log::info(log::kEnv, "PURLIN_EXCHANGE_LEAN=0: the latency exchange runs its kernels of every form");
  if (c.pdl_trigger != PdlTrigger::start)
    log::info(log::kEnv, "PURLIN_PDL_TRIGGER set by environment to {}", c.pdl_trigger == PdlTrigger::last ? "last" : "exit");
  if (c.cumem_disabled) log::info(log::kEnv, "PURLIN_CUMEM=0: device memory is shared between processes by CUDA IPC");
  if (!c.policy_file.empty()) log::info(log::kEnv, "PURLIN_POLICY_FILE set by environment to {}", c.policy_file);
  if (!c.stamps_path.empty()) log::info(log::kEnv, "PURLIN_STAMPS set by environment to {}", c.stamps_path);
  if (c.slots) log::info(log::kEnv, "PURLIN_SLOTS set by environment to {}", c.slots);
  if (c.channels) log::info(log::kEnv, "PURLIN_CHANNELS set by environment to {}", c.channels);
}

}  // namespace

std::optional<std::uint32_t> parse_fallback(const std::string& text, std::string* bad) {
  std::uint32_t ops = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item;
    for (char ch : text.substr(start, end - start))
      if (ch != ' ' && ch != '_' && ch != '-') item += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    start = end + 1;
    if (item.empty()) continue;
    if (item == "all") {
      ops |= fallback_op::all;
      continue;
    }
    if (item == "none") continue;
    std::uint32_t bit = 0;
    for (const FallbackName& f : kFallbackNames)
      if (item == f.name) bit = f.bit;
    if (bit == 0) {
      if (bad) *bad = item;
      return std::nullopt;
    }
    ops |= bit;
  }
  return ops;
}

std::string fallback_names(std::uint32_t ops) {
  if (ops == 0) return "none";
  if ((ops & fallback_op::all) == fallback_op::all) return "all";
  std::string out;
  std::uint32_t seen = 0;
  for (const FallbackName& f : kFallbackNames) {
    if (!(ops & f.bit) || (seen & f.bit)) continue;
    seen |= f.bit;
    if (!out.empty()) out += ',';
    out += f.name;
  }
  return out;
}

std::optional<std::uint64_t> parse_bytes(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;
  std::uint64_t mult = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: return std::nullopt;
    }
    ++end;
    if (*end == 'B' || *end == 'b') ++end;
    if (*end) return std::nullopt;
  }
  return static_cast<std::uint64_t>(v) * mult;
}

Config read_environment() { return read_config(); }

int apply_config_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return 0;
  int set = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, file) != nullptr) {
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty() || text[0] == '#') continue;
    const std::size_t eq = text.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = text.substr(0, std::min<std::size_t>(eq, 1023));
    const std::string value = text.substr(eq + 1, 1023);
    if (name.empty() || std::getenv(name.c_str()) != nullptr) continue;
    if (::setenv(name.c_str(), value.c_str(), 0) != 0) continue;
    ++set;
    std::lock_guard<std::mutex> g(g_file_mutex);
    file_settings().push_back(fmt::format("{} set by {} to {}", name, path, value));
  }
  std::fclose(file);
  return set;
}

std::vector<std::string> config_file_paths() {
  std::vector<std::string> paths;
  const char* user = std::getenv("NCCL_CONF_FILE");
  const char* home = std::getenv("HOME");
  if (user != nullptr && *user != '\0') paths.emplace_back(user);
  else if (home != nullptr) paths.push_back(std::string(home) + "/.nccl.conf");
  paths.emplace_back("/etc/nccl.conf");
  return paths;
}

void apply_config_files() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& path : config_file_paths()) apply_config_file(path);
  });
}

std::optional<std::string> env_now(const char* name) {
  apply_config_files();
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::int64_t nccl_int(const std::optional<std::string>& text, std::int64_t fallback) {
  if (!text || text->empty()) return fallback;
  errno = 0;
  const long long v = std::strtoll(text->c_str(), nullptr, 0);
  return errno ? fallback : static_cast<std::int64_t>(v);
}

CheckMode check_mode_from(bool check_pointers, const std::optional<std::string>& mode) {
  const auto is = [&](const char* name) { return mode && strcasecmp(mode->c_str(), name) == 0; };
  if (is("DEBUG_GLOBAL")) return CheckMode::global;
  if (is("DEBUG_LOCAL")) return CheckMode::local;
  return check_pointers ? CheckMode::local : CheckMode::off;
}

CheckMode check_mode_now() {
  const std::optional<std::string> mode = env_now("NCCL_CHECK_MODE");
  if (mode) log::info(log::kEnv, "NCCL_CHECK_MODE set by environment to {}", *mode);
  return check_mode_from(config().check_pointers, mode);
}

std::vector<EnvVariable> env_variables() {
  config();
  std::lock_guard<std::mutex> g(g_read_mutex);
  return read_variables();
}

const Config& config() {
  static const Config c = [] {
    Config read = read_config();
    log_config(read);
    return read;
  }();
  return c;
}

}  // namespace purlin
