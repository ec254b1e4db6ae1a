// Where a kernel of the SM datapath learns that it must stop, and reports why it stopped.
#pragma once

#include <cstdint>

namespace purlin::atom {

struct SmGuard {
  const volatile int* abort;   // host-mapped: set by ncclCommAbort / revoke
  volatile int* error;         // host-mapped: a kernel that gives up stores a Status here
  std::uint64_t timeout_ns;    // a wait longer than this gives up
  // The rank's fault word in its window: a peer that found the ranks' calls mismatched stores a
  // Status there (see snac::raise_fault), and every wait that spins long reads it.
  const volatile std::uint64_t* fault;
  // Nanoseconds a packet wait of the latency exchange sleeps after a look that found nothing new
  // (0: it looks again at once).
  unsigned poll_ns = 0;
};

}  // namespace purlin::atom
