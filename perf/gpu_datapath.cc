// GPU buffers, a stream and CUDA events for timing; with --graph 1, 128 calls captured in a CUDA
// graph and replayed. Built only where the build has the CUDA runtime (PURLIN_HAVE_CUDA); elsewhere
// it says why there is no GPU datapath.
#include "datapath.h"

#ifdef PURLIN_HAVE_CUDA
#include <cuda_runtime.h>

#include <stdexcept>
#endif

namespace perf {

#ifdef PURLIN_HAVE_CUDA
namespace {

constexpr int kCallsPerGraph = 128;

void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(error));
  }
}

class GpuDatapath final : public Datapath {
 public:
  GpuDatapath(int device, bool graph) : graph_(graph) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~GpuDatapath() override {
    cudaEventDestroy(stop_);
    cudaEventDestroy(start_);
    cudaStreamDestroy(stream_);
  }
  GpuDatapath(const GpuDatapath&) = delete;
  GpuDatapath& operator=(const GpuDatapath&) = delete;

  const char* name() const override { return "gpu"; }

  void* allocate(std::size_t bytes) override {
    void* buffer = nullptr;
    check_cuda(cudaMalloc(&buffer, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return buffer;
  }
  void release(void* buffer) override { cudaFree(buffer); }

  // On the benchmark's stream, which does not synchronise with the legacy default stream.
  void upload(void* buffer, const void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(buffer, host, bytes, cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync");
    finish();
  }
  void download(void* host, const void* buffer, std::size_t bytes) override {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(host, buffer, bytes, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync");
    finish();
  }

  cudaStream_t stream() const override { return stream_; }
  void finish() override { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  double copy_gbps(std::size_t bytes) override {
    void* a = allocate(bytes);
    void* b = allocate(bytes);
    constexpr int kCopies = 5;
    double us = 0;
    check_cuda(cudaMemsetAsync(a, 1, bytes, stream_), "cudaMemsetAsync");  // defined bytes to copy
    check_cuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
    check_cuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
    for (int i = 0; i < kCopies; ++i) {
      check_cuda(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, stream_),
                 "cudaMemcpyAsync");
    }
    check_cuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    us = elapsed_us();
    release(a);
    release(b);
    return 2.0 * static_cast<double>(bytes) * kCopies / (us * 1e-6) / 1e9;
  }

  double time_calls(const std::function<void()>& call, int warmup, int iters) override {
    return graph_ ? time_graph(call, warmup, iters) : time_eager(call, warmup, iters);
  }

 private:
  double elapsed_us() {
    check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e3;
  }

  double time_eager(const std::function<void()>& call, int warmup, int iters) {
    for (int i = 0; i < warmup; ++i) call();
    check_cuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) call();
    check_cuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    return elapsed_us() / iters;
  }

  // Captures 128 calls in one graph; a warm-up replay, then enough replays to cover `iters` calls.
  double time_graph(const std::function<void()>& call, int warmup, int iters) {
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
    try {
      for (int i = 0; i < kCallsPerGraph; ++i) call();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    check_cuda(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(instantiated, "cudaGraphInstantiate");

    const int replays = (iters + kCallsPerGraph - 1) / kCallsPerGraph;
    double us = 0;
    try {
      if (warmup > 0) check_cuda(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
      check_cuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
      for (int i = 0; i < replays; ++i) {
        check_cuda(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
      }
      check_cuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
      us = elapsed_us() / (static_cast<double>(replays) * kCallsPerGraph);
    } catch (...) {
      cudaGraphExecDestroy(exec);
      throw;
    }
    cudaGraphExecDestroy(exec);
    return us;
  }

  bool graph_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace

std::unique_ptr<Datapath> make_gpu_datapath(int local_rank, bool graph, std::string* why_not) {
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    *why_not = error != cudaSuccess
                   ? std::string("no usable CUDA device: ") + cudaGetErrorString(error)
                   : std::string("no CUDA device");
    cudaGetLastError();  // clear the error so later CUDA calls start clean
    return nullptr;
  }
  return std::make_unique<GpuDatapath>(local_rank % devices, graph);
}

#else

std::unique_ptr<Datapath> make_gpu_datapath(int, bool, std::string* why_not) {
  *why_not = "purlin-perf was built without the CUDA runtime";
  return nullptr;
}

#endif

}  // namespace perf
