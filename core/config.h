// Configuration read once from the environment, validated, and logged once at INFO (ENV).
// Everything the library reads from the environment is a field here; nothing else calls getenv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace purlin {

enum class DatapathChoice { automatic, sm, ce, host };

struct Config {
  // NCCL's variables users already set.
  std::string debug;             // NCCL_DEBUG
  std::string debug_subsys;      // NCCL_DEBUG_SUBSYS
  std::string debug_file;        // NCCL_DEBUG_FILE
  std::string comm_id;           // NCCL_COMM_ID: host:port of the bootstrap root
  std::string socket_ifname;     // NCCL_SOCKET_IFNAME: interface(s) the bootstrap binds to
  bool nvls_disabled = false;    // NCCL_NVLS_ENABLE=0 is a hard off

  // Purlin's own.
  DatapathChoice datapath = DatapathChoice::automatic;  // PURLIN_DATAPATH=sm|ce|host
  bool nvls_requested = false;                          // PURLIN_NVLS=1 (never overrides NCCL_NVLS_ENABLE=0)
  double timeout_s = 300.0;                             // PURLIN_TIMEOUT: any wait longer than this fails
  double bootstrap_timeout_s = 120.0;                   // PURLIN_BOOTSTRAP_TIMEOUT: init rendezvous
  std::string host_id;                                  // PURLIN_HOST_ID: overrides host identity (tests)
  // Policy overrides (0 / empty: use the policy table). See snac/policy.h.
  std::uint64_t chunk_bytes = 0;       // PURLIN_CHUNK_BYTES
  std::uint64_t staging_bytes = 0;     // PURLIN_STAGING_BYTES
  std::uint64_t latency_max_bytes = 0; // PURLIN_LATENCY_MAX_BYTES (crossover; 0 keeps the table's)
  int slots = 0;                       // PURLIN_SLOTS
  int channels = 0;                    // PURLIN_CHANNELS: CTAs per role on the SM datapath
  bool latency_disabled = false;       // PURLIN_LATENCY_MAX_BYTES=none forces the throughput path
  std::uint64_t direct_max_bytes = 0;  // PURLIN_DIRECT_MAX_BYTES: AllReduce as one direct reduce up to this
  bool direct_disabled = false;        // PURLIN_DIRECT_MAX_BYTES=none: always ReduceScatter + AllGather
  std::uint64_t channel_bytes = 0;     // PURLIN_CHANNEL_BYTES: bytes of a call per SM channel
  bool pdl_disabled = false;           // PURLIN_PDL=0: no programmatic dependent launch
};

// The process-wide configuration, read on first use.
const Config& config();

// Parses a byte size with an optional K/M/G suffix (binary). Returns nullopt on bad input.
std::optional<std::uint64_t> parse_bytes(const std::string& text);

}  // namespace purlin
