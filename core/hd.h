// Marks functions that compile for both the host compiler and nvcc.
// The orchestration (snac/) and the element-wise arithmetic (atom/) are written once
// and run on the CPU datapath and inside GPU kernels alike.
#pragma once

#if defined(__CUDACC__)
#define PURLIN_HD __host__ __device__ __forceinline__
#define PURLIN_DEVICE __device__
#else
#define PURLIN_HD inline
#define PURLIN_DEVICE
#endif
