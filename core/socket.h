// Small TCP helpers for the bootstrap: an owning socket, IPv4/IPv6 addresses, the choice of the
// interface to bind, and blocking-style send/recv/connect built on non-blocking sockets and poll.
//
// Every wait is bounded by a deadline and polls up to two abort flags at least every
// kPollSliceMs milliseconds. Sockets are created non-blocking and close-on-exec; writes use
// MSG_NOSIGNAL so a closed peer never raises SIGPIPE.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace purlin::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The longest a wait sleeps before it looks at its abort flags again.
inline constexpr int kPollSliceMs = 50;

// `seconds` from now; zero or negative means "never".
Deadline deadline_after(double seconds);
// Milliseconds left until `deadline`, clamped to [0, cap_ms].
int slice_ms(Deadline deadline, int cap_ms = kPollSliceMs);

// Up to two abort flags (either may be null); raised() is true once either reads true.
struct AbortFlags {
  const std::atomic<bool>* first = nullptr;
  const std::atomic<bool>* second = nullptr;

  AbortFlags() = default;
  AbortFlags(const std::atomic<bool>* a, const std::atomic<bool>* b = nullptr) : first(a), second(b) {}  // NOLINT
  bool raised() const {
    return (first && first->load(std::memory_order_acquire)) ||
           (second && second->load(std::memory_order_acquire));
  }
};

// A socket address of either family, small enough to travel in a UniqueId (28 bytes at most).
struct Address {
  sockaddr_storage storage{};
  socklen_t len = 0;

  static constexpr std::size_t kMaxBytes = 28;  // sizeof(sockaddr_in6)

  int family() const { return len ? storage.ss_family : AF_UNSPEC; }
  std::uint16_t port() const;
  void set_port(std::uint16_t port);
  bool is_any() const;       // 0.0.0.0 or ::
  bool is_loopback() const;  // 127/8 or ::1
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&storage); }
  // "192.0.2.1:5000" or "[2001:db8::1]:5000".
  std::string str() const;

  // Accepts only a well-formed sockaddr_in or sockaddr_in6 of a non-wildcard address.
  static bool from_bytes(const void* bytes, std::size_t len, Address* out);
};

// Parses "host:port", "[v6]:port" or a bare IPv6 literal with a trailing ":port" (as NCCL_COMM_ID
// accepts them). Host names are resolved; an IPv4 result is preferred.
Status parse_address(const std::string& text, Address* out);

// True when interface `name` is selected by an NCCL_SOCKET_IFNAME value: a comma-separated list of
// name prefixes, "=" before the list for exact names, "^" (before "=") to exclude those listed.
bool interface_selected(const std::string& spec, const std::string& name);

// The address (port 0) this process binds its bootstrap sockets to. With NCCL_SOCKET_IFNAME: the
// first up interface it selects that has an IPv4 or global IPv6 address. Otherwise: the first
// non-loopback up interface with an IPv4 address, skipping docker* and virbr*; then one with a
// global IPv6 address; then loopback. Decided once per process and logged at INFO (INIT|NET).
Status bootstrap_address(Address* out);

// Owns one file descriptor; closes it on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // shutdown(SHUT_RDWR): wakes a poll in another thread and tells the peer; the fd stays open.
  void shutdown() const;

 private:
  int fd_ = -1;
};

// A listening socket bound to `address` (port 0: an ephemeral port); `bound` receives the actual
// address. `reuse_addr` sets SO_REUSEADDR (for a fixed, well-known port).
Status listen_on(const Address& address, bool reuse_addr, Socket* out, Address* bound);

// Connects to `to`, retrying refused or unreachable attempts with a short backoff until the
// deadline. The socket returned is non-blocking with TCP_NODELAY set.
Status connect_to(const Address& to, Deadline deadline, AbortFlags abort, Socket* out);

// Accepts one pending connection without waiting. Returns ok with an invalid socket when none is
// pending; `peer` (may be null) receives the remote address.
Status accept_now(const Socket& listener, Socket* out, Address* peer);

// Send or receive exactly `bytes`. A peer that closes early, a deadline passed or an abort gives
// remote_error; other socket failures give system_error. All are reported through fail().
Status send_all(const Socket& s, const void* data, std::size_t bytes, Deadline deadline,
                AbortFlags abort);
Status recv_all(const Socket& s, void* data, std::size_t bytes, Deadline deadline,
                AbortFlags abort);

// One non-blocking step, for poll loops that multiplex many sockets. Never logs.
enum class Io {
  done,         // moved `*moved` > 0 bytes (may be fewer than asked)
  would_block,  // nothing to do now
  closed,       // orderly shutdown by the peer (recv) or connection reset/broken pipe
  error,        // any other failure (errno kept)
};
Io send_some(int fd, const void* data, std::size_t bytes, std::size_t* moved);
// Sends from two pieces in one call (a frame header and its payload).
Io send_some2(int fd, const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes,
              std::size_t* moved);
Io recv_some(int fd, void* data, std::size_t bytes, std::size_t* moved);

// Sleeps up to `ms`, waking early (returning false) if an abort flag is raised.
bool sleep_unless_aborted(int ms, AbortFlags abort);

// 64 random bits from the kernel (ids' secrets, mailbox keys).
Status random64(std::uint64_t* out);

}  // namespace purlin::net
