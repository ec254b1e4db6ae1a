// Communicator life cycle: ids, init (blocking and non-blocking), split, shrink, finalize, destroy,
// abort, revoke, and the queries.
#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include <fmt/format.h>

#include "core/bootstrap.h"
#include "core/config.h"
#include "core/cuda_probe.h"
#include "core/log.h"
#include "nccl_shim/argcheck.h"
#include "nccl_shim/fallback.h"
#include "nccl_shim/shim.h"

namespace purlin::shim {
namespace {

std::shared_mutex g_registry_mutex;
std::unordered_set<const ncclComm*>& registry() {
  static auto* set = new std::unordered_set<const ncclComm*>();  // outlives static destructors
  return *set;
}

// The parts of ncclConfig_t we honour, read only within the caller's `size` (older headers pass
// smaller structs).
struct Settings {
  bool blocking = true;
  std::string name;
};

ncclResult_t read_config(const char* fn, const ncclConfig_t* config, Settings* out) {
  if (config == nullptr) return ncclSuccess;
  constexpr std::size_t kHeader = offsetof(ncclConfig_t, blocking);
  if (config->size < kHeader + sizeof(int) || config->size > (1u << 16))
    return fail(nullptr, ncclInvalidArgument,
                fmt::format("{}: config size {} is not that of an ncclConfig_t (use NCCL_CONFIG_INITIALIZER)", fn,
                            config->size));
  if (config->magic != 0xcafebeef)
    return fail(nullptr, ncclInvalidArgument,
                fmt::format("{}: config magic {:#x} is wrong (use NCCL_CONFIG_INITIALIZER)", fn, config->magic));
  if (config->version < 21400)
    return fail(nullptr, ncclInvalidArgument, fmt::format("{}: config version {} is older than 2.14", fn, config->version));
  auto has = [&](std::size_t offset, std::size_t bytes) { return offset + bytes <= config->size; };
  if (has(offsetof(ncclConfig_t, blocking), sizeof(int)) && config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return fail(nullptr, ncclInvalidArgument, fmt::format("{}: config blocking {} is not 0 or 1", fn, config->blocking));
    out->blocking = config->blocking == 1;
  }
  if (has(offsetof(ncclConfig_t, commName), sizeof(char*)) && config->commName) out->name = config->commName;
  return ncclSuccess;
}

// The datapath and device a new communicator serves.
ncclResult_t choose_device(const char* fn, int* device) {
  const Config& c = config();
  int gpus = cuda_device_count();
  if (c.datapath == DatapathChoice::host || gpus == 0) {
    *device = -1;
    return ncclSuccess;
  }
  int d = cuda_current_device();
  if (d < 0) return fail(nullptr, ncclUnhandledCudaError, fmt::format("{}: cannot read the current CUDA device", fn));
  *device = d;
  return ncclSuccess;
}

void init_body(ncclComm* comm, purlin::UniqueId id, int rank, int nranks) {
  snac::Communicator::Options opt;
  opt.device = comm->device;
  log::set_thread_device(comm->device);
  Status s = snac::Communicator::create(id, rank, nranks, opt, &comm->abort_flag, &comm->impl);
  if (s == Status::ok) s = Fallback::attach(comm, &comm->fallback);
  if (s != Status::ok) {
    propagate(comm, s);
    comm->async_error.store(static_cast<int>(s));
    return;
  }
  comm->async_error.store(ncclSuccess);
}

// Allocates the comm, then joins the ranks now (blocking) or on a thread (non-blocking).
ncclResult_t start_comm(const char* fn, ncclComm_t* out, int nranks, const purlin::UniqueId& id, int rank,
                        const Settings& settings) {
  int device = -1;
  if (ncclResult_t r = choose_device(fn, &device); r != ncclSuccess) return r;
  auto* comm = new ncclComm();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = device;
  comm->blocking = settings.blocking;
  comm->async_error.store(ncclInProgress);
  register_comm(comm);
  *out = comm;
  if (settings.blocking) {
    init_body(comm, id, rank, nranks);
    int e = comm->async_error.load();
    if (e != ncclSuccess) {
      unregister_comm(comm);
      delete comm;
      *out = nullptr;
      return static_cast<ncclResult_t>(e);
    }
    return ncclSuccess;
  }
  comm->init_thread = std::thread(init_body, comm, id, rank, nranks);
  return ncclInProgress;
}

ncclResult_t check_init_args(const char* fn, ncclComm_t* out, int nranks, int rank, const void* id) {
  if (out == nullptr) return fail(nullptr, ncclInvalidArgument, fmt::format("{}: newcomm is NULL", fn));
  *out = nullptr;
  if (nranks < 1) return fail(nullptr, ncclInvalidArgument, fmt::format("{}: invalid nranks {}", fn, nranks));
  if (rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument, fmt::format("{}: invalid rank {} (nranks {})", fn, rank, nranks));
  if (id == nullptr) return fail(nullptr, ncclInvalidArgument, fmt::format("{}: commId is NULL", fn));
  return ncclSuccess;
}

ncclResult_t check_id(const char* fn, const purlin::UniqueId& id) {
  if (id.magic != purlin::kUniqueIdMagic)
    return fail(nullptr, ncclInvalidArgument, fmt::format("{}: the unique id was not made by ncclGetUniqueId", fn));
  return ncclSuccess;
}

void join_init(ncclComm* comm) {
  if (comm->init_thread.joinable()) comm->init_thread.join();
}

// Frees everything of a comm; `abort` first makes every wait end.
ncclResult_t teardown(ncclComm* comm, bool abort) {
  if (abort) {
    comm->abort_flag.store(true);
    if (comm->fallback) comm->fallback->abort();
    if (comm->impl) comm->impl->abort();
  }
  join_init(comm);
  unregister_comm(comm);
  for (auto* r : comm->registrations) delete r;
  delete comm;
  return ncclSuccess;
}

ncclResult_t new_child(const char* fn, ncclComm* parent, const ncclConfig_t* config, ncclComm_t* newcomm,
                       const std::function<Status(const snac::Communicator::Options&,
                                                  std::unique_ptr<snac::Communicator>*)>& make) {
  Settings settings;
  settings.blocking = parent->blocking;
  if (ncclResult_t r = read_config(fn, config, &settings); r != ncclSuccess) return r;
  snac::Communicator::Options opt;
  opt.device = parent->device;
  std::unique_ptr<snac::Communicator> child;
  Status s = make(opt, &child);
  if (s != Status::ok) return propagate(parent, s);
  if (!child) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  auto* comm = new ncclComm();
  comm->rank = child->rank();
  comm->nranks = child->nranks();
  comm->device = parent->device;
  comm->blocking = settings.blocking;
  comm->impl = std::move(child);
  s = Fallback::attach(comm, &comm->fallback);
  if (s != Status::ok) {
    delete comm;
    return propagate(parent, s);
  }
  register_comm(comm);
  *newcomm = comm;
  return ncclSuccess;
}

}  // namespace

void register_comm(ncclComm* comm) {
  std::unique_lock g(g_registry_mutex);
  registry().insert(comm);
}

void unregister_comm(ncclComm* comm) {
  std::unique_lock g(g_registry_mutex);
  comm->magic = 0;
  registry().erase(comm);
}

bool is_live(const ncclComm* comm) {
  std::shared_lock g(g_registry_mutex);
  return registry().count(comm) != 0 && comm->magic == ncclComm::kMagic;
}

}  // namespace purlin::shim

