// Codesign policies are data: for a datapath and a regime, how big the chunks are, how many slots a
// lane's ring has, how much staging a rank exposes and where the latency path hands over to the
// throughput path. The built-in table gives defaults per datapath; a policy file
// (PURLIN_POLICY_FILE, written by scripts/policy-sweep from measurements) overrides them per
// datapath, architecture, ranks per GPU and rank count; PURLIN_* variables override single entries.
//
// The policy file: one entry per line, `DATAPATH ARCH SHARING NRANKS KEY=VALUE...`, `#` starts a
// comment. DATAPATH is sm or host, ARCH sm_XY (sm_90), SHARING the ranks on one GPU, NRANKS the
// communicator's size; `*` matches anything. Keys: staging_bytes, chunk_bytes, slots,
// latency_max_bytes, channels, channel_bytes, direct_max_bytes (AllReduce and Reduce),
// exchange_direct_max_bytes (AllReduce in the latency exchange), broadcast_direct_max_bytes (sizes
// take K, M, G; `none` turns the latency path or a direct form off). Of the entries that match, the
// one that names the most fields wins, and among those the last. A line that does not parse is skipped with a WARN.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace purlin::snac {

struct Policy {
  std::string name;                    // e.g. "host/default", logged at INFO
  std::uint64_t staging_half = 0;      // bytes of one staging half per rank
  std::uint64_t chunk_bytes = 0;       // largest chunk of the throughput path
  int slots = 0;                       // ring depth per lane
  std::uint64_t latency_max_bytes = 0; // per pair message; above it the throughput path serves
  std::uint64_t packets_per_pair = 0;  // latency buffer per (phase, producer, buffer), in packets
  int workers = 1;                     // threads (host) or CTAs (GPU) per role: the most a call uses
  std::uint64_t channel_bytes = 0;     // SM: a call of uniform sizes takes one channel per this many bytes
  std::uint64_t direct_max_bytes = 0;  // AllReduce and Reduce up to this size: one direct reduce (0: never)
  // An AllReduce whose two-shot form the latency exchange would take (shards within
  // exchange_max_bytes, the buffer within exchange_call_bytes) runs direct (one-shot) only up to
  // this size, a Reduce up to exchange_reduce_direct_max_bytes. A policy entry's direct_max_bytes
  // sets both, and its exchange_direct_max_bytes, where named, sets both again.
  std::uint64_t exchange_direct_max_bytes = 0;
  std::uint64_t exchange_reduce_direct_max_bytes = 0;
  std::uint64_t broadcast_direct_max_bytes = 0;  // Broadcast up to this size: the root's whole buffer to all
  // The latency exchange (snac/protocol/exchange.h), SM datapath: a call whose largest message is at
  // most exchange_max_bytes, and whose input and output are each smaller than exchange_call_bytes,
  // runs as one exchange kernel, one CTA per exchange_channel_bytes of a message, at most
  // exchange_channels (0: no exchange).
  std::uint64_t exchange_max_bytes = 0;
  // Send/Recv messages of at most this size take the pair exchange (0: none), in the exchange's
  // channels (exchange_channel_bytes, exchange_channels).
  std::uint64_t pair_max_bytes = 0;
  std::uint64_t exchange_call_bytes = 0;  // ... and whose buffers are smaller than this
  std::uint64_t exchange_channel_bytes = 0;
  int exchange_channels = 0;
  unsigned exchange_poll_ns = 0;       // a packet wait's sleep after a look that found nothing (0: none)
  // Zero-staging (snac/protocol/zero_staging.h), SM datapath: a call captured in a CUDA graph whose
  // buffers every rank can share, and whose larger side is at least zero_staging_min_bytes, reads and
  // writes the peers' buffers in place with zero_staging_ctas CTAs (0: never); so does such a call
  // outside a graph with zero_staging_eager. Broadcast and Reduce from zero_staging_rooted_min_bytes
  // instead, AllReduce from zero_staging_all_reduce_min_bytes (both at most zero_staging_min_bytes);
  // calls below zero_staging_full_bytes (at least zero_staging_min_bytes) run with
  // zero_staging_small_ctas, and those below zero_staging_min_bytes with zero_staging_below_ctas.
  std::uint64_t zero_staging_min_bytes = 0;
  std::uint64_t zero_staging_rooted_min_bytes = 0;
  std::uint64_t zero_staging_all_reduce_min_bytes = 0;
  std::uint64_t zero_staging_full_bytes = 0;
  int zero_staging_ctas = 0;
  int zero_staging_small_ctas = 0;
  int zero_staging_below_ctas = 0;
  bool zero_staging_eager = false;
  // Zero-staged calls that only copy whose larger side is at least this size move their bytes on the
  // copy engines instead of SMs (0: never): AllGather, AlltoAll, Broadcast, Gather and Scatter; and
  // Send/Recv rounds whose messages this rank moves in place are all at least ce_send_recv_min_bytes.
  std::uint64_t ce_all_gather_min_bytes = 0;
  std::uint64_t ce_all_to_all_min_bytes = 0;
  std::uint64_t ce_broadcast_min_bytes = 0;
  std::uint64_t ce_gather_scatter_min_bytes = 0;
  std::uint64_t ce_send_recv_min_bytes = 0;
  double sim_us_per_op = 0;            // ncclGroupSimulateEnd's cost model: fixed cost per op
  double sim_gbps = 0;                 // and bytes (read + written) per second
};

