// PURLIN_DATAPATH accepts only datapaths that exist: a name of none (a datapath not built yet, or a
// typo) makes ncclCommInitRank fail with ncclInvalidUsage and says why in ncclGetLastError, never
// runs another datapath in its place. The library reads its environment once per process, so each
// value is tried in a child of its own.
//
//   test_datapath_env
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "test/common/loopback.h"
#include "test/common/ranks.h"

namespace {

// In a child: one-rank communicator under PURLIN_DATAPATH=value. Exit status 0 when the result is
// `want` (and, on failure, the last error names the variable).
[[noreturn]] void child(const char* value, ncclResult_t want) {
  ::setenv("PURLIN_DATAPATH", value, 1);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::printf("FAIL PURLIN_DATAPATH=%s: ncclGetUniqueId failed\n", value);
    std::_Exit(1);
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t got = ncclCommInitRank(&comm, 1, id, 0);
  const std::string why = ncclGetLastError(nullptr);
  bool ok = got == want;
  if (got == ncclSuccess) ok = ncclCommDestroy(comm) == ncclSuccess && ok;
  else if (why.find("PURLIN_DATAPATH") == std::string::npos) ok = false;
  std::printf("%s PURLIN_DATAPATH=%s: ncclCommInitRank returned %d (wanted %d)%s%s\n", ok ? "ok" : "FAIL", value,
              static_cast<int>(got), static_cast<int>(want), why.empty() ? "" : "; last error: ", why.c_str());
  std::fflush(stdout);
  std::_Exit(ok ? 0 : 1);
}

bool run(const char* value, ncclResult_t want) {
  return ranks::run(1, [&](int) -> int { child(value, want); })[0].ok();
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  int failed = 0;
  failed += !run("ce", ncclInvalidUsage);
  failed += !run("nvls", ncclInvalidUsage);
  failed += !run("SM", ncclInvalidUsage);
  failed += !run("host", ncclSuccess);
  failed += !run("auto", ncclSuccess);
  std::printf("%d passed, %d failed\n", 5 - failed, failed);
  return failed == 0 ? 0 : 1;
}
