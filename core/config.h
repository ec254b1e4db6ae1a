// Configuration read once from the environment, validated, and logged once at INFO (ENV).
// Everything the library reads from the environment is a field here; nothing else calls getenv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace purlin {

enum class DatapathChoice { automatic, sm, host };

// The operations PURLIN_FALLBACK can forward to the real NCCL, as bits of Config::fallback_ops. Bit k
// is the k-th operation of snac::CollKind (snac/runtime/hierarchy.cc asserts it from snac/collective_list.h).
namespace fallback_op {
inline constexpr std::uint32_t all_reduce = 1u << 0;
inline constexpr std::uint32_t broadcast = 1u << 1;
inline constexpr std::uint32_t reduce = 1u << 2;
inline constexpr std::uint32_t all_gather = 1u << 3;
inline constexpr std::uint32_t reduce_scatter = 1u << 4;
inline constexpr std::uint32_t all_to_all = 1u << 5;
inline constexpr std::uint32_t gather = 1u << 6;
inline constexpr std::uint32_t scatter = 1u << 7;
inline constexpr std::uint32_t send_recv = 1u << 8;
inline constexpr std::uint32_t all_gather_v = 1u << 9;
inline constexpr std::uint32_t reduce_scatter_v = 1u << 10;
inline constexpr std::uint32_t all_to_all_v = 1u << 11;
inline constexpr std::uint32_t all = (1u << 12) - 1;
}  // namespace fallback_op

// Where the latency exchange lets the next kernel of its stream launch: at its first phase's start,
// after its last phase's pushes, or when it ends.
enum class PdlTrigger : int { start, last, exit };

// NCCL 2.30's argument checks of a communicator (NCCL_CHECK_MODE): off (the default), local (every
// call asks the driver about its buffers: NCCL_CHECK_MODE=DEBUG_LOCAL or NCCL_CHECK_POINTERS=1) or
// global (NCCL_CHECK_MODE=DEBUG_GLOBAL: the local checks and, in NCCL, a check across the ranks of
// their symmetric windows, which Purlin does not make).
enum class CheckMode : int { off, local, global };

struct Config {
  // NCCL's variables users already set.
  std::string debug;             // NCCL_DEBUG
  std::string debug_subsys;      // NCCL_DEBUG_SUBSYS
  std::string debug_file;        // NCCL_DEBUG_FILE
  std::string comm_id;           // NCCL_COMM_ID: host:port of the bootstrap root
  int comm_blocking = -1;        // NCCL_COMM_BLOCKING: 0 or 1 overrides every config's blocking (-1: unset)
  std::string socket_ifname;     // NCCL_SOCKET_IFNAME: interface(s) the bootstrap binds to
  bool nvls_disabled = false;    // NCCL_NVLS_ENABLE=0 is a hard off
  bool check_pointers = false;   // NCCL_CHECK_POINTERS read as NCCL reads an integer, 1: local checks (CheckMode)
  bool local_register = true;    // NCCL_LOCAL_REGISTER read as NCCL reads it, 0: ncclCommRegister registers nothing
  int lsa_team_size = 0;         // NCCL_LSA_TEAM_SIZE: caps the size of ncclTeamLsa's teams (0: unset)
  bool mem_manager_disabled = false;  // NCCL_DISABLE_MEM_MANAGER other than 0: ncclCommMemStats is refused
  bool multi_rank_gpu = false;   // NCCL_MULTI_RANK_GPU_ENABLE other than 0: ranks of a host may share a GPU

