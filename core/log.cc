#include "core/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "core/config.h"
#include "core/cuda_probe.h"
#include "core/topology.h"

namespace purlin::log {
namespace {

struct Logger {
  std::atomic<int> level{0};  // a Level; NCCL_WARN_ENABLE_DEBUG_INFO sets INFO after a WARN
  std::uint64_t mask = kDefaultSubsys;
  std::uint32_t timestamp_levels = kDefaultTimestampLevels;  // bit 1 << level
  std::string timestamp_format = kDefaultTimestampFormat;    // for strftime, '_' made spaces
  int fraction_at = -1;  // where %Nf stood in it (N spaces hold its place), or -1
  int fraction_digits = 0;
  bool warn_sets_info = false;
  std::shared_ptr<spdlog::logger> sink;
  std::string host;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();  // TRACE lines count from it
};

// NCCL's timestamp format: the first %Nf (N of 1..9, not after %%) becomes N spaces that each line
// fills with the second's fraction; '_' stands for a space.
void set_timestamp_format(Logger* l, std::string format) {
  for (std::size_t i = 0; i + 1 < format.size(); ++i) {
    if (format[i] != '%') continue;
    if (format[i + 1] == '%') {
      ++i;
      continue;
    }
    if (i + 2 < format.size() && format[i + 1] >= '1' && format[i + 1] <= '9' && format[i + 2] == 'f') {
      l->fraction_digits = format[i + 1] - '0';
      l->fraction_at = static_cast<int>(i);
      format.replace(i, 3, static_cast<std::size_t>(l->fraction_digits), ' ');
      break;
    }
  }
  for (char& c : format)
    if (c == '_') c = ' ';
  l->timestamp_format = std::move(format);
}

std::string timestamp(const Logger& l) {
  if (l.timestamp_format.empty()) return "";
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::tm local{};
  localtime_r(&now.tv_sec, &local);
  std::string format = l.timestamp_format;
  if (l.fraction_at >= 0) {
    long scale = 1;
    for (int d = 0; d < l.fraction_digits; ++d) scale *= 10;
    const std::string fraction = fmt::format("{:0{}}", now.tv_nsec / (1000000000L / scale), l.fraction_digits);
    format.replace(static_cast<std::size_t>(l.fraction_at), fraction.size(), fraction);
  }
  char out[512];
  std::size_t n = std::strftime(out, sizeof out, format.c_str(), &local);
  if (n == 0) n = std::strftime(out, sizeof out, kDefaultTimestampFormat, &local);
  return std::string(out, n);
}

std::string expand_file_name(const std::string& pattern, const std::string& host) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') { out += host; continue; }
      if (c == 'p') { out += std::to_string(getpid()); continue; }
      if (c == '%') { out += '%'; continue; }
      out += '%';
      out += c;
      continue;
    }
    out += pattern[i];
  }
  return out;
}

// The [dev] field: the calling thread's CUDA device as NCCL prints it (cudaGetDevice, 0 where that
// fails), asked only once the library has found devices itself: a log line must not be what
// initialises CUDA (in a process that forks its ranks afterwards, say).
int shown_device() {
  if (!cuda_devices_found()) return 0;
  const int device = cuda_current_device();
  return device < 0 ? 0 : device;
}

// A source file as WARN lines name it: its folder and name ("nccl_shim/api_coll.cc").
std::string_view source_file(const std::source_location& where) {
  std::string_view path = where.file_name();
  const std::size_t last = path.rfind('/');
  if (last == std::string_view::npos || last == 0) return path;
  const std::size_t before = path.rfind('/', last - 1);
  return before == std::string_view::npos ? path : path.substr(before + 1);
}

// A function's bare name, as __func__ gives it, from the compiler's full signature
// ("purlin::Status purlin::snac::Communicator::start(int)" -> "start"). The exported functions are
// defined as pncclX, which ncclX aliases; their lines name ncclX, as NCCL's do.
std::string_view function_of(const std::source_location& where) {
  std::string_view s = where.function_name();
  s = s.substr(0, s.find('('));
  int depth = 0;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] == '>') ++depth;
    else if (s[i] == '<') --depth;
    else if (depth == 0 && (s[i] == ' ' || s[i] == ':')) {
      s = s.substr(i + 1);
      break;
    }
  }
  if (s.starts_with("pnccl")) s.remove_prefix(1);
  return s;
}

