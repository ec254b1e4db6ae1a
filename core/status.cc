#include "core/status.h"

#include "core/log.h"

namespace purlin {
namespace {
thread_local std::string tls_last_error;
}  // namespace

Status fail(Status code, const std::string& message) {
  tls_last_error = message;
  log::warn("{}", message);
  return code;
}

Status adopt_error(Status code, const std::string& message) {
  tls_last_error = message;
  return code;
}

const std::string& last_error() { return tls_last_error; }
void clear_last_error() { tls_last_error.clear(); }

}  // namespace purlin
