// NCCL 2.29 and 2.30's additions to the API (nccl_shim/nccl_next.h): every name NCCL 2.30.7 exports
// is exported, and each answers as NCCL does, or refuses with NCCL's code, a WARN line and a last
// error that says so. The library reads its environment once per process, so each setting runs in a
// child of its own, on a one-rank communicator (the host datapath without a GPU). Through
// ncclResetDebugInit it also checks NCCL's INFO lines of a communicator's life (Init START and
// COMPLETE, split, Destroy and Abort).
//
//   test_nccl_next
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl_shim/nccl_next.h"
#include "test/common/loopback.h"
#include "test/common/ranks.h"
#include "test/common/tally.h"

namespace {

using tally::check;

// NCCL's header marks ncclResetDebugInit deprecated; it is exported and tested all the same.
void reset_debug() {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
}

// `rc` is `want` and, for an error, the last error names the function.
void expect(ncclResult_t rc, ncclResult_t want, const char* fn, const std::string& what) {
  const std::string last = ncclGetLastError(nullptr);
  check(rc == want, std::string(fn) + ": " + what + ": returned " + std::to_string(rc) + ", wanted " +
                        std::to_string(want) + " (last error: " + last + ")");
  if (want != ncclSuccess && rc == want)
    check(last.find(fn) != std::string::npos, std::string(fn) + ": " + what + ": last error \"" + last +
                                                  "\" does not name the function");
}

// The names NCCL 2.30.7 exports beyond NCCL 2.28's header (from its libnccl.so.2), each also as
// pnccl<name> where NCCL exports that.
const char* const kNames[] = {
    "ncclCommGetUniqueId", "ncclCommGrow", "ncclCommMemStats", "ncclCommQueryProperties", "ncclCommResume",
    "ncclCommSuspend", "ncclGetLsaDevicePointer", "ncclGetLsaMultimemDevicePointer", "ncclGetMultimemDevicePointer",
    "ncclGetPeerDevicePointer", "ncclGinInboxA2ACreateRequirement", "ncclGinOutboxCreateRequirement",
    "ncclParamBind", "ncclParamDumpAll", "ncclParamGet", "ncclParamGetAllParameterKeys", "ncclParamGetI16",
    "ncclParamGetI32", "ncclParamGetI64", "ncclParamGetI8", "ncclParamGetParameter", "ncclParamGetStr",
    "ncclParamGetU16", "ncclParamGetU32", "ncclParamGetU64", "ncclParamGetU8", "ncclPutSignal",
    "ncclResetDebugInit", "ncclSignal", "ncclWaitSignal", "ncclWinGetUserPtr",
};

void exported() {
  for (const char* name : kNames) {
    check(::dlsym(RTLD_DEFAULT, name) != nullptr, std::string(name) + " is not exported");
    const std::string p = std::string("p") + name;
    check(::dlsym(RTLD_DEFAULT, p.c_str()) != nullptr, p + " is not exported");
  }
}

// NCCL 2.30's result code ncclTimeout (8) has its string; the codes past it are unknown, as in
// NCCL 2.30.7.
void error_strings() {
  const std::string timeout = ncclGetErrorString(static_cast<ncclResult_t>(8));
  check(timeout == "timeout", "ncclGetErrorString(8) is \"" + timeout + "\", not \"timeout\"");
  const std::string past = ncclGetErrorString(static_cast<ncclResult_t>(9));
  check(past == "unknown result code", "ncclGetErrorString(9) is \"" + past + "\"");
}

void communicator_calls(ncclComm_t comm, const std::string& log_file) {
  // Windows: a communicator without windows answers NULL (host datapath), as NCCL without symmetric
  // memory; a NULL output is an invalid argument.
  void* user = reinterpret_cast<void*>(1);
  int device = -2;
  ncclCommCuDevice(comm, &device);
  if (device < 0) {
    expect(ncclWinGetUserPtr(comm, nullptr, &user), ncclSuccess, "ncclWinGetUserPtr", "host communicator");
    check(user == nullptr, "ncclWinGetUserPtr: a host communicator's answer is not NULL");
  } else {
    expect(ncclWinGetUserPtr(comm, nullptr, &user), ncclInvalidArgument, "ncclWinGetUserPtr", "win NULL");
    // A window's pointer is the buffer it was registered with; a deregistered one is unknown.
    void* buf = nullptr;
    ncclWindow_t win = nullptr;
    check(ncclMemAlloc(&buf, 1 << 20) == ncclSuccess, "ncclMemAlloc");
    check(ncclCommWindowRegister(comm, buf, 1 << 20, &win, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess,
          "ncclCommWindowRegister");
    expect(ncclWinGetUserPtr(comm, win, &user), ncclSuccess, "ncclWinGetUserPtr", "a window");
    check(user == buf, "ncclWinGetUserPtr: not the registered buffer");
    check(ncclCommWindowDeregister(comm, win) == ncclSuccess, "ncclCommWindowDeregister");
    expect(ncclWinGetUserPtr(comm, win, &user), ncclInternalError, "ncclWinGetUserPtr", "a deregistered window");
    check(ncclMemFree(buf) == ncclSuccess, "ncclMemFree");
  }
  expect(ncclWinGetUserPtr(comm, nullptr, nullptr), ncclInvalidArgument, "ncclWinGetUserPtr", "outUserPtr NULL");
  expect(ncclWinGetUserPtr(nullptr, nullptr, &user), ncclInvalidArgument, "ncclWinGetUserPtr", "comm NULL");

  float x = 1;
  // Suspend and resume, as NCCL's memory manager: nothing but memory can be suspended; suspended
  // memory stays so until resumed, and collectives are refused meanwhile (the communicator stays
  // usable).
  std::uint64_t state = 7;
  expect(ncclCommSuspend(comm, 0), ncclSuccess, "ncclCommSuspend", "no flags");
  expect(ncclCommResume(comm), ncclInvalidUsage, "ncclCommResume", "not suspended");
  expect(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclSuccess, "ncclCommSuspend", "NCCL_SUSPEND_MEM");
  expect(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &state), ncclSuccess, "ncclCommMemStats", "suspended");
  check(state == 1, "ncclCommMemStats: suspended is " + std::to_string(state) + " after ncclCommSuspend");
  expect(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage, "ncclCommSuspend", "suspended twice");
  void* one = &x;
  if (device >= 0) check(ncclMemAlloc(&one, 256) == ncclSuccess, "ncclMemAlloc");
  expect(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidUsage, "ncclAllReduce",
         "suspended");
  expect(ncclCommResume(comm), ncclSuccess, "ncclCommResume", "suspended");
  expect(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &state), ncclSuccess, "ncclCommMemStats", "resumed");
  check(state == 0, "ncclCommMemStats: suspended is " + std::to_string(state) + " after ncclCommResume");
  expect(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess, "ncclAllReduce", "resumed");
  if (device >= 0) check(ncclMemFree(one) == ncclSuccess, "ncclMemFree");
  // Inside a group, both at its end, in the order called.
  check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  expect(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclSuccess, "ncclCommSuspend", "in a group");
  expect(ncclCommResume(comm), ncclSuccess, "ncclCommResume", "in a group");
  expect(ncclGroupEnd(), ncclSuccess, "ncclGroupEnd", "suspend and resume");
  expect(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &state), ncclSuccess, "ncclCommMemStats", "after the group");
  check(state == 0, "ncclCommMemStats: suspended is " + std::to_string(state) + " after a group's suspend and resume");
  expect(ncclCommSuspend(nullptr, 0), ncclInvalidArgument, "ncclCommSuspend", "comm NULL");

  // Memory statistics, as NCCL's memory manager answers them: the device memory the communicator
  // holds (none on the host datapath, some on a GPU); with one rank its window is not shared by
  // descriptors, so none of it can be suspended.
  std::uint64_t total = 7, persist = 7, suspend = 7, suspended = 7, value = 7;
  expect(ncclCommMemStats(comm, ncclStatGpuMemTotal, &total), ncclSuccess, "ncclCommMemStats", "total");
  expect(ncclCommMemStats(comm, ncclStatGpuMemPersist, &persist), ncclSuccess, "ncclCommMemStats", "persist");
  expect(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &suspend), ncclSuccess, "ncclCommMemStats", "suspend");
  expect(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &suspended), ncclSuccess, "ncclCommMemStats", "suspended");
  check(total == persist + suspend, "ncclCommMemStats: total " + std::to_string(total) + " is not persist " +
                                        std::to_string(persist) + " + suspend " + std::to_string(suspend));
  check(suspend == 0 && suspended == 0, "ncclCommMemStats: suspendable " + std::to_string(suspend) + ", suspended " +
                                            std::to_string(suspended) + " (wanted 0 and 0)");
  check(device < 0 ? total == 0 : total > 0,
        "ncclCommMemStats: total " + std::to_string(total) + " on device " + std::to_string(device));
  expect(ncclCommMemStats(comm, ncclStatGpuMemTotal, nullptr), ncclInvalidArgument, "ncclCommMemStats", "value NULL");
  expect(ncclCommMemStats(comm, static_cast<ncclCommMemStat_t>(999), &value), ncclInvalidArgument, "ncclCommMemStats",
         "unknown stat");
  expect(ncclCommMemStats(nullptr, ncclStatGpuMemTotal, &value), ncclInvalidArgument, "ncclCommMemStats", "comm NULL");

  // Growing: NCCL's argument checks, then one rank more, joining from another thread, as NCCL's
  // header has it: the existing rank that made the id passes it, the new rank its rank.
  ncclUniqueId id;
  expect(ncclCommGetUniqueId(comm, nullptr), ncclInvalidArgument, "ncclCommGetUniqueId", "uniqueId NULL");
  expect(ncclCommGetUniqueId(comm, &id), ncclSuccess, "ncclCommGetUniqueId", "an id to grow with");
  ncclComm_t grown = reinterpret_cast<ncclComm_t>(1);
  expect(ncclCommGrow(comm, 2, nullptr, -1, nullptr, nullptr), ncclInvalidArgument, "ncclCommGrow", "newcomm NULL");
  expect(ncclCommGrow(comm, 0, nullptr, -1, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "nRanks 0");
  check(grown == nullptr, "ncclCommGrow: *newcomm is not NULL after a failure");
  expect(ncclCommGrow(comm, 1, nullptr, -1, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "no more ranks");
  expect(ncclCommGrow(comm, 2, nullptr, 0, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "existing rank not -1");
  expect(ncclCommGrow(nullptr, 2, nullptr, 1, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "new rank without id");
  expect(ncclCommGrow(nullptr, 2, &id, 2, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "new rank out of range");
  {
    ncclComm_t joined = nullptr;
    ncclResult_t joined_rc = ncclInternalError;
    std::thread joiner([&] { joined_rc = ncclCommGrow(nullptr, 2, &id, 1, &joined, nullptr); });
    expect(ncclCommGrow(comm, 2, &id, -1, &grown, nullptr), ncclSuccess, "ncclCommGrow", "1 rank to 2");
    joiner.join();
    check(joined_rc == ncclSuccess, std::string("ncclCommGrow of the new rank: ") + ncclGetErrorString(joined_rc));
    int ranks[2] = {-1, -1}, counts[2] = {-1, -1};
    if (grown && joined_rc == ncclSuccess) {
      ncclCommUserRank(grown, &ranks[0]);
      ncclCommCount(grown, &counts[0]);
      ncclCommUserRank(joined, &ranks[1]);
      ncclCommCount(joined, &counts[1]);
    }
    check(ranks[0] == 0 && ranks[1] == 1 && counts[0] == 2 && counts[1] == 2,
          "ncclCommGrow: the grown communicators are ranks " + std::to_string(ranks[0]) + ", " +
              std::to_string(ranks[1]) + " of " + std::to_string(counts[0]) + ", " + std::to_string(counts[1]));
    std::thread leaver([&] {
      if (joined) ncclCommDestroy(joined);
    });
    check(grown == nullptr || ncclCommDestroy(grown) == ncclSuccess, "ncclCommDestroy of the grown communicator");
    leaver.join();
  }

  // One-sided operations: the peer checked, then refused with NCCL's code for a communicator
  // without host RMA.
  expect(ncclPutSignal(&x, 1, ncclFloat32, 1, nullptr, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument,
         "ncclPutSignal", "peer out of range");
  expect(ncclPutSignal(&x, 1, ncclFloat32, 0, nullptr, 0, 0, 0, 0, comm, nullptr), ncclInvalidArgument,
         "ncclPutSignal", "no RMA");
  expect(ncclSignal(-1, 0, 0, 0, comm, nullptr), ncclInvalidArgument, "ncclSignal", "peer out of range");
  expect(ncclSignal(0, 0, 0, 0, comm, nullptr), ncclInvalidArgument, "ncclSignal", "no RMA");
  ncclWaitSignalDesc_t desc{1, 0, 0, 0};
  expect(ncclWaitSignal(1, &desc, comm, nullptr), ncclInvalidArgument, "ncclWaitSignal", "no RMA");
  expect(ncclWaitSignal(1, &desc, nullptr, nullptr), ncclInvalidArgument, "ncclWaitSignal", "comm NULL");

  // Properties: the caller's version decides which fields are written.
  ncclCommProperties_t props{};
  expect(ncclCommQueryProperties(comm, &props), ncclInvalidUsage, "ncclCommQueryProperties", "not initialised");
  expect(ncclCommQueryProperties(comm, nullptr), ncclInvalidArgument, "ncclCommQueryProperties", "props NULL");
  props = ncclCommProperties_t{};
  props.size = sizeof(ncclCommProperties_t);
  props.magic = 0xcafebeef;
  props.version = NCCL_VERSION(2, 30, 7);
  props.nLsaTeams = -5;
  expect(ncclCommQueryProperties(comm, &props), ncclSuccess, "ncclCommQueryProperties", "2.30.7");
  check(props.rank == 0 && props.nRanks == 1 && props.cudaDev == device && props.nLsaTeams == 1 &&
            !props.deviceApiSupport && !props.multimemSupport && !props.hostRmaSupport &&
            props.ginType == NCCL_GIN_TYPE_NONE && props.railedGinType == NCCL_GIN_TYPE_NONE,
        "ncclCommQueryProperties: rank " + std::to_string(props.rank) + ", nRanks " + std::to_string(props.nRanks) +
            ", cudaDev " + std::to_string(props.cudaDev) + ", nLsaTeams " + std::to_string(props.nLsaTeams));
  check(device < 0 || props.nvmlDev >= 0, "ncclCommQueryProperties: nvmlDev " + std::to_string(props.nvmlDev));
  props = ncclCommProperties_t{};
  props.size = sizeof(ncclCommProperties_t);
  props.magic = 0xcafebeef;
  props.version = NCCL_VERSION(2, 29, 3);
  props.nLsaTeams = -5;
  expect(ncclCommQueryProperties(comm, &props), ncclSuccess, "ncclCommQueryProperties", "2.29.3");
  check(props.nRanks == 1 && props.nLsaTeams == -5, "ncclCommQueryProperties: a 2.29.3 caller's nLsaTeams was written");

  // Device pointers of windows: the device API is not offered; the output is NULLed.
  void* ptr = &x;
  expect(ncclGetPeerDevicePointer(nullptr, 0, 0, &ptr), ncclInvalidUsage, "ncclGetPeerDevicePointer", "device API");
  check(ptr == nullptr, "ncclGetPeerDevicePointer: the output is not NULL");
  expect(ncclGetLsaDevicePointer(nullptr, 0, 0, &ptr), ncclInvalidUsage, "ncclGetLsaDevicePointer", "device API");
  expect(ncclGetLsaMultimemDevicePointer(nullptr, 0, &ptr), ncclInvalidUsage, "ncclGetLsaMultimemDevicePointer",
         "device API");

  // Logging follows the variables as they are when ncclResetDebugInit is called.
  ::setenv("NCCL_DEBUG", "WARN", 1);
  ::setenv("NCCL_DEBUG_FILE", log_file.c_str(), 1);
  reset_debug();
  ncclCommResume(comm);  // a WARN line: not suspended
  std::ifstream f(log_file);
  std::stringstream text;
  text << f.rdbuf();
  check(text.str().find("NCCL WARN ncclCommResume") != std::string::npos,
        "ncclResetDebugInit: the WARN line did not reach NCCL_DEBUG_FILE (" + log_file + "): \"" + text.str() + "\"");
}

// NCCL's INFO lines of a communicator's life, which its users look for in logs: init, split,
// destroy and abort, each with the comm's address, rank, size and device; and the line of each call
// (COLL), with the comm's count of calls (opCount). The calls have count 0: no buffer is touched.
void lifecycle_lines(const std::string& log_file) {
  ::setenv("NCCL_DEBUG", "INFO", 1);
  ::setenv("NCCL_DEBUG_SUBSYS", "INIT,DESTROY,COLL", 1);
  ::setenv("NCCL_DEBUG_FILE", log_file.c_str(), 1);
  reset_debug();
  ncclUniqueId id;
  ncclComm_t comm = nullptr, child = nullptr, none = nullptr;
  int device = -2;
  const bool made = ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess &&
                    ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr) == ncclSuccess && none == nullptr &&
                    ncclCommSplit(comm, 3, 5, &child, nullptr) == ncclSuccess &&
                    ncclCommCuDevice(comm, &device) == ncclSuccess;
  check(made, std::string("lifecycle lines: a communicator and its split: ") + ncclGetLastError(nullptr));
  if (!made) return;
  static char buffer[8];
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(buffer + 1);  // only printed: the calls have count 0
  check(ncclAllReduce(buffer, buffer + 4, 0, ncclFloat32, ncclMax, comm, nullptr) == ncclSuccess &&
            ncclBcast(nullptr, 0, ncclInt8, 0, comm, stream) == ncclSuccess &&
            ncclSend(buffer, 0, ncclUint64, 0, comm, nullptr) == ncclSuccess,
        std::string("lifecycle lines: calls of count 0: ") + ncclGetLastError(nullptr));
  check(ncclAllReduce(nullptr, nullptr, 0, static_cast<ncclDataType_t>(99), ncclSum, comm, nullptr) ==
            ncclInvalidArgument,
        "lifecycle lines: a call with a bad data type is refused");
  check(ncclCommDestroy(child) == ncclSuccess && ncclCommAbort(comm) == ncclSuccess, "lifecycle lines: destroy, abort");
  for (const char* var : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}) ::unsetenv(var);
  reset_debug();
  std::ifstream f(log_file);
  std::stringstream text;
  text << f.rdbuf();
  auto pointer = [](const void* p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return std::string(b);
  };
  const std::string c = pointer(comm), k = pointer(child), dev = std::to_string(device);
  const std::string b = pointer(buffer), b4 = pointer(buffer + 4), st = pointer(buffer + 1);
  const std::string wants[] = {
      "NCCL INFO AllReduce: opCount 0 sendbuff " + b + " recvbuff " + b4 + " count 0 datatype 7 op 2 root 0 comm " + c +
          " [nranks=1] stream (nil)\n",
      "NCCL INFO Broadcast: opCount 1 sendbuff (nil) recvbuff (nil) count 0 datatype 0 op 0 root 0 comm " + c +
          " [nranks=1] stream " + st + "\n",
      "NCCL INFO Send: opCount 2 sendbuff (nil) recvbuff " + b + " count 0 datatype 5 op 0 root 0 comm " + c +
          " [nranks=1] stream (nil)\n",
      "NCCL INFO [Rank 0] ncclCommInitRank comm " + c + " rank 0 nranks 1 cudaDev " + dev + " nvmlDev ",
      "NCCL INFO ncclCommInitRank comm " + c + " rank 0 nranks 1 cudaDev " + dev + " nvmlDev ",
      "NCCL INFO Rank 0 has color with NCCL_SPLIT_NOCOLOR, not creating a new communicator\n",
      "NCCL INFO ncclCommSplit comm " + k + " rank 0 nranks 1 cudaDev " + dev + " nvmlDev ",
      " parent " + c + " childCount 2 color 3 key 5- Init START\n",
      " parent " + c + " childCount 2 color 3 key 5 - Init COMPLETE\n",
      "NCCL INFO comm " + k + " rank 0 nranks 1 cudaDev " + dev + " busId ",
      " - Destroy COMPLETE\n",
      "NCCL INFO comm " + c + " rank 0 nRanks 1 cudaDev " + dev + " busId ",
      " - Abort START\n",
      " - Abort COMPLETE\n"};
  for (const std::string& want : wants)
    check(text.str().find(want) != std::string::npos, "lifecycle lines: no \"" + want + "\" in \"" + text.str() + "\"");
  check(text.str().find("opCount 3") == std::string::npos, "lifecycle lines: a refused call was counted or logged");
  const std::size_t start = text.str().find(" - Init START"), complete = text.str().find(" - Init COMPLETE");
  check(start != std::string::npos && complete != std::string::npos && start < complete &&
            text.str().find("commId 0x") < start,
        "lifecycle lines: Init START, then COMPLETE, with a commId");
}

// The state of a non-blocking communicator once its work has settled (ncclInProgress no more).
ncclResult_t settled(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 20000 && state == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) ::usleep(500);
  }
  return state;
}

// Suspend and resume on a non-blocking communicator (as PyTorch makes them): each answers
// ncclSuccess or ncclInProgress and settles in the background.
void non_blocking_suspend() {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (ncclGetUniqueId(&id) != ncclSuccess) return check(false, "ncclGetUniqueId");
  const ncclResult_t init = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  check(init == ncclSuccess || init == ncclInProgress, "non-blocking ncclCommInitRankConfig");
  check(settled(comm) == ncclSuccess, "the non-blocking communicator's init");
  std::uint64_t state = 7;
  const ncclResult_t suspend = ncclCommSuspend(comm, NCCL_SUSPEND_MEM);
  check(suspend == ncclSuccess || suspend == ncclInProgress,
        "non-blocking ncclCommSuspend returned " + std::to_string(suspend));
  check(settled(comm) == ncclSuccess, "the non-blocking ncclCommSuspend did not settle with ncclSuccess");
  check(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &state) == ncclSuccess && state == 1,
        "a non-blocking communicator is not suspended: " + std::to_string(state));
  const ncclResult_t resume = ncclCommResume(comm);
  check(resume == ncclSuccess || resume == ncclInProgress,
        "non-blocking ncclCommResume returned " + std::to_string(resume));
  check(settled(comm) == ncclSuccess, "the non-blocking ncclCommResume did not settle with ncclSuccess");
  check(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &state) == ncclSuccess && state == 0,
        "a non-blocking communicator is still suspended: " + std::to_string(state));
  check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy of the non-blocking communicator");
}

