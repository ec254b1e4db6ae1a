// Turning NCCL result codes into exceptions with the library's own explanation.
#pragma once

#include <nccl.h>

#include <stdexcept>
#include <string>

namespace perf {

struct NcclError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check_nccl(ncclResult_t result, const std::string& what, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return;
  std::string message = what + " failed: " + ncclGetErrorString(result);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += " (" + std::string(detail) + ")";
  throw NcclError(message);
}

}  // namespace perf
