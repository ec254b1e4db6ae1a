#include "nccl_shim/fallback.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "core/config.h"
#include "core/log.h"
#include "nccl_shim/forward.h"

#if defined(PURLIN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace purlin::shim {
namespace {

constexpr int kKinds = snac::kUserCollKinds;

// What each rank brings to the agreement at init.
struct Vote {
  std::uint32_t forced;   // PURLIN_FALLBACK's operations
  std::uint32_t found;    // 1: it has a real NCCL (asked for only when needed)
  std::uint32_t comm_id;  // 1: NCCL_COMM_ID is set, which the real NCCL would read too
};

Status use_device(int device) {
#if defined(PURLIN_HAVE_CUDA)
  if (device >= 0) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(Status::cuda_error, fmt::format("cudaSetDevice({}) for NCCL: {}", device, cudaGetErrorString(e)));
    }
  }
#else
  (void)device;
#endif
  return Status::ok;
}

}  // namespace

Status Fallback::attach(ncclComm* comm, std::unique_ptr<Fallback>* out) {
  out->reset();
  snac::Communicator& world = *comm->impl;
  const Config& c = config();
  const bool needs = c.fallback_ops != 0 || !world.native();
  std::string missing;
  const RealNccl* lib = needs ? RealNccl::get(&missing) : nullptr;

  // An environment that differs between ranks would leave some of them waiting in NCCL's init for
  // the others: agree first, and fail together.
  const int n = world.nranks(), me = world.rank();
  Vote mine{c.fallback_ops, lib ? 1u : 0u, c.comm_id.empty() ? 0u : 1u};
  std::vector<Vote> votes(static_cast<std::size_t>(n));
  PURLIN_TRY(world.bootstrap().all_gather(&mine, sizeof(Vote), votes.data()));
  for (int r = 0; r < n; ++r)
    if (votes[r].forced != mine.forced)
      return fail(Status::invalid_usage,
                  fmt::format("PURLIN_FALLBACK differs between ranks: rank {} forwards {}, rank {} forwards {}; "
                              "set the same value on every rank", me, fallback_names(mine.forced), r,
                              fallback_names(votes[r].forced)));
  if (!needs) return Status::ok;
  const std::string reason = world.native() ? fmt::format("PURLIN_FALLBACK={}", fallback_names(c.fallback_ops))
                                            : world.declined();
  if (!lib)
    return fail(Status::invalid_usage, fmt::format("{}: the real NCCL must serve this communicator, but {}", reason, missing));
  for (int r = 0; r < n; ++r)
    if (votes[r].comm_id)
      return fail(Status::invalid_usage,
                  fmt::format("{}: the real NCCL must serve this communicator, but NCCL_COMM_ID is set (rank {}), "
                              "and the real NCCL would serve the rendezvous of each of its communicators at that "
                              "address too; unset NCCL_COMM_ID", reason, r));
  for (int r = 0; r < n; ++r)
    if (!votes[r].found)
      return fail(Status::invalid_usage,
                  fmt::format("{}: the real NCCL must serve this communicator, but rank {} found none "
                              "(set PURLIN_NCCL_LIBRARY on every rank)", reason, r));

  std::unique_ptr<Fallback> f(new Fallback());
  f->rank_ = me;
  f->nranks_ = n;
  f->device_ = comm->device;
  f->forced_ = c.fallback_ops;
  f->lib_ = lib;
  f->world_ = &world;
  f->local_ = &world;
  f->noted_.assign(kKinds, 0);
  const snac::HostLayout& layout = world.layout();
  if (layout.hosts() > 1) {
    snac::Communicator::Options opt;
    opt.device = comm->device;
    PURLIN_TRY(world.split(layout.host_of(me), me, opt, &comm->abort_flag, &f->host_));
    f->local_ = f->host_.get();
  }
  PURLIN_TRY(use_device(comm->device));
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) everyone[r] = r;
  RealComm* all = nullptr;
  PURLIN_TRY(f->make_real(everyone, me, &all));
  f->all_.store(all);
  const bool rails = layout.hosts() > 1 && layout.uniform() && layout.local_size(me) > 1 && f->host_->native();
  if (rails) {
    RealComm* rail = nullptr;
    PURLIN_TRY(f->make_real(layout.rail_of(me), layout.host_of(me), &rail));
    f->rail_.store(rail);
  }
  log::info(log::kInit, "comm rank {}/{}: NCCL {} communicator of {} ranks{} alongside Purlin's {} ({})", me, n,
            lib->version_text(), n, rails ? fmt::format(", rails of {} ranks", layout.hosts()) : std::string(),
            f->local_->native() ? fmt::format("{} ranks on {}", f->local_->nranks(), f->local_->datapath())
                                : std::string("nothing"),
            reason);
  *out = std::move(f);
  return Status::ok;
}