std::string str(const char* s) { return s ? s : "(null)"; }

// The parameter API answers as NCCL 2.30.7's (each answer below was read from NCCL 2.30.7 itself):
// NCCL's nine parameters with NCCL's types, read anew at each call unless cached, this library's
// PURLIN_ variables as private strings, and NULL arguments refused without a WARN.
void parameters(bool dump_all) {
  ncclParamHandle_t h = nullptr;
  const char* s = nullptr;
  int n = -1, len = -1;
  char raw[16];

  // NCCL_DEBUG has NCCL's enum type: no typed getter and no string, its bytes are the level's int.
  expect(ncclParamBind(&h, "NCCL_DEBUG"), ncclSuccess, "ncclParamBind", "NCCL_DEBUG");
  check(ncclParamGetStr(h, &s) == ncclInvalidArgument, "ncclParamGetStr of NCCL_DEBUG, a level, is a type mismatch");
  std::int32_t i32 = 0;
  check(ncclParamGetI32(h, &i32) == ncclInvalidArgument, "ncclParamGetI32 of NCCL_DEBUG is a type mismatch");
  check(ncclParamGet(h, raw, 2, &len) == ncclInvalidArgument && len == 0, "ncclParamGet of NCCL_DEBUG into 2 bytes");
  int level = -1;
  check(ncclParamGet(h, &level, sizeof level, &len) == ncclSuccess && len == 4 && level == 3,
        "NCCL_DEBUG=INFO read by ncclParamGet as " + std::to_string(level) + " in " + std::to_string(len) + " bytes");
  check(ncclParamGetParameter("NCCL_DEBUG", &s, &n) == ncclSuccess && str(s) == "INFO" && n == 4,
        "ncclParamGetParameter(NCCL_DEBUG) is \"" + str(s) + "\"");

  // NCCL_DEBUG_SUBSYS is a uint64_t, read anew at every call; an unknown name keeps the default.
  expect(ncclParamBind(&h, "NCCL_DEBUG_SUBSYS"), ncclSuccess, "ncclParamBind", "NCCL_DEBUG_SUBSYS");
  std::uint64_t mask = 0;
  check(ncclParamGetU64(h, &mask) == ncclSuccess && mask == 0x80, "NCCL_DEBUG_SUBSYS=ENV read as " + std::to_string(mask));
  check(ncclParamGetU32(h, reinterpret_cast<std::uint32_t*>(raw)) == ncclInvalidArgument,
        "ncclParamGetU32 of NCCL_DEBUG_SUBSYS is a type mismatch");
  ::setenv("NCCL_DEBUG_SUBSYS", "^coll", 1);
  check(ncclParamGetU64(h, &mask) == ncclSuccess && mask == ~std::uint64_t{2}, "NCCL_DEBUG_SUBSYS=^coll read anew");
  ncclParamGetParameter("NCCL_DEBUG_SUBSYS", &s, &n);
  check(str(s) == "INIT,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,ALLOC_HOST,CALL,PROXY,NVLS,BOOTSTRAP,REG,PROFILE,RAS,DESTROY",
        "NCCL_DEBUG_SUBSYS=^coll written as \"" + str(s) + "\"");
  ::setenv("NCCL_DEBUG_SUBSYS", "INIT,NOSUCH", 1);
  check(ncclParamGetU64(h, &mask) == ncclSuccess && mask == 0x1081, "NCCL_DEBUG_SUBSYS with an unknown name: default");
  ::setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);

  // Strings: NCCL_DEBUG_TIMESTAMP_FORMAT as the configuration file set it, NCCL_DEBUG_FILE unset.
  expect(ncclParamBind(&h, "NCCL_DEBUG_TIMESTAMP_FORMAT"), ncclSuccess, "ncclParamBind", "NCCL_DEBUG_TIMESTAMP_FORMAT");
  check(ncclParamGetStr(h, &s) == ncclSuccess && str(s) == "[conf] ",
        "NCCL_DEBUG_TIMESTAMP_FORMAT from NCCL_CONF_FILE is \"" + str(s) + "\"");
  expect(ncclParamBind(&h, "NCCL_DEBUG_FILE"), ncclSuccess, "ncclParamBind", "NCCL_DEBUG_FILE");
  check(ncclParamGetStr(h, &s) == ncclSuccess && str(s).empty(), "NCCL_DEBUG_FILE unset is \"" + str(s) + "\"");
  check(ncclParamGet(h, raw, sizeof raw, &len) == ncclSuccess && len == 1 && raw[0] == '\0',
        "ncclParamGet of an unset string: its NUL alone");
  ncclParamBind(&h, "NCCL_DEBUG_TIMESTAMP_LEVELS");
  std::uint32_t levels = 0;
  check(ncclParamGetU32(h, &levels) == ncclSuccess && levels == 4, "NCCL_DEBUG_TIMESTAMP_LEVELS defaults to WARN (4)");

  // A cached parameter keeps its first reading.
  ::setenv("NCCL_SET_THREAD_NAME", "t", 1);
  check(ncclParamGetParameter("NCCL_SET_THREAD_NAME", &s, &n) == ncclSuccess && str(s) == "TRUE",
        "NCCL_SET_THREAD_NAME=t is \"" + str(s) + "\"");
  ::setenv("NCCL_SET_THREAD_NAME", "0", 1);
  ncclParamGetParameter("NCCL_SET_THREAD_NAME", &s, &n);
  check(str(s) == "TRUE", "NCCL_SET_THREAD_NAME is cached, yet read anew as \"" + str(s) + "\"");

  // Keys NCCL 2.30.7's registry lacks, and NULL arguments: ncclInvalidArgument, no WARN.
  const std::string last = ncclGetLastError(nullptr);
  check(ncclParamBind(&h, "NCCL_NVLS_ENABLE") == ncclInvalidArgument, "ncclParamBind(NCCL_NVLS_ENABLE): not in NCCL's registry");
  check(ncclParamBind(&h, "NCCL_NOT_A_PARAMETER") == ncclInvalidArgument, "ncclParamBind of an unknown key");
  check(ncclParamBind(nullptr, "NCCL_DEBUG") == ncclInvalidArgument, "ncclParamBind with out NULL");
  check(ncclParamGetStr(nullptr, &s) == ncclInvalidArgument, "ncclParamGetStr with handle NULL");
  check(ncclParamGet(h, raw, 0, &len) == ncclInvalidArgument, "ncclParamGet with maxLen 0");
  s = "x";
  check(ncclParamGetParameter("NCCL_NOT_A_PARAMETER", &s, &n) == ncclInvalidArgument && s == nullptr && n == 0,
        "ncclParamGetParameter of an unknown key");
  check(ncclGetLastError(nullptr) == last, "the parameter API's refusals changed the last error");

  // This library's variables: the environment's value over the configuration file's.
  check(ncclParamGetParameter("PURLIN_TIMEOUT", &s, &n) == ncclSuccess && str(s) == "45" && n == 2,
        "ncclParamGetParameter(PURLIN_TIMEOUT) is \"" + str(s) + "\", not the environment's 45");
  check(ncclParamGetParameter("PURLIN_BOOTSTRAP_TIMEOUT", &s, &n) == ncclSuccess && str(s) == "33",
        "ncclParamGetParameter(PURLIN_BOOTSTRAP_TIMEOUT) is \"" + str(s) + "\", not NCCL_CONF_FILE's 33");

  // The published keys, NCCL's private ones and this library's under NCCL_PARAM_DUMP_ALL.
  const char** keys = nullptr;
  check(ncclParamGetAllParameterKeys(&keys, &n) == ncclSuccess && n > 0, "ncclParamGetAllParameterKeys");
  std::vector<std::string> listed(keys, keys + n);
  auto has = [&](const char* key) { return std::find(listed.begin(), listed.end(), key) != listed.end(); };
  for (const char* key : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT",
                          "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_SET_THREAD_NAME"})
    check(has(key), std::string("ncclParamGetAllParameterKeys does not list ") + key);
  for (const char* key : {"NCCL_PARAM_DUMP_ALL", "NCCL_NO_CACHE", "NCCL_WARN_ENABLE_DEBUG_INFO", "PURLIN_TIMEOUT"})
    check(has(key) == dump_all, std::string("ncclParamGetAllParameterKeys ") + (has(key) ? "lists " : "does not list ") +
                                    key + " with NCCL_PARAM_DUMP_ALL " + (dump_all ? "true" : "unset"));
  check(!has("NCCL_NVLS_ENABLE"), "ncclParamGetAllParameterKeys lists NCCL_NVLS_ENABLE");
  check(dump_all ? n > 9 : n == 6, "ncclParamGetAllParameterKeys lists " + std::to_string(n) + " keys");
}

