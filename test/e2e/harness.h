// Ranks as processes for the end-to-end tests.
//
// The parent makes the unique ids (ncclGetUniqueId) before forking, then forks one child per
// rank; each child joins the communicator with ncclCommInitRank, runs the test body, and sends
// its pass/fail counts back through a pipe. The parent fails the run on any failed case, on a
// child that crashes, exits non-zero or never reports, and kills every child when the run takes
// longer than its time limit or stops making progress. While a run is stuck, the name of the case
// each rank is in can be read from a page shared with the parent, and is printed on a timeout.
//
// Options (every binary): --filter PATTERN[,PATTERN...] (or E2E_FILTER) selects cases by name
// (shell glob; a pattern with no '*', '?' or '[' matches as a substring; a pattern starting with
// '-' excludes what it matches), --list prints the selected case names instead of running them,
// --ranks N, --timeout SECONDS (or E2E_TIMEOUT), --stall SECONDS (or E2E_STALL).
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace e2e {

struct Options {
  int nranks = 1;
  std::vector<std::string> filters;
  bool list = false;
  double timeout_s = 1700;  // whole run
  double stall_s = 120;     // no case finished on any rank for this long
};

// Parses the options above; exits with a usage message on anything else.
Options parse_options(int argc, char** argv);

struct RankSlot;  // the page a rank shares with the parent

// One rank's record of its cases. A case passes when nothing was reported failed within it.
class Reporter {
 public:
  Reporter(const Options& options, int rank, int nranks, RankSlot* slot);

  // Whether the case `name` is selected by --filter. The same answer on every rank.
  bool selected(std::string_view name) const;
  // True when only listing: the caller should not run the case.
  bool listing() const { return options_.list; }

  void begin(std::string name);
  void fail(std::string_view detail);  // the first few per rank are printed with the case name
  void end();
  bool case_failed() const { return case_failures_ > 0; }

  // Checks an NCCL result; on a mismatch records a failure naming `what`, the codes and the
  // communicator's last error.
  bool expect(ncclResult_t got, std::string_view what, ncclComm_t comm = nullptr,
              ncclResult_t want = ncclSuccess);

  std::uint64_t passed() const { return passed_; }
  std::uint64_t failed() const { return failed_; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

 private:
  const Options& options_;
  int rank_;
  int nranks_;
  RankSlot* slot_;
  std::string case_;
  bool in_case_ = false;
  std::uint64_t case_failures_ = 0;
  std::uint64_t passed_ = 0;
  std::uint64_t failed_ = 0;
  std::uint64_t printed_ = 0;
};

// Runs one named case: begin, body, end. Returns false when the case is filtered out or listed.
template <class Body>
bool run_case(Reporter& report, std::string name, Body&& body) {
  if (!report.selected(name)) return false;
  if (report.listing()) {
    if (report.rank() == 0) std::printf("%s\n", name.c_str());
    return false;
  }
  report.begin(std::move(name));
  body();
  report.end();
  return true;
}

// What the test body of one rank gets.
struct RankEnv {
  int rank;
  int nranks;
  ncclComm_t comm;                  // joined by the runner; null when it was asked for none
  std::vector<ncclUniqueId> ids;    // extra ids the parent made before forking
  Reporter& report;
  const Options& options;
};

struct Totals {
  std::uint64_t passed = 0;
  std::uint64_t failed = 0;
};

// Forks `nranks` processes that each run `body`. With `join` each child first joins a
// communicator of nranks ranks (ncclCommInitRank on the first id) and destroys it afterwards;
// `extra_ids` more ids are made for the body's own communicators. Returns the summed counts; a
// child that crashed, hung or failed to report counts as one failure.
Totals run_ranks(const Options& options, int nranks, bool join, int extra_ids,
                 const std::function<void(RankEnv&)>& body);

// Prints "N passed, N failed" and returns the process exit status. The counts are rank-cases (a
// case run by 8 ranks counts 8 times); a failure outside any case (joining, leaving, a crash,
// a rank killed on a timeout) counts once. The status is non-zero on any failure, and when
// nothing ran (a filter that selects no case) unless only listing.
int finish(const Options& options, const Totals& totals, std::chrono::steady_clock::time_point started);

// Wall seconds since `t`.
double seconds_since(std::chrono::steady_clock::time_point t);

}  // namespace e2e
