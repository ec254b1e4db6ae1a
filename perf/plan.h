// The "plan" column: which plan the library chose for a row's calls.
#pragma once

#include <string>

#include "bench.h"

namespace perf {

// HOOK: the library logs the plan it picks (for example AllReduce_RSxPull_AGxPull) at INFO. Until
// purlin-perf reads it from there, the column names the collective.
inline std::string plan_of(const RowSpec& spec) { return spec.coll->api; }

}  // namespace perf
