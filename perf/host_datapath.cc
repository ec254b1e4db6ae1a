// Host buffers and wall-clock timing, for the library's CPU datapath.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "datapath.h"

namespace perf {
namespace {

constexpr std::size_t kAlignment = 4096;

class HostDatapath final : public Datapath {
 public:
  const char* name() const override { return "host"; }

  void* allocate(std::size_t bytes) override {
    std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* buffer = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (buffer == nullptr) throw std::bad_alloc();
    return buffer;
  }
  void release(void* buffer) override { std::free(buffer); }

  void upload(void* buffer, const void* host, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(buffer, host, bytes);
  }
  void download(void* host, const void* buffer, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(host, buffer, bytes);
  }

  cudaStream_t stream() const override { return nullptr; }
  void finish() override {}

  double copy_gbps(std::size_t bytes) override {
    char* a = static_cast<char*>(allocate(bytes));
    char* b = static_cast<char*>(allocate(bytes));
    std::memset(a, 1, bytes);
    std::memset(b, 2, bytes);  // every page present before the timing
    std::memcpy(b, a, bytes);
    constexpr int kCopies = 3;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCopies; ++i) {
      std::memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
      asm volatile("" : : "r"(a), "r"(b) : "memory");  // the copies are used: none may be left out
    }
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    release(a);
    release(b);
    return 2.0 * static_cast<double>(bytes) * kCopies / elapsed.count() / 1e9;
  }

  double time_calls(const std::function<void()>& call, int warmup, int iters) override {
    for (int i = 0; i < warmup; ++i) call();
    if (iters <= 0) return 0.0;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
    return elapsed.count() / iters;
  }
};

}  // namespace

std::unique_ptr<Datapath> make_host_datapath() { return std::make_unique<HostDatapath>(); }

}  // namespace perf
