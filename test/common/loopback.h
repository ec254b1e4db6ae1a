// Every test's traffic stays on loopback. Each test binary calls loopback::use() before its first
// NCCL call: the bootstrap of the process and of every process it starts then binds to loopback
// (NCCL_SOCKET_IFNAME=lo, whatever the caller's environment said), where the library on its own,
// as NCCL, takes the first up non-loopback interface. loopback::listeners() finds the listening
// TCP sockets of processes the way a port scanner on this machine would (from /proc), for the
// tests that check where they are bound.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace loopback {

// The tests also run several ranks on one GPU where the machine has fewer GPUs than ranks; as in
// NCCL 2.30, that needs NCCL_MULTI_RANK_GPU_ENABLE, which use() sets unless the caller did.
inline void use() {
  ::setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  ::setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
}

struct Listener {
  pid_t pid;
  sockaddr_storage addr;
  socklen_t len;
  std::string text;  // "address:port"

  bool wildcard() const {
    if (addr.ss_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr.s_addr == 0;
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr;
    return std::memcmp(&a, &in6addr_any, sizeof a) == 0;
  }
  std::uint16_t port() const {  // sin_port and sin6_port are at the same place
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  bool on_loopback() const {
    if (addr.ss_family == AF_INET)
      return (ntohl(reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr.s_addr) >> 24) == 127;
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr;
    return std::memcmp(&a, &in6addr_loopback, sizeof a) == 0;
  }
};

// The inodes of the sockets among the open files of `pid`.
inline std::set<unsigned long> socket_inodes(pid_t pid) {
  std::set<unsigned long> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char link[128] = {};
    const std::string path = dir + "/" + e->d_name;
    ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
    unsigned long ino = 0;
    if (n > 0 && std::sscanf(link, "socket:[%lu]", &ino) == 1) out.insert(ino);
  }
  ::closedir(d);
  return out;
}

// Listening TCP sockets (IPv4 and IPv6) of `pids`.
inline std::vector<Listener> listeners(const std::vector<pid_t>& pids) {
  std::map<unsigned long, pid_t> owner;
  for (pid_t p : pids)
    for (unsigned long ino : socket_inodes(p)) owner[ino] = p;
  std::vector<Listener> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::FILE* f = std::fopen(table, "r");
    if (!f) continue;
    char line[512];
    if (!std::fgets(line, sizeof line, f)) line[0] = '\0';  // header
    while (std::fgets(line, sizeof line, f)) {
      char local[64] = {}, remote[64] = {};
      unsigned state = 0;
      unsigned long ino = 0;
      if (std::sscanf(line, " %*d: %63s %63s %x %*s %*s %*s %*u %*u %lu", local, remote, &state, &ino) != 4) continue;
      if (state != 0x0A || !owner.count(ino)) continue;
      Listener l{};
      l.pid = owner[ino];
      char* colon = std::strchr(local, ':');
      if (!colon) continue;
      *colon = '\0';
      const unsigned port = static_cast<unsigned>(std::strtoul(colon + 1, nullptr, 16));
      char text[INET6_ADDRSTRLEN] = {};
      if (std::strlen(local) == 8) {
        auto* a = reinterpret_cast<sockaddr_in*>(&l.addr);
        a->sin_family = AF_INET;
        a->sin_port = htons(static_cast<std::uint16_t>(port));
        a->sin_addr.s_addr = static_cast<std::uint32_t>(std::strtoul(local, nullptr, 16));
        l.len = sizeof(sockaddr_in);
        inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      } else {
        auto* a = reinterpret_cast<sockaddr_in6*>(&l.addr);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(static_cast<std::uint16_t>(port));
        for (int w = 0; w < 4; ++w) {
          char word[9] = {};
          std::memcpy(word, local + 8 * w, 8);
          const std::uint32_t v = static_cast<std::uint32_t>(std::strtoul(word, nullptr, 16));
          std::memcpy(&a->sin6_addr.s6_addr[4 * w], &v, 4);
        }
        l.len = sizeof(sockaddr_in6);
        inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      }
      l.text = std::string(text) + ":" + std::to_string(port);
      out.push_back(l);
    }
    std::fclose(f);
  }
  return out;
}

}  // namespace loopback
