#include "core/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/socket.h"

namespace purlin {
namespace {

constexpr std::uint64_t kMagic = 0x3130'4446'4e4c'5250ull;  // "PRLNFD01"

// What travels beside a descriptor.
struct Note {
  std::uint64_t magic;
  std::uint64_t key;
  std::uint32_t from;
  std::uint64_t tag;
};

socklen_t fill(const FdAddress& a, sockaddr_un* sun) {
  std::memset(sun, 0, sizeof(*sun));
  sun->sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, then the name (no terminator counted).
  const std::size_t len = 1 + ::strnlen(a.name + 1, sizeof(a.name) - 1);
  std::memcpy(sun->sun_path, a.name, len);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
}

enum class Io { done, again, failed };

Io send_fd(int sock, const FdAddress& to, const Note& note, int fd) {
  sockaddr_un sun;
  const socklen_t len = fill(to, &sun);
  iovec iov{const_cast<Note*>(&note), sizeof(note)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_name = &sun;
  msg.msg_namelen = len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (::sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(note))) return Io::done;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Io::again : Io::failed;
}

// One message: its note and the descriptor it carried (-1 for none).
Io receive_fd(int sock, Note* note, int* fd) {
  iovec iov{note, sizeof(*note)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Io::again : Io::failed;
  *fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*fd < 0) *fd = got;
      else ::close(got);  // a message carries one descriptor: extras are a stranger's
    }
  }
  if (n != static_cast<ssize_t>(sizeof(*note)) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) note->magic = 0;
  return Io::done;
}

}  // namespace

Status FdMailbox::open(std::unique_ptr<FdMailbox>* out) {
  std::unique_ptr<FdMailbox> box(new FdMailbox());
  PURLIN_TRY(net::random64(&box->address_.key));
  std::uint64_t salt = 0;
  PURLIN_TRY(net::random64(&salt));
  const std::string name = fmt::format("purlin-fd-{}-{:016x}", ::getpid(), salt);
  box->address_.name[0] = '\0';
  std::memcpy(box->address_.name + 1, name.data(), std::min(name.size(), sizeof(box->address_.name) - 2));
  box->sock_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (box->sock_ < 0)
    return fail(Status::system_error, fmt::format("cannot create a Unix socket for descriptors: {}", std::strerror(errno)));
  sockaddr_un sun;
  const socklen_t len = fill(box->address_, &sun);
  if (::bind(box->sock_, reinterpret_cast<sockaddr*>(&sun), len) != 0)
    return fail(Status::system_error, fmt::format("cannot bind the Unix socket {}: {}", name, std::strerror(errno)));
  *out = std::move(box);
  return Status::ok;
}

FdMailbox::~FdMailbox() {
  if (sock_ >= 0) ::close(sock_);
}

Status FdMailbox::exchange(int me, int fd, const std::vector<int>& to, const std::vector<int>& from,
                           const std::vector<FdAddress>& all, double timeout_s, const std::function<bool()>& stop,
                           std::vector<ReceivedFd>* got) {
  std::vector<int> pending = to;
  std::vector<bool> wanted(all.size(), false);
  std::size_t missing = 0;
  for (int r : from) {
    if (r >= 0 && static_cast<std::size_t>(r) < all.size() && !wanted[r]) {
      wanted[r] = true;
      ++missing;
    }
  }
  const Note note{kMagic, address_.key, static_cast<std::uint32_t>(me), 0};
  const net::Deadline deadline = net::deadline_after(timeout_s);
  auto give_back = [&] {
    for (const ReceivedFd& r : *got) ::close(r.fd);
    got->clear();
  };
  while (!pending.empty() || missing > 0) {
    bool moved = false;
    for (std::size_t i = 0; i < pending.size();) {
      const Io io = send_fd(sock_, all[pending[i]], note, fd);
      if (io == Io::failed) {
        const int e = errno;
        give_back();
        return fail(Status::system_error,
                    fmt::format("cannot send a descriptor to rank {}'s Unix socket: {} (ranks on one host must share "
                                "a network namespace)",
                                pending[i], std::strerror(e)));
      }
      if (io == Io::done) {
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        moved = true;
      } else {
        ++i;
      }
    }
    for (;;) {
      Note in{};
      int received = -1;
      const Io io = receive_fd(sock_, &in, &received);
      if (io != Io::done) break;
      moved = true;
      const bool valid = in.magic == kMagic && in.from < all.size() && wanted[in.from] && in.key == all[in.from].key &&
                         received >= 0;
      if (!valid) {
        if (received >= 0) ::close(received);
        continue;
      }
      wanted[in.from] = false;
      --missing;
      got->push_back(ReceivedFd{static_cast<int>(in.from), received});
    }
    if (pending.empty() && missing == 0) break;
    if (stop && stop()) {
      give_back();
      return fail(Status::remote_error, "the exchange of memory descriptors was stopped (abort, or a peer was lost)");
    }
    if (net::Clock::now() >= deadline) {
      give_back();
      return fail(Status::remote_error,
                  fmt::format("the exchange of memory descriptors did not finish within {:.0f} s: {} to send, {} to "
                              "receive",
                              timeout_s, pending.size(), missing));
    }
    if (!moved) {
      pollfd p{sock_, POLLIN, 0};
      ::poll(&p, 1, 1);
    }
  }
  return Status::ok;
}

Status FdMailbox::post(int me, int fd, std::uint64_t tag, const FdAddress& to, bool* sent) {
  const Note note{kMagic, address_.key, static_cast<std::uint32_t>(me), tag};
  const Io io = send_fd(sock_, to, note, fd);
  *sent = io == Io::done;
  if (io == Io::failed)
    return fail(Status::system_error, fmt::format("cannot send a descriptor to a peer's Unix socket: {} (ranks on one "
                                                  "host must share a network namespace)", std::strerror(errno)));
  return Status::ok;
}

void FdMailbox::take(const std::vector<FdAddress>& all, std::vector<ReceivedFd>* got) {
  for (;;) {
    Note in{};
    int received = -1;
    if (receive_fd(sock_, &in, &received) != Io::done) return;
    const bool valid = in.magic == kMagic && in.from < all.size() && in.key == all[in.from].key && received >= 0;
    if (valid) got->push_back(ReceivedFd{static_cast<int>(in.from), received, in.tag});
    else if (received >= 0) ::close(received);
  }
}

}  // namespace purlin
