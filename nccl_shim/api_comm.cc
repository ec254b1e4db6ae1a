// Communicator life cycle: ids, init (blocking and non-blocking), split, shrink, finalize, destroy,
// abort, revoke, and the queries.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "core/bootstrap.h"
#include "core/config.h"
#include "core/cuda_probe.h"
#include "core/log.h"
#include "nccl_shim/argcheck.h"
#include "nccl_shim/comm_work.h"
#include "nccl_shim/fallback.h"
#include "nccl_shim/group.h"
#include "nccl_shim/nccl_next.h"
#include "nccl_shim/shim.h"

namespace purlin::shim {
namespace {

// NCCL_CHECK_MODE as a communicator made now takes it. NCCL's DEBUG_GLOBAL also compares the ranks'
// symmetric windows at every collective; that check is not made here (said once per process).
CheckMode check_mode() {
  const CheckMode m = check_mode_now();
  if (m == CheckMode::global) {
    static std::once_flag once;
    std::call_once(once, [] {
      log::warn("NCCL_CHECK_MODE=DEBUG_GLOBAL: each call's buffers are checked on its own rank (as DEBUG_LOCAL); "
                "the check across ranks of their symmetric windows is not made");
    });
  }
  return m;
}

// The parts of ncclConfig_t we honour.
struct Settings {
  bool blocking = true;
  std::string name;
};

// As NCCL 2.30.7 reads an ncclConfig_t: the caller's struct, up to its `size` (at most 2.30's),
// over an unset one; then every field the caller's `version` did not have is unset again, whatever
// its bytes; then each field is checked in NCCL's order, with NCCL's words. Purlin uses `blocking`
// and `commName`; the other fields tune NCCL's own kernels and network, and are only checked.
ncclResult_t parse_config(const char* fn, const ncclConfig_t* config, Settings* out) {
  if (config == nullptr) return ncclSuccess;
  constexpr int kUnset = NCCL_CONFIG_UNDEF_INT;
  PurlinConfigV23000 c{};
  c.version = NCCL_VERSION_CODE;
  for (int* f : {&c.blocking, &c.cgaClusterSize, &c.minCTAs, &c.maxCTAs, &c.splitShare, &c.trafficClass,
                 &c.collnetEnable, &c.CTAPolicy, &c.shrinkShare, &c.nvlsCTAs, &c.nChannelsPerNetPeer,
                 &c.nvlinkCentricSched, &c.graphUsageMode, &c.numRmaCtx, &c.maxP2pPeers, &c.graphStreamOrdering})
    *f = kUnset;
  std::memcpy(&c, config, std::min<std::size_t>(config->size, sizeof(c)));
  if (c.magic != 0xcafebeef)
    return fail(nullptr, ncclInvalidArgument,
                fmt::format("{}: ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER", fn));
  const auto unset_before = [&](unsigned version, std::initializer_list<int*> fields) {
    if (c.version < version)
      for (int* f : fields) *f = kUnset;
  };
  unset_before(NCCL_VERSION(2, 14, 0), {&c.blocking});
  unset_before(NCCL_VERSION(2, 17, 0), {&c.cgaClusterSize, &c.minCTAs, &c.maxCTAs});
  unset_before(NCCL_VERSION(2, 25, 0), {&c.trafficClass});
  unset_before(NCCL_VERSION(2, 27, 0), {&c.collnetEnable, &c.CTAPolicy, &c.shrinkShare, &c.nvlsCTAs});
  unset_before(NCCL_VERSION(2, 28, 0), {&c.nChannelsPerNetPeer, &c.nvlinkCentricSched});
  unset_before(NCCL_VERSION(2, 29, 0), {&c.graphUsageMode, &c.numRmaCtx});
  unset_before(NCCL_VERSION(2, 30, 0), {&c.maxP2pPeers});
  unset_before(NCCL_VERSION(2, 30, 5), {&c.graphStreamOrdering});
  const auto set = [](int v) { return v != kUnset; };
  const auto flag = [](int v) { return v == 0 || v == 1; };
  const auto invalid = [&](const char* name, int v) {
    return fail(nullptr, ncclInvalidArgument, fmt::format("{}: Invalid config {} attribute value {}", fn, name, v));
  };
  if (set(c.blocking) && !flag(c.blocking)) return invalid("blocking", c.blocking);
  if (set(c.cgaClusterSize) && c.cgaClusterSize < 0) return invalid("cgaClusterSize", c.cgaClusterSize);
  // As NCCL, minCTAs is compared with maxCTAs even when maxCTAs is unset (INT_MIN): a config that
  // sets minCTAs alone is refused.
  if ((set(c.minCTAs) && c.minCTAs <= 0) || (set(c.maxCTAs) && c.maxCTAs <= 0) || c.minCTAs > c.maxCTAs)
    return fail(nullptr, ncclInvalidArgument,
                fmt::format("{}: Invalid config min/max channels attribute value {}/{}", fn, c.minCTAs, c.maxCTAs));
  if (set(c.splitShare) && !flag(c.splitShare)) return invalid("splitShare", c.splitShare);
  if (set(c.collnetEnable) && !flag(c.collnetEnable)) return invalid("collnetEnable", c.collnetEnable);
  if (set(c.CTAPolicy) && (c.CTAPolicy & ~(NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO)) != 0)
    return invalid("policy", c.CTAPolicy);
  if (set(c.shrinkShare) && !flag(c.shrinkShare)) return invalid("shrinkShare", c.shrinkShare);
  if (set(c.nvlsCTAs) && c.nvlsCTAs <= 0) return invalid("nvlsCTAs", c.nvlsCTAs);
  if (set(c.nChannelsPerNetPeer) && (c.nChannelsPerNetPeer <= 0 || c.nChannelsPerNetPeer > 64))
    return invalid("nChannelsPerNetPeer", c.nChannelsPerNetPeer);
  if (set(c.nvlinkCentricSched) && !flag(c.nvlinkCentricSched))
    return invalid("nvlinkCentricSched", c.nvlinkCentricSched);
  if (set(c.graphUsageMode) && (c.graphUsageMode < 0 || c.graphUsageMode > 2))
    return invalid("graphUsageMode", c.graphUsageMode);
  if (set(c.numRmaCtx) && c.numRmaCtx < 0) return invalid("numRmaCtx", c.numRmaCtx);
  if (set(c.maxP2pPeers) && c.maxP2pPeers <= 0) return invalid("maxP2pPeers", c.maxP2pPeers);
  if (set(c.graphStreamOrdering) && !flag(c.graphStreamOrdering))
    return invalid("graphStreamOrdering", c.graphStreamOrdering);
  if (set(c.blocking)) out->blocking = c.blocking == 1;
  if (c.commName) out->name = c.commName;
  return ncclSuccess;
}

// The config, then, as NCCL: NCCL_COMM_BLOCKING (0 or 1) over what it says, or its absence.
ncclResult_t read_config(const char* fn, const ncclConfig_t* config, Settings* out) {
  if (ncclResult_t r = parse_config(fn, config, out); r != ncclSuccess) return r;
  if (const int b = purlin::config().comm_blocking; b >= 0) out->blocking = b == 1;
  return ncclSuccess;
}

// The datapath and device a new communicator serves.
ncclResult_t choose_device(const char* fn, int* device) {
  const Config& c = config();
  if (!c.datapath_refused.empty()) return fail(nullptr, ncclInvalidUsage, fmt::format("{}: {}", fn, c.datapath_refused));
  int gpus = cuda_device_count();
  if (c.datapath == DatapathChoice::host || gpus == 0) {
    log::info(log::kInit, "{}: host datapath ({})", fn,
              c.datapath == DatapathChoice::host ? "PURLIN_DATAPATH=host" : "no CUDA device visible");
    *device = -1;
    return ncclSuccess;
  }
  int d = cuda_current_device();
  if (d < 0) return fail(nullptr, ncclUnhandledCudaError, fmt::format("{}: cannot read the current CUDA device", fn));
  log::info(log::kInit, "{}: GPU datapath on device {} ({})", fn, d,
            c.datapath == DatapathChoice::sm ? "PURLIN_DATAPATH=sm" : "a CUDA device is visible");
  *device = d;
  return ncclSuccess;
}

// NCCL's INFO lines of a communicator's life, which its users look for in logs ("Init COMPLETE"),
// with NCCL's fields: the comm's device as CUDA, NVML and PCI number it (-1, -1, 0 on the host
// datapath).
std::string device_fields(int device, bool nvml) {
  std::string out = fmt::format("cudaDev {}", device);
  if (nvml) out += fmt::format(" nvmlDev {}", gpu_nvml_index(device));
  return out + fmt::format(" busId {:x}", gpu_bus_id(device));
}

ncclResult_t init_work(const char* fn, ncclComm* comm, const purlin::UniqueId& id, int rank, int nranks) {
  const bool logged = log::enabled(log::Level::info, log::kInit);
  const std::string fields =
      logged ? fmt::format("comm {} rank {} nranks {} {} commId {:#x}", static_cast<void*>(comm), rank, nranks,
                           device_fields(comm->device, true), public_hash(id))
             : "";
  if (logged) log::info(log::kInit, "[Rank {}] {} {} - Init START", rank, fn, fields);
  snac::Communicator::Options opt;
  opt.device = comm->device;
  Status s = snac::Communicator::create(id, rank, nranks, opt, &comm->abort_flag, &comm->impl);
  if (s == Status::ok) s = Fallback::attach(comm, &comm->fallback);
  if (s != Status::ok) return propagate(comm, s);
  comm->impl_ready.store(true, std::memory_order_release);  // impl and fallback are set
  if (comm->revoked.load()) comm->impl->revoke();  // revoked while it was being created
  if (logged) log::info(log::kInit, "{} {} - Init COMPLETE", fn, fields);
  return ncclSuccess;
}

// Frees a comm that never reached its caller's hands.
void discard(ncclComm* comm) {
  unregister_comm(comm);
  delete comm;
}

// NCCL's version line, at the first communicator the process creates: a line of its own on rank 0
// at NCCL_DEBUG=VERSION or WARN, an INFO line on every rank from INFO up. It names this library too.
void announce_version(int rank) {
  const log::Level level = log::current_level();
  if (level <= log::Level::warn && (level == log::Level::none || rank != 0)) return;
  static std::once_flag once;
  std::call_once(once, [level] {
    std::string text = fmt::format("NCCL version {}.{}.{}{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX);
    if (const int cuda = cuda_build_version(); cuda > 0) text += fmt::format("+cuda{}.{}", cuda / 1000, cuda % 1000 / 10);
    text += fmt::format(" (Purlin {})", PURLIN_VERSION);
    if (level <= log::Level::warn) log::write(log::Level::version, log::kAll, text);
    else log::info(log::kAll, "{}", text);
  });
}

// Allocates the comm, then joins the ranks now (blocking) or in the background (non-blocking).
ncclResult_t start_comm(const char* fn, ncclComm_t* out, int nranks, const purlin::UniqueId& id, int rank,
                        const Settings& settings) {
  int device = -1;
  if (ncclResult_t r = choose_device(fn, &device); r != ncclSuccess) return r;
  auto* comm = new ncclComm();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = device;
  comm->blocking = settings.blocking;
  comm->check_mode = check_mode();
  register_comm(comm);
  auto work = [fn, comm, id, rank, nranks] { return init_work(fn, comm, id, rank, nranks); };
  if (comm->blocking && group_depth() > 0) {
    // As NCCL: inside a group the rendezvous runs at the outermost ncclGroupEnd, so that one thread
    // may create the communicators of several ranks; until then the comm answers in progress.
    comm->async_error.store(ncclInProgress, std::memory_order_release);
    defer(
        [comm, work] {
          const ncclResult_t r = work();
          comm->async_error.store(r, std::memory_order_release);
          return r;
        },
        comm);
    *out = comm;
    return ncclSuccess;
  }
  ncclResult_t r = run_work(comm, work, Settle::every_error);
  if (r != ncclSuccess && r != ncclInProgress) {
    discard(comm);
    return r;
  }
  *out = comm;
  return r;
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

// Frees everything of a comm. With `abort` every wait of its calls ends first; without, the calls
// in flight are waited for.
ncclResult_t teardown(ncclComm* comm, bool abort) {
  const bool logged = log::enabled(log::Level::info, log::kDestroy);
  const std::string device = logged ? device_fields(comm->device, false) : "";
  // As NCCL's lines, "nRanks" at abort's start and "nranks" at the end.
  if (logged && abort)
    log::info(log::kDestroy, "comm {} rank {} nRanks {} {} - Abort START", static_cast<void*>(comm), comm->rank,
              comm->nranks, device);
  const std::string done = logged ? fmt::format("comm {} rank {} nranks {} {} - {} COMPLETE", static_cast<void*>(comm),
                                                comm->rank, comm->nranks, device, abort ? "Abort" : "Destroy")
                                  : "";
  unregister_comm(comm);  // no new use is taken from here on
  if (abort) {
    comm->abort_flag.store(true);
    if (comm->impl_ready.load(std::memory_order_acquire)) {
      if (comm->fallback) comm->fallback->abort();
      comm->impl->abort();
    }
  }
  wait_idle(comm);  // calls in flight, in any thread; they also start the background work
  join_background(comm);
  // A child whose creation runs on its parent's background thread settles when that ends.
  while (comm->async_error.load(std::memory_order_acquire) == ncclInProgress)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (abort) {
    if (comm->fallback) comm->fallback->abort();
    if (comm->impl) comm->impl->abort();
  }
  for (auto* r : comm->registrations) delete r;
  delete comm;
  if (logged) log::info(log::kDestroy, "{}", done);
  return ncclSuccess;
}

using MakeChild = std::function<Status(const snac::Communicator::Options&, std::atomic<bool>* abort,
                                       std::unique_ptr<snac::Communicator>*)>;

// What makes a child, and what its INIT lines say of it: its colour and key (a shrink's and a
// grow's are 0 and the parent's rank) and NCCL's childCount.
struct Placement {
  enum class Kind { split, shrink, grow } kind = Kind::split;
  int color = 0;
  int key = 0;
};

// Split, shrink and grow (on an existing rank): `make` creates the child's Communicator (none for a
// rank that joins none, `joins` false). Blocking: now. Non-blocking: the child is returned at once
// in ncclInProgress and both it and the parent settle when the work, run on the parent's background
// thread, ends.
ncclResult_t new_child(const char* fn, ncclComm* parent, const ncclConfig_t* config, bool joins, ncclComm_t* newcomm,
                       Placement placement, MakeChild make) {
  using Kind = Placement::Kind;
  // As NCCL: without a config the child inherits the parent's mode; a config's unset fields take
  // the defaults (blocking), not the parent's. A rank that joins no child does not read it.
  Settings settings;
  settings.blocking = config == nullptr ? parent->blocking : true;
  if (joins)
    if (ncclResult_t r = read_config(fn, config, &settings); r != ncclSuccess) return r;
  // As NCCL: every split and grow counts, a rank's that joins no child too; a shrink does not. A
  // grow's lines say 0, as NCCL's.
  const int child_count = placement.kind != Kind::shrink ? ++parent->children : 0;
  const std::string how =
      fmt::format("parent {} childCount {} color {} key {}", static_cast<void*>(parent),
                  placement.kind == Kind::split ? child_count : 0, placement.color, placement.key);
  snac::Communicator::Options opt;
  opt.device = parent->device;
  ncclComm* child = nullptr;
  if (joins) {
    child = new ncclComm();
    child->rank = -1;
    child->nranks = 0;
    child->device = parent->device;
    child->blocking = settings.blocking;
    child->check_mode = check_mode();
    child->async_error.store(ncclInProgress);
    register_comm(child);
    if (log::enabled(log::Level::info, log::kInit))
      opt.placed = [fn, child, how, grow = placement.kind == Kind::grow](int rank, int nranks, const UniqueId& id) {
        const std::string fields = fmt::format("comm {} rank {} nranks {} {}", static_cast<void*>(child), rank, nranks,
                                               device_fields(child->device, true));
        // NCCL's lines: a grow's as an init's, a split's without a space before the dash.
        if (grow)
          log::info(log::kInit, "[Rank {}] {} {} commId {:#x} - Init START", rank, fn, fields, public_hash(id));
        else
          log::info(log::kInit, "{} {} {}- Init START", fn, fields, how);
      };
  }
  // The parent's serial: work deferred to a group's end must not take a later communicator at
  // the same address for it.
  auto work = [fn, parent, serial = parent->serial, child, opt, how, make = std::move(make)]() -> ncclResult_t {
    InUse use(parent, serial);
    if (!use) {
      if (child) child->async_error.store(ncclInvalidArgument, std::memory_order_release);
      return fail(nullptr, ncclInvalidArgument, fmt::format("{}: the parent communicator was destroyed", fn));
    }
    std::atomic<bool> own_abort{false};
    std::unique_ptr<snac::Communicator> made;
    Status s = make(opt, child ? &child->abort_flag : &own_abort, &made);
    if (s == Status::ok && child && !made) s = fail(Status::internal_error, fmt::format("{}: no communicator made", fn));
    ncclResult_t r = s == Status::ok ? ncclSuccess : propagate(parent, s);
    if (child) {
      if (r == ncclSuccess) {
        child->rank = made->rank();
        child->nranks = made->nranks();
        child->impl = std::move(made);
        s = Fallback::attach(child, &child->fallback);
        if (s == Status::ok) child->impl_ready.store(true, std::memory_order_release);
        else r = propagate(parent, s);
        if (r == ncclSuccess && log::enabled(log::Level::info, log::kInit))
          log::info(log::kInit, "{} comm {} rank {} nranks {} {} {} - Init COMPLETE", fn, static_cast<void*>(child),
                    child->rank, child->nranks, device_fields(child->device, true), how);
      }
      if (r != ncclSuccess) propagate(child, s);
      child->async_error.store(r, std::memory_order_release);  // the last touch of the child here
    }
    return r;
  };
  if (parent->blocking && group_depth() > 0) {
    // As an init inside a group: the child is made at the outermost ncclGroupEnd, after the
    // parent's splits and shrinks called before it in the group.
    *newcomm = child;
    defer(std::move(work), child, parent);
    return ncclSuccess;
  }
  if (parent->blocking) {
    ncclResult_t r = work();
    if (r != ncclSuccess) {
      if (child) discard(child);
      return r;
    }
    *newcomm = child;
    return ncclSuccess;
  }
  *newcomm = child;
  ncclResult_t r = run_work(parent, std::move(work));
  if (r != ncclInProgress && child) {  // no thread could be started: nothing runs
    child->async_error.store(r);
    discard(child);
    *newcomm = nullptr;
  }
  return r;
}

// A communicator whose previous work is done, as NCCL's ncclCommEnsureReady sees it: in progress
// is invalid_argument (poll ncclCommGetAsyncError first), a failure is reported as itself.
ncclResult_t ensure_ready(const char* fn, ncclComm* comm) {
  if (comm == nullptr || !is_live(comm)) return check_comm(fn, comm);
  ncclResult_t state = comm_state(comm);
  if (state == ncclInProgress)
    return fail(comm, ncclInvalidArgument,
                fmt::format("{}: the communicator's previous operation is still in progress (poll ncclCommGetAsyncError)", fn));
  if (state != ncclSuccess)
    return fail(comm, state, fmt::format("{}: the communicator is in error state ({}): {}; abort it", fn,
                                         ncclGetErrorString(state), failure_reason(comm)));
  return ncclSuccess;
}

// ncclCommInitRankConfig under the name of the function called (fn), which its lines give.
// As NCCL, the version line comes before the arguments are checked.
ncclResult_t init_rank(const char* fn, ncclComm_t* comm, int nranks, const ncclUniqueId* commId, int rank,
                       const ncclConfig_t* config) {
  announce_version(rank);
  if (ncclResult_t r = check_init_args(fn, comm, nranks, rank, commId); r != ncclSuccess) return r;
  Settings settings;
  if (ncclResult_t r = read_config(fn, config, &settings); r != ncclSuccess) return r;
  purlin::UniqueId id;
  std::memcpy(&id, commId, sizeof(id));
  if (ncclResult_t r = check_id(fn, id); r != ncclSuccess) return r;
  return start_comm(fn, comm, nranks, id, rank, settings);
}

}  // namespace

}  // namespace purlin::shim

using namespace purlin;
using namespace purlin::shim;

// A NULL version is refused without a WARN or a last error, as NCCL refuses it.
NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == nullptr) return ncclInvalidArgument;
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
  return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, nullptr);
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config) {
  const char* fn = "ncclCommInitRankScalable";
  // As NCCL: nId first, then the version line and the other arguments.
  if (nId < 1 || nId > nranks)
    return fail(nullptr, ncclInvalidArgument, fmt::format("{}: invalid nId {} (nranks {})", fn, nId, nranks));
  // Every rank holds all nId ids; the first one's root serves the rendezvous of all ranks.
  return init_rank(fn, newcomm, nranks, commIds, myrank, config);
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
  if (ndev < 1) return fail(nullptr, ncclInvalidArgument, fmt::format("ncclCommInitAll: invalid ndev {}", ndev));
  if (devlist) {
    const int gpus = cuda_device_count();
    for (int i = 0; i < ndev; ++i)
      if (devlist[i] < 0 || (gpus > 0 && devlist[i] >= gpus))
        return fail(nullptr, ncclInvalidArgument,
                    fmt::format("ncclCommInitAll: invalid device {} at devlist[{}]", devlist[i], i));
  }
  ncclUniqueId id;
  if (ncclResult_t r = pncclGetUniqueId(&id); r != ncclSuccess) return r;
  std::vector<ncclResult_t> results(ndev, ncclSuccess);
  std::vector<std::string> why(ndev);  // a failed rank's message, from its thread to the caller's
  std::vector<std::thread> threads;
  // Rank i runs on devlist[i]; without a list on device i, wrapping round when there are more
  // ranks than visible devices (several ranks then share a GPU).
  const int gpus = cuda_device_count();
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  for (int i = 0; i < ndev; ++i)
    threads.emplace_back([&, i] {
      if (gpus > 0) {
        const int device = devlist ? devlist[i] : i % gpus;
        if (!cuda_set_current_device(device)) {
          results[i] = fail(nullptr, ncclUnhandledCudaError, fmt::format("cannot use device {}", device));
          why[i] = last_error();
          return;
        }
      }
      results[i] = init_rank("ncclCommInitAll", &comms[i], ndev, &id, i, nullptr);
      if (results[i] != ncclSuccess && results[i] != ncclInProgress) why[i] = last_error();
    });
  for (auto& t : threads) t.join();
  // Under NCCL_COMM_BLOCKING=0 the inits answer in progress: the caller polls each communicator.
  ncclResult_t result = ncclSuccess;
  for (int i = 0; i < ndev; ++i)
    if (results[i] == ncclInProgress) result = ncclInProgress;
  for (int i = 0; i < ndev; ++i)
    if (results[i] != ncclSuccess && results[i] != ncclInProgress) {
      for (int j = 0; j < ndev; ++j)
        if (comms[j]) teardown(comms[j], true), comms[j] = nullptr;
      adopt_error(static_cast<Status>(results[i]), fmt::format("ncclCommInitAll: rank {}: {}", i, why[i]));
      return results[i];
    }
  return result;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (ncclResult_t r = ensure_ready(fn, comm); r != ncclSuccess) return r;
  if (newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = nullptr;
  // As NCCL: only NCCL_SPLIT_NOCOLOR joins no child; other negative colours name groups too.
  static_assert(NCCL_SPLIT_NOCOLOR == snac::Communicator::kNoColor);
  if (color == NCCL_SPLIT_NOCOLOR)
    log::info(log::kInit, "Rank {} has color with NCCL_SPLIT_NOCOLOR, not creating a new communicator", comm->rank);
  return new_child(fn, comm, config, color != NCCL_SPLIT_NOCOLOR, newcomm, Placement{Placement::Kind::split, color, key},
                   [comm, color, key](const snac::Communicator::Options& o, std::atomic<bool>* abort, auto* out) {
                     return comm->impl->split(color, key, o, abort, out);
                   });
}

// A failed communicator may be shrunk: that is how its survivors go on.
NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  const char* fn = "ncclCommShrink";
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (comm_state(comm) == ncclInProgress) return ensure_ready(fn, comm);
  if (newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  *newcomm = nullptr;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fail(comm, ncclInvalidArgument, fmt::format("ncclCommShrink: invalid flags {:#x}", shrinkFlags));
  if (excludeRanksList == nullptr || excludeRanksCount <= 0)
    return fail(comm, ncclInvalidArgument,
                fmt::format("ncclCommShrink: invalid exclude list ({} ranks at {})", excludeRanksCount,
                            static_cast<const void*>(excludeRanksList)));
  if (!comm->impl_ready.load(std::memory_order_acquire))
    return fail(comm, ncclInvalidUsage, "ncclCommShrink: the communicator's initialisation failed");
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  for (int r : excluded) {
    if (r < 0 || r >= comm->nranks)
      return fail(comm, ncclInvalidArgument, fmt::format("ncclCommShrink: invalid rank {} to exclude (nranks {})", r, comm->nranks));
    if (r == comm->rank)
      return fail(comm, ncclInvalidArgument, fmt::format("ncclCommShrink: rank {} excludes itself", r));
  }
  // Stops the parent's collectives in flight; the bootstrap goes on serving the shrink.
  if (shrinkFlags == NCCL_SHRINK_ABORT) comm->impl->revoke();
  return new_child(fn, comm, config, true, newcomm, Placement{Placement::Kind::shrink, 0, comm->rank},
                   [comm, excluded](const snac::Communicator::Options& o, std::atomic<bool>* abort, auto* out) {
                     return comm->impl->shrink(excluded, o, abort, out);
                   });
}

// Growing (NCCL 2.29): one existing rank makes the id; the existing ranks keep their ranks in the
// grown communicator and the new ranks join it through that id, as ncclCommInitRank's ranks do.
NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId) {
  const char* fn = "ncclCommGetUniqueId";
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (ncclResult_t r = ensure_ready(fn, comm); r != ncclSuccess) return r;
  if (uniqueId == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommGetUniqueId: uniqueId is NULL");
  if (!config().comm_id.empty())
    return fail(comm, ncclInvalidUsage, "ncclCommGetUniqueId should not be called when NCCL_COMM_ID is set");
  purlin::UniqueId id{};
  if (Status s = make_unique_id(&id, IdFor::child); s != Status::ok) return propagate(comm, s);
  std::memcpy(uniqueId, &id, sizeof(id));  // the same size (ncclGetUniqueId asserts it)
  std::lock_guard<std::mutex> g(comm->mutex);
  comm->grow_id = id;
  return ncclSuccess;
}

// Existing ranks: comm, rank -1, the id where this rank has it (the one that made it may pass NULL
// too). New ranks: no comm, the id, and their rank.
NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
         ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommGrow";
  if (newcomm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommGrow: newcomm is NULL");
  *newcomm = nullptr;
  if (nRanks <= 0) return fail(nullptr, ncclInvalidArgument, fmt::format("ncclCommGrow: invalid nRanks {}", nRanks));
  if (comm == nullptr) {
    if (uniqueId == nullptr || rank < 0 || rank >= nRanks)
      return fail(nullptr, ncclInvalidArgument,
                  fmt::format("ncclCommGrow: a new rank needs a unique id and a rank in 0..{} (rank {}, uniqueId {})",
                              nRanks - 1, rank, static_cast<const void*>(uniqueId)));
    announce_version(rank);  // as NCCL, before its INFO line
    log::info(log::kInit, "ncclCommGrow: new rank creating new communicator with {} total ranks", nRanks);
    return init_rank(fn, newcomm, nRanks, uniqueId, rank, config);
  }
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (nRanks <= comm->nranks)
    return fail(comm, ncclInvalidArgument,
                fmt::format("ncclCommGrow: total ranks {} is not more than the current {}", nRanks, comm->nranks));
  if (ncclResult_t r = ensure_ready(fn, comm); r != ncclSuccess) return r;
  if (rank != -1)
    return fail(comm, ncclInvalidArgument,
                fmt::format("ncclCommGrow: rank {} given by an existing rank (must be -1)", rank));
  // The id offered: the one passed, else the one this rank made. Either way the id this rank made
  // is used up here, as NCCL's ids are single-use. It is checked among the existing ranks, so that
  // a bad one fails them all alike.
  std::optional<purlin::UniqueId> offer;
  {
    std::lock_guard<std::mutex> g(comm->mutex);
    offer = comm->grow_id;
    comm->grow_id.reset();
  }
  if (uniqueId) {
    offer.emplace();
    std::memcpy(&*offer, uniqueId, sizeof(*offer));
  }
  log::info(log::kInit, "ncclCommGrow: existing rank creating new communicator with {} total ranks", nRanks);
  return new_child(fn, comm, config, true, newcomm, Placement{Placement::Kind::grow, 0, comm->rank},
                   [comm, offer, nRanks](const snac::Communicator::Options& o, std::atomic<bool>* abort, auto* out) {
                     return comm->impl->grow(offer ? &*offer : nullptr, nRanks, o, abort, out);
                   });
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  const char* fn = "ncclCommFinalize";
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (ncclResult_t r = ensure_ready(fn, comm); r != ncclSuccess) return r;
  if (comm->finalized.exchange(true))
    return fail(comm, ncclInvalidArgument, "ncclCommFinalize: the communicator was already finalized or revoked");
  // Every call's work is complete (host) or ordered on its stream (GPU) when the call settles:
  // nothing is left to flush but the farewell; a non-blocking communicator answers in progress.
  return run_work(comm, [comm] {
    InUse use(comm);
    if (use) comm->impl->finalize();
    return ncclSuccess;
  });
}

namespace {

// A communicator whose creation this thread deferred to the end of its open group.
ncclResult_t not_yet_created(const char* fn, ncclComm* comm) {
  return fail(comm, ncclInvalidUsage,
              fmt::format("{}: the communicator is created when the group this thread has open ends; call "
                          "ncclGroupEnd first", fn));
}

}  // namespace

// As NCCL: a communicator in the error state is not freed; the call returns its error, and
// ncclCommAbort frees it. One finalized or revoked first is freed whatever happened since: NCCL's
// finalize stops everything that could record a later error, and its revoke resets the error.
NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  if (!is_live(comm)) return check_comm("ncclCommDestroy", comm);
  if (created_at_group_end(comm)) return not_yet_created("ncclCommDestroy", comm);
  if (comm_state(comm) == ncclInProgress || !comm->finalized.load())
    if (ncclResult_t r = ensure_ready("ncclCommDestroy", comm); r != ncclSuccess) return r;
  return teardown(comm, false);
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (!is_live(comm)) return check_comm("ncclCommAbort", comm);
  if (created_at_group_end(comm)) return not_yet_created("ncclCommAbort", comm);
  return teardown(comm, true);
}

