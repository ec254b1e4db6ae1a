// AllToAll: partition k of rank s's input lands in partition s of rank k's output.
#pragma once
#include "collectives/declaration.h"

namespace purlin::coll {
using AllToAll = Declare<Consume::copy, Layout::scattered, Layout::transposed>;
using AllToAllV = Declare<Consume::copy, Layout::scattered, Layout::transposed, Root::none, Sizes::variable>;
}  // namespace purlin::coll
