#include "core/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace purlin {

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    this->~ShmSegment();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  close_fd();
  if (data_) munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

void ShmSegment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status ShmSegment::create(std::size_t bytes, ShmSegment* out) {
  // The name shows in /proc/<pid>/maps only; memfd files live in no directory.
  int fd = memfd_create("purlin-window", MFD_CLOEXEC);
  if (fd < 0) return fail(Status::system_error, fmt::format("memfd_create of a {}-byte window failed: {}", bytes, strerror(errno)));
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    return fail(Status::system_error, fmt::format("cannot reserve {} bytes of shared memory: {}", bytes, strerror(rc)));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return fail(Status::system_error, fmt::format("mmap of a {}-byte window failed: {}", bytes, strerror(e)));
  }
  ShmSegment seg;
  seg.data_ = p;
  seg.bytes_ = bytes;
  seg.fd_ = fd;
  *out = std::move(seg);
  return Status::ok;
}

Status ShmSegment::map(int fd, std::size_t bytes, ShmSegment* out) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes)
    return fail(Status::internal_error, fmt::format("a peer's window has {} bytes, expected {}",
                                                    static_cast<long long>(st.st_size), bytes));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(Status::system_error, fmt::format("mmap of a peer's window failed: {}", strerror(errno)));
  ShmSegment seg;
  seg.data_ = p;
  seg.bytes_ = bytes;
  *out = std::move(seg);
  return Status::ok;
}

}  // namespace purlin