[[noreturn]] void child(bool dump_all) {
  // NCCL's configuration file: read before the first variable; the environment's PURLIN_TIMEOUT wins.
  char conf[] = "/tmp/purlin-next-conf-XXXXXX";
  const int conf_fd = ::mkstemp(conf);
  const std::string conf_text = "PURLIN_TIMEOUT=99\nPURLIN_BOOTSTRAP_TIMEOUT=33\nNCCL_DEBUG_TIMESTAMP_FORMAT=[conf] \n";
  check(conf_fd >= 0 && ::write(conf_fd, conf_text.data(), conf_text.size()) == static_cast<ssize_t>(conf_text.size()),
        "writing a configuration file");
  if (conf_fd >= 0) ::close(conf_fd);
  ::setenv("NCCL_CONF_FILE", conf, 1);
  for (const char* name : {"PURLIN_BOOTSTRAP_TIMEOUT", "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS",
                           "NCCL_DEBUG_FILE", "NCCL_SET_THREAD_NAME", "NCCL_NO_CACHE"})
    ::unsetenv(name);
  ::setenv("NCCL_DEBUG", "INFO", 1);
  ::setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);
  ::setenv("PURLIN_TIMEOUT", "45", 1);
  if (dump_all) {
    ::setenv("NCCL_PARAM_DUMP_ALL", "true", 1);
    ::setenv("NCCL_DISABLE_MEM_MANAGER", "1", 1);
  }
  exported();
  error_strings();
  parameters(dump_all);
  ::unlink(conf);
  // NCCL's version line at the first communicator: alone on its line at NCCL_DEBUG=WARN, on rank 0.
  char version_log[] = "/tmp/purlin-next-version-XXXXXX";
  if (dump_all) {
    const int fd = ::mkstemp(version_log);
    if (fd >= 0) ::close(fd);
    ::setenv("NCCL_DEBUG", "WARN", 1);
    ::setenv("NCCL_DEBUG_FILE", version_log, 1);
    reset_debug();
  }
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  // As NCCL's, the line comes before the arguments are checked: a refused first init prints it.
  check(ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(nullptr, 1, id, 0) == ncclInvalidArgument,
        "ncclCommInitRank with a NULL comm");
  if (ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    std::printf("FAIL a one-rank communicator: %s\n", ncclGetLastError(nullptr));
    std::_Exit(1);
  }
  if (dump_all) {
    std::ifstream f(version_log);
    std::stringstream text;
    text << f.rdbuf();
    const std::string want = "NCCL version " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
                             std::to_string(NCCL_PATCH);
    check(text.str().rfind(want, 0) == 0 && text.str().find("(Purlin ") != std::string::npos,
          "NCCL_DEBUG=WARN: the log is \"" + text.str() + "\", not a line \"" + want + "...\"");
    ::unlink(version_log);
    ::unsetenv("NCCL_DEBUG_FILE");
    ::setenv("NCCL_DEBUG", "INFO", 1);
    reset_debug();
  }
  if (!dump_all) {
    char file[] = "/tmp/purlin-next-log-XXXXXX";
    const int fd = ::mkstemp(file);
    if (fd >= 0) ::close(fd);
    communicator_calls(comm, file);
    lifecycle_lines(file);
    ::unlink(file);
    non_blocking_suspend();
  } else {
    std::uint64_t value = 7;
    expect(ncclCommMemStats(comm, ncclStatGpuMemTotal, &value), ncclInvalidUsage, "ncclCommMemStats",
           "NCCL_DISABLE_MEM_MANAGER=1");
    expect(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage, "ncclCommSuspend", "NCCL_DISABLE_MEM_MANAGER=1");
    expect(ncclCommResume(comm), ncclInvalidUsage, "ncclCommResume", "NCCL_DISABLE_MEM_MANAGER=1");
  }
  check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  std::printf("%s: %d passed, %d failed\n", dump_all ? "NCCL_PARAM_DUMP_ALL=true NCCL_DISABLE_MEM_MANAGER=1" : "default",
              tally::passed, tally::failed);
  std::fflush(stdout);
  std::_Exit(tally::failed == 0 && tally::passed > 0 ? 0 : 1);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  int failed = 0;
  for (bool dump_all : {false, true}) {
    // A call that never returns (a lock taken twice) fails the child instead of hanging the test.
    ranks::Wait w;
    w.deadline = ranks::Clock::now() + ranks::seconds(60);
    const bool ok = ranks::run(1, [&](int) -> int { child(dump_all); }, w)[0].ok();
    if (!ok) std::printf("FAIL the %s child did not pass within 60 s\n", dump_all ? "NCCL_PARAM_DUMP_ALL" : "default");
    failed += !ok;
  }
  std::printf("%d passed, %d failed\n", 2 - failed, failed);
  return failed == 0 ? 0 : 1;
}