  // Purlin's own.
  DatapathChoice datapath = DatapathChoice::automatic;  // PURLIN_DATAPATH=sm|host|auto
  std::string datapath_refused;                         // why PURLIN_DATAPATH names no datapath (init fails)
  bool nvls_requested = false;                          // PURLIN_NVLS=1 (never overrides NCCL_NVLS_ENABLE=0)
  double timeout_s = 300.0;                             // PURLIN_TIMEOUT: any wait longer than this fails
  double bootstrap_timeout_s = 120.0;                   // PURLIN_BOOTSTRAP_TIMEOUT: init rendezvous
  std::string host_id;                                  // PURLIN_HOST_ID: overrides host identity (tests)
  std::string nccl_library;                             // PURLIN_NCCL_LIBRARY: the real NCCL to load
  std::uint32_t fallback_ops = 0;                       // PURLIN_FALLBACK: fallback_op bits forwarded to it
  // Policy overrides (0 / empty: use the policy table). See snac/runtime/policy.h.
  std::uint64_t chunk_bytes = 0;       // PURLIN_CHUNK_BYTES
  std::uint64_t staging_bytes = 0;     // PURLIN_STAGING_BYTES
  std::uint64_t latency_max_bytes = 0; // PURLIN_LATENCY_MAX_BYTES (crossover; 0 keeps the table's)
  int slots = 0;                       // PURLIN_SLOTS
  int channels = 0;                    // PURLIN_CHANNELS: CTAs per role on the SM datapath
  bool latency_disabled = false;       // PURLIN_LATENCY_MAX_BYTES=none forces the throughput path
  std::uint64_t direct_max_bytes = 0;  // PURLIN_DIRECT_MAX_BYTES: AllReduce and Reduce direct up to this
  bool direct_disabled = false;        // PURLIN_DIRECT_MAX_BYTES=none: AllReduce and Reduce always composed
  std::uint64_t broadcast_direct_max_bytes = 0;  // PURLIN_BROADCAST_DIRECT_MAX_BYTES: Broadcast direct up to this
  bool broadcast_direct_disabled = false;        // PURLIN_BROADCAST_DIRECT_MAX_BYTES=none: Broadcast always composed
  std::uint64_t channel_bytes = 0;     // PURLIN_CHANNEL_BYTES: bytes of a call per SM channel
  std::uint64_t exchange_max_bytes = 0;      // PURLIN_EXCHANGE_MAX_BYTES: latency exchange up to this per message
  bool exchange_disabled = false;            // PURLIN_EXCHANGE_MAX_BYTES=none: no latency exchange
  std::uint64_t exchange_channel_bytes = 0;  // PURLIN_EXCHANGE_CHANNEL_BYTES: bytes of a message per exchange channel
  std::uint64_t exchange_call_bytes = 0;     // PURLIN_EXCHANGE_CALL_BYTES: the exchange takes calls below this
  int exchange_channels = 0;                 // PURLIN_EXCHANGE_CHANNELS: the most CTAs of one exchange
  int exchange_poll_ns = -1;                 // PURLIN_EXCHANGE_POLL_NS: sleep between empty polls (-1: not set)
  // PURLIN_ZERO_STAGING_MIN_BYTES: calls captured in a CUDA graph from this size on read and write
  // the peers' buffers in place (snac/protocol/zero_staging.h); `none` stages every call.
  std::uint64_t zero_staging_min_bytes = 0;
  bool zero_staging_disabled = false;
  int zero_staging_ctas = 0;           // PURLIN_ZERO_STAGING_CTAS: CTAs per rank of a zero-staging call
  // PURLIN_ZERO_STAGING_FULL_BYTES: zero-staged calls below this size run fewer CTAs (0: not set)
  std::uint64_t zero_staging_full_bytes = 0;
  // PURLIN_ZERO_STAGING_EAGER=0: calls outside graphs are staged whatever their buffers
  bool zero_staging_eager_disabled = false;
  // PURLIN_CE_MIN_BYTES: zero-staged calls that only copy (AllGather, AlltoAll, Broadcast, Gather,
  // Scatter) from this size move their bytes on the copy engines (atom/ce); `none` or 0: never;
  // unset: the policy's bounds
  std::uint64_t ce_min_bytes = 0;
  bool ce_disabled = false;
  bool pdl_disabled = false;           // PURLIN_PDL=0: no programmatic dependent launch
  // PURLIN_ZERO_STAGING_PDL=0: a zero-staging kernel never launches behind the previous one early
  bool zero_staging_pdl_disabled = false;
  PdlTrigger pdl_trigger = PdlTrigger::start;  // PURLIN_PDL_TRIGGER
  bool exchange_word_disabled = false;  // PURLIN_EXCHANGE_WORD=0: no word kernels (atom::WordAtom)
  bool pair_flat_disabled = false;      // PURLIN_PAIR_FLAT=0: the pair exchange moves a word per thread
  bool exchange_lean_disabled = false;  // PURLIN_EXCHANGE_LEAN=0: the exchange's kernels of every form only
  bool cumem_disabled = false;         // PURLIN_CUMEM=0: share device memory by legacy CUDA IPC only
  std::string policy_file;             // PURLIN_POLICY_FILE: a policy table (snac/runtime/policy.h) over the defaults
  std::string stamps_path;             // PURLIN_STAMPS: where the GPU exchange writes its per-call timestamps
};