std::atomic<Logger*> g_logger{nullptr};
std::mutex g_init_mutex;

// A logger as NCCL's debug variables say now.
Logger* make_logger() {
  // Not through config(), which logs through us: the variables as they are now, after NCCL's files.
  auto env = [](const char* name) { return env_now(name).value_or(""); };
  auto* fresh = new Logger();  // lives for the process: log lines may come from exit handlers
  fresh->level = static_cast<int>(parse_level(env("NCCL_DEBUG")).value_or(Level::none));
  if (auto subsys = env_now("NCCL_DEBUG_SUBSYS")) fresh->mask = parse_names(*subsys, subsys_table()).value_or(kDefaultSubsys);
  if (auto levels = env_now("NCCL_DEBUG_TIMESTAMP_LEVELS"))
    fresh->timestamp_levels =
        static_cast<std::uint32_t>(parse_names(*levels, timestamp_level_table()).value_or(kDefaultTimestampLevels));
  set_timestamp_format(fresh, env_now("NCCL_DEBUG_TIMESTAMP_FORMAT").value_or(kDefaultTimestampFormat));
  fresh->warn_sets_info = parse_bool(env("NCCL_WARN_ENABLE_DEBUG_INFO")).value_or(false);
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  fresh->host = name;
  if (auto dot = fresh->host.find('.'); dot != std::string::npos) fresh->host.resize(dot);
  // As NCCL: the file is opened only for more than the version line.
  std::string file = fresh->level > static_cast<int>(Level::version) ? env("NCCL_DEBUG_FILE") : "";
  try {
    if (!file.empty()) {
      fresh->sink = std::make_shared<spdlog::logger>(
          "purlin", std::make_shared<spdlog::sinks::basic_file_sink_mt>(expand_file_name(file, fresh->host)));
    }
  } catch (const std::exception&) {
    fresh->sink.reset();  // fall back to stdout as NCCL does
  }
  if (!fresh->sink)
    fresh->sink = std::make_shared<spdlog::logger>("purlin", std::make_shared<spdlog::sinks::stdout_sink_mt>());
  fresh->sink->set_pattern("%v");
  fresh->sink->set_level(spdlog::level::trace);
  fresh->sink->flush_on(spdlog::level::trace);
  return fresh;
}

Logger& logger() {
  Logger* l = g_logger.load(std::memory_order_acquire);
  if (l) return *l;
  std::lock_guard<std::mutex> guard(g_init_mutex);
  l = g_logger.load(std::memory_order_relaxed);
  if (l) return *l;
  l = make_logger();
  g_logger.store(l, std::memory_order_release);
  return *l;
}

constexpr NamedBits kLevels[] = {
    {"VERSION", 1, "Prints the NCCL version info only"},
    {"WARN", 2, "Prints only messages indicating a fatal error."},
    {"INFO", 3, "Prints debug message"},
    {"ABORT", 4, ""},
    {"TRACE", 5, "Prints replayable trace info on all calls"},
};

constexpr NamedBits kSubsys[] = {
    {"INIT", kInit, "NCCL and comm initialization (included in default)"},
    {"COLL", kColl, "Collective operations"},
    {"P2P", kP2p, "Peer-to-peer transport"},
    {"SHM", kShm, "Shared memory transport"},
    {"NET", kNet, "Network transport"},
    {"GRAPH", kGraph, "Graph search and topology"},
    {"TUNING", kTune, "Algorithm tuning"},
    {"ENV", kEnv, "Parameter settings by config file, EnvVar or EnvPlugins (included in default)"},
    {"ALLOC", kAlloc, "Device memory allocation"},
    {"ALLOC_HOST", kAllocHost, "Host memory allocation"},
    {"CALL", kCall, "API call tracing"},
    {"PROXY", kProxy, "Proxy thread operations"},
    {"NVLS", kNvls, "NVLink SHARP operations"},
    {"BOOTSTRAP", kBootstrap, "Bootstrap network (included in default)"},
    {"REG", kReg, "Buffer registration"},
    {"PROFILE", kProfile, "Profiling"},
    {"RAS", kRas, "Reliability, availability, serviceability"},
    {"DESTROY", kDestroy, "Communicator destroy, abort, revoke, and plugin unload/close operations"},
    {"ALL", ~std::uint64_t{0}, "All categories"},
};

