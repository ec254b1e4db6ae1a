// Turning NCCL result codes into exceptions with the library's own explanation.
#pragma once

#include <nccl.h>

#include <stdexcept>
#include <string>

namespace perf {

struct NcclError : std::runtime_error {
  NcclError(ncclResult_t r, const std::string& message) : std::runtime_error(message), result(r) {}
  ncclResult_t result;
};

inline void check_nccl(ncclResult_t result, const std::string& what, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return;
  std::string message = what + " failed: " + ncclGetErrorString(result);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += " (" + std::string(detail) + ")";
  throw NcclError(result, message);
}

}  // namespace perf
