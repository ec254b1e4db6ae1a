#include "harness.h"

#include <fnmatch.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "test/common/ranks.h"

namespace e2e {

// Written by the child, read by the parent: progress for the stall check, and the case in flight
// for the timeout diagnostics.
struct RankSlot {
  std::atomic<std::uint64_t> passed;
  std::atomic<std::uint64_t> failed;
  char current[240];
};

// What a child writes to its pipe when it is done.
struct Report {
  std::uint64_t magic;
  std::uint64_t passed;
  std::uint64_t failed;
};
constexpr std::uint64_t kReportMagic = 0x6532655265706f72ull;

namespace {

[[noreturn]] void usage(const char* argv0, const char* bad) {
  std::fprintf(stderr,
               "%s: bad argument '%s'\n"
               "usage: %s [--ranks N] [--filter PATTERN[,PATTERN...]] [--list]\n"
               "          [--timeout SECONDS] [--stall SECONDS]\n"
               "environment: E2E_FILTER, E2E_TIMEOUT, E2E_STALL\n",
               argv0, bad, argv0);
  std::exit(2);
}

void split_filters(std::string_view text, std::vector<std::string>& out) {
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto piece = text.substr(0, comma);
    if (!piece.empty()) out.emplace_back(piece);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
}

double parse_seconds(const char* argv0, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0)) usage(argv0, text);
  return v;
}

}  // namespace

// Five flags read by hand (--name=value too): not worth a parser library as a dependency of the
// test binaries.
Options parse_options(int argc, char** argv) {
  Options o;
  if (const char* f = std::getenv("E2E_FILTER")) split_filters(f, o.filters);
  if (const char* t = std::getenv("E2E_TIMEOUT")) o.timeout_s = parse_seconds(argv[0], t);
  if (const char* t = std::getenv("E2E_STALL")) o.stall_s = parse_seconds(argv[0], t);
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    std::string_view value;
    bool has_value = false;
    if (const auto eq = a.find('='); a.starts_with("--") && eq != std::string_view::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_value) return std::string(value);
      if (i + 1 >= argc) usage(argv[0], argv[i]);
      return argv[++i];
    };
    if (a == "--ranks") {
      const std::string v = next();
      o.nranks = std::atoi(v.c_str());
      if (o.nranks < 1 || o.nranks > 64) usage(argv[0], v.c_str());
    } else if (a == "--filter") {
      split_filters(next(), o.filters);
    } else if (a == "--timeout") {
      o.timeout_s = parse_seconds(argv[0], next().c_str());
    } else if (a == "--stall") {
      o.stall_s = parse_seconds(argv[0], next().c_str());
    } else if (a == "--list" && !has_value) {
      o.list = true;
    } else {
      usage(argv[0], argv[i]);
    }
  }
  return o;
}

// ---- Reporter ------------------------------------------------------------------------------------

Reporter::Reporter(const Options& options, int rank, int nranks, RankSlot* slot)
    : options_(options), rank_(rank), nranks_(nranks), slot_(slot) {}

bool Reporter::selected(std::string_view name) const {
  const std::string n(name);
  auto matches = [&](const std::string& f) {
    const bool glob = f.find_first_of("*?[") != std::string::npos;
    return glob ? fnmatch(f.c_str(), n.c_str(), 0) == 0 : n.find(f) != std::string::npos;
  };
  bool any_positive = false, included = false;
  for (const auto& f : options_.filters) {
    if (f.starts_with('-')) {
      if (matches(f.substr(1))) return false;
    } else {
      any_positive = true;
      included = included || matches(f);
    }
  }
  return !any_positive || included;
}

void Reporter::begin(std::string name) {
  case_ = std::move(name);
  in_case_ = true;
  case_failures_ = 0;
  if (slot_) {
    std::strncpy(slot_->current, case_.c_str(), sizeof slot_->current - 1);
    slot_->current[sizeof slot_->current - 1] = '\0';
  }
}

void Reporter::fail(std::string_view detail) {
  ++case_failures_;
  if (!in_case_) {  // outside any case: counts on its own
    ++failed_;
    if (slot_) slot_->failed.store(failed_, std::memory_order_relaxed);
  }
  constexpr std::uint64_t kPrintLimit = 40;
  if (printed_ < kPrintLimit) {
    std::fprintf(stderr, "FAIL [rank %d/%d] %s: %.*s\n", rank_, nranks_, in_case_ ? case_.c_str() : "(setup)",
                 static_cast<int>(detail.size()), detail.data());
  } else if (printed_ == kPrintLimit) {
    std::fprintf(stderr, "[rank %d/%d] further failures are counted but not printed\n", rank_, nranks_);
  }
  ++printed_;
}

