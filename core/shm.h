// Shared memory for the host datapath: an anonymous file (memfd) that its creator maps and hands to
// its peers as a descriptor (core/fd_passing.h). It has no name, so nothing is ever left in /dev/shm,
// whenever and however a process ends; the memory goes when the last mapping does.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace purlin {

class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();

  // Creates and maps a zero-filled segment of `bytes` bytes, its pages reserved now (a full
  // shared-memory file system fails here, not with SIGBUS later). fd() hands it to peers.
  static Status create(std::size_t bytes, ShmSegment* out);
  // Maps a peer's segment from its descriptor, which must hold exactly `bytes` bytes. The
  // descriptor stays the caller's.
  static Status map(int fd, std::size_t bytes, ShmSegment* out);

  void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  // The creator's descriptor (-1 once closed, and for a mapped peer's segment).
  int fd() const { return fd_; }
  // Closes the descriptor (the mapping stays valid). Idempotent.
  void close_fd();

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;
};

}  // namespace purlin
