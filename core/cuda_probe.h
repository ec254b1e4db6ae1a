// What the CUDA runtime says about this machine, asked lazily: the library loads and runs its host
// datapath where there is no driver or no device.
#pragma once

#include <cstdint>

namespace purlin {

// The CUDA runtime version the library was built with (13000 for 13.0), 0 for a build without CUDA.
int cuda_build_version();
// Number of usable CUDA devices; 0 when the build has no CUDA, there is no driver or no device.
int cuda_device_count();
// True once cuda_device_count has found a device (it never initialises CUDA itself): the logger
// asks for the current device only then.
bool cuda_devices_found();
// The calling thread's current device, or -1 when there is none.
int cuda_current_device();
// Makes `device` the calling thread's current device; false when that fails or there is no CUDA.
bool cuda_set_current_device(int device);
// A 64-bit identity of a device, equal across processes (hash of its PCI bus id); 0 for none.
std::uint64_t gpu_identity(int device);
// The device's PCI bus id as the number NCCL's log lines show ("0000:1b:00.0" -> 0x1b000: its hex
// digits read as one number); 0 for none.
std::int64_t gpu_bus_id(int device);
// The device's index as NVML numbers GPUs (every GPU of the machine in PCI bus order, whatever
// CUDA_VISIBLE_DEVICES hides); -1 for none.
int gpu_nvml_index(int device);
// Multiprocessors of a device (0 for none).
int gpu_sm_count(int device);
// A device's compute capability as 10 * major + minor (90 for sm_90); 0 for none.
int gpu_arch(int device);
// What NCCL's pointer check (NCCL_CHECK_MODE) learns of `ptr` from one cudaPointerGetAttributes,
// about a microsecond, asked as `device` (made the calling thread's device for the query, as NCCL
// does, and the thread's own put back): whether that device can address it (its memory, a peer's
// it may reach, pinned host or managed memory; not NULL, pageable host memory or freed memory), and
// the device whose memory it is (-1: no device's). Without CUDA nothing is valid.
struct PointerFacts {
  bool valid = false;
  int device = -1;
};
PointerFacts cuda_pointer_facts(const void* ptr, int device);

}  // namespace purlin