void Reporter::end() {
  if (case_failures_ > 0) {
    ++failed_;
  } else {
    ++passed_;
  }
  in_case_ = false;
  case_failures_ = 0;
  if (slot_) {
    slot_->passed.store(passed_, std::memory_order_relaxed);
    slot_->failed.store(failed_, std::memory_order_relaxed);
  }
}

bool Reporter::expect(ncclResult_t got, std::string_view what, ncclComm_t comm, ncclResult_t want) {
  if (got == want) return true;
  std::string detail(what);
  detail += " returned ";
  detail += std::to_string(static_cast<int>(got)) + " (" + ncclGetErrorString(got) + "), expected ";
  detail += std::to_string(static_cast<int>(want)) + " (" + ncclGetErrorString(want) + ")";
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) detail += std::string("; last error: ") + last;
  }
  fail(detail);
  return false;
}

// ---- Processes -----------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

namespace {

bool write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// A rank's body: the exit status is 0 when every case passed.
int child_main(const Options& options, int rank, int nranks, bool join, const std::vector<ncclUniqueId>& ids,
               RankSlot* slot, int fd, const std::function<void(RankEnv&)>& body) {
  Reporter report(options, rank, nranks, slot);
  ncclComm_t comm = nullptr;
  bool ready = true;
  // Joining and leaving are not cases of their own: a failure there counts as one failure.
  if (join) ready = report.expect(ncclCommInitRank(&comm, nranks, ids[0], rank), "ncclCommInitRank");
  if (ready) {
    RankEnv env{rank, nranks, comm, std::vector<ncclUniqueId>(ids.begin() + (join ? 1 : 0), ids.end()), report,
                options};
    try {
      body(env);
    } catch (const std::exception& e) {
      report.fail(std::string("exception: ") + e.what());
    }
    if (comm) report.expect(ncclCommDestroy(comm), "ncclCommDestroy");
  }
  const Report r{kReportMagic, report.passed(), report.failed()};
  write_all(fd, &r, sizeof r);
  return report.failed() == 0 ? 0 : 1;
}

struct Child {
  int fd = -1;
  Report report{};
  std::size_t got = 0;  // bytes of report received
};

}  // namespace

