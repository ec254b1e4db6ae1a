// Builds without the CUDA toolkit have no SM datapath; communicators on a GPU fail with this reason.
#include <fmt/format.h>

#include "snac/executors/datapaths.h"

namespace purlin::snac {

Status make_sm_executor(const ExecutorArgs&, std::unique_ptr<Executor>*) {
  return fail(Status::invalid_usage, "this build has no GPU datapath (configured without the CUDA toolkit); "
                                     "set PURLIN_DATAPATH=host to use the host datapath with host buffers");
}

int sm_resident_ctas_per_sm(int) { return 0; }
int zero_staging_resident_ctas_per_sm(int) { return 0; }

}  // namespace purlin::snac
