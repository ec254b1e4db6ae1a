// NCCL's device API (nccl_device/): its host functions exist so that programs linked against them
// (PyTorch imports ncclDevCommCreate and ncclDevCommDestroy) load; a device communicator is not
// offered, and the calls that would create one say so. The team queries are answered as NCCL does:
// arithmetic on the communicator's ranks and on the size of its LSA teams (the ranks of one host).
#include <nccl.h>

#include <numeric>

#include <fmt/format.h>

#include "core/config.h"
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
// The size of the communicator's LSA teams, as NCCL derives it: runs of consecutive ranks on one host
// (snac::HostLayout::lsa_size), capped by NCCL_LSA_TEAM_SIZE. Every rank of a communicator that is
// not yet made (a non-blocking init in progress) counts as one host's.
int lsa_size_of(ncclComm* comm) {
  if (comm == nullptr || !is_live(comm)) return 1;
  if (!comm->impl_ready.load(std::memory_order_acquire) || !comm->impl) {
    const int cap = config().lsa_team_size;
    return cap > 0 ? std::gcd(cap, comm->nranks) : comm->nranks;
  }
  return comm->impl->layout().lsa_size(config().lsa_team_size);
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
__attribute__((visibility("default"))) PurlinTeam ncclTeamWorld(ncclComm_t comm) { return world_of(comm); }
// The ranks of this rank's LSA team: lsa consecutive ranks on its host.
__attribute__((visibility("default"))) PurlinTeam ncclTeamLsa(ncclComm_t comm) {
  const PurlinTeam w = world_of(comm);
  const int lsa = lsa_size_of(comm);
  return w.nRanks ? PurlinTeam{lsa, w.rank % lsa, 1} : w;
}
// The ranks at this rank's place in every LSA team.
__attribute__((visibility("default"))) PurlinTeam ncclTeamRail(ncclComm_t comm) {
  const PurlinTeam w = world_of(comm);
  const int lsa = lsa_size_of(comm);
  return w.nRanks ? PurlinTeam{w.nRanks / lsa, w.rank / lsa, lsa} : w;
}
__attribute__((visibility("default"))) int ncclTeamRankToWorld(ncclComm_t comm, PurlinTeam team, int rank) {
  return world_of(comm).rank + (rank - team.rank) * team.stride;
}
__attribute__((visibility("default"))) int ncclTeamRankToLsa(ncclComm_t comm, PurlinTeam team, int rank) {
  return world_of(comm).rank % lsa_size_of(comm) + (rank - team.rank) * team.stride;
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
