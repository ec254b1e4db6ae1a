// ReduceScatter: partition k of every rank's input is reduced, in rank order, into rank k's output.
#pragma once
#include "collectives/declaration.h"

namespace purlin::coll {
using ReduceScatter = Declare<Consume::reduce, Layout::scattered, Layout::packed>;
using ReduceScatterV = Declare<Consume::reduce, Layout::scattered, Layout::packed, Root::none, Sizes::variable>;
}  // namespace purlin::coll
