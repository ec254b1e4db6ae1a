// NCCL 2.30's parameter API (nccl_shim/nccl_next.h), answering as NCCL 2.30.7 answers: its registry
// holds NCCL's own nine parameters with NCCL's types, defaults, flags and parsers (NCCL_DEBUG,
// NCCL_DEBUG_SUBSYS, ...), each read anew from the environment at every call unless NCCL caches it,
// and this library's PURLIN_ variables besides, as private strings with the value the configuration
// read (listed under NCCL_PARAM_DUMP_ALL, as NCCL lists its private parameters). NCCL's other
// variables (NCCL_NVLS_ENABLE, ...) are not in its registry, so not in this one. Calls with a NULL
// argument fail with ncclInvalidArgument and no WARN, as in NCCL.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "nccl_shim/nccl_next.h"
#include "nccl_shim/shim.h"

using namespace purlin;

namespace {

// NCCL's ncclParamFlag_t and ncclParamTypeId_t (src/include/param/common.h), with their values.
enum Flag : std::uint64_t { kPublished = 1, kDeprecated = 2, kCached = 4, kUnused = 8, kNoEnvPluginInit = 16 };
enum TypeId { kI8 = 1, kI16, kI32, kI64, kU8, kU16, kU32, kU64, kBool, kCstr, kRaw };

// How a parameter's text becomes its value, and back.
enum class Parser { boolean, text, level, subsys, timestamp_levels };

// A value of any parameter: the bytes ncclParamGet copies, or the string of a text parameter
// (nullopt: no value, NCCL's null).
struct Value {
  std::uint64_t bits = 0;               // bool, uint32_t, uint64_t or the level's int, by the parser
  std::optional<std::string> text;      // Parser::text
};

}  // namespace

struct ncclParamHandle {
  std::string key;
  Parser parser;
  int type_id;
  const char* type;  // as NCCL writes the C type
  std::uint64_t flags;
  const char* desc;
  Value fallback;  // the default
  std::string accepted;
  // The value last read, for parameters NCCL caches (and this library's, read once).
  std::mutex mutex;
  bool loaded = false;
  Value value;
  const char* set_by = "Default";
  bool read_once = false;  // this library's variables: what the configuration read, whatever NCCL_NO_CACHE says
};

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The value of text from the environment, or nullopt where NCCL would keep the default.
std::optional<Value> resolve(Parser parser, const std::string& text) {
  Value v;
  switch (parser) {
    case Parser::boolean:
      if (auto b = log::parse_bool(text)) v.bits = *b ? 1 : 0;
      else return std::nullopt;
      return v;
    case Parser::text:
      v.text = text;
      return v;
    case Parser::level:
      if (auto level = log::parse_level(text)) v.bits = static_cast<std::uint64_t>(*level);
      else return std::nullopt;
      return v;
    case Parser::subsys:
      if (auto mask = log::parse_names(text, log::subsys_table())) v.bits = *mask;
      else return std::nullopt;
      return v;
    case Parser::timestamp_levels:
      if (auto mask = log::parse_names(text, log::timestamp_level_table())) v.bits = static_cast<std::uint32_t>(*mask);
      else return std::nullopt;
      return v;
  }
  return std::nullopt;
}

std::string to_string(Parser parser, const Value& v) {
  switch (parser) {
    case Parser::boolean: return v.bits ? "TRUE" : "FALSE";
    case Parser::text: return v.text.value_or("");
    case Parser::level: return log::level_name(static_cast<log::Level>(v.bits));
    case Parser::subsys: return log::names_of(v.bits, log::subsys_table());
    case Parser::timestamp_levels: return log::names_of(v.bits, log::timestamp_level_table());
  }
  return "";
}

std::size_t raw_size(const ncclParamHandle& h) {
  switch (h.parser) {
    case Parser::boolean: return 1;
    case Parser::level: return sizeof(int);
    case Parser::timestamp_levels: return sizeof(std::uint32_t);
    case Parser::subsys: return sizeof(std::uint64_t);
    case Parser::text: return 0;  // the string's bytes
  }
  return 0;
}

std::string describe(const char* title, std::span<const log::NamedBits> options) {
  std::string d = title;
  for (const log::NamedBits& o : options) {
    d += "\n        ";
    d += o.name;
    d += " - ";
    d += o.desc;
  }
  return d;
}

