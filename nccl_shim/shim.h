// Internals shared by the ABI entry points: the ncclComm object, the export macro, and the one
// conversion from purlin::Status to ncclResult_t.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "core/types.h"
#include "snac/runtime/communicator.h"

namespace purlin::shim {
class Fallback;  // nccl_shim/fallback.h
}

// Defines pnccl<name> and exports nccl<name> as a weak alias of it, as NCCL does.
#define NCCL_API(ret, name, ...)                                                                  \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);                     \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__); \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

struct ncclComm {
  static constexpr std::uint64_t kMagic = 0x50524c4e434f4d4dull;  // "PRLNCOMM"
  std::uint64_t magic = kMagic;
  std::uint64_t serial = 0;  // unique per communicator of the process (set at registration)
  std::unique_ptr<purlin::snac::Communicator> impl;  // set once, before impl_ready
  int rank = 0;
  int nranks = 0;
  int device = -1;
  bool blocking = true;
  purlin::CheckMode check_mode = purlin::CheckMode::off;  // NCCL_CHECK_MODE as it was at this comm's creation
  int children = 0;  // splits and grows called on this comm, NOCOLOR splits too: NCCL's childCount
  // ncclInProgress while work of a non-blocking call runs, else ncclSuccess or an error that
  // broke the communicator outside impl (its init failed). ncclCommGetAsyncError adds impl's.
  std::atomic<int> async_error{ncclSuccess};
  std::atomic<bool> impl_ready{false};
  std::atomic<bool> revoked{false};
  std::atomic<bool> finalized{false};
  std::atomic<bool> abort_flag{false};
  std::atomic<int> users{0};  // calls running on impl, in any thread; teardown waits for them
  std::atomic<std::uint64_t> calls{0};  // calls that passed their checks: the opCount of INFO (COLL) lines
  std::thread background;     // the work of non-blocking calls (init included), one at a time
  mutable std::mutex mutex;   // last_error, failure and redops
  std::string last_error;
  std::string failure;  // why async_error holds an error the shim set (a refused call, a failed group)
  // The id this rank made with ncclCommGetUniqueId for growing, until a grow consumes it (mutex).
  std::optional<purlin::UniqueId> grow_id;

  // User reduction operators. A handle is ncclNumOps + slot + (generation << 16): a slot is reused
  // after ncclRedOpDestroy with the next generation, so a destroyed handle is never taken for the
  // operator that reuses its slot.
  struct RedOpSlot {
    bool live = false;
    std::uint32_t generation = 0;
    purlin::ReduceOp op{};
    purlin::DataType type = purlin::DataType::f32;
  };
  static constexpr std::size_t kRedOpSlots = 1u << 16;
  static constexpr std::uint32_t kRedOpGenerations = 1u << 14;
  std::vector<RedOpSlot> redops;
  // The live slot a handle names, or null. Call with `mutex` held.
  RedOpSlot* redop(int handle) {
    if (handle < ncclNumOps) return nullptr;
    const auto v = static_cast<std::uint32_t>(handle - ncclNumOps);
    const std::size_t index = v % kRedOpSlots;
    if (index >= redops.size() || !redops[index].live || redops[index].generation != v / kRedOpSlots) return nullptr;
    return &redops[index];
  }

  // Buffers registered with ncclCommRegister / ncclCommWindowRegister (GPU communicators). The
  // datapath treats them like any buffer (large calls run in place on every buffer it can map,
  // registered or not); registration records them so that deregistration can be checked.
  struct Registration {
    ncclComm* comm;
    void* ptr;
    std::size_t bytes;
    bool window;
    int flags;
  };
  std::vector<Registration*> registrations;

  // The real NCCL's part (nccl_shim/fallback.h), when the ranks span hosts or PURLIN_FALLBACK is
  // set; null otherwise. Declared last so that it is destroyed first, before `impl`, whose
  // bootstrap it uses.
  std::unique_ptr<purlin::shim::Fallback> fallback;
};

namespace purlin::shim {

inline ncclResult_t to_nccl(Status s) { return static_cast<ncclResult_t>(s); }

// Registers a live communicator / forgets it; `is_live` tells a comm from garbage or a destroyed one
// without dereferencing it. `serial` also tells it from a later comm at the same address.
void register_comm(ncclComm* comm);
void unregister_comm(ncclComm* comm);
bool is_live(const ncclComm* comm);
bool is_live(const ncclComm* comm, std::uint64_t serial);
// Counts a use of `comm` (users) if it is live (and its serial is `serial`, when not 0), atomically
// with the check; see InUse.
bool acquire_use(ncclComm* comm, std::uint64_t serial);

// Records `message` as the comm's (and the thread's) last error, logs WARN naming the caller's
// source line, returns `code`.
ncclResult_t fail(ncclComm* comm, ncclResult_t code, const std::string& message,
                  std::source_location where = std::source_location::current());
// After an internal failure: copy the thread's last error into the comm.
ncclResult_t propagate(ncclComm* comm, Status s);

}  // namespace purlin::shim
