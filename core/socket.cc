#include "core/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/log.h"

namespace purlin::net {

namespace {

std::string errno_text(int err) { return fmt::format("{} ({})", std::strerror(err), err); }

bool is_link_local_v6(const in6_addr& a) { return a.s6_addr[0] == 0xfe && (a.s6_addr[1] & 0xc0) == 0x80; }

void set_nodelay(int fd) {
  int one = 1;
  // Best effort: bootstrap messages are small and latency-bound, but correctness does not need it.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Waits until `fd` is ready for `events`, the deadline passes or an abort flag is raised.
// Returns ok when ready (or when poll reports an error condition: the next I/O call says which).
Status wait_ready(int fd, short events, Deadline deadline, AbortFlags abort, const char* what) {
  for (;;) {
    if (abort.raised()) return fail(Status::remote_error, fmt::format("{}: aborted", what));
    if (Clock::now() >= deadline) return fail(Status::remote_error, fmt::format("{}: timed out", what));
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, slice_ms(deadline));
    if (rc > 0) return Status::ok;
    if (rc < 0 && errno != EINTR) {
      return fail(Status::system_error, fmt::format("{}: poll failed: {}", what, errno_text(errno)));
    }
  }
}

bool retryable_connect_error(int err) {
  switch (err) {
    case ECONNREFUSED: case ETIMEDOUT: case ENETUNREACH: case EHOSTUNREACH: case ECONNRESET:
    case ECONNABORTED: case EAGAIN: case EADDRNOTAVAIL:
      return true;
    default:
      return false;
  }
}

}  // namespace

Deadline deadline_after(double seconds) {
  if (!(seconds > 0)) return Deadline::max();
  // Anything beyond a year is "never", which also keeps the addition from overflowing.
  if (seconds > 365.0 * 24 * 3600) return Deadline::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int slice_ms(Deadline deadline, int cap_ms) {
  if (deadline == Deadline::max()) return cap_ms;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  // Round up so a wait does not spin with 0 ms slices just before its deadline.
  return static_cast<int>(std::min<long long>(left + 1, cap_ms));
}

bool sleep_unless_aborted(int ms, AbortFlags abort) {
  auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < until) {
    if (abort.raised()) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<long long>(left, 1, kPollSliceMs)));
  }
  return !abort.raised();
}

// ---- Address -----------------------------------------------------------------------------------

std::uint16_t Address::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void Address::set_port(std::uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

bool Address::is_any() const {
  if (family() == AF_INET) return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
    return std::memcmp(&a, &in6addr_any, sizeof(a)) == 0;
  }
  return false;
}

bool Address::is_loopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
    return std::memcmp(&a, &in6addr_loopback, sizeof(a)) == 0;
  }
  return false;
}

std::string Address::str() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, port());
  }
  if (family() == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof(host));
    if (a6->sin6_scope_id != 0) return fmt::format("[{}%{}]:{}", host, a6->sin6_scope_id, port());
    return fmt::format("[{}]:{}", host, port());
  }
  return "<no address>";
}

bool Address::from_bytes(const void* bytes, std::size_t len, Address* out) {
  if (len < sizeof(sa_family_t) || len > kMaxBytes) return false;
  Address a;
  std::memcpy(&a.storage, bytes, len);
  a.len = static_cast<socklen_t>(len);
  bool v4 = a.storage.ss_family == AF_INET && len == sizeof(sockaddr_in);
  bool v6 = a.storage.ss_family == AF_INET6 && len == sizeof(sockaddr_in6);
  if ((!v4 && !v6) || a.is_any() || a.port() == 0) return false;
  *out = a;
  return true;
}

Status parse_address(const std::string& text, Address* out) {
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return fail(Status::invalid_argument, fmt::format("bad address '{}': expected [v6]:port", text));
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return fail(Status::invalid_argument, fmt::format("bad address '{}': expected host:port", text));
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(port) == 0 || std::stoul(port) > 65535) {
    return fail(Status::invalid_argument, fmt::format("bad address '{}': bad port '{}'", text, port));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return fail(Status::invalid_argument,
                fmt::format("cannot resolve '{}': {}", text, rc == EAI_SYSTEM ? errno_text(errno) : gai_strerror(rc)));
  }
  const addrinfo* pick = nullptr;
  for (const addrinfo* r = res; r; r = r->ai_next) {
    if (r->ai_family == AF_INET) { pick = r; break; }
    if (r->ai_family == AF_INET6 && !pick) pick = r;
  }
  Address a;
  bool ok = pick && pick->ai_addrlen <= sizeof(a.storage);
  if (ok) {
    std::memcpy(&a.storage, pick->ai_addr, pick->ai_addrlen);
    a.len = static_cast<socklen_t>(pick->ai_addrlen);
  }
  freeaddrinfo(res);
  if (!ok) return fail(Status::invalid_argument, fmt::format("'{}' has no IPv4 or IPv6 address", text));
  *out = a;
  return Status::ok;
}

// ---- interface choice --------------------------------------------------------------------------

