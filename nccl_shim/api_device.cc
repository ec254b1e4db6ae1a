// NCCL's device API (nccl_device/): its host functions exist so that programs linked against them
// (PyTorch imports ncclDevCommCreate and ncclDevCommDestroy) load; a device communicator is not
// offered, and the calls that would create one say so. The team queries are answered as NCCL does:
// arithmetic on the communicator's ranks and on the size of its LSA teams (the ranks of one host).
#include <nccl.h>

#include <cstddef>
#include <numeric>

#include <fmt/format.h>

#include "core/config.h"
#include "core/cuda_probe.h"
#include "nccl_shim/argcheck.h"
#include "nccl_shim/nccl_next.h"
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
struct ncclGinOutboxHandle;
struct ncclGinInboxA2AHandle;

namespace {
ncclResult_t not_offered(ncclComm* comm, const char* fn) {
  return fail(comm && is_live(comm) ? comm : nullptr, ncclInvalidUsage,
              fmt::format("{}: NCCL's device API is not offered by this library", fn));
}
// A peer's address in a window is device-API memory: windows are recorded, not mapped.
ncclResult_t pointer_not_offered(const char* fn, void** out) {
  if (out) *out = nullptr;
  return not_offered(nullptr, fn);
}
constexpr unsigned kApiMagic = 0xcafebeef;  // NCCL_API_MAGIC, the magic of NCCL's initialisers
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

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const ncclDevCommRequirements*, ncclDevComm*) {
  return not_offered(comm, "ncclDevCommCreate");
}
NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const ncclDevComm*) {
  return not_offered(comm, "ncclDevCommDestroy");
}
NCCL_API(PurlinTeam, ncclTeamWorld, ncclComm_t comm) { return world_of(comm); }
// The ranks of this rank's LSA team: lsa consecutive ranks on its host.
NCCL_API(PurlinTeam, ncclTeamLsa, ncclComm_t comm) {
  const PurlinTeam w = world_of(comm);
  const int lsa = lsa_size_of(comm);
  return w.nRanks ? PurlinTeam{lsa, w.rank % lsa, 1} : w;
}
// The ranks at this rank's place in every LSA team.
NCCL_API(PurlinTeam, ncclTeamRail, ncclComm_t comm) {
  const PurlinTeam w = world_of(comm);
  const int lsa = lsa_size_of(comm);
  return w.nRanks ? PurlinTeam{w.nRanks / lsa, w.rank / lsa, lsa} : w;
}
NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, PurlinTeam team, int rank) {
  return world_of(comm).rank + (rank - team.rank) * team.stride;
}
NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, PurlinTeam team, int rank) {
  return world_of(comm).rank % lsa_size_of(comm) + (rank - team.rank) * team.stride;
}
NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, PurlinTeam, int, ncclGinBarrierHandle*,
         ncclDevResourceRequirements*) {
  return not_offered(comm, "ncclGinBarrierCreateRequirement");
}
NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, PurlinTeam, int, ncclLsaBarrierHandle*,
         ncclDevResourceRequirements*) {
  return not_offered(nullptr, "ncclLsaBarrierCreateRequirement");
}
NCCL_API(int, ncclLLA2ACalcSlots, int, int) {
  not_offered(nullptr, "ncclLLA2ACalcSlots");
  return 0;
}
NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int, int, ncclLLA2AHandle*, ncclDevResourceRequirements*) {
  return not_offered(nullptr, "ncclLLA2ACreateRequirement");
}

// The communicator's properties (NCCL 2.29): no device communicator, multicast, GIN or host RMA is
// offered; the LSA teams are those ncclTeamLsa answers with. Fields past the caller's version are
// left alone, as NCCL leaves them.
NCCL_API(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm, ncclCommProperties_t* props) {
  const char* fn = "ncclCommQueryProperties";
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (props == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommQueryProperties: props is NULL");
  if (props->magic != kApiMagic)
    return fail(comm, ncclInvalidUsage,
                "ncclCommQueryProperties: the ncclCommProperties_t argument must be initialised with "
                "NCCL_COMM_PROPERTIES_INITIALIZER");
  props->rank = comm->rank;
  props->nRanks = comm->nranks;
  props->cudaDev = comm->device;
  props->nvmlDev = gpu_nvml_index(comm->device);
  props->deviceApiSupport = false;
  props->multimemSupport = false;
  if (props->version > static_cast<unsigned>(NCCL_VERSION(2, 29, 3)) &&
      props->size >= offsetof(ncclCommProperties_t, railedGinType) + sizeof(props->railedGinType)) {
    props->hostRmaSupport = false;
    props->ginType = NCCL_GIN_TYPE_NONE;
    props->railedGinType = NCCL_GIN_TYPE_NONE;
    props->nLsaTeams = comm->nranks / lsa_size_of(comm);
  }
  return ncclSuccess;
}
NCCL_API(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t, size_t, void** outPtr) {
  return pointer_not_offered("ncclGetLsaMultimemDevicePointer", outPtr);
}
NCCL_API(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t, size_t, PurlinMultimemHandle, void** outPtr) {
  return pointer_not_offered("ncclGetMultimemDevicePointer", outPtr);
}
NCCL_API(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t, size_t, int, void** outPtr) {
  return pointer_not_offered("ncclGetLsaDevicePointer", outPtr);
}
NCCL_API(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t, size_t, int, void** outPtr) {
  return pointer_not_offered("ncclGetPeerDevicePointer", outPtr);
}
NCCL_API(ncclResult_t, ncclGinOutboxCreateRequirement, int, int, ncclGinOutboxHandle*,
         ncclDevResourceRequirements*) {
  return not_offered(nullptr, "ncclGinOutboxCreateRequirement");
}
NCCL_API(ncclResult_t, ncclGinInboxA2ACreateRequirement, PurlinTeam, int, int, ncclGinInboxA2AHandle*,
         ncclDevResourceRequirements*) {
  return not_offered(nullptr, "ncclGinInboxA2ACreateRequirement");
}