ncclParamHandle* make(std::string key, Parser parser, const char* type, std::uint64_t flags, const char* desc,
                      Value fallback) {
  auto* h = new ncclParamHandle();
  h->key = std::move(key);
  h->parser = parser;
  h->type = type;
  h->flags = flags;
  h->desc = desc;
  h->fallback = fallback;
  switch (parser) {
    case Parser::boolean:
      h->type_id = kBool;
      h->accepted = "Boolean: 1/T/TRUE or 0/F/FALSE";
      break;
    case Parser::text:
      h->type_id = kCstr;
      h->accepted = "String";
      break;
    case Parser::level:
      h->type_id = kRaw;
      h->accepted = describe("One of:", log::level_names());
      break;
    case Parser::subsys:
      h->type_id = kU64;
      h->accepted = describe("Comma-separated list of:", log::subsys_table());
      break;
    case Parser::timestamp_levels:
      h->type_id = kU32;
      h->accepted = describe("Comma-separated list of:", log::timestamp_level_table());
      break;
  }
  return h;
}

Value bits(std::uint64_t b) { return Value{b, std::nullopt}; }
Value text(const char* t) { return Value{0, t ? std::optional<std::string>(t) : std::nullopt}; }

// Every handle, made once and never freed (NCCL's live for the process too), in the order NCCL 2.30.7
// lists its keys, then this library's variables.
const std::vector<ncclParamHandle*>& handles() {
  static const std::vector<ncclParamHandle*> all = [] {
    std::vector<ncclParamHandle*> v = {
        make("NCCL_PARAM_DUMP_ALL", Parser::boolean, "bool", 0, "Print all parameters including private ones", bits(0)),
        make("NCCL_DEBUG_FILE", Parser::text, "const char*", kPublished | kNoEnvPluginInit,
             "Set the NCCL debug logging output to a file. The filename format can be set to filename.%h.%p where %h "
             "is replaced with the hostname and %p is replaced with the process PID. This does not accept the ~ "
             "character as part of the path, please convert to a relative or absolute path first.",
             text(nullptr)),
        make("NCCL_DEBUG_TIMESTAMP_FORMAT", Parser::text, "const char*", kPublished | kNoEnvPluginInit,
             "Set the format used when printing debug log messages", text(log::kDefaultTimestampFormat)),
        make("NCCL_DEBUG_TIMESTAMP_LEVELS", Parser::timestamp_levels, "uint32_t", kPublished | kNoEnvPluginInit,
             "Set which log lines get a timestamp depending upon the level of the log", bits(log::kDefaultTimestampLevels)),
        make("NCCL_NO_CACHE", Parser::text, "const char*", kCached,
             "Comma-separated list of param keys to disable caching (or ALL)", text(nullptr)),
        make("NCCL_SET_THREAD_NAME", Parser::boolean, "bool", kPublished | kCached,
             "Allow NCCL to give meaningful names to NCCL CPU threads via pthread_setname_np", bits(0)),
        make("NCCL_WARN_ENABLE_DEBUG_INFO", Parser::boolean, "bool", kNoEnvPluginInit,
             "If enabled, the debug level will be set to INFO after a WARN level debug message is logged.", bits(0)),
        make("NCCL_DEBUG_SUBSYS", Parser::subsys, "uint64_t", kPublished | kNoEnvPluginInit,
             "Filter debug output by (comma-separated)", bits(log::kDefaultSubsys)),
        make("NCCL_DEBUG", Parser::level, "ncclDebugLogLevel", kPublished | kNoEnvPluginInit,
             "Set debug output level, the option is inclusive for any level that is less verbose than the set value",
             bits(0)),
    };
    // This library's own variables: read once by the configuration, so cached, with what it read.
    for (const EnvVariable& e : env_variables()) {
      if (e.name.rfind("PURLIN_", 0) != 0) continue;
      ncclParamHandle* h = make(e.name, Parser::text, "const char*", kCached,
                                "Purlin's own setting (README, Environment)", text(nullptr));
      h->loaded = true;
      h->read_once = true;
      if (e.set) {
        h->value = text(e.value.c_str());
        h->set_by = "EnvPlugin";
      }
      v.push_back(h);
    }
    return v;
  }();
  return all;
}

ncclParamHandle* find(const char* key) {
  for (ncclParamHandle* h : handles())
    if (h->key == key) return h;
  return nullptr;
}