using namespace purlin;
using namespace purlin::shim;

NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  static_assert(sizeof(ncclUniqueId) == sizeof(purlin::UniqueId));
  if (uniqueId == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  purlin::UniqueId id{};
  Status s = make_unique_id(&id);
  if (s != Status::ok) return propagate(nullptr, s);
  std::memcpy(uniqueId, &id, sizeof(id));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config) {
  const char* fn = "ncclCommInitRankConfig";
  if (ncclResult_t r = check_init_args(fn, comm, nranks, rank, &commId); r != ncclSuccess) return r;
  Settings settings;
  if (ncclResult_t r = read_config(fn, config, &settings); r != ncclSuccess) return r;
  purlin::UniqueId id;
  std::memcpy(&id, &commId, sizeof(id));
  if (ncclResult_t r = check_id(fn, id); r != ncclSuccess) return r;
  return start_comm(fn, comm, nranks, id, rank, settings);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return pncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config) {
  const char* fn = "ncclCommInitRankScalable";
  if (ncclResult_t r = check_init_args(fn, newcomm, nranks, myrank, commIds); r != ncclSuccess) return r;
  if (nId < 1 || nId > nranks)
    return fail(nullptr, ncclInvalidArgument, fmt::format("{}: invalid nId {} (nranks {})", fn, nId, nranks));
  // Every rank holds all nId ids; the first one's root serves the rendezvous of all ranks.
  return pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
  if (ndev < 1) return fail(nullptr, ncclInvalidArgument, fmt::format("ncclCommInitAll: invalid ndev {}", ndev));
  if (devlist) {
    int gpus = cuda_device_count();
    for (int i = 0; i < ndev; ++i)
      if (devlist[i] < 0 || (gpus > 0 && devlist[i] >= gpus))
        return fail(nullptr, ncclInvalidArgument,
                    fmt::format("ncclCommInitAll: invalid device {} at devlist[{}]", devlist[i], i));
  }
  ncclUniqueId id;
  if (ncclResult_t r = pncclGetUniqueId(&id); r != ncclSuccess) return r;
  std::vector<ncclResult_t> results(ndev, ncclSuccess);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i)
    threads.emplace_back([&, i] { results[i] = pncclCommInitRank(&comms[i], ndev, id, i); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < ndev; ++i)
    if (results[i] != ncclSuccess) {
      for (int j = 0; j < ndev; ++j)
        if (comms[j]) teardown(comms[j], true), comms[j] = nullptr;
      return results[i];
    }
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  if (ncclResult_t r = check_comm(fn, comm); r != ncclSuccess) return r;
  if (newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(comm, ncclInvalidArgument, fmt::format("ncclCommSplit: invalid color {}", color));
  return new_child(fn, comm, config, newcomm, [&](const snac::Communicator::Options& o, auto* out) {
    return comm->impl->split(color, key, o, out);
  });
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  const char* fn = "ncclCommShrink";
  if (comm == nullptr || !is_live(comm)) return check_comm(fn, comm);
  if (newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  *newcomm = nullptr;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fail(comm, ncclInvalidArgument, fmt::format("ncclCommShrink: invalid flags {:#x}", shrinkFlags));
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr))
    return fail(comm, ncclInvalidArgument, fmt::format("ncclCommShrink: invalid exclude list ({} ranks)", excludeRanksCount));
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  for (int r : excluded)
    if (r < 0 || r >= comm->nranks)
      return fail(comm, ncclInvalidArgument, fmt::format("ncclCommShrink: invalid rank {} to exclude (nranks {})", r, comm->nranks));
  if (shrinkFlags == NCCL_SHRINK_ABORT && comm->impl) comm->impl->abort();
  if (!comm->impl) return fail(comm, ncclInvalidUsage, "ncclCommShrink: comm was not initialised");
  return new_child(fn, comm, config, newcomm, [&](const snac::Communicator::Options& o, auto* out) {
    return comm->impl->shrink(excluded, o, out);
  });
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommFinalize", comm);
  join_init(comm);
  // Work completes before each call returns on the host datapath; nothing is left to flush.
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  if (!is_live(comm)) return check_comm("ncclCommDestroy", comm);
  return teardown(comm, false);
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (!is_live(comm)) return check_comm("ncclCommAbort", comm);
  return teardown(comm, true);
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommRevoke", comm);
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(comm, ncclInvalidArgument, fmt::format("ncclCommRevoke: invalid flags {:#x}", revokeFlags));
  comm->revoked.store(true);
  comm->abort_flag.store(true);
  if (comm->impl) comm->impl->abort();
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommGetAsyncError", comm);
  if (asyncError == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  int e = comm->async_error.load(std::memory_order_acquire);
  if (e == ncclSuccess && comm->impl) {
    Status s = comm->impl->async_status();
    if (s == Status::ok && comm->fallback) s = comm->fallback->async_status();
    if (s != Status::ok) {
      e = static_cast<int>(s);
      comm->async_error.store(e);
    }
  }
  *asyncError = static_cast<ncclResult_t>(e);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommCount", comm);
  if (count == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommCuDevice", comm);
  if (device == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = comm->device;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommUserRank", comm);
  if (rank == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}
