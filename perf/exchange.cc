#include "exchange.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace perf {
namespace {

bool read_file(const std::string& path, std::string* contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *contents = buffer.str();
  return true;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw ExchangeError("cannot write " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    std::remove(temporary.c_str());
    throw ExchangeError("cannot rename " + temporary + " to " + path + ": " + std::strerror(error));
  }
}

std::string wait_for_file(const std::string& path, double timeout_s, const std::string& what,
                          const std::function<bool(const std::string&)>& accept) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(timeout_s);
  // Start by spinning briefly (rows come back within microseconds), then back off to 10 ms.
  auto pause = std::chrono::microseconds(20);
  bool seen_rejected = false;
  for (;;) {
    std::string contents;
    if (read_file(path, &contents)) {
      if (!accept || accept(contents)) return contents;
      seen_rejected = true;
    }
    if (clock::now() > deadline) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
      throw ExchangeError(std::string("timed out after ") + seconds + " s waiting for " + what +
                          " (" + path + (seen_rejected ? ": it holds another run's data)" : ")"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

Mailbox::Mailbox(std::string prefix, double timeout_s)
    : prefix_(std::move(prefix)), timeout_s_(timeout_s) {}

void Mailbox::post(const std::string& name, const std::string& bytes) const {
  write_file_atomically(prefix_ + name, bytes);
}

std::string Mailbox::take(const std::string& name) const {
  const std::string path = prefix_ + name;
  std::string contents = wait_for_file(path, timeout_s_, name);
  std::remove(path.c_str());
  return contents;
}

}  // namespace perf
