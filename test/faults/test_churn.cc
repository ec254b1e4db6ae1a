// Churn in one process: --cycles cycles of init, AllReduce, destroy, then --abort-cycles ending in
// ncclCommAbort, with the ranks as threads. Open files, threads, our shared-memory files and their
// mappings must come back to their values after the first cycle (which starts what lives for the
// process: the logger, the configuration). Resident memory may grow while the C library adds
// arenas for the threads, then must stay flat: at most 16 MiB more at the end than at the first
// check. GPU memory in use (GPU datapath; the device's, as cudaMemGetInfo counts it) may take one
// step of at most 32 MiB by the first check (the driver keeps resources of the rank threads' first
// streams and launches), then must not grow at all.
//
//   test_churn [--cycles 1000] [--abort-cycles 100] [--ranks 4] [--datapath host|gpu] [--seed N]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support.h"
#include "test/common/loopback.h"

namespace faults {
namespace {

// Mappings of our host windows (memfd files: "/memfd:purlin-window (deleted)" in the maps).
int window_mappings() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0;
  char line[1024];
  while (std::fgets(line, sizeof line, f)) n += std::strstr(line, "/memfd:purlin-window") != nullptr;
  std::fclose(f);
  return n;
}

long resident_kib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long size = 0, resident = 0;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

struct Snapshot {
  int fds, threads, shm, maps;
  std::uint64_t gpu;
  long rss_kib;

  // The names in /dev/shm when the process started: a file left by an earlier run whose pid was
  // this one's is not this process's.
  static const std::set<std::string>& at_start() {
    static const std::set<std::string> names = shm_names();
    return names;
  }

  static Snapshot take(bool gpu, int threads_target) {
    Snapshot s;
    s.threads = threads_target >= 0 ? wait_threads(threads_target, 2) : faults::threads();
    s.fds = open_fds();
    s.shm = static_cast<int>(shm_files({::getpid()}, at_start()).size());
    s.maps = window_mappings();
    s.gpu = gpu_used(gpu);
    s.rss_kib = resident_kib();
    return s;
  }
};

// AddressSanitizer's quarantine keeps freed memory resident on purpose: there the resident size
// says nothing about leaks (its own leak check at exit does).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRssChecked = false;
#else
constexpr bool kRssChecked = true;
#endif

// One cycle: every rank joins, runs a checked AllReduce and leaves by destroy or abort.
bool cycle(const Options& o, int k, bool abort, Report& report) {
  ncclUniqueId id;
  if (!report.expect(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId")) return false;
  std::vector<std::thread> ranks;
  std::atomic<int> failures{0};
  for (int r = 0; r < o.ranks; ++r) {
    ranks.emplace_back([&, r] {
      Report rep("churn cycle " + std::to_string(k) + " rank " + std::to_string(r));
      cudaStream_t stream = make_stream(o.gpu);
      ncclComm_t comm = nullptr;
      if (rep.expect(ncclCommInitRank(&comm, o.ranks, id, r), ncclSuccess, "ncclCommInitRank")) {
        checked_allreduce(o.gpu, comm, stream, r, o.ranks, 1 + (k * 7919) % 20000, o.seed + k, rep, "AllReduce");
        if (abort) rep.expect(ncclCommAbort(comm), ncclSuccess, "ncclCommAbort");
        else rep.expect(ncclCommDestroy(comm), ncclSuccess, "ncclCommDestroy");
      }
      destroy_stream(o.gpu, stream);
      failures.fetch_add(rep.failures());
    });
  }
  for (auto& t : ranks) t.join();
  return failures.load() == 0;
}

}  // namespace
}  // namespace faults

int main(int argc, char** argv) {
  using namespace faults;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  const Options o = parse_options(argc, argv, Options{});
  select_datapath(o);
  std::printf("churn: %d cycles with destroy and %d with abort, %d ranks as threads, %s datapath, seed %llu\n", o.cycles,
              o.abort_cycles, o.ranks, o.gpu ? "gpu" : "host", static_cast<unsigned long long>(o.seed));
  if (!kRssChecked) std::printf("resident memory not checked: AddressSanitizer's quarantine keeps freed memory\n");
  Report report("churn");
  Snapshot::at_start();
  const double started = now_s();
  if (!cycle(o, 0, false, report)) return 1;  // the warm-up: what lives for the process starts here
  const Snapshot base = Snapshot::take(o.gpu, -1);
  long first_rss_kib = -1;
  std::size_t first_gpu = 0;
  bool first = true;
  auto compare = [&](const std::string& when) {
    const Snapshot now = Snapshot::take(o.gpu, base.threads);
    report.check(now.fds == base.fds, when + ": open files " + std::to_string(now.fds) + ", " + std::to_string(base.fds) + " at the start");
    report.check(now.threads == base.threads,
                 when + ": threads " + std::to_string(now.threads) + ", " + std::to_string(base.threads) + " at the start");
    report.check(now.shm == 0, when + ": " + std::to_string(now.shm) + " shared-memory files of this process");
    report.check(now.maps == 0, when + ": " + std::to_string(now.maps) + " shared-memory windows still mapped");
    if (first) {
      first_rss_kib = now.rss_kib;
      first_gpu = now.gpu;
      first = false;
      report.check(now.gpu <= base.gpu + (32u << 20), when + ": GPU memory in use " + std::to_string(now.gpu) +
                                                          " B, more than 32 MiB over " + std::to_string(base.gpu) +
                                                          " B at the start");
    }
    if (kRssChecked)
      report.check(now.rss_kib <= first_rss_kib + 16 * 1024, when + ": resident memory " + std::to_string(now.rss_kib) +
                                                                 " KiB, " + std::to_string(first_rss_kib) + " KiB at the first check");
    report.check(now.gpu <= first_gpu, when + ": GPU memory in use " + std::to_string(now.gpu) + " B, " +
                                           std::to_string(first_gpu) + " B at the first check");
    std::printf("%s: %d open files, %d threads, %ld KiB resident (start: %d, %d, %ld KiB)%s\n", when.c_str(), now.fds,
                now.threads, now.rss_kib, base.fds, base.threads, base.rss_kib,
                o.gpu ? (", GPU " + std::to_string(now.gpu) + " B").c_str() : "");
  };
  int bad = 0;
  const int every = std::max(1, o.cycles / 4);
  for (int k = 1; k <= o.cycles; ++k) {
    if (!cycle(o, k, false, report)) ++bad;
    if (k % every == 0 || k == o.cycles) compare("after " + std::to_string(k) + " cycles with destroy");
  }
  for (int k = 1; k <= o.abort_cycles; ++k)
    if (!cycle(o, o.cycles + k, true, report)) ++bad;
  if (o.abort_cycles) compare("after " + std::to_string(o.abort_cycles) + " cycles with abort");
  report.check(bad == 0, std::to_string(bad) + " cycles failed");
  std::printf("churn: %d + %d cycles in %.1f s, %d failed checks\n", o.cycles, o.abort_cycles, now_s() - started,
              report.failures());
  return report.exit_code();
}
