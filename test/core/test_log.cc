// NCCL's debug variables as core/log parses them (each answer as NCCL 2.30.7 gives it), and the
// lines the logger writes under them: timestamps by level and format, WARN lines after an empty
// line, INFO turned on by a WARN under NCCL_WARN_ENABLE_DEBUG_INFO.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "core/log.h"
#include "core/status.h"
#include "test/catch.h"

using namespace purlin;

TEST_CASE("NCCL_DEBUG takes NCCL's level names in any case, trimmed", "[core][log]") {
  CHECK(log::parse_level("WARN") == log::Level::warn);
  CHECK(log::parse_level(" info ") == log::Level::info);
  CHECK(log::parse_level("Abort") == log::Level::abort);
  CHECK(log::parse_level("TRACE") == log::Level::trace);
  CHECK_FALSE(log::parse_level("").has_value());
  CHECK_FALSE(log::parse_level("verbose").has_value());
  CHECK(std::string(log::level_name(log::Level::none)) == "<unknown>");
  CHECK(std::string(log::level_name(log::Level::version)) == "VERSION");
}

TEST_CASE("NCCL_DEBUG_SUBSYS is NCCL's bitset: names, ^ for all but them, unknown names refused", "[core][log]") {
  const auto table = log::subsys_table();
  CHECK(log::parse_names("INIT,ENV", table) == std::uint64_t{log::kInit | log::kEnv});
  CHECK(log::parse_names("init , coll,,", table) == std::uint64_t{log::kInit | log::kColl});
  CHECK(log::parse_names("", table) == std::uint64_t{0});
  CHECK(log::parse_names("ALL", table) == ~std::uint64_t{0});
  CHECK(log::parse_names("^COLL", table) == ~std::uint64_t{log::kColl});
  CHECK(log::parse_names("^ALL", table) == std::uint64_t{0});
  CHECK_FALSE(log::parse_names("INIT,TUNE", table).has_value());  // NCCL's name is TUNING
  CHECK(log::names_of(log::kDefaultSubsys, table) == "INIT,ENV,BOOTSTRAP");
  CHECK(log::names_of(~std::uint64_t{0}, table) == "ALL");
  CHECK(log::names_of(0, table) == "NONE");
  CHECK(log::names_of(~std::uint64_t{log::kColl}, table) ==
        "INIT,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,ALLOC_HOST,CALL,PROXY,NVLS,BOOTSTRAP,REG,PROFILE,RAS,DESTROY");
  const auto levels = log::timestamp_level_table();
  CHECK(log::parse_names("warn,info", levels) == std::uint64_t{(1u << 2) | (1u << 3)});
  CHECK(log::names_of(0x3e, levels) == "ALL");
  CHECK(log::names_of(static_cast<std::uint32_t>(*log::parse_names("^warn", levels)), levels) == "VERSION,INFO,ABORT,TRACE");
}

TEST_CASE("booleans are 1/T/TRUE and 0/F/FALSE in any case", "[core][log]") {
  CHECK(log::parse_bool("1") == true);
  CHECK(log::parse_bool("true") == true);
  CHECK(log::parse_bool("t") == true);
  CHECK(log::parse_bool("F") == false);
  CHECK(log::parse_bool("0") == false);
  CHECK_FALSE(log::parse_bool("yes").has_value());
  CHECK_FALSE(log::parse_bool("").has_value());
}

namespace {

// The lines the logger writes under these variables, through NCCL_DEBUG_FILE.
std::string logged(const char* level, const char* timestamp_levels, const char* timestamp_format, const char* warn_info,
                   void (*body)()) {
  char name[] = "/tmp/purlin-log-XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  ::close(fd);
  ::setenv("NCCL_DEBUG", level, 1);
  ::setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);
  ::setenv("NCCL_DEBUG_FILE", name, 1);
  auto set = [](const char* var, const char* value) { value ? ::setenv(var, value, 1) : ::unsetenv(var); };
  set("NCCL_DEBUG_TIMESTAMP_LEVELS", timestamp_levels);
  set("NCCL_DEBUG_TIMESTAMP_FORMAT", timestamp_format);
  set("NCCL_WARN_ENABLE_DEBUG_INFO", warn_info);
  log::reload();
  body();
  for (const char* var : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_LEVELS",
                          "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_WARN_ENABLE_DEBUG_INFO"})
    ::unsetenv(var);
  log::reload();  // back to stdout, the old file flushed
  std::ifstream in(name);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(name);
  return text.str();
}