Totals run_ranks(const Options& options, int nranks, bool join, int extra_ids,
                 const std::function<void(RankEnv&)>& body) {
  Totals totals;
  if (options.list) {  // names only: run the body here, as rank 0, without a communicator
    Reporter report(options, 0, nranks, nullptr);
    RankEnv env{0, nranks, nullptr, std::vector<ncclUniqueId>(static_cast<std::size_t>(extra_ids)), report, options};
    body(env);
    return totals;
  }

  std::vector<ncclUniqueId> ids(static_cast<std::size_t>(extra_ids + (join ? 1 : 0)));
  for (auto& id : ids) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) {
      std::fprintf(stderr, "FAIL ncclGetUniqueId returned %d (%s)\n", rc, ncclGetErrorString(rc));
      totals.failed = 1;
      return totals;
    }
  }

  const std::size_t slots_bytes = sizeof(RankSlot) * static_cast<std::size_t>(nranks);
  void* mem = ::mmap(nullptr, slots_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    totals.failed = 1;
    return totals;
  }
  auto* slots = static_cast<RankSlot*>(mem);
  for (int r = 0; r < nranks; ++r) {
    new (&slots[r]) RankSlot{};
    std::strcpy(slots[r].current, "(starting)");
  }

  std::vector<Child> children(static_cast<std::size_t>(nranks));
  ranks::Group group;
  for (int r = 0; r < nranks; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) {
      std::perror("pipe");
      ++totals.failed;
      break;
    }
    const bool started = group.spawn([&, fds](int rank) {
      ::close(fds[0]);
      for (int k = 0; k < rank; ++k) ::close(children[static_cast<std::size_t>(k)].fd);
      return child_main(options, rank, nranks, join, ids, &slots[rank], fds[1], body);
    });
    ::close(fds[1]);
    if (!started) {
      ::close(fds[0]);
      ++totals.failed;
      break;
    }
    children[static_cast<std::size_t>(r)].fd = fds[0];
  }

  // Collect the reports while the ranks run, watching the clock and their progress.
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  std::uint64_t last_finished = 0;
  // A rank that ended without its report leaves its peers waiting in a collective: give them a
  // short grace and stop them.
  constexpr double kOrphanGrace_s = 20;
  bool orphaned = false;
  auto orphaned_at = start;
  auto collect = [&] {  // reads what the pipes hold now; false when there was nothing
    std::vector<pollfd> pfds;
    std::vector<Child*> owners;
    for (auto& c : children) {
      if (c.fd >= 0) {
        pfds.push_back(pollfd{c.fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    const int n = pfds.empty() ? 0 : ::poll(pfds.data(), pfds.size(), 0);
    if (n < 0 && errno != EINTR) std::perror("poll");
    if (n <= 0) return false;
    for (std::size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child& c = *owners[i];
      char buf[sizeof(Report)];
      const ssize_t got = ::read(c.fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        ::close(c.fd);
        c.fd = -1;
        if (c.got != sizeof(Report) && !orphaned) {
          orphaned = true;
          orphaned_at = std::chrono::steady_clock::now();
        }
        continue;
      }
      for (ssize_t k = 0; k < got; ++k) {
        if (c.got < sizeof(Report)) reinterpret_cast<char*>(&c.report)[c.got] = buf[k];
        ++c.got;
      }
    }
    return true;
  };
  bool stalled = false;
  ranks::Wait watch;
  watch.deadline = start + ranks::seconds(options.timeout_s);
  watch.give_up = [&] {
    collect();
    std::uint64_t finished = 0;
    for (int r = 0; r < nranks; ++r) {
      finished += slots[r].passed.load(std::memory_order_relaxed) + slots[r].failed.load(std::memory_order_relaxed);
    }
    const auto now = std::chrono::steady_clock::now();
    if (finished != last_finished) {
      last_finished = finished;
      last_progress = now;
    }
    stalled = std::chrono::duration<double>(now - last_progress).count() > options.stall_s;
    const bool abandoned = orphaned && std::chrono::duration<double>(now - orphaned_at).count() > kOrphanGrace_s;
    return stalled || abandoned;
  };
  watch.on_stop = [&](ranks::Stop why) {
    std::fprintf(stderr, "FAIL %s after %.0f s; killing the ranks still running:\n",
                 why == ranks::Stop::deadline ? "time limit reached"
                 : stalled                    ? "no progress"
                                              : "a rank died, the others did not finish",
                 seconds_since(start));
    for (int r = 0; r < group.size(); ++r) {
      if (group[r].ended) continue;
      std::fprintf(stderr, "  rank %d (pid %d) in case %s\n", r, static_cast<int>(group[r].pid), slots[r].current);
    }
  };
  const bool killed = group.wait(watch) != ranks::Stop::none;
  while (!killed && collect()) {  // the reports of the ranks that ended since the last look
  }

  for (int r = 0; r < group.size(); ++r) {
    Child& c = children[static_cast<std::size_t>(r)];
    if (c.fd >= 0) ::close(c.fd);
    const ranks::Outcome& o = group[r];
    if (o.pid <= 0) continue;
    const bool reported = c.got == sizeof(Report) && c.report.magic == kReportMagic;
    if (reported) {
      totals.passed += c.report.passed;
      totals.failed += c.report.failed;
    } else {  // the cases it finished still count; the one it was in counts below as failed
      totals.passed += slots[r].passed.load(std::memory_order_relaxed);
      totals.failed += slots[r].failed.load(std::memory_order_relaxed);
    }
    if (o.signal()) {
      std::fprintf(stderr, "FAIL rank %d %s by signal %d (%s) in case %s\n", r, killed ? "stopped" : "died",
                   o.signal(), strsignal(o.signal()), slots[r].current);
      if (!reported) ++totals.failed;
    } else if (!reported) {
      std::fprintf(stderr, "FAIL rank %d exited with status %d without reporting (last case %s)\n", r,
                   o.exit_code(), slots[r].current);
      ++totals.failed;
    } else if (o.exit_code() != 0 && c.report.failed == 0) {
      std::fprintf(stderr, "FAIL rank %d exited with status %d\n", r, o.exit_code());
      ++totals.failed;
    }
  }
  ::munmap(mem, slots_bytes);
  return totals;
}

int finish(const Options& options, const Totals& totals, std::chrono::steady_clock::time_point started) {
  if (options.list) return 0;
  if (totals.passed + totals.failed == 0) std::fprintf(stderr, "no case ran: check the filter\n");
  std::printf("time: %.1f s\n", seconds_since(started));
  std::printf("%llu passed, %llu failed\n", static_cast<unsigned long long>(totals.passed),
              static_cast<unsigned long long>(totals.failed));
  std::fflush(stdout);
  return totals.failed == 0 && totals.passed > 0 ? 0 : 1;
}

}  // namespace e2e
