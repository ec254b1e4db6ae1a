// Who shares what: the identity of this host (ranks with equal ids share memory and may map each
// other's allocations) and of this process.
#pragma once

#include <cstdint>
#include <string>

namespace purlin {

// A 64-bit id equal on every process of one host (hash of the hostname and the kernel's boot id).
// PURLIN_HOST_ID overrides it, for tests that pretend ranks live on different hosts.
std::uint64_t host_id();
std::string host_name();

}  // namespace purlin