// The lines below write WARN and TRACE lines from named functions, keeping their line numbers.
unsigned g_fail_line = 0;
unsigned g_trace_line = 0;

Status refuse_for_the_log() {
  g_fail_line = __LINE__ + 1;
  return fail(Status::invalid_argument, "refused here");
}

// As the exported functions are defined (pncclX, aliased by ncclX): its lines name ncclTestRefusal.
unsigned g_exported_line = 0;
Status pncclTestRefusal() {
  g_exported_line = __LINE__ + 1;
  return fail(Status::invalid_usage, "refused by an exported function");
}

void trace_for_the_log() {
  g_trace_line = __LINE__ + 1;
  log::trace(log::kEnv, "traced {}", 3);
}

}  // namespace

TEST_CASE("WARN lines come after an empty line, with a timestamp by default; INFO lines without", "[core][log]") {
  const std::string text = logged("INFO", nullptr, nullptr, nullptr, [] {
    log::warn("first {}", 1);
    log::info(log::kEnv, "second {}", 2);
  });
  INFO(text);
  // The device is the thread's CUDA device, 0 for this one (it set none) as in NCCL; the WARN line
  // names its source line and function.
  const std::regex want(R"(^\n\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] [^ ]+:\d+:\d+ \[0\] core/test_log\.cc:\d+ \(\w+\) )"
                        R"(NCCL WARN first 1\n[^ \[]+:\d+:\d+ \[0\] NCCL INFO second 2\n$)");
  CHECK(std::regex_match(text, want));
}

TEST_CASE("WARN and TRACE lines name the source line and function, as NCCL's do", "[core][log]") {
  const std::string text = logged("TRACE", "", nullptr, nullptr, [] {
    (void)refuse_for_the_log();
    (void)pncclTestRefusal();
    trace_for_the_log();
  });
  INFO(text);
  const std::string warn_at = "[0] core/test_log.cc:" + std::to_string(g_fail_line) + " (refuse_for_the_log) NCCL WARN refused here\n";
  CHECK(text.find(warn_at) != std::string::npos);
  const std::string exported_at = "core/test_log.cc:" + std::to_string(g_exported_line) + " (ncclTestRefusal) NCCL WARN ";
  CHECK(text.find(exported_at) != std::string::npos);
  const std::regex trace_at(R"(\[0\] \d+\.\d{6} trace_for_the_log:)" + std::to_string(g_trace_line) + R"( NCCL TRACE traced 3\n)");
  CHECK(std::regex_search(text, trace_at));
}

TEST_CASE("a VERSION line is its message alone", "[core][log]") {
  const std::string text = logged("WARN", nullptr, nullptr, nullptr, [] {  // NCCL opens no file at VERSION
    log::write(log::Level::version, log::kAll, "NCCL version 9.9.9");
    log::info(log::kEnv, "not at WARN");
  });
  CHECK(text == "NCCL version 9.9.9\n");
  CHECK(log::current_level() == log::Level::none);  // logged() put the variables back
}

TEST_CASE("NCCL_DEBUG_TIMESTAMP_FORMAT and _LEVELS: %Nf is the second's fraction, _ a space", "[core][log]") {
  const std::string text = logged("INFO", "INFO", "<%Y_%3f>_", nullptr, [] {
    log::warn("plain");
    log::info(log::kEnv, "stamped");
  });
  INFO(text);
  CHECK(std::regex_match(text, std::regex(R"(^\n[^<\n]+ NCCL WARN plain\n<\d{4} \d{3}> [^\n]+ NCCL INFO stamped\n$)")));
}

TEST_CASE("NCCL_WARN_ENABLE_DEBUG_INFO: INFO lines follow the first WARN", "[core][log]") {
  const std::string text = logged("WARN", "", nullptr, "1", [] {
    log::info(log::kEnv, "before");
    log::warn("the warning");
    log::info(log::kEnv, "after");
  });
  INFO(text);
  CHECK(text.find("before") == std::string::npos);
  CHECK(text.find("NCCL WARN the warning") != std::string::npos);
  CHECK(text.find("NCCL INFO after") != std::string::npos);
}
