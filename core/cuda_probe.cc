#include "core/cuda_probe.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#if defined(PURLIN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "core/log.h"

namespace purlin {

namespace {
std::atomic<bool> g_devices_found{false};
}  // namespace

#if defined(PURLIN_HAVE_CUDA)
namespace {
// The device's PCI bus id as CUDA writes it ("0000:1B:00.0"), or "" when CUDA cannot say.
std::string pci_bus_id(int device) {
  char bus[64] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return bus;
}
}  // namespace
#endif

int cuda_build_version() {
#if defined(PURLIN_HAVE_CUDA)
  return CUDART_VERSION;
#else
  return 0;
#endif
}

int cuda_device_count() {
#if defined(PURLIN_HAVE_CUDA)
  static const int count = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      log::info(log::kInit, "no CUDA device usable ({}): the host datapath serves", cudaGetErrorString(e));
      cudaGetLastError();
      return 0;
    }
    if (n > 0) g_devices_found.store(true, std::memory_order_relaxed);
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

bool cuda_devices_found() { return g_devices_found.load(std::memory_order_relaxed); }

int cuda_current_device() {
#if defined(PURLIN_HAVE_CUDA)
  if (cuda_device_count() == 0) return -1;
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
#else
  return -1;
#endif
}

bool cuda_set_current_device(int device) {
#if defined(PURLIN_HAVE_CUDA)
  if (device < 0 || device >= cuda_device_count()) return false;
  if (cudaSetDevice(device) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
#else
  (void)device;
  return false;
#endif
}

std::uint64_t gpu_identity(int device) {
#if defined(PURLIN_HAVE_CUDA)
  if (device < 0) return 0;
  const std::string bus = pci_bus_id(device);
  if (bus.empty()) return static_cast<std::uint64_t>(device) + 1;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : bus) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h ? h : 1;
#else
  (void)device;
  return 0;
#endif
}

std::int64_t gpu_bus_id(int device) {
#if defined(PURLIN_HAVE_CUDA)
  if (device < 0) return 0;
  std::string hex;
  for (const char c : pci_bus_id(device)) {
    if (c == ':' || c == '.') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c)) || hex.size() == 15) break;
    hex += c;
  }
  return hex.empty() ? 0 : std::stoll(hex, nullptr, 16);
#else
  (void)device;
  return 0;
#endif
}

int gpu_nvml_index(int device) {
#if defined(PURLIN_HAVE_CUDA)
  const auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  if (device < 0) return -1;
  const std::string mine = lower(pci_bus_id(device));
  if (mine.empty()) return device;
  // Every GPU the driver knows, as NVML counts them; the visible devices where the driver's list
  // cannot be read.
  std::vector<std::string> buses;
  std::error_code e;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", e))
    buses.push_back(lower(entry.path().filename().string()));
  if (std::find(buses.begin(), buses.end(), mine) == buses.end()) {
    buses.clear();
    for (int d = 0; d < cuda_device_count(); ++d) buses.push_back(lower(pci_bus_id(d)));
  }
  std::sort(buses.begin(), buses.end());
  return static_cast<int>(std::find(buses.begin(), buses.end(), mine) - buses.begin());
#else
  (void)device;
  return -1;
#endif
}

int gpu_sm_count(int device) {
#if defined(PURLIN_HAVE_CUDA)
  int n = 0;
  if (device < 0 || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  (void)device;
  return 0;
#endif
}

int gpu_arch(int device) {
#if defined(PURLIN_HAVE_CUDA)
  int major = 0, minor = 0;
  if (device < 0 || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return 10 * major + minor;
#else
  (void)device;
  return 0;
#endif
}

PointerFacts cuda_pointer_facts(const void* ptr, int device) {
  PointerFacts f;
#if defined(PURLIN_HAVE_CUDA)
  if (cuda_device_count() == 0) return f;
  const int before = cuda_current_device();
  const bool switched = device >= 0 && device != before && cuda_set_current_device(device);
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, ptr) == cudaSuccess) {
    f.valid = a.devicePointer != nullptr;
    f.device = a.type == cudaMemoryTypeDevice ? a.device : -1;
  } else {
    cudaGetLastError();
  }
  if (switched && before >= 0) cuda_set_current_device(before);
#else
  (void)ptr;
  (void)device;
#endif
  return f;
}

}  // namespace purlin