bool interface_selected(const std::string& spec_in, const std::string& name) {
  std::string_view spec = spec_in;
  bool exclude = false;
  bool exact = false;
  if (!spec.empty() && spec.front() == '^') { exclude = true; spec.remove_prefix(1); }
  if (!spec.empty() && spec.front() == '=') { exact = true; spec.remove_prefix(1); }
  bool listed = false;
  while (!spec.empty() && !listed) {
    auto comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    listed = exact ? name == item : std::string_view(name).substr(0, item.size()) == item;
  }
  return exclude ? !listed : listed;
}

namespace {

struct Candidate {
  std::string ifname;
  Address address;
};

// Interfaces in the kernel's order, with one usable address each (IPv4 entries before IPv6 ones
// of the same interface, since getifaddrs lists them that way).
std::vector<Candidate> list_candidates(bool want_loopback) {
  std::vector<Candidate> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    if (static_cast<bool>(i->ifa_flags & IFF_LOOPBACK) != want_loopback) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    Candidate c;
    c.ifname = i->ifa_name;
    c.address.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&c.address.storage, i->ifa_addr, c.address.len);
    if (fam == AF_INET6 && is_link_local_v6(reinterpret_cast<sockaddr_in6*>(&c.address.storage)->sin6_addr)) continue;
    c.address.set_port(0);
    out.push_back(std::move(c));
  }
  freeifaddrs(list);
  return out;
}

Status choose_address(Address* out) {
  const std::string& spec = config().socket_ifname;
  if (!spec.empty()) {
    for (bool loop : {false, true}) {
      for (const Candidate& c : list_candidates(loop)) {
        if (!interface_selected(spec, c.ifname)) continue;
        log::info(log::kInit | log::kNet, "Bootstrap: using interface {} address {} (NCCL_SOCKET_IFNAME={})",
                  c.ifname, c.address.str(), spec);
        *out = c.address;
        return Status::ok;
      }
    }
    return fail(Status::invalid_argument,
                fmt::format("NCCL_SOCKET_IFNAME={} selects no up interface with an address", spec));
  }
  auto skipped = [](const std::string& n) { return n.rfind("docker", 0) == 0 || n.rfind("virbr", 0) == 0; };
  auto candidates = list_candidates(false);
  for (int fam : {AF_INET, AF_INET6}) {
    for (const Candidate& c : candidates) {
      if (c.address.family() != fam || skipped(c.ifname)) continue;
      log::info(log::kInit | log::kNet, "Bootstrap: using interface {} address {} (first up non-loopback {} interface)",
                c.ifname, c.address.str(), fam == AF_INET ? "IPv4" : "IPv6");
      *out = c.address;
      return Status::ok;
    }
  }
  Address lo;
  auto* a4 = reinterpret_cast<sockaddr_in*>(&lo.storage);
  a4->sin_family = AF_INET;
  a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  lo.len = sizeof(sockaddr_in);
  log::info(log::kInit | log::kNet,
            "Bootstrap: using loopback address {} (no up non-loopback interface; ranks on other hosts cannot join)",
            lo.str());
  *out = lo;
  return Status::ok;
}

}  // namespace

Status bootstrap_address(Address* out) {
  static std::mutex mu;
  static bool decided = false;
  static Address chosen;
  std::lock_guard<std::mutex> lock(mu);
  if (!decided) {
    PURLIN_TRY(choose_address(&chosen));
    decided = true;
  }
  *out = chosen;
  return Status::ok;
}