// What a datapath's policy depends on: the communicator's size and the GPU it runs on.
struct Regime {
  int nranks = 1;
  int sharing = 1;      // ranks on the most shared GPU (processes or threads)
  int sms = 0;          // the GPU's multiprocessors (0: none)
  int ctas_per_sm = 0;  // of the datapath's CTAs, how many one multiprocessor holds at once
  int arch = 0;         // the GPU's compute capability as 10 * major + minor (0: none)
  int zero_staging_ctas_per_sm = 0;  // of zero-staging's CTAs, how many one multiprocessor holds (0: taken as 1)
};

// How a datapath makes its policy (each datapath's executor file has one): its built-in defaults
// for a regime, then, after the policy file and the PURLIN_* variables have spoken, what it derives
// from the result. `channels` is the channel count they asked for (0: none), which the datapath may
// still bound.
struct PolicyRecipe {
  const char* datapath;  // the name policy files use
  Policy (*defaults)(const Regime& r);
  void (*derive)(const Regime& r, int channels, Policy* p);
};

// The policy of a datapath in a regime: defaults, the policy file's entry, the environment, the
// datapath's derivations. Logged at INFO under TUNING.
Policy policy_for(const PolicyRecipe& recipe, const Regime& r);
// The least staging half in which every lane of the widest call (two scattered phases) holds
// `slots` chunks of 256 bytes.
std::uint64_t least_staging_half(int nranks, int slots);

// The size by which the latency exchange's call bound (Policy::exchange_call_bytes) judges a call:
// the larger of its input and output totals, and, where one side is cut into blocks of the call's
// message (`blocks`: AllGather's output, Scatter's input, ...), n times its largest message. Every
// rank of the call must come to the same answer, and a rank that holds no such side (Scatter's
// input away from the root, given as empty parts) knows the blocks only from its own message.
inline std::uint64_t exchange_call_size(std::uint64_t total_in, std::uint64_t total_out, std::uint64_t largest,
                                        int nranks, bool blocks) {
  const std::uint64_t cut = blocks ? largest * static_cast<std::uint64_t>(nranks) : 0;
  return std::max({total_in, total_out, cut});
}

// Whether a call of `total` bytes (its whole buffer) runs in its direct form (snac's plan): within
// the direct bound of its collective, or, for an AllReduce or Reduce whose composed (two-shot) form
// the latency exchange would take (shards of at most `shard` bytes), within the exchange's own bound
// for it instead. Every rank computes the same sizes, so all choose alike.
enum class DirectOf { all_reduce, reduce, broadcast };
inline bool runs_direct(const Policy& p, DirectOf what, std::uint64_t total, std::uint64_t shard) {
  std::uint64_t bound = what == DirectOf::broadcast ? p.broadcast_direct_max_bytes : p.direct_max_bytes;
  if (what != DirectOf::broadcast && shard <= p.exchange_max_bytes && total < p.exchange_call_bytes)
    bound = what == DirectOf::all_reduce ? p.exchange_direct_max_bytes : p.exchange_reduce_direct_max_bytes;
  return total > 0 && total <= bound;
}

// One entry of a policy file: the regime it applies to (-1: any) and what it sets.
struct PolicyEntry {
  std::string datapath;  // a datapath's name or "*"
  int arch = -1, sharing = -1, nranks = -1;
  std::int64_t staging_bytes = -1, chunk_bytes = -1, latency_max_bytes = -1, channel_bytes = -1,
               direct_max_bytes = -1, exchange_direct_max_bytes = -1,
               broadcast_direct_max_bytes = -1;  // -1: not set; `none` is 0
  int slots = -1, channels = -1;
  int line = 0;
};
// Parses a policy file's text; bad lines are reported in *errors (line: why) and skipped.
std::vector<PolicyEntry> parse_policy_table(const std::string& text, std::vector<std::string>* errors);
// The entry that applies (see above), or null.
const PolicyEntry* match_policy(const std::vector<PolicyEntry>& table, std::string_view datapath, int arch,
                                int sharing, int nranks);

}  // namespace purlin::snac
