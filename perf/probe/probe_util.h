// What the probes share: a CUDA call that must succeed, and their command-line values (sizes with
// a K, M or G suffix, comma-separated lists).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// A CUDA runtime call that must succeed: on an error, where and CUDA's message, and exit status 2.
#define CHECK(x)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

namespace probe {

// "64K" -> 65536; a plain number is bytes.
inline std::uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  std::uint64_t v = std::strtoull(s.c_str(), &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return v;
}

// "a,b,,c" -> {a, b, c}: empty items are dropped.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace probe