// NCCL's configuration files, read as NCCL reads them, once, before the first variable is read
// (config(), the logger, env_now()): the file NCCL_CONF_FILE names, or $HOME/.nccl.conf where it is
// unset or empty, then /etc/nccl.conf. Each line `NAME=VALUE` sets a variable the environment does
// not have yet, so the environment wins over the files and the first file over the second; lines
// that start with '#' or have no '=' are skipped, nothing is trimmed. What they set is logged at
// INFO (ENV) with the configuration.
void apply_config_files();
// The files apply_config_files() reads, in its order, for the environment as it is now.
std::vector<std::string> config_file_paths();
// One file's lines, applied as above; returns how many variables it set (0 where it cannot be opened).
int apply_config_file(const std::string& path);

// The check mode a communicator created now takes, as NCCL 2.30 sets it at every init and split:
// NCCL_CHECK_POINTERS (read once per process, as NCCL caches it) and, over it, NCCL_CHECK_MODE (read
// anew). check_mode_from is the rule alone: `mode` DEBUG_LOCAL or DEBUG_GLOBAL in any case, any
// other text leaves the mode NCCL_CHECK_POINTERS set.
CheckMode check_mode_from(bool check_pointers, const std::optional<std::string>& mode);
CheckMode check_mode_now();
// An integer variable as NCCL's parameters read one (strtoll in base 0, the digits it can read;
// `fallback` when unset, empty or out of range).
std::int64_t nccl_int(const std::optional<std::string>& text, std::int64_t fallback);
// A variable as the environment holds it now, after the configuration files (nullopt when unset):
// for NCCL's parameter API, which reads its variables anew on every call as NCCL does.
std::optional<std::string> env_now(const char* name);

// The process-wide configuration, read on first use.
const Config& config();
// The environment as it is now, validated as config() validates it (its WARN lines included), not
// logged and not kept: config() still holds what it read first.
Config read_environment();

// The variables the configuration reads, in the order it first read them, with the value it read.
struct EnvVariable {
  std::string name;
  std::string value;
  bool set = false;  // present in the environment (perhaps empty)
};
std::vector<EnvVariable> env_variables();

// Parses PURLIN_FALLBACK: `all`, `none`, or a comma-separated list of operation names, case
// insensitive, as NCCL's functions are named without the prefix (allreduce, broadcast, reduce,
// allgather, reducescatter, alltoall, gather, scatter, send, recv; the V collectives of purlin.h as
// allgatherv, reducescatterv, alltoallv). `send` and `recv` both name Send/Recv: the two ends of a
// transfer go the same way. Returns nullopt and the offending name in *bad on an unknown name.
std::optional<std::uint32_t> parse_fallback(const std::string& text, std::string* bad);
// "allreduce,sendrecv" for a set of fallback_op bits ("none" for none, "all" for all).
std::string fallback_names(std::uint32_t ops);

// Parses a byte size with an optional K/M/G suffix (binary). Returns nullopt on bad input.
std::optional<std::uint64_t> parse_bytes(const std::string& text);

}  // namespace purlin
