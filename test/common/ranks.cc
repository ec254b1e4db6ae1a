#include "test/common/ranks.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

namespace ranks {

bool Outcome::exited() const { return ended && WIFEXITED(status); }
int Outcome::exit_code() const { return exited() ? WEXITSTATUS(status) : -1; }
int Outcome::signal() const { return ended && WIFSIGNALED(status) ? WTERMSIG(status) : 0; }

std::string describe(const Outcome& o) {
  if (o.pid <= 0) return "not started";
  if (!o.ended) return "running";
  if (WIFEXITED(o.status)) return "exit " + std::to_string(WEXITSTATUS(o.status));
  if (WIFSIGNALED(o.status)) {
    const int sig = WTERMSIG(o.status);
    return "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "status " + std::to_string(o.status);
}

namespace {

[[noreturn]] void rank_main(int rank, const Group::Body& body, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(3);  // the parent died before the line above
  ::signal(SIGPIPE, SIG_IGN);
  int code = 1;
  try {
    code = body(rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL exception in pid %d: %s\n", static_cast<int>(::getpid()), e.what());
  } catch (...) {
    std::fprintf(stderr, "FAIL exception in pid %d\n", static_cast<int>(::getpid()));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace

Group::Group() : started_(Clock::now()) {}

Group::Group(int n, const Body& body) : Group() {
  for (int r = 0; r < n; ++r) {
    if (!spawn(body)) {
      outcomes_.resize(static_cast<std::size_t>(n));  // the rest never ran either
      break;
    }
  }
}

Group::~Group() { kill_running(); }

bool Group::spawn(const Body& body) {
  const int rank = size();
  outcomes_.emplace_back();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) rank_main(rank, body, parent);
  if (pid < 0) {
    std::perror("fork");
    return false;
  }
  outcomes_.back().pid = pid;
  return true;
}

bool Group::all_started() const {
  for (const Outcome& o : outcomes_)
    if (o.pid <= 0) return false;
  return true;
}

void Group::reaped(Outcome& o, int status) {
  o.ended = true;
  o.status = status;
  o.ended_at = Clock::now();
  o.elapsed_s = std::chrono::duration<double>(o.ended_at - started_).count();
}

void Group::kill_running() {
  for (Outcome& o : outcomes_)
    if (o.pid > 0 && !o.ended) ::kill(o.pid, SIGKILL);
  for (Outcome& o : outcomes_) {
    if (o.pid <= 0 || o.ended) continue;
    int status = 0;
    while (::waitpid(o.pid, &status, 0) < 0 && errno == EINTR) {
    }
    o.timed_out = true;
    reaped(o, status);
  }
}

Stop Group::wait(const Wait& w) {
  for (;;) {
    bool running = false;
    for (int r = 0; r < size(); ++r) {
      Outcome& o = outcomes_[static_cast<std::size_t>(r)];
      if (o.pid <= 0 || o.ended) continue;
      int status = 0;
      const pid_t got = ::waitpid(o.pid, &status, WNOHANG);
      if (got == o.pid || (got < 0 && errno == ECHILD)) {  // ECHILD: reaped elsewhere, status unknown
        reaped(o, got == o.pid ? status : -1);
        if (w.on_end) w.on_end(r, o);
      } else {
        running = true;
      }
    }
    if (!running) return Stop::none;
    Stop stop = Stop::none;
    if (w.deadline && Clock::now() > *w.deadline) stop = Stop::deadline;
    else if (w.give_up && w.give_up()) stop = Stop::gave_up;
    if (stop != Stop::none) {
      if (w.on_stop) w.on_stop(stop);
      kill_running();
      return stop;
    }
    std::this_thread::sleep_for(w.poll);
  }
}

Stop Group::wait(Clock::time_point deadline) {
  Wait w;
  w.deadline = deadline;
  return wait(w);
}

bool Group::has_ended(int rank) const {
  const Outcome& o = (*this)[rank];
  if (o.pid <= 0 || o.ended) return o.ended;
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(o.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == o.pid;
}

std::vector<Outcome> run(int n, const Group::Body& body, const Wait& w) {
  Group g(n, body);
  g.wait(w);
  return g.outcomes();
}

}  // namespace ranks