// Local and prompt: the collectives in flight end (with ncclInvalidUsage), later ones are refused
// with ncclInvalidUsage; split, shrink, destroy and abort still work. A non-blocking communicator
// answers ncclInProgress and settles once the calls in flight have ended.
NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  const char* fn = "ncclCommRevoke";
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  InUse use(comm);
  if (!use) return check_comm(fn, comm);
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(comm, ncclInvalidArgument, fmt::format("{}: invalid flags {:#x}", fn, revokeFlags));
  if (comm->finalized.load())
    return fail(comm, ncclInvalidArgument, fmt::format("{}: the communicator was finalized", fn));
  if (comm->revoked.exchange(true)) return fail(comm, ncclInvalidArgument, fmt::format("{}: already revoked", fn));
  comm->finalized.store(true);  // as NCCL: a revoked communicator cannot be finalized
  // An init still running revokes what it creates; its own settling ends the revoke.
  if (!comm->impl_ready.load(std::memory_order_acquire))
    return comm_state(comm) == ncclInProgress ? ncclInProgress : ncclSuccess;
  comm->impl->revoke();
  join_background(comm);  // non-blocking work in flight ends now
  // Settled once the calls in flight have ended (a blocking revoke waits here, holding its own use).
  const int own = comm->blocking ? 1 : 0;
  return run_work(comm, [comm, own] {
    wait_idle(comm, own);
    return ncclSuccess;
  });
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommGetAsyncError", comm);
  if (asyncError == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *asyncError = comm_state(comm);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommCount", comm);
  if (count == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommCount: count is NULL");
  if (ncclResult_t r = ensure_ready("ncclCommCount", comm); r != ncclSuccess) return r;
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommCuDevice", comm);
  if (device == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  if (ncclResult_t r = ensure_ready("ncclCommCuDevice", comm); r != ncclSuccess) return r;
  *device = comm->device;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  if (comm == nullptr || !is_live(comm)) return check_comm("ncclCommUserRank", comm);
  if (rank == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  if (ncclResult_t r = ensure_ready("ncclCommUserRank", comm); r != ncclSuccess) return r;
  *rank = comm->rank;
  return ncclSuccess;
}
