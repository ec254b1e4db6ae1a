// What the rank processes of a GPU test tell their launcher: each rank's checks passed and failed,
// or that it found no CUDA device (the test is then skipped), one record per rank over a pipe made
// before the ranks are forked.
//
//   rank_results::Pipe results;
//   ranks::Group group(n, [&](int r) { ...; results.report(passed, failed); ... });
//   group.wait(deadline);
//   rank_results::Totals t = results.collect(n, group);
//   return rank_results::finish(t);
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include "test/common/ranks.h"

namespace rank_results {

struct Totals {
  int passed = 0;
  int failed = 0;   // failed checks, missing records and ranks that did not exit 0
  bool skipped = false;  // some rank found no CUDA device
};

class Pipe {
 public:
  Pipe() {
    if (::pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
  }
  ~Pipe() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  bool ok() const { return fds_[0] >= 0; }

  // In a rank: its record (passed < 0: skipped, no device).
  void report(int passed, int failed) {
    close_end(0);
    const int record[2] = {passed, failed};
    (void)!::write(fds_[1], record, sizeof(record));
  }
  void report_skipped() { report(-1, 0); }

  // In the launcher, once the ranks have ended: every rank's record, and a failure for each rank
  // whose record is missing or that did not exit 0 (said in a FAIL line).
  Totals collect(int nranks, const ranks::Group& group) {
    close_end(1);
    Totals t;
    for (int r = 0; r < nranks; ++r) {
      int record[2] = {0, 0};
      if (::read(fds_[0], record, sizeof(record)) != sizeof(record)) {
        ++t.failed;
        continue;
      }
      if (record[0] < 0) {
        t.skipped = true;
      } else {
        t.passed += record[0];
        t.failed += record[1];
      }
    }
    for (const ranks::Outcome& out : group.outcomes())
      if (!out.ok()) {
        std::printf("FAIL a rank ended with %s\n", ranks::describe(out).c_str());
        ++t.failed;
      }
    return t;
  }

 private:
  void close_end(int end) {
    if (fds_[end] >= 0) ::close(fds_[end]);
    fds_[end] = -1;
  }
  int fds_[2] = {-1, -1};
};

// The launcher's last words: the skip line (exit status 77) where some rank found no device,
// otherwise "P passed, F failed" (a run that checked nothing fails) and its exit status.
inline int finish(const Totals& t) {
  if (t.skipped) {
    std::printf("SKIPPED: no CUDA device usable on this machine\n0 passed, 0 failed, 1 skipped\n");
    return 77;
  }
  const int failed = t.passed + t.failed == 0 ? 1 : t.failed;
  std::printf("%d passed, %d failed\n", t.passed, failed);
  return failed ? 1 : 0;
}

// A one-process test's settings, each in a child of its own, in turn (the library reads its
// environment once per process, and a process that initialised CUDA cannot hand it to a fork: only
// the children touch CUDA). child(i) returns 0 when every check passed and kNoDevice where there is
// no CUDA device, which ends the run as skipped; each child counts as one check, named by name(i).
constexpr int kNoDevice = 77;

template <class Child, class Name>
int run_children(int count, Child child, Name name, int limit_s = 120) {
  Totals totals;
  for (int i = 0; i < count; ++i) {
    ranks::Wait w;
    w.deadline = ranks::Clock::now() + ranks::seconds(limit_s);
    const ranks::Outcome o = ranks::run(1, [&](int) { return child(i); }, w)[0];
    if (o.exit_code() == kNoDevice) {
      totals.skipped = true;
      break;
    }
    if (o.ok()) {
      ++totals.passed;
    } else {
      std::printf("FAIL %s: %s\n", std::string(name(i)).c_str(), ranks::describe(o).c_str());
      ++totals.failed;
    }
  }
  return finish(totals);
}

}  // namespace rank_results
