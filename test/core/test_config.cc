// The environment as core/config.cc reads it: counts outside their range and unknown datapaths are
// refused, `none` and 0 turn a bound off, byte sizes take K/M/G, bad seconds keep the default; and
// NCCL's configuration files as it applies them.
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "test/catch.h"

namespace {

// Sets variables (a null value unsets one) for one scope and puts back what was there after it.
class Env {
 public:
  Env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* before = std::getenv(name);
      saved_.push_back({name, before ? std::optional<std::string>(before) : std::nullopt});
      if (value) ::setenv(name, value, 1);
      else ::unsetenv(name);
    }
  }
  ~Env() {
    for (const auto& [name, before] : saved_) {
      if (before) ::setenv(name, before->c_str(), 1);
      else ::unsetenv(name);
    }
  }
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("counts are taken within their range and ignored outside it", "[core][config]") {
  {
    Env e{{"PURLIN_ZERO_STAGING_CTAS", "64"}, {"PURLIN_EXCHANGE_CHANNELS", "1"}, {"PURLIN_SLOTS", "64"},
          {"PURLIN_EXCHANGE_POLL_NS", "0"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.zero_staging_ctas == 64);
    CHECK(c.exchange_channels == 1);
    CHECK(c.slots == 64);
    CHECK(c.exchange_poll_ns == 0);
  }
  {
    // A zero-staging call has at most 64 CTAs per rank (its barrier words), as the exchange has.
    Env e{{"PURLIN_ZERO_STAGING_CTAS", "65"}, {"PURLIN_EXCHANGE_CHANNELS", "128"}, {"PURLIN_SLOTS", "65"},
          {"PURLIN_CHANNELS", "-3"}, {"PURLIN_EXCHANGE_POLL_NS", "100001"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.zero_staging_ctas == 0);
    CHECK(c.exchange_channels == 0);
    CHECK(c.slots == 0);
    CHECK(c.channels == 0);
    CHECK(c.exchange_poll_ns == -1);
  }
}

TEST_CASE("PURLIN_DATAPATH names a datapath that exists or init is refused", "[core][config]") {
  for (const char* ok : {"sm", "host", "auto"}) {
    Env e{{"PURLIN_DATAPATH", ok}};
    CHECK(purlin::read_environment().datapath_refused.empty());
  }
  {
    Env e{{"PURLIN_DATAPATH", "host"}};
    CHECK(purlin::read_environment().datapath == purlin::DatapathChoice::host);
  }
  for (const char* bad : {"ce", "nvls", "SM", "gpu"}) {
    Env e{{"PURLIN_DATAPATH", bad}};
    const std::string why = purlin::read_environment().datapath_refused;
    CHECK(why.find(bad) != std::string::npos);
    CHECK(why.find("sm, host, auto") != std::string::npos);
  }
}

TEST_CASE("bounds take byte sizes, and none or 0 turns them off", "[core][config]") {
  {
    Env e{{"PURLIN_ZERO_STAGING_MIN_BYTES", "64K"}, {"PURLIN_CE_MIN_BYTES", "2M"}, {"PURLIN_DIRECT_MAX_BYTES", "1G"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.zero_staging_min_bytes == 65536);
    CHECK_FALSE(c.zero_staging_disabled);
    CHECK(c.ce_min_bytes == (2u << 20));
    CHECK(c.direct_max_bytes == (1ull << 30));
  }
  {
    Env e{{"PURLIN_ZERO_STAGING_MIN_BYTES", "none"}, {"PURLIN_CE_MIN_BYTES", "0"}, {"PURLIN_LATENCY_MAX_BYTES", "none"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.zero_staging_disabled);
    CHECK(c.zero_staging_min_bytes == 0);
    CHECK(c.ce_disabled);
    CHECK(c.latency_disabled);
  }
  {
    Env e{{"PURLIN_ZERO_STAGING_MIN_BYTES", "lots"}, {"PURLIN_CHUNK_BYTES", "12Q"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.zero_staging_min_bytes == 0);
    CHECK_FALSE(c.zero_staging_disabled);
    CHECK(c.chunk_bytes == 0);
  }
}

TEST_CASE("timeouts are positive seconds or keep their defaults", "[core][config]") {
  {
    Env e{{"PURLIN_TIMEOUT", "2.5"}, {"PURLIN_BOOTSTRAP_TIMEOUT", "7"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.timeout_s == 2.5);
    CHECK(c.bootstrap_timeout_s == 7.0);
  }
  {
    Env e{{"PURLIN_TIMEOUT", "-1"}, {"PURLIN_BOOTSTRAP_TIMEOUT", "soon"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.timeout_s == 300.0);
    CHECK(c.bootstrap_timeout_s == 120.0);
  }
}

TEST_CASE("PURLIN_NVLS=1 never overrides NCCL_NVLS_ENABLE=0", "[core][config]") {
  {
    Env e{{"PURLIN_NVLS", "1"}, {"NCCL_NVLS_ENABLE", nullptr}};
    CHECK(purlin::read_environment().nvls_requested);
  }
  {
    Env e{{"PURLIN_NVLS", "1"}, {"NCCL_NVLS_ENABLE", "0"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.nvls_disabled);
    CHECK_FALSE(c.nvls_requested);
  }
}

TEST_CASE("NCCL's integer variables read as NCCL's parameters read them", "[core][config]") {
  using purlin::nccl_int;
  CHECK(nccl_int(std::nullopt, 7) == 7);
  CHECK(nccl_int(std::string(""), 7) == 7);
  CHECK(nccl_int(std::string("1"), 0) == 1);
  CHECK(nccl_int(std::string("0x1"), 0) == 1);    // base 0, as NCCL's strtoll
  CHECK(nccl_int(std::string("010"), 0) == 8);
  CHECK(nccl_int(std::string("1abc"), 0) == 1);   // the digits strtoll can read
  CHECK(nccl_int(std::string("abc"), 5) == 0);    // no digits: 0, not the default
  CHECK(nccl_int(std::string("-2"), 0) == -2);
  CHECK(nccl_int(std::string("99999999999999999999"), 3) == 3);  // out of range: the default
  {
    Env e{{"NCCL_CHECK_POINTERS", "0x1"}, {"NCCL_LOCAL_REGISTER", "0"}};
    const purlin::Config c = purlin::read_environment();
    CHECK(c.check_pointers);
    CHECK_FALSE(c.local_register);
  }
  {
    Env e{{"NCCL_CHECK_POINTERS", "2"}, {"NCCL_LOCAL_REGISTER", nullptr}};
    const purlin::Config c = purlin::read_environment();
    CHECK_FALSE(c.check_pointers);  // NCCL compares it with 1
    CHECK(c.local_register);
  }
}

TEST_CASE("NCCL_CHECK_MODE names a mode in any case and overrides NCCL_CHECK_POINTERS", "[core][config]") {
  using purlin::CheckMode;
  using purlin::check_mode_from;
  CHECK(check_mode_from(false, std::nullopt) == CheckMode::off);
  CHECK(check_mode_from(true, std::nullopt) == CheckMode::local);
  CHECK(check_mode_from(false, std::string("DEBUG_LOCAL")) == CheckMode::local);
  CHECK(check_mode_from(false, std::string("debug_global")) == CheckMode::global);
  CHECK(check_mode_from(true, std::string("Debug_Global")) == CheckMode::global);
  CHECK(check_mode_from(true, std::string("DEBUG")) == CheckMode::local);  // unknown: NCCL_CHECK_POINTERS decides
  CHECK(check_mode_from(false, std::string("DEBUG")) == CheckMode::off);
  CHECK(check_mode_from(false, std::string("")) == CheckMode::off);
  {
    // Read anew at every call, as NCCL reads it at every init.
    Env e{{"NCCL_CHECK_MODE", "DEBUG_LOCAL"}};
    CHECK(purlin::check_mode_now() == CheckMode::local);
  }
  {
    Env e{{"NCCL_CHECK_MODE", "DEBUG_GLOBAL"}};
    CHECK(purlin::check_mode_now() == CheckMode::global);
  }
}

namespace {

// A file of the given text for one scope.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/purlin-conf-XXXXXX";
    const int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    ::close(fd);
    path_ = name;
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string value_of(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

}  // namespace

TEST_CASE("NCCL's configuration files set only what the environment lacks, line by line as NCCL reads them",
          "[core][config]") {
  Env e{{"PURLIN_CONF_A", nullptr}, {"PURLIN_CONF_B", "from the environment"}, {"PURLIN_CONF_C", nullptr},
        {"PURLIN_CONF_D ", nullptr}, {"PURLIN_CONF_E", nullptr}, {"PURLIN_CONF_F", nullptr}};
  TempFile first("# PURLIN_CONF_F=a comment\n"
                 "PURLIN_CONF_A=1\n"
                 "PURLIN_CONF_B=from the file\n"
                 "a line without an equals sign\n"
                 "PURLIN_CONF_C=x=y\r\n"
                 "PURLIN_CONF_D = spaced\n"
                 "PURLIN_CONF_E=");
  TempFile second("PURLIN_CONF_A=2\nPURLIN_CONF_F=from the second file\n");
  CHECK(purlin::apply_config_file(first.path()) == 4);  // A, C, "D " and E
  CHECK(value_of("PURLIN_CONF_A") == "1");
  CHECK(value_of("PURLIN_CONF_B") == "from the environment");
  CHECK(value_of("PURLIN_CONF_C") == "x=y");
  CHECK(value_of("PURLIN_CONF_D ") == " spaced");  // nothing is trimmed: the name keeps its space
  CHECK(value_of("PURLIN_CONF_E").empty());
  CHECK(value_of("PURLIN_CONF_F") == "(unset)");
  CHECK(purlin::apply_config_file(second.path()) == 1);  // the first file's A stays
  CHECK(value_of("PURLIN_CONF_A") == "1");
  CHECK(value_of("PURLIN_CONF_F") == "from the second file");
  CHECK(purlin::apply_config_file("/nonexistent/nccl.conf") == 0);
}

TEST_CASE("the configuration files are NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf", "[core][config]") {
  using Paths = std::vector<std::string>;
  {
    Env e{{"NCCL_CONF_FILE", "/opt/site/nccl.conf"}, {"HOME", "/home/someone"}};
    CHECK(purlin::config_file_paths() == Paths{"/opt/site/nccl.conf", "/etc/nccl.conf"});
  }
  {
    Env e{{"NCCL_CONF_FILE", ""}, {"HOME", "/home/someone"}};
    CHECK(purlin::config_file_paths() == Paths{"/home/someone/.nccl.conf", "/etc/nccl.conf"});
  }
  {
    Env e{{"NCCL_CONF_FILE", nullptr}, {"HOME", nullptr}};
    CHECK(purlin::config_file_paths() == Paths{"/etc/nccl.conf"});
  }
}
