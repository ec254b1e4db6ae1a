// Logging in NCCL's format and levels through spdlog:
//   host:pid:tid [dev] NCCL INFO <message>
// NCCL_DEBUG chooses the level (VERSION, WARN, INFO, TRACE), NCCL_DEBUG_SUBSYS the subsystems
// (INIT, COLL, P2P, SHM, NET, GRAPH, TUNE, ENV, ALLOC, CALL, ALL, ^ to negate), NCCL_DEBUG_FILE the
// destination (%h host, %p pid). WARN lines are always printed when NCCL_DEBUG is WARN or more.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace purlin::log {

enum class Level : int { none = 0, version = 1, warn = 2, info = 3, trace = 4 };

enum Subsys : unsigned {
  kInit = 1u << 0,
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kShm = 1u << 3,
  kNet = 1u << 4,
  kGraph = 1u << 5,
  kTune = 1u << 6,
  kEnv = 1u << 7,
  kAlloc = 1u << 8,
  kCall = 1u << 9,
  kAll = ~0u,
};

// True when a message of this level and subsystem would be printed (cheap: two loads).
bool enabled(Level level, unsigned subsys);
void write(Level level, unsigned subsys, std::string_view message);
// Reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE again (ncclResetDebugInit).
void reload();
// The device the calling thread works for, shown in the [dev] field (-1: none).
void set_thread_device(int device);

template <typename... Args>
void info(unsigned subsys, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::info, subsys)) write(Level::info, subsys, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::warn, kAll)) write(Level::warn, kAll, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void trace(unsigned subsys, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::trace, subsys)) write(Level::trace, subsys, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace purlin::log
