// Ranks as processes: the one launcher of the multi-process tests. Each rank is a forked process
// that runs a function of its rank and exits with what it returns; the parent waits for them under
// an overall deadline, kills those still running then with SIGKILL, and says how each rank ended.
//
// What a rank is guaranteed: it dies with the parent (PR_SET_PDEATHSIG, so a test runner that
// kills a test leaves no rank behind; strictly, with the thread that forked it, so spawn from a
// thread that outlives the ranks), ignores SIGPIPE (a closed output must not kill a rank
// mid-collective), and flushes stdout and stderr before it exits; an exception that leaves the
// function prints a FAIL line and exits 1. The parent flushes before each fork, so nothing it
// printed is written again by a rank.
//
//   ranks::Group g(4, [&](int rank) { return run_rank(rank); });
//   if (g.wait(ranks::Clock::now() + ranks::seconds(300)) != ranks::Stop::none) ...
//   for (const ranks::Outcome& o : g.outcomes()) check(o.ok(), ranks::describe(o));
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ranks {

using Clock = std::chrono::steady_clock;

// A deadline's distance: ranks::Clock::now() + ranks::seconds(2.5).
inline Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// How one rank ended.
struct Outcome {
  pid_t pid = -1;            // -1: its fork failed, it never ran
  bool ended = false;        // reaped
  int status = 0;            // waitpid's status, once ended
  bool timed_out = false;    // still running when the wait stopped, so killed with SIGKILL
  Clock::time_point ended_at{};  // when it was reaped
  double elapsed_s = 0;      // from the group's start to ended_at

  bool exited() const;       // ended by exit, not by a signal
  int exit_code() const;     // its exit status; -1 unless exited()
  int signal() const;        // the signal it died by; 0 if none
  bool ok() const { return exit_code() == 0; }
};

// "exit 0", "exit 3", "signal 9 (Killed)", "not started", "running".
std::string describe(const Outcome& o);

// Why a wait stopped the ranks still running.
enum class Stop {
  none,      // every rank ended by itself
  deadline,  // Wait::deadline passed
  gave_up,   // Wait::give_up said so
};

struct Wait {
  std::optional<Clock::time_point> deadline;  // none: as long as the ranks take
  std::chrono::milliseconds poll{2};          // how often ended ranks are reaped and give_up asked
  // Each rank that ends by itself, as it is reaped: in the order the ranks end, not rank order.
  std::function<void(int rank, const Outcome&)> on_end;
  // Asked every poll while a rank runs and the deadline has not passed: true stops the ranks as the
  // deadline does.
  std::function<bool()> give_up;
  // Called once before the ranks still running (those not ended) are killed.
  std::function<void(Stop)> on_stop;
};

class Group {
 public:
  using Body = std::function<int(int rank)>;

  Group();
  // Spawns ranks 0..n-1; a fork that fails leaves that rank and the later ones not started.
  Group(int n, const Body& body);
  // Kills and reaps every rank still running: no rank outlives its group.
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Forks rank size(), which runs body(rank). False (with perror) when the fork failed; the rank's
  // outcome then says it never ran.
  bool spawn(const Body& body);
  bool all_started() const;

  // Reaps the ranks until all have ended or the wait is stopped (deadline, give_up); then kills
  // the rest with SIGKILL and reaps them, so that every started rank has ended on return.
  Stop wait(const Wait& w = {});
  Stop wait(Clock::time_point deadline);  // a Wait with only a deadline
  // True once rank `rank` has ended, reaped or not (an unreaped one is left for wait()).
  bool has_ended(int rank) const;

  int size() const { return static_cast<int>(outcomes_.size()); }
  const Outcome& operator[](int rank) const { return outcomes_[static_cast<std::size_t>(rank)]; }
  const std::vector<Outcome>& outcomes() const { return outcomes_; }
  Clock::time_point started() const { return started_; }

 private:
  void reaped(Outcome& o, int status);
  void kill_running();

  Clock::time_point started_;
  std::vector<Outcome> outcomes_;
};

// Runs `n` ranks of `body` and waits for them.
std::vector<Outcome> run(int n, const Group::Body& body, const Wait& w = {});

}  // namespace ranks
