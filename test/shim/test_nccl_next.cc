// NCCL 2.29 and 2.30's additions to the API (nccl_shim/nccl_next.h): every name NCCL 2.30.7 exports
// is exported, and each answers as NCCL does, or refuses with NCCL's code, a WARN line and a last
// error that says so. The library reads its environment once per process, so each setting runs in a
// child of its own, on a one-rank communicator (the host datapath without a GPU).
//
//   test_nccl_next
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_shim/nccl_next.h"
#include "test/common/loopback.h"
#include "test/common/ranks.h"

namespace {

int g_failed = 0, g_passed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::printf("FAIL %s\n", what.c_str());
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

  // Growing: NCCL's argument checks, then refused.
  ncclUniqueId id;
  expect(ncclCommGetUniqueId(comm, nullptr), ncclInvalidArgument, "ncclCommGetUniqueId", "uniqueId NULL");
  expect(ncclCommGetUniqueId(comm, &id), ncclInvalidUsage, "ncclCommGetUniqueId", "growing");
  ncclComm_t grown = reinterpret_cast<ncclComm_t>(1);
  expect(ncclCommGrow(comm, 2, nullptr, -1, nullptr, nullptr), ncclInvalidArgument, "ncclCommGrow", "newcomm NULL");
  expect(ncclCommGrow(comm, 0, nullptr, -1, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "nRanks 0");
  check(grown == nullptr, "ncclCommGrow: *newcomm is not NULL after a failure");
  expect(ncclCommGrow(comm, 1, nullptr, -1, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "no more ranks");
  expect(ncclCommGrow(comm, 2, nullptr, 0, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "existing rank not -1");
  expect(ncclCommGrow(nullptr, 2, nullptr, 1, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "new rank without id");
  expect(ncclCommGrow(nullptr, 2, &id, 2, &grown, nullptr), ncclInvalidArgument, "ncclCommGrow", "new rank out of range");
  expect(ncclCommGrow(comm, 2, nullptr, -1, &grown, nullptr), ncclInvalidUsage, "ncclCommGrow", "growing");

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
  props = ncclCommProperties_t{sizeof(ncclCommProperties_t), 0xcafebeef, NCCL_VERSION(2, 30, 7)};
  props.nLsaTeams = -5;
  expect(ncclCommQueryProperties(comm, &props), ncclSuccess, "ncclCommQueryProperties", "2.30.7");
  check(props.rank == 0 && props.nRanks == 1 && props.cudaDev == device && props.nLsaTeams == 1 &&
            !props.deviceApiSupport && !props.multimemSupport && !props.hostRmaSupport &&
            props.ginType == NCCL_GIN_TYPE_NONE && props.railedGinType == NCCL_GIN_TYPE_NONE,
        "ncclCommQueryProperties: rank " + std::to_string(props.rank) + ", nRanks " + std::to_string(props.nRanks) +
            ", cudaDev " + std::to_string(props.cudaDev) + ", nLsaTeams " + std::to_string(props.nLsaTeams));
  check(device < 0 || props.nvmlDev >= 0, "ncclCommQueryProperties: nvmlDev " + std::to_string(props.nvmlDev));
  props = ncclCommProperties_t{sizeof(ncclCommProperties_t), 0xcafebeef, NCCL_VERSION(2, 29, 3)};
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
  ncclResetDebugInit();
  ncclCommResume(comm);  // a WARN line: not suspended
  std::ifstream f(log_file);
  std::stringstream text;
  text << f.rdbuf();
  check(text.str().find("NCCL WARN ncclCommResume") != std::string::npos,
        "ncclResetDebugInit: the WARN line did not reach NCCL_DEBUG_FILE (" + log_file + "): \"" + text.str() + "\"");
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

void parameters(bool dump_all) {
  ncclParamHandle_t h = nullptr;
  expect(ncclParamBind(&h, "NCCL_DEBUG"), ncclSuccess, "ncclParamBind", "NCCL_DEBUG");
  const char* s = nullptr;
  expect(ncclParamGetStr(h, &s), ncclSuccess, "ncclParamGetStr", "NCCL_DEBUG");
  check(s && std::string(s) == "INFO", std::string("ncclParamGetStr: NCCL_DEBUG is \"") + (s ? s : "(null)") + "\"");
  std::int32_t i32 = 0;
  check(ncclParamGetI32(h, &i32) == ncclInvalidArgument, "ncclParamGetI32 of a string parameter");
  char raw[8];
  int len = -1;
  check(ncclParamGet(h, raw, 4, &len) == ncclInvalidArgument && len == 0, "ncclParamGet into 4 bytes");
  check(ncclParamGet(h, raw, sizeof(raw), &len) == ncclSuccess && len == 5 && std::memcmp(raw, "INFO", 5) == 0,
        "ncclParamGet into 8 bytes: length " + std::to_string(len));
  check(ncclParamBind(&h, "NCCL_NOT_A_PARAMETER") == ncclInvalidArgument, "ncclParamBind of an unknown key");
  check(ncclParamBind(nullptr, "NCCL_DEBUG") == ncclInvalidArgument, "ncclParamBind with out NULL");
  int n = -1;
  s = "x";
  check(ncclParamGetParameter("NCCL_NOT_A_PARAMETER", &s, &n) == ncclInvalidArgument && s == nullptr && n == 0,
        "ncclParamGetParameter of an unknown key");
  check(ncclParamGetParameter("PURLIN_TIMEOUT", &s, &n) == ncclSuccess && s && std::string(s) == "45" && n == 2,
        "ncclParamGetParameter(PURLIN_TIMEOUT)");
  const char** keys = nullptr;
  check(ncclParamGetAllParameterKeys(&keys, &n) == ncclSuccess && n > 0, "ncclParamGetAllParameterKeys");
  bool debug = false, timeout = false;
  for (int k = 0; k < n; ++k) {
    debug = debug || std::string(keys[k]) == "NCCL_DEBUG";
    timeout = timeout || std::string(keys[k]) == "PURLIN_TIMEOUT";
  }
  check(debug, "ncclParamGetAllParameterKeys does not list NCCL_DEBUG");
  check(timeout == dump_all, std::string("ncclParamGetAllParameterKeys ") + (timeout ? "lists" : "does not list") +
                                 " PURLIN_TIMEOUT with NCCL_PARAM_DUMP_ALL " + (dump_all ? "true" : "unset"));
}

[[noreturn]] void child(bool dump_all) {
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
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    std::printf("FAIL a one-rank communicator: %s\n", ncclGetLastError(nullptr));
    std::_Exit(1);
  }
  if (!dump_all) {
    char file[] = "/tmp/purlin-next-log-XXXXXX";
    const int fd = ::mkstemp(file);
    if (fd >= 0) ::close(fd);
    communicator_calls(comm, file);
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
              g_passed, g_failed);
  std::fflush(stdout);
  std::_Exit(g_failed == 0 && g_passed > 0 ? 0 : 1);
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
