// Codesign policies are data: for a datapath and a regime, how big the chunks are, how many slots a
// lane's ring has, how much staging a rank exposes and where the latency path hands over to the
// throughput path. The table gives defaults per datapath; PURLIN_* variables override single entries.
#pragma once

#include <cstdint>
#include <string>

namespace purlin::snac {

enum class DatapathKind { host, sm, ce };
const char* name_of(DatapathKind d);

struct Policy {
  std::string name;                    // e.g. "host/default", logged at INFO
  std::uint64_t staging_half = 0;      // bytes of one staging half per rank
  std::uint64_t chunk_bytes = 0;       // largest chunk of the throughput path
  int slots = 0;                       // ring depth per lane
  std::uint64_t latency_max_bytes = 0; // per pair message; above it the throughput path serves
  std::uint64_t packets_per_pair = 0;  // latency buffer per (phase, producer, parity), in packets
  int workers = 1;                     // threads (host) or CTAs (GPU) per role: the most a call uses
  std::uint64_t channel_bytes = 0;     // SM: a call of uniform sizes takes one channel per this many bytes
  std::uint64_t direct_max_bytes = 0;  // AllReduce up to this size: one direct reduce (0: always composed)
  double sim_us_per_op = 0;            // ncclGroupSimulateEnd's cost model: fixed cost per op
  double sim_gbps = 0;                 // and bytes (read + written) per second
};

// The policy for a datapath and rank count, with environment overrides applied. `sharing` ranks run
// on this rank's GPU (processes or threads) and the GPU has `sms` multiprocessors: the CTAs of all
// of them must be resident at once, which caps the channels (CTAs per role): a multiprocessor holds
// `ctas_per_sm` of the datapath's CTAs.
Policy policy_for(DatapathKind datapath, int nranks, int sharing, int sms, int ctas_per_sm = 0);

}  // namespace purlin::snac
