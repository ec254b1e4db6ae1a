// Small messages between the ranks of one run, through files: the unique id (rank 0 writes it,
// the others poll for it) and each row's measurements (every rank posts, rank 0 collects).
// Needs only a file system the ranks share; nothing from the library under test.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace perf {

// A wait for another rank ran out of time, or a file could not be written or read.
struct ExchangeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes `bytes` to `path` so that readers see all of it or nothing (a temporary, then rename).
void write_file_atomically(const std::string& path, const std::string& bytes);

// Polls until `path` exists and `accept(contents)` is true, then returns the contents. `what`
// names the awaited thing in the error after `timeout_s`.
std::string wait_for_file(const std::string& path, double timeout_s, const std::string& what,
                          const std::function<bool(const std::string&)>& accept = nullptr);

// Messages named by a string, each sent once and received once: `post` creates prefix + name,
// `take` waits for it, returns its contents and removes it.
class Mailbox {
 public:
  Mailbox(std::string prefix, double timeout_s);
  void post(const std::string& name, const std::string& bytes) const;
  std::string take(const std::string& name) const;

 private:
  std::string prefix_;
  double timeout_s_;
};

}  // namespace perf
