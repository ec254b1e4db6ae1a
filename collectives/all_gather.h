// AllGather: every rank's packed contribution is copied into slot r of every rank's output.
#pragma once
#include "collectives/declaration.h"

namespace purlin::coll {
using AllGather = Declare<Consume::copy, Layout::packed, Layout::scattered>;
using AllGatherV = Declare<Consume::copy, Layout::packed, Layout::scattered, Root::none, Sizes::variable>;
}  // namespace purlin::coll
