// Accepting connections and their hellos, for the root service and for the mesh.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/bootstrap/wire.h"

namespace purlin::boot {

// ---- accepting hellos --------------------------------------------------------------------------

// Accepts connections on a listener and reads each one's hello, many at a time, so that no
// connection (silent, slow, truncated or hostile) holds up another. A hello with the right magic,
// secret, kind and a sane address length goes to `admit`, which takes the socket or rejects it
// with a reason; everything else is dropped and logged at INFO.
class HelloGate {
 public:
  using Admit = std::function<bool(const Hello&, const std::uint8_t* addr, Socket&, std::string* why)>;
  enum class End { done, aborted, timed_out, failed };

  HelloGate(const Socket& listener, std::uint64_t secret, std::uint32_t kind, std::string who)
      : listener_(listener), secret_(secret), kind_(kind), who_(std::move(who)) {}

  End run(Deadline deadline, AbortFlags abort, const Admit& admit, const std::function<bool()>& done);

 private:
  struct Pending {
    Socket sock;
    Address from;
    std::uint8_t buf[sizeof(Hello) + Address::kMaxBytes];
    std::size_t got = 0;
    Deadline until;
  };
  // Reads what is available; returns true when the connection is finished with (admitted or
  // dropped) and can leave the pending list.
  bool advance(Pending& p, const Admit& admit);
  void drop(Pending& p, const std::string& why);

  const Socket& listener_;
  std::uint64_t secret_;
  std::uint32_t kind_;
  std::string who_;
  std::vector<Pending> pending_;
};

}  // namespace purlin::boot
