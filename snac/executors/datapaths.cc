#include "snac/executors/datapaths.h"

namespace purlin::snac {

std::span<const Datapath* const> datapaths() {
  static const Datapath* const all[] = {
      &sm_datapath(),    // GPU buffers: roles as CTAs (atom/sm)
      &host_datapath(),  // host buffers: roles as threads (atom/host)
  };
  return all;
}

const Datapath* find_datapath(std::string_view name) {
  for (const Datapath* d : datapaths())
    if (name == d->name) return d;
  return nullptr;
}

}  // namespace purlin::snac
