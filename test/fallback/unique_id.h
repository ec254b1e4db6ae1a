// A ncclUniqueId as text, for handing it to rank processes on their command line.
#pragma once

#include <nccl.h>

#include <cstdio>
#include <string>

inline std::string hex_of(const ncclUniqueId& id) {
  std::string s;
  char b[3];
  for (unsigned char c : id.internal) std::snprintf(b, sizeof b, "%02x", c), s += b;
  return s;
}

inline ncclUniqueId id_of(const std::string& hex) {
  ncclUniqueId id{};
  for (std::size_t i = 0; i < sizeof id.internal && 2 * i + 1 < hex.size(); ++i)
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return id;
}
