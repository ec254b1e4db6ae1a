#include "core/status.h"

#include <mutex>

#include "core/log.h"

namespace purlin {
namespace {

thread_local std::string tls_last_error;

// The last failure of any thread: what a thread that saw none gets (a watchdog thread asking why
// another thread's call failed, as PyTorch's does).
struct ProcessError {
  std::mutex mu;
  std::string message;
};

ProcessError& process_error() {
  static auto* e = new ProcessError();  // outlives static destructors
  return *e;
}

void record(const std::string& message) {
  tls_last_error = message;
  ProcessError& e = process_error();
  std::lock_guard<std::mutex> g(e.mu);
  e.message = message;
}

}  // namespace

Status fail(Status code, const std::string& message, std::source_location where) {
  record(message);
  if (log::enabled(log::Level::warn, log::kAll)) log::write(log::Level::warn, log::kAll, message, where);
  return code;
}

Status adopt_error(Status code, const std::string& message) {
  record(message);
  return code;
}

const std::string& last_error() { return tls_last_error; }

std::string last_error_of_process() {
  ProcessError& e = process_error();
  std::lock_guard<std::mutex> g(e.mu);
  return e.message;
}

void clear_last_error() { tls_last_error.clear(); }

}  // namespace purlin
