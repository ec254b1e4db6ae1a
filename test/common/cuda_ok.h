// CUDA_OK(call): a CUDA runtime call that must succeed in a test. On an error it prints the call,
// where it is and CUDA's message as a FAIL line and ends the process (a rank) with status 3, which
// every launcher counts as a failure.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_OK(x)                                                                                \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::_Exit(3);                                                                              \
    }                                                                                             \
  } while (0)
