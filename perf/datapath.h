// Where purlin-perf's buffers live and how it times calls: host memory and a wall clock now; GPU
// memory, a stream and events (optionally CUDA graphs) where the build has CUDA and a device.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace perf {

enum class DatapathChoice { automatic, host, gpu };

class Datapath {
 public:
  virtual ~Datapath() = default;

  virtual const char* name() const = 0;  // "host" or "gpu"
  // Buffers are aligned to at least 256 bytes; zero bytes gives a valid, unique pointer.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* buffer) = 0;
  virtual void upload(void* buffer, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* buffer, std::size_t bytes) = 0;
  // The stream handed to every NCCL call (nullptr for host buffers).
  virtual cudaStream_t stream() const = 0;
  // Waits until every call issued so far has completed.
  virtual void finish() = 0;
  // Issues `call` `warmup` times untimed, then `iters` times timed; returns microseconds per call.
  virtual double time_calls(const std::function<void()>& call, int warmup, int iters) = 0;
  // The copy roofline: a copy of `bytes` between two buffers of this datapath's memory (device to
  // device, or memcpy), in GB/s counting the bytes read and the bytes written.
  virtual double copy_gbps(std::size_t bytes) = 0;
};

// Host memory, for the library's CPU datapath. Calls complete before they return there.
std::unique_ptr<Datapath> make_host_datapath();

// GPU memory on device `local_rank % devices`; nullptr with a reason when the build has no CUDA
// or no device is usable. With `graph`, calls are captured 128 to a CUDA graph and replayed.
std::unique_ptr<Datapath> make_gpu_datapath(int local_rank, bool graph, std::string* why_not);

// A buffer of one datapath, released when it goes out of scope.
class Buffer {
 public:
  Buffer(Datapath& datapath, std::size_t bytes)
      : datapath_(&datapath), data_(datapath.allocate(bytes)), bytes_(bytes) {}
  ~Buffer() { datapath_->release(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  char* data() const { return static_cast<char*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  Datapath* datapath_;
  void* data_;
  std::size_t bytes_;
};

}  // namespace perf