// A real communicator of `members` (ranks of the world, this one at my_index): the first member
// makes the id and sends it to the others over the bootstrap.
Status Fallback::make_real(const std::vector<int>& members, int my_index, RealComm** out) {
  ncclUniqueId id{};
  Bootstrap& boot = world_->bootstrap();
  if (my_index == 0) {
    ncclResult_t r = lib_->GetUniqueId(&id);
    if (r != ncclSuccess)
      return fail(static_cast<Status>(r), fmt::format("NCCL {} ncclGetUniqueId: {}", lib_->version_text(),
                                                      lib_->GetErrorString(r)));
    for (std::size_t i = 1; i < members.size(); ++i) PURLIN_TRY(boot.send(members[i], &id, sizeof(id)));
  } else {
    PURLIN_TRY(boot.recv(members.front(), &id, sizeof(id)));
  }
  ncclComm_t handle = nullptr;
  ncclResult_t r = lib_->CommInitRank(&handle, static_cast<int>(members.size()), id, my_index);
  // Under NCCL_COMM_BLOCKING=0 the real NCCL's init answers in progress: wait for it to settle.
  while (r == ncclInProgress && handle && lib_->CommGetAsyncError) {
    ncclResult_t state = ncclInProgress;
    if (lib_->CommGetAsyncError(handle, &state) != ncclSuccess) break;
    r = state;
    if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r != ncclSuccess) {
    const char* last = lib_->GetLastError ? lib_->GetLastError(nullptr) : nullptr;
    return fail(static_cast<Status>(r), fmt::format("NCCL {} ncclCommInitRank (rank {} of {}): {}{}{}",
                                                    lib_->version_text(), my_index, members.size(),
                                                    lib_->GetErrorString(r), last && *last ? ": " : "",
                                                    last ? last : ""));
  }
  *out = reinterpret_cast<RealComm*>(handle);
  return Status::ok;
}

std::uint64_t Fallback::real_stat(int stat) const {
  std::uint64_t total = 0;
  for (RealComm* real : {all_.load(), rail_.load()}) {
    std::uint64_t bytes = 0;
    if (real && lib_->CommMemStats &&
        lib_->CommMemStats(RealNccl::handle(real), static_cast<ncclCommMemStat_t>(stat), &bytes) == ncclSuccess)
      total += bytes;
  }
  return total;
}

std::uint64_t Fallback::device_bytes() const {
  return (host_ ? host_->device_bytes() : 0) + real_stat(ncclStatGpuMemTotal);
}

std::uint64_t Fallback::suspendable_bytes() const {
  return (host_ ? host_->suspendable_bytes() : 0) + real_stat(ncclStatGpuMemSuspend);
}

bool Fallback::can_suspend(std::string* why) const {
  if ((all_.load() || rail_.load()) && (!lib_->CommSuspend || !lib_->CommResume)) {
    *why = fmt::format("the real NCCL serving this communicator ({} from {}) has no ncclCommSuspend (NCCL 2.29 and later)",
                       lib_->version_text(), lib_->path());
    return false;
  }
  return true;
}

Status Fallback::settle_real(RealComm* real, ncclResult_t r, const char* what) const {
  while (r == ncclInProgress && lib_->CommGetAsyncError) {
    ncclResult_t state = ncclInProgress;
    if (lib_->CommGetAsyncError(RealNccl::handle(real), &state) != ncclSuccess) break;
    r = state;
    if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r == ncclSuccess) return Status::ok;
  const char* last = lib_->GetLastError ? lib_->GetLastError(nullptr) : nullptr;
  return fail(static_cast<Status>(r), fmt::format("NCCL {} {}: {}{}{}", lib_->version_text(), what,
                                                  lib_->GetErrorString(r), last && *last ? ": " : "",
                                                  last ? last : ""));
}

Status Fallback::suspend() {
  std::string why;
  if (!can_suspend(&why)) return fail(Status::invalid_usage, why);
  if (host_) PURLIN_TRY(host_->suspend());
  int reals = 0;
  for (RealComm* real : {all_.load(), rail_.load()})
    if (real && ++reals) PURLIN_TRY(settle_real(real, lib_->CommSuspend(RealNccl::handle(real), NCCL_SUSPEND_MEM), "ncclCommSuspend"));
  log::info(log::kInit, "comm rank {}/{}: suspended {} NCCL {} communicator(s){}", rank_, nranks_, reals,
            lib_->version_text(), host_ ? " and this host's Purlin communicator" : "");
  return Status::ok;
}

Status Fallback::resume() {
  if (host_) PURLIN_TRY(host_->resume());
  int reals = 0;
  for (RealComm* real : {all_.load(), rail_.load()})
    if (real && ++reals) PURLIN_TRY(settle_real(real, lib_->CommResume(RealNccl::handle(real)), "ncclCommResume"));
  log::info(log::kInit, "comm rank {}/{}: resumed {} NCCL {} communicator(s){}", rank_, nranks_, reals,
            lib_->version_text(), host_ ? " and this host's Purlin communicator" : "");
  return Status::ok;
}

