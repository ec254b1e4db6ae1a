// What the fault tests share: options, the datapath's buffers and streams, the process's resources
// (open files, threads, our shared-memory files, GPU memory), memory shared with the rank processes
// (a ranks::Group), and the report.
//
// Every fault binary takes: --trials N, --ranks N, --datapath host|gpu, --seed N, and its own
// counts (--connections, --cycles, --abort-cycles). The GPU datapath reports skipped (exit 77,
// with the reason) where this build or this machine has no GPU. The tests call the library only
// through nccl.h.
#pragma once

#include <nccl.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "test/common/ranks.h"

namespace faults {

inline constexpr int kSkipped = 77;  // meson's "skipped"

struct Options {
  int trials = 3;
  int ranks = 4;
  bool gpu = false;
  std::uint64_t seed = 0;  // 0: from the clock (printed, so a run can be repeated)
  int connections = 200;   // hostile: connections per target
  int cycles = 20;         // churn: init/allreduce/destroy cycles
  int abort_cycles = 5;    // churn: cycles ending in abort
  std::vector<std::string> only;  // phases to run (empty: all)
};

// Parses the options above (defaults as given); exits 2 with a usage line on anything else.
Options parse_options(int argc, char** argv, Options defaults);
bool selected(const Options& o, const std::string& phase);

// Chooses the datapath for this process and the ranks it forks, before any NCCL call; with the
// GPU datapath and no usable GPU it prints the reason and exits 77.
void select_datapath(const Options& o);

double now_s();  // steady clock, shared by every process of the machine

// ---- buffers and streams on the chosen datapath ------------------------------------------------

class Buffer {
 public:
  // On the GPU from cudaMalloc, or with `cumem` from ncclMemAlloc (which peers in other processes
  // can map).
  Buffer(bool gpu, std::size_t bytes, bool cumem = false);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;

 private:
  bool gpu_;
  bool cumem_ = false;
  void* data_ = nullptr;
};

// A stream on the GPU datapath; the null stream on the host one.
cudaStream_t make_stream(bool gpu);
void destroy_stream(bool gpu, cudaStream_t s);
// True while work enqueued on a GPU stream has not finished (false on the host datapath).
bool stream_pending(bool gpu, cudaStream_t s);
// Starts the CUDA runtime in this process (GPU datapath): its own threads and open files, which
// stay for the process, exist before a test takes its baseline of them.
void start_cuda(bool gpu);
// The GPU's memory in use as a fresh process sees it (0 on the host datapath): read in a child, so
// that this process never starts CUDA and can go on forking ranks.
std::uint64_t gpu_used_by_probe(bool gpu);

// Waits until the work enqueued on `stream` is done (GPU; nothing to wait for on the host, where
// calls complete before returning) while watching ncclCommGetAsyncError, as an application's
// watchdog does. Returns ncclSuccess, the communicator's error, or ncclInternalError on timeout.
ncclResult_t settle(bool gpu, ncclComm_t comm, cudaStream_t stream, double timeout_s);

// Polls ncclCommGetAsyncError until it stops answering ncclInProgress or `timeout_s` passes.
// Returns the last answer (ncclInProgress on timeout); *longest_call_s gets the slowest poll.
ncclResult_t poll_state(ncclComm_t comm, double timeout_s, double* longest_call_s = nullptr);

// ---- resources ---------------------------------------------------------------------------------

int open_fds();
int threads();
// The names in /dev/shm now: taken before a trial, so that a file some earlier run left behind (a
// process killed mid-init) is not charged to the trial, even when a pid of it is reused.
std::set<std::string> shm_names();
// Shared-memory files (/dev/shm/purlin-*) named after one of `pids`, every one when `pids` is
// empty, leaving out those in `before`. The host windows are memfd files and have no name: any such
// file is a leak (earlier versions named a communicator's segments after its rank 0's pid).
std::vector<std::string> shm_files(const std::vector<pid_t>& pids = {}, const std::set<std::string>& before = {});
// The host windows (memfd files: "/memfd:purlin-window" in /proc) that process `pid` holds: the
// inodes of those among its open files and its mappings. Empty when it cannot be inspected.
std::set<unsigned long> window_inodes(pid_t pid);
// The processes this one may inspect (itself included) that hold one of `inodes` open or mapped.
std::vector<pid_t> window_holders(const std::set<unsigned long>& inodes);
// Bytes of GPU memory in use on the current device (0 on the host datapath).
std::uint64_t gpu_used(bool gpu);
// Waits up to `seconds` for the thread count to drop to `target`; returns the last count.
int wait_threads(int target, double seconds);

// ---- rank processes ----------------------------------------------------------------------------

// A block of anonymous memory shared with the processes forked after it is made.
void* shared_block(std::size_t bytes);
template <class T>
T* shared_object() {
  return new (shared_block(sizeof(T))) T();
}

// The rank processes themselves are a ranks::Group (test/common/ranks.h).

// ---- report ------------------------------------------------------------------------------------

// Counts checks and failures of one process; failures are printed at once with their context.
class Report {
 public:
  explicit Report(std::string context) : context_(std::move(context)) {}
  bool check(bool ok, const std::string& what);
  bool expect(ncclResult_t got, ncclResult_t want, const std::string& what, ncclComm_t comm = nullptr);
  void set_context(std::string c) { context_ = std::move(c); }
  int failures() const { return failures_; }
  int exit_code() const { return failures_ == 0 ? 0 : 1; }

 private:
  std::string context_;
  int failures_ = 0;
};

const char* name_of(ncclResult_t r);

// One float sum AllReduce of `count` seeded elements on `comm`, waited for (settle) and checked
// against the exact sum. Returns the call's result, or ncclInternalError when the data is wrong
// (reported). A failing call is reported only when `must_succeed`.
ncclResult_t checked_allreduce(bool gpu, ncclComm_t comm, cudaStream_t stream, int rank, int nranks,
                               std::size_t count, std::uint64_t salt, Report& report, const std::string& what,
                               bool must_succeed = true);

// Deterministic, never-zero test values: element i of rank r in trial t.
float value(std::uint64_t seed, int rank, std::size_t i);

}  // namespace faults
