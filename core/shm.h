// POSIX shared memory: the peer memory of the host datapath. A rank creates a named segment,
// peers on the same host open it by name, and the creator unlinks the name as soon as every peer
// has mapped it, so nothing is left in /dev/shm even if a process dies later.
#pragma once

#include <cstddef>
#include <string>

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

  // Creates and maps a zero-filled segment. Fails if the name exists.
  static Status create(const std::string& name, std::size_t bytes, ShmSegment* out);
  // Maps an existing segment of exactly `bytes` bytes.
  static Status open(const std::string& name, std::size_t bytes, ShmSegment* out);

  void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  // Removes the name (mappings stay valid). Idempotent.
  void unlink();

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;
  bool owner_ = false;
};

}  // namespace purlin