Fallback::~Fallback() {
  // Rails first: they were made after the communicator of all ranks.
  if (RealComm* rail = rail_.exchange(nullptr)) lib_->CommDestroy(RealNccl::handle(rail));
  if (RealComm* all = all_.exchange(nullptr)) lib_->CommDestroy(RealNccl::handle(all));
}

void Fallback::abort() {
  if (host_) host_->abort();
  if (RealComm* rail = rail_.exchange(nullptr)) lib_->CommAbort(RealNccl::handle(rail));
  if (RealComm* all = all_.exchange(nullptr)) lib_->CommAbort(RealNccl::handle(all));
}

Status Fallback::async_status() const {
  for (const auto* slot : {&all_, &rail_}) {
    RealComm* c = slot->load();
    if (!c) continue;
    ncclResult_t e = ncclSuccess;
    if (lib_->CommGetAsyncError(RealNccl::handle(c), &e) == ncclSuccess && e != ncclSuccess && e != ncclInProgress)
      return e < ncclNumResults ? static_cast<Status>(e) : Status::internal_error;
  }
  return host_ ? host_->async_status() : Status::ok;
}

snac::RouteChoice Fallback::route(const snac::Op& op) const {
  const std::string declined = local_->native() ? local_->supports(op) : local_->declined();
  return snac::choose_route(op, world_->layout(), forced_, declined);
}

void Fallback::note(const snac::Op& op, const snac::RouteChoice& choice) {
  const int k = static_cast<int>(op.kind);
  const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(choice.route));
  {
    std::lock_guard<std::mutex> g(noted_mutex_);
    if (noted_[k] & bit) return;
    noted_[k] |= bit;
  }
  if (choice.route == snac::Route::native) {
    log::info(log::kInit | log::kColl, "{} on rank {}/{}: Purlin", snac::name_of(op.kind), rank_, nranks_);
  } else {
    log::info(log::kInit | log::kColl, "{} on rank {}/{}: {} through NCCL {} ({})", snac::name_of(op.kind), rank_,
              nranks_, choice.route == snac::Route::nccl ? "forwarded whole" : "across hosts",
              lib_->version_text(), choice.why);
  }
}

Status Fallback::run(const snac::Op& op, cudaStream_t stream) {
  const snac::RouteChoice choice = route(op);
  note(op, choice);
  switch (choice.route) {
    case snac::Route::native:
      return local_->execute({&op, 1}, {}, stream);
    case snac::Route::nccl:
      return forward_op(*lib_, all_.load(), rank_, nranks_, device_, op, stream);
    case snac::Route::hierarchical:
      break;
  }
  const snac::HostLayout& layout = world_->layout();
  for (const snac::Step& step : snac::hierarchical_plan(op, layout, rank_)) {
    if (step.where == snac::Step::Where::host) PURLIN_TRY(local_->execute({&step.op, 1}, {}, stream));
    else PURLIN_TRY(forward_op(*lib_, rail_.load(), layout.host_of(rank_), layout.hosts(), device_, step.op, stream));
  }
  return Status::ok;
}

Status Fallback::run_p2p(const std::vector<snac::PeerOp>& p2p, cudaStream_t stream) {
  snac::Op kind;
  kind.kind = snac::CollKind::send_recv;
  const snac::RouteChoice choice = route(kind);
  note(kind, choice);
  switch (choice.route) {
    case snac::Route::native:
      return local_->execute({}, p2p, stream);
    case snac::Route::nccl:
      return forward_p2p(*lib_, all_.load(), p2p, stream);
    case snac::Route::hierarchical:
      break;
  }
  // Peers on this host first: their transfers never wait for one that crosses hosts, so every
  // rank finishing its own host's part first cannot deadlock.
  const snac::HostLayout& layout = world_->layout();
  std::vector<snac::PeerOp> near, far;
  for (const snac::PeerOp& p : p2p) {
    if (layout.same_host(p.peer, rank_)) near.push_back(snac::PeerOp{p.send, layout.local_rank(p.peer), p.buf, p.bytes});
    else far.push_back(p);
  }
  if (!near.empty()) PURLIN_TRY(local_->execute({}, near, stream));
  return forward_p2p(*lib_, all_.load(), far, stream);
}

Status Fallback::execute(const std::vector<snac::Op>& ops, const std::vector<snac::PeerOp>& p2p, cudaStream_t stream) {
  for (const snac::Op& op : ops) PURLIN_TRY(run(op, stream));
  if (!p2p.empty()) PURLIN_TRY(run_p2p(p2p, stream));
  return Status::ok;
}

}  // namespace purlin::shim
