// Logging in NCCL's format and levels through spdlog:
//   host:pid:tid [dev] NCCL INFO <message>
//   host:pid:tid [dev] file.cc:line (function) NCCL WARN <message>
//   host:pid:tid [dev] <ms since the logger started> function:line NCCL TRACE <message>
// where dev is the calling thread's CUDA device (0 where it has none, or before the library has
// asked CUDA for its devices, so that a log line never initialises CUDA).
// NCCL_DEBUG chooses the level (VERSION, WARN, INFO, ABORT, TRACE), NCCL_DEBUG_SUBSYS the
// subsystems (INIT, COLL, ..., ALL; ^ negates), NCCL_DEBUG_FILE the destination (%h host, %p pid),
// NCCL_DEBUG_TIMESTAMP_LEVELS and NCCL_DEBUG_TIMESTAMP_FORMAT the lines that start with a timestamp
// and its strftime format (%Nf: N digits of the second's fraction; _ for a space; by default WARN
// lines, "[%F %T] "), each parsed as NCCL 2.30 parses it. WARN lines are printed whenever
// NCCL_DEBUG is WARN or more, after an empty line as NCCL prints them; NCCL_WARN_ENABLE_DEBUG_INFO
// turns INFO on after the first.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

namespace purlin::log {

// NCCL's levels and subsystem bits (ncclDebugLogLevel, ncclDebugLogSubSys), with their values.
enum class Level : int { none = 0, version = 1, warn = 2, info = 3, abort = 4, trace = 5 };

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
  kProxy = 1u << 10,
  kNvls = 1u << 11,
  kBootstrap = 1u << 12,
  kReg = 1u << 13,
  kProfile = 1u << 14,
  kRas = 1u << 15,
  kDestroy = 1u << 16,
  kAllocHost = 1u << 17,
  kAll = ~0u,
};

// NCCL 2.30's debug variables, parsed as NCCL parses them (its parameter registry's parsers), for
// the logger and the parameter API (nccl_shim/api_param.cc).
//
// A name with its value and NCCL's description of it, in NCCL's order.
struct NamedBits {
  const char* name;
  std::uint64_t bits;
  const char* desc;
};
std::span<const NamedBits> level_names();            // NCCL_DEBUG: VERSION (1) ... TRACE (5)
std::span<const NamedBits> subsys_table();           // NCCL_DEBUG_SUBSYS: INIT ... DESTROY, ALL
std::span<const NamedBits> timestamp_level_table();  // NCCL_DEBUG_TIMESTAMP_LEVELS: 1 << level, ALL

// NCCL_DEBUG: one of the level names in any case, blanks around it trimmed; nullopt for anything
// else (NCCL then keeps its default, none).
std::optional<Level> parse_level(std::string_view text);
// The level's name, "<unknown>" for none (which has no name in NCCL either).
const char* level_name(Level level);
// NCCL_DEBUG_SUBSYS and NCCL_DEBUG_TIMESTAMP_LEVELS: names separated by commas (any case, trimmed,
// empty items skipped, so "" is none), or all bits but those named after a leading ^; nullopt where
// a name is unknown (NCCL then keeps the default).
std::optional<std::uint64_t> parse_names(std::string_view text, std::span<const NamedBits> table);
// NCCL's text for a mask: the one name whose value it is (ALL), else the single-bit names it holds
// joined by commas, else NONE.
std::string names_of(std::uint64_t mask, std::span<const NamedBits> table);
// A boolean parameter (NCCL_WARN_ENABLE_DEBUG_INFO, ...): 1, T or TRUE, 0, F or FALSE in any case;
// nullopt for anything else.
std::optional<bool> parse_bool(std::string_view text);
inline constexpr std::uint64_t kDefaultSubsys = kInit | kEnv | kBootstrap;
inline constexpr std::uint32_t kDefaultTimestampLevels = 1u << static_cast<int>(Level::warn);
inline constexpr const char* kDefaultTimestampFormat = "[%F %T] ";

// True when a message of this level and subsystem would be printed (cheap: two loads).
bool enabled(Level level, unsigned subsys);
// A line of this level; a VERSION line is the message alone, as NCCL prints it. WARN and TRACE
// lines name `where` (none: "<unknown>", as NCCL's).
void write(Level level, unsigned subsys, std::string_view message, const std::source_location& where = {});
// The level NCCL_DEBUG set (raised to INFO by NCCL_WARN_ENABLE_DEBUG_INFO after a WARN).
Level current_level();
// Reads NCCL's debug variables again (ncclResetDebugInit).
void reload();

// A format string and the source line that wrote it, for the lines that name it (WARN, TRACE).
template <typename... Args>
struct Located {
  template <typename S>
    requires std::is_convertible_v<const S&, std::string_view>
  consteval Located(const S& text, std::source_location at = std::source_location::current())
      : format(text), where(at) {}
  fmt::format_string<Args...> format;
  std::source_location where;
};

template <typename... Args>
void info(unsigned subsys, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::info, subsys)) write(Level::info, subsys, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(Located<std::type_identity_t<Args>...> f, Args&&... args) {
  if (enabled(Level::warn, kAll)) write(Level::warn, kAll, fmt::format(f.format, std::forward<Args>(args)...), f.where);
}
template <typename... Args>
void trace(unsigned subsys, Located<std::type_identity_t<Args>...> f, Args&&... args) {
  if (enabled(Level::trace, subsys))
    write(Level::trace, subsys, fmt::format(f.format, std::forward<Args>(args)...), f.where);
}

}  // namespace purlin::log
