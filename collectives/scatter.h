// Scatter: partition k of the root's input becomes rank k's output.
#pragma once
#include "collectives/declaration.h"

namespace purlin::coll {
using Scatter = Declare<Consume::copy, Layout::scattered, Layout::packed, Root::producer>;
}  // namespace purlin::coll
