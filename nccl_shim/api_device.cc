// NCCL's device API (nccl_device/): its host functions exist so that programs linked against them
// (PyTorch imports ncclDevCommCreate and ncclDevCommDestroy) load; a device communicator is not
// offered, and the calls that would create one say so. The team queries are plain arithmetic on the
// communicator's ranks and are answered.
#include <nccl.h>

#include <fmt/format.h>

#include "nccl_shim/argcheck.h"
#include "nccl_shim/shim.h"

using namespace purlin;
using namespace purlin::shim;

// Layout of nccl_device's ncclTeam (returned by value); the device headers need CUDA's, so the
// structure is restated here.
struct PurlinTeam {
  int nRanks, rank, stride;
};
struct ncclDevCommRequirements;
struct ncclDevComm;
struct ncclDevResourceRequirements;
struct ncclGinBarrierHandle;
struct ncclLsaBarrierHandle;
struct ncclLLA2AHandle;

namespace {
ncclResult_t not_offered(ncclComm* comm, const char* fn) {
  return fail(comm && is_live(comm) ? comm : nullptr, ncclInvalidUsage,
              fmt::format("{}: NCCL's device API is not offered by this library", fn));
}
PurlinTeam world_of(ncclComm* comm) {
  if (comm == nullptr || !is_live(comm)) return PurlinTeam{0, 0, 1};
  return PurlinTeam{comm->nranks, comm->rank, 1};
}
}  // namespace

extern "C" {

__attribute__((visibility("default"))) ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements*,
                                                                       ncclDevComm*) {
  return not_offered(comm, "ncclDevCommCreate");
}
__attribute__((visibility("default"))) ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm*) {
  return not_offered(comm, "ncclDevCommDestroy");
}
// Every rank of a communicator shares one host here, so the load/store-accessible team is the world.
__attribute__((visibility("default"))) PurlinTeam ncclTeamWorld(ncclComm_t comm) { return world_of(comm); }
__attribute__((visibility("default"))) PurlinTeam ncclTeamLsa(ncclComm_t comm) { return world_of(comm); }
__attribute__((visibility("default"))) PurlinTeam ncclTeamRail(ncclComm_t comm) {
  PurlinTeam w = world_of(comm);
  return PurlinTeam{1, 0, w.nRanks};
}
__attribute__((visibility("default"))) int ncclTeamRankToWorld(ncclComm_t comm, PurlinTeam team, int rank) {
  PurlinTeam w = world_of(comm);
  return w.rank + (rank - team.rank) * team.stride;
}
__attribute__((visibility("default"))) int ncclTeamRankToLsa(ncclComm_t comm, PurlinTeam team, int rank) {
  return ncclTeamRankToWorld(comm, team, rank);
}
__attribute__((visibility("default"))) ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, PurlinTeam, int,
                                                                                     ncclGinBarrierHandle*,
                                                                                     ncclDevResourceRequirements*) {
  return not_offered(comm, "ncclGinBarrierCreateRequirement");
}
__attribute__((visibility("default"))) ncclResult_t ncclLsaBarrierCreateRequirement(PurlinTeam, int, ncclLsaBarrierHandle*,
                                                                                     ncclDevResourceRequirements*) {
  return not_offered(nullptr, "ncclLsaBarrierCreateRequirement");
}
__attribute__((visibility("default"))) int ncclLLA2ACalcSlots(int, int) {
  not_offered(nullptr, "ncclLLA2ACalcSlots");
  return 0;
}
__attribute__((visibility("default"))) ncclResult_t ncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle*,
                                                                                ncclDevResourceRequirements*) {
  return not_offered(nullptr, "ncclLLA2ACreateRequirement");
}

}  // extern "C"
