// From the run-time kind to its declaration type, for every entry of snac/collective_list.h.
#pragma once

#include "collectives/all_gather.h"
#include "collectives/all_reduce.h"
#include "collectives/all_to_all.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/scatter.h"
#include "collectives/send_recv.h"
#include "snac/op.h"

namespace purlin::snac {

// Calls f.template operator()<Declaration>() for the declaration of `kind`.
template <class F>
auto dispatch(CollKind kind, F&& f) {
  switch (kind) {
#define PURLIN_DISPATCH(kind, decl, name, forward) \
  case CollKind::kind: return f.template operator()<coll::decl>();
    PURLIN_COLLECTIVES(PURLIN_DISPATCH)
#undef PURLIN_DISPATCH
  }
  return f.template operator()<coll::AllReduce>();
}

}  // namespace purlin::snac
