#include "core/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
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
  Level level = Level::warn;
  unsigned mask = kInit | kEnv;  // NCCL's default subsystems
  std::shared_ptr<spdlog::logger> sink;
  std::string host;
};

Level parse_level(const std::string& text) {
  if (text.empty()) return Level::none;
  std::string t;
  for (char c : text) t += static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (t == "VERSION") return Level::version;
  if (t == "WARN") return Level::warn;
  if (t == "INFO") return Level::info;
  if (t == "TRACE" || t == "ABORT") return Level::trace;
  return Level::none;
}

unsigned parse_subsys(const std::string& text) {
  if (text.empty()) return kInit | kEnv;
  bool invert = !text.empty() && text[0] == '^';
  unsigned mask = 0;
  std::size_t start = invert ? 1 : 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    for (auto& c : item) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
    static const struct { const char* name; unsigned bit; } names[] = {
        {"INIT", kInit}, {"COLL", kColl}, {"P2P", kP2p},   {"SHM", kShm},     {"NET", kNet},
        {"GRAPH", kGraph}, {"TUNE", kTune}, {"ENV", kEnv}, {"ALLOC", kAlloc}, {"CALL", kCall},
        {"ALL", kAll}};
    for (const auto& n : names)
      if (item == n.name) mask |= n.bit;
    start = end + 1;
  }
  return invert ? ~mask : mask;
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

std::atomic<Logger*> g_logger{nullptr};
std::mutex g_init_mutex;
thread_local int tls_device = -1;

// A logger as NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE say now.
Logger* make_logger() {
  // Read the variables directly: config() logs through us, so it cannot be used here.
  auto env = [](const char* name) { const char* v = getenv(name); return std::string(v ? v : ""); };
  auto* fresh = new Logger();  // lives for the process: log lines may come from exit handlers
  fresh->level = parse_level(env("NCCL_DEBUG"));
  fresh->mask = parse_subsys(env("NCCL_DEBUG_SUBSYS"));
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

}  // namespace

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
