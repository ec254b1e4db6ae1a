// Ranks as threads of the test process, for the unit tests of services that ranks share (the
// bootstrap, the shared-memory all-gather): Catch2 assertions are made on the main thread only, so
// rank threads record their first failure in a Checker that the main thread reports.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rank_threads {

// The first failure seen by any rank thread.
struct Checker {
  std::mutex mu;
  std::string first;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    std::lock_guard<std::mutex> lock(mu);
    if (first.empty()) first = what;
  }
};

// Runs fn(0 .. n-1) at once, each on a thread of its own, and waits for them all.
inline void run(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

}  // namespace rank_threads
