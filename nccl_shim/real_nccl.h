// The real NCCL, loaded with dlopen for what Purlin does not serve: communicators whose ranks span
// hosts, the operations PURLIN_FALLBACK names, and those a datapath declines.
//
// Where it comes from: PURLIN_NCCL_LIBRARY when set (and nothing else); otherwise the nvidia-nccl
// Python wheel beside the Python packages already loaded (torch finds its NCCL there), then the
// system's libnccl.so.2. Never this library: a candidate that is the same file as ours, or that
// resolves to our code, or that is any Purlin build (it exports ncclPurlinReductionMode), is
// skipped. It is loaded RTLD_LOCAL | RTLD_DEEPBIND so that its references to nccl* bind to its own
// definitions and ours stay invisible to it, and its functions are resolved by their ncclX names
// (pncclX where a build exports only those).
#pragma once

#include <nccl.h>

#include <string>

#include "nccl_shim/nccl_next.h"

namespace purlin::shim {

// A communicator of the real library: its own ncclComm, never dereferenced here.
struct RealComm;

class RealNccl {
 public:
  // Loads the library on first use (thread-safe) and keeps it for the life of the process. Null
  // when none was found; *why then lists what was tried and names PURLIN_NCCL_LIBRARY.
  static const RealNccl* get(std::string* why);

  const std::string& path() const { return path_; }
  int version() const { return version_; }
  std::string version_text() const;  // "2.28.9"

  // Its communicator as the functions below take it.
  static ncclComm_t handle(RealComm* comm) { return reinterpret_cast<ncclComm_t>(comm); }

  // nccl.h's functions, as the loaded library defines them. The last group may be null: AlltoAll,
  // Gather and Scatter appeared in NCCL 2.28, GetLastError in 2.13, CommMemStats, CommSuspend and
  // CommResume in 2.29.
  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRank) CommInitRank = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclBroadcast) Broadcast = nullptr;
  decltype(&::ncclReduce) Reduce = nullptr;
  decltype(&::ncclAllGather) AllGather = nullptr;
  decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  decltype(&::ncclRedOpCreatePreMulSum) RedOpCreatePreMulSum = nullptr;
  decltype(&::ncclRedOpDestroy) RedOpDestroy = nullptr;
  decltype(&::ncclGetLastError) GetLastError = nullptr;
  decltype(&::ncclAlltoAll) AlltoAll = nullptr;
  decltype(&::ncclGather) Gather = nullptr;
  decltype(&::ncclScatter) Scatter = nullptr;
  decltype(&::ncclCommMemStats) CommMemStats = nullptr;
  decltype(&::ncclCommSuspend) CommSuspend = nullptr;
  decltype(&::ncclCommResume) CommResume = nullptr;

 private:
  RealNccl() = default;
  static RealNccl* load(std::string* why);

  void* dl_ = nullptr;
  std::string path_;
  int version_ = 0;
};

}  // namespace purlin::shim
