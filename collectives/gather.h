// Gather: rank k's packed contribution lands in partition k of the root's output.
#pragma once
#include "collectives/declaration.h"

namespace purlin::coll {
using Gather = Declare<Consume::copy, Layout::packed, Layout::scattered, Root::consumer>;
}  // namespace purlin::coll
