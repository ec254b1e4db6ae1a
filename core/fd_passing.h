// File descriptors handed between the processes of one host (the cuMem allocations of the GPU
// datapath travel as descriptors). Each process binds a Unix datagram socket under an abstract name,
// so nothing is left on the file system, and peers send it descriptors (SCM_RIGHTS) with their rank
// and a key that the receiver checks: a stray process that finds the name cannot hand in its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"

namespace purlin {

// A mailbox's name and key as they travel over the bootstrap.
struct FdAddress {
  char name[48];      // abstract socket name (its first byte is the NUL of the abstract namespace)
  std::uint64_t key;  // random; a descriptor is accepted only with its sender's key
};

// One descriptor received: who sent it, and the descriptor (the receiver's to close).
struct ReceivedFd {
  int from;
  int fd;
  std::uint64_t tag = 0;  // what the sender named the descriptor with (post; exchange: 0)
};

class FdMailbox {
 public:
  static Status open(std::unique_ptr<FdMailbox>* out);
  ~FdMailbox();
  FdMailbox(const FdMailbox&) = delete;
  FdMailbox& operator=(const FdMailbox&) = delete;

  const FdAddress& address() const { return address_; }

  // Sends `fd` as rank `me` to every mailbox of `to`, and receives one descriptor from every rank
  // in `from`, whose addresses (with their keys) are `all`, indexed by rank. Sending and receiving
  // interleave, so any number of processes may exchange at once whatever their queues hold.
  // Fails after `timeout_s`, or once `stop` (may be empty) returns true.
  Status exchange(int me, int fd, const std::vector<int>& to, const std::vector<int>& from,
                  const std::vector<FdAddress>& all, double timeout_s, const std::function<bool()>& stop,
                  std::vector<ReceivedFd>* got);

  // Sends `fd` as rank `me`, named `tag`, to the mailbox `to`, without waiting: *sent is false when
  // its queue is full (nothing was sent).
  Status post(int me, int fd, std::uint64_t tag, const FdAddress& to, bool* sent);
  // Takes every descriptor waiting here without waiting for more; those of no rank of `all` (with
  // its key) are closed.
  void take(const std::vector<FdAddress>& all, std::vector<ReceivedFd>* got);

 private:
  FdMailbox() = default;
  int sock_ = -1;
  FdAddress address_{};
};

}  // namespace purlin
