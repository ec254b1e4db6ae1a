// One status type for the whole library. Values equal NCCL's ncclResult_t so that the
// shim converts with a cast at the boundary and nowhere else.
#pragma once

#include <source_location>
#include <string>

#include "core/hd.h"

namespace purlin {

enum class Status : int {
  ok = 0,
  cuda_error = 1,        // a CUDA call failed
  system_error = 2,      // an OS call failed (socket, shm, thread)
  internal_error = 3,    // a bug or an impossible state
  invalid_argument = 4,  // caller's arguments; the communicator stays usable
  invalid_usage = 5,     // caller used the API out of order (destroyed comm, revoked comm)
  remote_error = 6,      // a peer failed, timed out or aborted
  in_progress = 7,       // non-blocking operation not finished yet
};

PURLIN_HD bool failed(Status s) { return s != Status::ok && s != Status::in_progress; }

// What every report of mismatched calls (Status::invalid_usage from a message's tag) begins with.
inline constexpr const char* kDifferentArguments =
    "the ranks called a collective with different arguments (count, data type, reduction op or root)";

// Records the message of the last failure of the calling thread (ncclGetLastError) and logs
// it at WARN, naming the caller's source line. Returns `code` so that call sites read
// `return fail(Status::x, "...")`.
Status fail(Status code, const std::string& message, std::source_location where = std::source_location::current());
// Records a failure that another thread already logged (with fail) as this thread's last error.
Status adopt_error(Status code, const std::string& message);
const std::string& last_error();
// The last failure recorded by any thread of the process.
std::string last_error_of_process();
void clear_last_error();

}  // namespace purlin

// Propagate a failed status with no extra ceremony.
#define PURLIN_TRY(expr)                                 \
  do {                                                   \
    ::purlin::Status purlin_try_status_ = (expr);        \
    if (::purlin::failed(purlin_try_status_)) return purlin_try_status_; \
  } while (0)
