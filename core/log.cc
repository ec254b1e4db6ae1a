#include "core/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "core/config.h"
#include "core/topology.h"

namespace purlin::log {
namespace {

struct Logger {
  Level level = Level::none;
  std::uint64_t mask = kDefaultSubsys;
  std::shared_ptr<spdlog::logger> sink;
  std::string host;
};

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

std::atomic<Logger*> g_logger{nullptr};
std::mutex g_init_mutex;
thread_local int tls_device = -1;

// A logger as NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE say now.
Logger* make_logger() {
  // Not through config(), which logs through us: the variables as they are now, after NCCL's files.
  auto env = [](const char* name) { return env_now(name).value_or(""); };
  auto* fresh = new Logger();  // lives for the process: log lines may come from exit handlers
  fresh->level = parse_level(env("NCCL_DEBUG")).value_or(Level::none);
  if (auto subsys = env_now("NCCL_DEBUG_SUBSYS")) fresh->mask = parse_subsys(*subsys).value_or(kDefaultSubsys);
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  fresh->host = name;
  if (auto dot = fresh->host.find('.'); dot != std::string::npos) fresh->host.resize(dot);
  std::string file = env("NCCL_DEBUG_FILE");
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

struct SubsysName {
  const char* name;
  std::uint64_t bits;
};
// In NCCL's order; ALL is the one name of several bits.
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit},     {"COLL", kColl},       {"P2P", kP2p},         {"SHM", kShm},
    {"NET", kNet},       {"GRAPH", kGraph},     {"TUNING", kTune},     {"ENV", kEnv},
    {"ALLOC", kAlloc},   {"ALLOC_HOST", kAllocHost}, {"CALL", kCall},   {"PROXY", kProxy},
    {"NVLS", kNvls},     {"BOOTSTRAP", kBootstrap}, {"REG", kReg},      {"PROFILE", kProfile},
    {"RAS", kRas},       {"DESTROY", kDestroy}, {"ALL", ~std::uint64_t{0}},
};

constexpr const char* kLevelNames[] = {"VERSION", "WARN", "INFO", "ABORT", "TRACE"};

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

std::optional<Level> parse_level(std::string_view text) {
  const std::string_view t = trimmed(text);
  for (int i = 0; i < 5; ++i)
    if (same_letters(t, kLevelNames[i])) return static_cast<Level>(i + 1);
  return std::nullopt;
}

const char* level_name(Level level) {
  const int i = static_cast<int>(level);
  return i >= 1 && i <= 5 ? kLevelNames[i - 1] : "<unknown>";
}

std::optional<std::uint64_t> parse_subsys(std::string_view text) {
  const bool invert = !text.empty() && text.front() == '^';
  if (invert) text.remove_prefix(1);
  std::uint64_t mask = invert ? ~std::uint64_t{0} : 0;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trimmed(text.substr(0, comma));
    if (!item.empty()) {
      const SubsysName* found = nullptr;
      for (const SubsysName& n : kSubsysNames)
        if (same_letters(item, n.name)) found = &n;
      if (found == nullptr) return std::nullopt;
      mask = invert ? mask & ~found->bits : mask | found->bits;
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return mask;
}

std::string subsys_names(std::uint64_t mask) {
  for (const SubsysName& n : kSubsysNames)
    if (n.bits == mask) return n.name;
  std::string out;
  for (const SubsysName& n : kSubsysNames) {
    const bool one_bit = n.bits != 0 && (n.bits & (n.bits - 1)) == 0;
    if (!one_bit || (mask & n.bits) != n.bits) continue;
    if (!out.empty()) out += ',';
    out += n.name;
  }
  return out.empty() ? "NONE" : out;
}

bool enabled(Level level, unsigned subsys) {
  const Logger& l = logger();
  if (static_cast<int>(level) > static_cast<int>(l.level)) return false;
  if (level == Level::warn || level == Level::version) return true;
  return (l.mask & subsys) != 0;
}

void set_thread_device(int device) { tls_device = device; }

void reload() {
  std::lock_guard<std::mutex> guard(g_init_mutex);
  Logger* old = g_logger.exchange(make_logger(), std::memory_order_acq_rel);
  // Another thread may still be writing through the old logger: its file is flushed, never closed.
  if (old) old->sink->flush();
}

void write(Level level, unsigned /*subsys*/, std::string_view message) {
  Logger& l = logger();
  const char* tag = level == Level::warn ? "WARN" : level == Level::trace ? "TRACE" : "INFO";
  long tid = syscall(SYS_gettid);
  std::string line = fmt::format("{}:{}:{} [{}] NCCL {} {}", l.host, getpid(), tid, tls_device, tag, message);
  l.sink->info(line);
}

}  // namespace purlin::log
