// The root service of a unique id: it collects every rank's hello and answers each with the table
// of the ranks' listening addresses.
#pragma once

#include <cstdint>

#include "core/bootstrap/wire.h"

namespace purlin::boot {

// Binds `bind_addr` and serves the rendezvous for `nranks` ranks (0: unknown yet) on a thread.
Status start_root(const Address& bind_addr, std::uint64_t secret, std::uint32_t nranks, bool fixed_port,
                  Address* bound);

}  // namespace purlin::boot
