// The registry of live communicators and the one way an entry point records an error.
#include "nccl_shim/shim.h"

#include <shared_mutex>
#include <unordered_set>

#include "core/status.h"

namespace purlin::shim {
namespace {

std::shared_mutex g_registry_mutex;
std::unordered_set<const ncclComm*>& registry() {
  static auto* set = new std::unordered_set<const ncclComm*>();  // outlives static destructors
  return *set;
}

}  // namespace

void register_comm(ncclComm* comm) {
  static std::uint64_t next_serial = 0;
  std::unique_lock g(g_registry_mutex);
  comm->serial = ++next_serial;
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

bool is_live(const ncclComm* comm, std::uint64_t serial) {
  std::shared_lock g(g_registry_mutex);
  return registry().count(comm) != 0 && comm->magic == ncclComm::kMagic && comm->serial == serial;
}

bool acquire_use(ncclComm* comm, std::uint64_t serial) {
  std::shared_lock g(g_registry_mutex);
  if (registry().count(comm) == 0 || comm->magic != ncclComm::kMagic || (serial != 0 && comm->serial != serial))
    return false;
  comm->users.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

ncclResult_t fail(ncclComm* comm, ncclResult_t code, const std::string& message, std::source_location where) {
  purlin::fail(static_cast<Status>(code), message, where);
  if (comm && is_live(comm)) {
    std::lock_guard<std::mutex> g(comm->mutex);
    comm->last_error = message;
  }
  return code;
}

ncclResult_t propagate(ncclComm* comm, Status s) {
  if (comm && is_live(comm)) {
    std::lock_guard<std::mutex> g(comm->mutex);
    comm->last_error = last_error();
  }
  return to_nccl(s);
}

}  // namespace purlin::shim