// NCCL_NO_CACHE's keys: read once, as NCCL reads it (a cached parameter itself).
bool cache_disabled(const std::string& key) {
  if (key == "NCCL_NO_CACHE") return false;
  static const std::unordered_set<std::string> keys = [] {
    std::unordered_set<std::string> k;
    const std::string list = env_now("NCCL_NO_CACHE").value_or("");
    std::size_t start = 0;
    while (start <= list.size()) {
      std::size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      if (const std::string_view item = trim(std::string_view(list).substr(start, comma - start)); !item.empty())
        k.emplace(item);
      start = comma + 1;
    }
    return k;
  }();
  const bool off = keys.count("ALL") > 0 || keys.count(key) > 0;
  if (off) log::info(log::kEnv, "PARAM: Disabling caching for environment variable {}.", key);
  return off;
}

// The value now, with where it came from: the environment where it is set and parses, else the
// default; a cached parameter keeps its first reading.
Value current(ncclParamHandle& h, const char** set_by = nullptr) {
  std::lock_guard<std::mutex> g(h.mutex);
  const bool keep = h.loaded && (h.read_once || ((h.flags & kCached) && !cache_disabled(h.key)));
  if (!keep) {
    h.value = h.fallback;
    h.set_by = "Default";
    if (const std::optional<std::string> text = env_now(h.key.c_str())) {
      if (std::optional<Value> v = resolve(h.parser, *text)) {
        h.value = *v;
        h.set_by = "EnvPlugin";
      }
    }
    h.loaded = true;
  }
  if (set_by) *set_by = h.set_by;
  return h.value;
}

// NCCL's notes on a key's flags, once per key.
void note_flags(const ncclParamHandle& h) {
  static std::mutex mutex;
  static std::unordered_set<std::string> noted;
  {
    std::lock_guard<std::mutex> g(mutex);
    if (!noted.insert(h.key).second) return;
  }
  if (h.flags & kUnused) log::info(log::kEnv, "Warning: ENV {} is unused. Setting it has no effect.", h.key);
  else if (h.flags & kDeprecated)
    log::info(log::kEnv, "Warning: ENV {} is deprecated. It may be removed or become unused in future versions.", h.key);
  if (!(h.flags & kPublished))
    log::info(log::kEnv, "ENV: {} is private. Its function may change without notice across versions.", h.key);
}

bool show_all() { return log::parse_bool(env_now("NCCL_PARAM_DUMP_ALL").value_or("")).value_or(false); }

template <class T>
ncclResult_t typed(ncclParamHandle_t h, T* out, int type_id) {
  if (h == nullptr || out == nullptr) return ncclInvalidArgument;
  if (h->type_id != type_id) {
    log::info(log::kEnv, "PARAM: type mismatch for key \"{}\"", h->key);
    return ncclInvalidArgument;
  }
  *out = static_cast<T>(current(*h).bits);
  return ncclSuccess;
}

std::string flag_names(std::uint64_t flags) {
  std::string out = (flags & kPublished) ? "" : "Private";
  for (auto [flag, name] : {std::pair{kDeprecated, "Deprecated"}, std::pair{kCached, "Cached"},
                            std::pair{kUnused, "Unused"}, std::pair{kNoEnvPluginInit, "NoEnvPluginInit"}}) {
    if (!(flags & flag)) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace

NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key) {
  if (out == nullptr || key == nullptr) return ncclInvalidArgument;
  ncclParamHandle* h = find(key);
  if (h == nullptr) {
    log::info(log::kEnv, "PARAM: key \"{}\" not found in registry", key);
    return ncclInvalidArgument;
  }
  note_flags(*h);
  *out = h;
  return ncclSuccess;
}

// Integer getters: the registry's integers are NCCL_DEBUG_TIMESTAMP_LEVELS (uint32_t) and
// NCCL_DEBUG_SUBSYS (uint64_t); every other pairing is a type mismatch, as in NCCL.
NCCL_API(ncclResult_t, ncclParamGetI8, ncclParamHandle_t h, int8_t* out) { return typed(h, out, kI8); }
NCCL_API(ncclResult_t, ncclParamGetI16, ncclParamHandle_t h, int16_t* out) { return typed(h, out, kI16); }
NCCL_API(ncclResult_t, ncclParamGetI32, ncclParamHandle_t h, int32_t* out) { return typed(h, out, kI32); }
NCCL_API(ncclResult_t, ncclParamGetI64, ncclParamHandle_t h, int64_t* out) { return typed(h, out, kI64); }
NCCL_API(ncclResult_t, ncclParamGetU8, ncclParamHandle_t h, uint8_t* out) { return typed(h, out, kU8); }
NCCL_API(ncclResult_t, ncclParamGetU16, ncclParamHandle_t h, uint16_t* out) { return typed(h, out, kU16); }
NCCL_API(ncclResult_t, ncclParamGetU32, ncclParamHandle_t h, uint32_t* out) { return typed(h, out, kU32); }
NCCL_API(ncclResult_t, ncclParamGetU64, ncclParamHandle_t h, uint64_t* out) { return typed(h, out, kU64); }

// A string parameter's value, valid until this thread's next ncclParamGetStr (NCCL's lifetime).
NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char** out) {
  if (h == nullptr || out == nullptr) return ncclInvalidArgument;
  if (h->type_id != kCstr) {
    log::info(log::kEnv, "PARAM: type mismatch for key \"{}\"", h->key);
    return ncclInvalidArgument;
  }
  static thread_local std::string held;
  held = to_string(h->parser, current(*h));
  *out = held.c_str();
  return ncclSuccess;
}