// ---- Socket ------------------------------------------------------------------------------------

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status listen_on(const Address& address, bool reuse_addr, Socket* out, Address* bound) {
  if (address.is_any()) return fail(Status::internal_error, "bootstrap: refusing to bind a wildcard address");
  Socket s(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return fail(Status::system_error, fmt::format("socket() failed: {}", errno_text(errno)));
  if (reuse_addr) {
    int one = 1;
    if (setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      return fail(Status::system_error, fmt::format("SO_REUSEADDR failed: {}", errno_text(errno)));
    }
  }
  if (::bind(s.fd(), address.sa(), address.len) != 0) {
    return fail(Status::system_error, fmt::format("bind({}) failed: {}", address.str(), errno_text(errno)));
  }
  if (::listen(s.fd(), SOMAXCONN) != 0) {
    return fail(Status::system_error, fmt::format("listen({}) failed: {}", address.str(), errno_text(errno)));
  }
  Address b;
  b.len = sizeof(b.storage);
  if (getsockname(s.fd(), b.sa(), &b.len) != 0) {
    return fail(Status::system_error, fmt::format("getsockname failed: {}", errno_text(errno)));
  }
  if (bound) *bound = b;
  *out = std::move(s);
  return Status::ok;
}

Status connect_to(const Address& to, Deadline deadline, AbortFlags abort, Socket* out) {
  int backoff_ms = 10;
  int last_err = 0;
  for (;;) {
    if (abort.raised()) return fail(Status::remote_error, fmt::format("connect to {}: aborted", to.str()));
    Socket s(::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) return fail(Status::system_error, fmt::format("socket() failed: {}", errno_text(errno)));
    int err = 0;
    if (::connect(s.fd(), to.sa(), to.len) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        PURLIN_TRY(wait_ready(s.fd(), POLLOUT, deadline, abort, "connect"));
        socklen_t len = sizeof(err);
        if (getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      set_nodelay(s.fd());
      *out = std::move(s);
      return Status::ok;
    }
    last_err = err;
    if (!retryable_connect_error(err)) {
      return fail(Status::system_error, fmt::format("connect to {} failed: {}", to.str(), errno_text(err)));
    }
    if (Clock::now() + std::chrono::milliseconds(backoff_ms) >= deadline) break;
    if (!sleep_unless_aborted(backoff_ms, abort)) {
      return fail(Status::remote_error, fmt::format("connect to {}: aborted", to.str()));
    }
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
  return fail(Status::remote_error,
              fmt::format("connect to {} timed out (last error: {})", to.str(), errno_text(last_err)));
}

Status accept_now(const Socket& listener, Socket* out, Address* peer) {
  Address a;
  a.len = sizeof(a.storage);
  int fd = ::accept4(listener.fd(), a.sa(), &a.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    *out = Socket();
    // Errors of a connection that died before we took it, or a signal: nothing to accept now.
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED || err == EPROTO ||
        err == ENETDOWN || err == ENOPROTOOPT || err == EHOSTDOWN || err == ENONET ||
        err == EHOSTUNREACH || err == EOPNOTSUPP || err == ENETUNREACH) {
      return Status::ok;
    }
    return fail(Status::system_error, fmt::format("accept failed: {}", errno_text(err)));
  }
  set_nodelay(fd);
  *out = Socket(fd);
  if (peer) *peer = a;
  return Status::ok;
}

Io send_some(int fd, const void* data, std::size_t bytes, std::size_t* moved) {
  *moved = 0;
  if (bytes == 0) return Io::done;
  for (;;) {
    ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *moved = static_cast<std::size_t>(n);
      return Io::done;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Io::would_block;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)) return Io::closed;
    return Io::error;
  }
}

Io send_some2(int fd, const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes,
              std::size_t* moved) {
  *moved = 0;
  if (a_bytes + b_bytes == 0) return Io::done;
  iovec iov[2] = {{const_cast<void*>(a), a_bytes}, {const_cast<void*>(b), b_bytes}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  for (;;) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *moved = static_cast<std::size_t>(n);
      return Io::done;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Io::would_block;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)) return Io::closed;
    return Io::error;
  }
}

Io recv_some(int fd, void* data, std::size_t bytes, std::size_t* moved) {
  *moved = 0;
  if (bytes == 0) return Io::done;
  for (;;) {
    ssize_t n = ::recv(fd, data, bytes, MSG_DONTWAIT);
    if (n > 0) {
      *moved = static_cast<std::size_t>(n);
      return Io::done;
    }
    if (n == 0) return Io::closed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::would_block;
    if (errno == ECONNRESET || errno == ENOTCONN || errno == ETIMEDOUT) return Io::closed;
    return Io::error;
  }
}

Status send_all(const Socket& s, const void* data, std::size_t bytes, Deadline deadline, AbortFlags abort) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    std::size_t n = 0;
    switch (send_some(s.fd(), p + done, bytes - done, &n)) {
      case Io::done:
        done += n;
        break;
      case Io::would_block:
        PURLIN_TRY(wait_ready(s.fd(), POLLOUT, deadline, abort, "send"));
        break;
      case Io::closed:
        return fail(Status::remote_error, "send: connection closed by peer");
      case Io::error:
        return fail(Status::system_error, fmt::format("send failed: {}", errno_text(errno)));
    }
  }
  return Status::ok;
}

Status recv_all(const Socket& s, void* data, std::size_t bytes, Deadline deadline, AbortFlags abort) {
  auto* p = static_cast<std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    std::size_t n = 0;
    switch (recv_some(s.fd(), p + done, bytes - done, &n)) {
      case Io::done:
        done += n;
        break;
      case Io::would_block:
        PURLIN_TRY(wait_ready(s.fd(), POLLIN, deadline, abort, "recv"));
        break;
      case Io::closed:
        return fail(Status::remote_error,
                    fmt::format("recv: connection closed by peer after {} of {} bytes", done, bytes));
      case Io::error:
        return fail(Status::system_error, fmt::format("recv failed: {}", errno_text(errno)));
    }
  }
  return Status::ok;
}

Status random64(std::uint64_t* out) {
  std::uint8_t* p = reinterpret_cast<std::uint8_t*>(out);
  std::size_t got = 0;
  while (got < sizeof(*out)) {
    ssize_t n = getrandom(p + got, sizeof(*out) - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  if (got == sizeof(*out)) return Status::ok;
  Socket urandom(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (urandom.valid() && ::read(urandom.fd(), out, sizeof(*out)) == static_cast<ssize_t>(sizeof(*out))) {
    return Status::ok;
  }
  return fail(Status::system_error, "cannot read random bytes");
}

}  // namespace purlin::net
