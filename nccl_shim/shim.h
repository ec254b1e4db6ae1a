// Internals shared by the ABI entry points: the ncclComm object, the export macro, and the one
// conversion from purlin::Status to ncclResult_t.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/types.h"
#include "snac/communicator.h"

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
  std::unique_ptr<purlin::snac::Communicator> impl;
  int rank = 0;
  int nranks = 0;
  int device = -1;
  bool blocking = true;
  std::atomic<int> async_error{ncclSuccess};  // ncclInProgress while a non-blocking init runs
  std::atomic<bool> revoked{false};
  std::atomic<bool> abort_flag{false};
  std::thread init_thread;  // non-blocking init
  std::mutex mutex;          // last_error and redops
  std::string last_error;

  struct RedOpSlot {
    bool live = false;
    purlin::ReduceOp op{};
    purlin::DataType type = purlin::DataType::f32;
  };
  std::vector<RedOpSlot> redops;

  // Buffers registered with ncclCommRegister / ncclCommWindowRegister (GPU communicators). The
  // datapath stages them like any buffer for now; registration records them so that deregistration
  // can be checked.
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
// without dereferencing it.
void register_comm(ncclComm* comm);
void unregister_comm(ncclComm* comm);
bool is_live(const ncclComm* comm);

// Records `message` as the comm's (and the thread's) last error, logs WARN, returns `code`.
ncclResult_t fail(ncclComm* comm, ncclResult_t code, const std::string& message);
// After an internal failure: copy the thread's last error into the comm.
ncclResult_t propagate(ncclComm* comm, Status s);

}  // namespace purlin::shim