constexpr NamedBits kTimestampLevels[] = {
    {"VERSION", 1u << 1, "on NCCL version info message"},
    {"WARN", 1u << 2, "on Explicit error message"},
    {"INFO", 1u << 3, "on Debug message"},
    {"ABORT", 1u << 4, ""},
    {"TRACE", 1u << 5, "on Replayable trace message"},
    {"ALL", 0x3eu, "on All messages"},
};

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool same_letters(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

std::span<const NamedBits> level_names() { return kLevels; }
std::span<const NamedBits> subsys_table() { return kSubsys; }
std::span<const NamedBits> timestamp_level_table() { return kTimestampLevels; }

std::optional<Level> parse_level(std::string_view text) {
  const std::string_view t = trimmed(text);
  for (const NamedBits& n : kLevels)
    if (same_letters(t, n.name)) return static_cast<Level>(n.bits);
  return std::nullopt;
}

const char* level_name(Level level) {
  for (const NamedBits& n : kLevels)
    if (n.bits == static_cast<std::uint64_t>(level)) return n.name;
  return "<unknown>";
}

std::optional<bool> parse_bool(std::string_view text) {
  if (text == "1" || same_letters(text, "T") || same_letters(text, "TRUE")) return true;
  if (text == "0" || same_letters(text, "F") || same_letters(text, "FALSE")) return false;
  return std::nullopt;
}

std::optional<std::uint64_t> parse_names(std::string_view text, std::span<const NamedBits> table) {
  const bool invert = !text.empty() && text.front() == '^';
  if (invert) text.remove_prefix(1);
  std::uint64_t mask = invert ? ~std::uint64_t{0} : 0;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trimmed(text.substr(0, comma));
    if (!item.empty()) {
      const NamedBits* found = nullptr;
      for (const NamedBits& n : table)
        if (same_letters(item, n.name)) found = &n;
      if (found == nullptr) return std::nullopt;
      mask = invert ? mask & ~found->bits : mask | found->bits;
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return mask;
}

std::string names_of(std::uint64_t mask, std::span<const NamedBits> table) {
  for (const NamedBits& n : table)
    if (n.bits == mask) return n.name;
  std::string out;
  for (const NamedBits& n : table) {
    const bool one_bit = n.bits != 0 && (n.bits & (n.bits - 1)) == 0;
    if (!one_bit || (mask & n.bits) != n.bits) continue;
    if (!out.empty()) out += ',';
    out += n.name;
  }
  return out.empty() ? "NONE" : out;
}

bool enabled(Level level, unsigned subsys) {
  const Logger& l = logger();
  if (static_cast<int>(level) > l.level.load(std::memory_order_relaxed)) return false;
  if (level == Level::warn || level == Level::version) return true;
  return (l.mask & subsys) != 0;
}

Level current_level() { return static_cast<Level>(logger().level.load(std::memory_order_relaxed)); }

void reload() {
  std::lock_guard<std::mutex> guard(g_init_mutex);
  Logger* old = g_logger.exchange(make_logger(), std::memory_order_acq_rel);
  // Another thread may still be writing through the old logger: its file is flushed, never closed.
  if (old) old->sink->flush();
}

void write(Level level, unsigned /*subsys*/, std::string_view message, const std::source_location& where) {
  Logger& l = logger();
  long tid = syscall(SYS_gettid);
  std::string line = level == Level::warn ? "\n" : "";
  if (l.timestamp_levels & (1u << static_cast<int>(level))) line += timestamp(l);
  if (level == Level::version) {
    line += message;
  } else {
    line += fmt::format("{}:{}:{} [{}] ", l.host, getpid(), tid, shown_device());
    const bool located = where.line() != 0;
    if (level == Level::warn) {
      if (located) line += fmt::format("{}:{} ({}) ", source_file(where), where.line(), function_of(where));
      else line += "<unknown>:0 ";
      line += "NCCL WARN ";
    } else if (level == Level::trace) {
      const std::chrono::duration<double, std::milli> since = std::chrono::steady_clock::now() - l.epoch;
      line += fmt::format("{:f} {}:{} NCCL TRACE ", since.count(), located ? function_of(where) : "<unknown>",
                          where.line());
    } else {
      line += "NCCL INFO ";
    }
    line += message;
  }
  l.sink->info(line);
  if (level == Level::warn && l.warn_sets_info) l.level.store(static_cast<int>(Level::info), std::memory_order_relaxed);
}

}  // namespace purlin::log
