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
    name_ = std::move(other.name_);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  unlink();
  if (data_) munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

Status ShmSegment::create(const std::string& name, std::size_t bytes, ShmSegment* out) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return fail(Status::system_error, fmt::format("shm_open({}) failed: {}", name, strerror(errno)));
  // posix_fallocate reserves the pages now, so a full /dev/shm fails here rather than with SIGBUS later.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return fail(Status::system_error, fmt::format("cannot reserve {} bytes of shared memory for {}: {}", bytes,
                                                  name, strerror(rc)));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return fail(Status::system_error, fmt::format("mmap of {} failed: {}", name, strerror(errno)));
  }
  ShmSegment seg;
  seg.data_ = p;
  seg.bytes_ = bytes;
  seg.name_ = name;
  seg.owner_ = true;
  *out = std::move(seg);
  return Status::ok;
}

Status ShmSegment::open(const std::string& name, std::size_t bytes, ShmSegment* out) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return fail(Status::system_error, fmt::format("shm_open({}) of a peer failed: {}", name, strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    close(fd);
    return fail(Status::internal_error, fmt::format("peer segment {} has {} bytes, expected {}", name,
                                                    static_cast<long long>(st.st_size), bytes));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fail(Status::system_error, fmt::format("mmap of {} failed: {}", name, strerror(errno)));
  ShmSegment seg;
  seg.data_ = p;
  seg.bytes_ = bytes;
  seg.name_ = name;
  *out = std::move(seg);
  return Status::ok;
}

void ShmSegment::unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

}  // namespace purlin