// The value's bytes: a string's with its terminating NUL, else the C type's; a buffer too small
// takes nothing (*len = 0).
NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void* out, int maxLen, int* len) {
  if (h == nullptr || out == nullptr || len == nullptr || maxLen <= 0) return ncclInvalidArgument;
  const Value v = current(*h);
  const std::string bytes = v.text.value_or("");
  const std::size_t size = h->parser == Parser::text ? bytes.size() + 1 : raw_size(*h);
  if (size > static_cast<std::size_t>(maxLen)) {
    *len = 0;
    return ncclInvalidArgument;
  }
  if (h->parser == Parser::text) {
    std::memcpy(out, bytes.c_str(), size);
  } else if (h->parser == Parser::boolean) {
    const bool b = v.bits != 0;
    std::memcpy(out, &b, size);
  } else if (size == sizeof(std::uint32_t)) {
    const std::uint32_t u = static_cast<std::uint32_t>(v.bits);
    std::memcpy(out, &u, size);
  } else {
    std::memcpy(out, &v.bits, size);
  }
  *len = static_cast<int>(size);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen) {
  if (key == nullptr || value == nullptr || valueLen == nullptr) return ncclInvalidArgument;
  ncclParamHandle* h = find(key);
  if (h == nullptr) {
    *value = nullptr;
    *valueLen = 0;
    log::info(log::kEnv, "PARAM: key \"{}\" not found in registry", key);
    return ncclInvalidArgument;
  }
  note_flags(*h);
  static thread_local std::string held;
  held = to_string(h->parser, current(*h));
  *value = held.c_str();
  *valueLen = static_cast<int>(held.size());
  return ncclSuccess;
}

// The published keys, or every key under NCCL_PARAM_DUMP_ALL; the table is this thread's until its
// next call, as NCCL's.
NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen) {
  if (table == nullptr || tableLen == nullptr) return ncclInvalidArgument;
  static thread_local std::vector<const char*> keys;
  const bool all = show_all();
  keys.clear();
  for (const ncclParamHandle* h : handles())
    if (all || (h->flags & kPublished)) keys.push_back(h->key.c_str());
  *table = keys.data();
  *tableLen = static_cast<int>(keys.size());
  return ncclSuccess;
}

// To standard output, in NCCL's format.
NCCL_API(void, ncclParamDumpAll) {
  const bool all = show_all();
  std::printf("=== ncclParam Registry Dump ===\n");
  for (ncclParamHandle* h : handles()) {
    if (!all && !(h->flags & kPublished)) continue;
    const char* set_by = "Default";
    const std::string now = to_string(h->parser, current(*h, &set_by));
    const std::string fallback = to_string(h->parser, h->fallback);
    std::printf("%s (%s) [%s] %s\n    Current value=%s set_by=%s default=%s\n    Accepted value: %s\n\n", h->key.c_str(),
                h->type, flag_names(h->flags).c_str(), h->desc, now.empty() ? "<unset>" : now.c_str(), set_by,
                fallback.empty() ? "<unset>" : fallback.c_str(), h->accepted.c_str());
  }
  std::fflush(stdout);
}
