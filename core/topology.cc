#include "core/topology.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>

#include "core/config.h"
#include "core/log.h"

namespace purlin {

namespace {

std::uint64_t fnv1a(std::uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Spreads the bits of an FNV hash (splitmix64's finaliser).
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ' || id.back() == '\r')) id.pop_back();
  return id;
}

std::uint64_t compute_host_id() {
  const std::string& forced = config().host_id;
  if (!forced.empty()) {
    // A number is taken as the id itself; any other text is hashed.
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(forced.c_str(), &end, 0);
    std::uint64_t id = (errno == 0 && end && *end == '\0' && forced[0] != '-')
                           ? static_cast<std::uint64_t>(v)
                           : mix(fnv1a(0xcbf29ce484222325ull, forced));
    log::info(log::kInit, "Host id {:#018x} (PURLIN_HOST_ID={})", id, forced);
    return id;
  }
  // A hostname can repeat across machines (containers keep default names); the boot id differs
  // between machines and is shared by every process of one boot. Together they name a host.
  std::string boot = read_boot_id();
  std::uint64_t h = fnv1a(0xcbf29ce484222325ull, host_name());
  h = fnv1a(h, "/");
  h = fnv1a(h, boot);
  std::uint64_t id = mix(h);
  log::info(log::kInit, "Host id {:#018x} (host {}, boot id {})", id, host_name(), boot.empty() ? "unknown" : boot);
  return id;
}

}  // namespace

std::uint64_t host_id() {
  static const std::uint64_t id = compute_host_id();
  return id;
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

}  // namespace purlin
