#include "support.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#if defined(PURLIN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "test/common/rng.h"

namespace faults {

namespace {

[[noreturn]] void usage(const char* argv0, const std::string& bad) {
  std::fprintf(stderr,
               "%s: bad argument '%s'\n"
               "usage: %s [--trials N] [--ranks N] [--datapath host|gpu] [--seed N] [--connections N]\n"
               "          [--cycles N] [--abort-cycles N] [--only PHASE[,PHASE...]]\n",
               argv0, bad.c_str(), argv0);
  std::exit(2);
}

long to_long(const char* argv0, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || v > hi) usage(argv0, text);
  return v;
}

int count_entries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - (std::strcmp(dir, "/proc/self/fd") == 0 ? 1 : 0);  // the directory being read
}

}  // namespace

// Eight flags read by hand (--name=value too): not worth a parser library as a dependency of
// the test binaries.
Options parse_options(int argc, char** argv, Options o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(argv[0], a);
    }
    if (a == "--trials") o.trials = static_cast<int>(to_long(argv[0], value, 0, 1000000));
    else if (a == "--ranks") o.ranks = static_cast<int>(to_long(argv[0], value, 2, 64));
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(to_long(argv[0], value, 0, 1L << 62));
    else if (a == "--connections") o.connections = static_cast<int>(to_long(argv[0], value, 0, 100000));
    else if (a == "--cycles") o.cycles = static_cast<int>(to_long(argv[0], value, 0, 1000000));
    else if (a == "--abort-cycles") o.abort_cycles = static_cast<int>(to_long(argv[0], value, 0, 1000000));
    else if (a == "--datapath" && (value == "host" || value == "gpu")) o.gpu = value == "gpu";
    else if (a == "--only") {
      for (std::size_t at = 0; at <= value.size();) {
        std::size_t comma = value.find(',', at);
        if (comma == std::string::npos) comma = value.size();
        if (comma > at) o.only.push_back(value.substr(at, comma - at));
        at = comma + 1;
      }
    } else {
      usage(argv[0], a + (value.empty() ? "" : "=" + value));
    }
  }
  if (o.seed == 0) o.seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) | 1;
  return o;
}

bool selected(const Options& o, const std::string& phase) {
  if (o.only.empty()) return true;
  for (const std::string& p : o.only)
    if (p == phase) return true;
  return false;
}

namespace {

// `fn()` computed in a child process (0 when that fails). What asks CUDA runs there: the tests
// fork their ranks from this process, and a process that has initialised CUDA cannot hand it to
// the children it forks.
std::uint64_t in_child(std::uint64_t (*fn)()) {
  int fds[2];
  if (::pipe(fds) != 0) return 0;
  ranks::Group child(1, [&](int) {
    ::close(fds[0]);
    const std::uint64_t value = fn();
    (void)!::write(fds[1], &value, sizeof value);
    return 0;
  });
  ::close(fds[1]);
  std::uint64_t value = 0;
  if (child.all_started()) {
    if (::read(fds[0], &value, sizeof value) != static_cast<ssize_t>(sizeof value)) value = 0;
    child.wait();
  }
  ::close(fds[0]);
  return value;
}

}  // namespace

void select_datapath(const Options& o) {
  if (!o.gpu) {
    ::setenv("PURLIN_DATAPATH", "host", 1);
    return;
  }
#if defined(PURLIN_HAVE_CUDA)
  const std::uint64_t devices = in_child([] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? static_cast<std::uint64_t>(n) : 0;
  });
  if (devices == 0) {
    std::printf("SKIP: the GPU datapath was asked for and no CUDA device is usable here\n");
    std::exit(kSkipped);
  }
  ::setenv("PURLIN_DATAPATH", "sm", 1);
#else
  std::printf("SKIP: the GPU datapath was asked for and this build has no CUDA runtime (-Dgpu=disabled)\n");
  std::exit(kSkipped);
#endif
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- buffers and streams -------------------------------------------------------------------------

Buffer::Buffer(bool gpu, std::size_t bytes, bool cumem) : gpu_(gpu), cumem_(gpu && cumem) {
  if (bytes == 0) bytes = 1;
#if defined(PURLIN_HAVE_CUDA)
  if (cumem_) {
    if (ncclMemAlloc(&data_, bytes) != ncclSuccess) throw std::bad_alloc();
    return;
  }
  if (gpu_) {
    if (cudaMalloc(&data_, bytes) != cudaSuccess) throw std::bad_alloc();
    return;
  }
#endif
  data_ = ::operator new(bytes, std::align_val_t(64));
}

Buffer::~Buffer() {
#if defined(PURLIN_HAVE_CUDA)
  if (cumem_) {
    ncclMemFree(data_);
    return;
  }
  if (gpu_) {
    cudaFree(data_);
    return;
  }
#endif
  ::operator delete(data_, std::align_val_t(64));
}

void Buffer::upload(const void* host, std::size_t bytes) {
#if defined(PURLIN_HAVE_CUDA)
  if (gpu_) {
    // From pageable memory cudaMemcpy may return before the copy has landed, and the tests' streams
    // do not wait for the legacy stream: wait for it here, or a collective may run before its input
    // (or an output's poison) is in place.
    cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice);
    cudaStreamSynchronize(cudaStreamLegacy);
    return;
  }
#endif
  std::memcpy(data_, host, bytes);
}

void Buffer::download(void* host, std::size_t bytes) const {
#if defined(PURLIN_HAVE_CUDA)
  if (gpu_) {
    cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost);
    return;
  }
#endif
  std::memcpy(host, data_, bytes);
}

cudaStream_t make_stream(bool gpu) {
#if defined(PURLIN_HAVE_CUDA)
  if (gpu) {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) return s;
  }
#endif
  (void)gpu;
  return nullptr;
}

bool stream_pending(bool gpu, cudaStream_t s) {
#if defined(PURLIN_HAVE_CUDA)
  if (gpu) return cudaStreamQuery(s) == cudaErrorNotReady;
#endif
  (void)gpu;
  (void)s;
  return false;
}

std::uint64_t gpu_used_by_probe(bool gpu) {
  return gpu ? in_child([] { return gpu_used(true); }) : 0;
}

void start_cuda(bool gpu) {
#if defined(PURLIN_HAVE_CUDA)
  if (gpu) cudaFree(nullptr);
#endif
  (void)gpu;
}

void destroy_stream(bool gpu, cudaStream_t s) {
#if defined(PURLIN_HAVE_CUDA)
  if (gpu && s) cudaStreamDestroy(s);
#endif
  (void)gpu;
  (void)s;
}

ncclResult_t settle(bool gpu, ncclComm_t comm, cudaStream_t stream, double timeout_s) {
  const double until = now_s() + timeout_s;
  for (;;) {
    // The stream first: once it has finished, the state read next includes whatever its kernels
    // reported before they ended.
    bool finished = true;
#if defined(PURLIN_HAVE_CUDA)
    if (gpu) {
      cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaErrorNotReady) finished = false;
      else if (e != cudaSuccess) return ncclUnhandledCudaError;
    }
#else
    (void)gpu;
    (void)stream;
#endif
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInvalidArgument;
    if (state != ncclSuccess && state != ncclInProgress) return state;
    if (finished && state == ncclSuccess) return ncclSuccess;
    if (now_s() > until) return ncclInternalError;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

ncclResult_t poll_state(ncclComm_t comm, double timeout_s, double* longest_call_s) {
  const double until = now_s() + timeout_s;
  double longest = 0;
  ncclResult_t state = ncclInProgress;
  for (;;) {
    const double t0 = now_s();
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    longest = std::max(longest, now_s() - t0);
    if (r != ncclSuccess) {
      state = r;
      break;
    }
    if (state != ncclInProgress || now_s() > until) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (longest_call_s) *longest_call_s = longest;
  return state;
}

// ---- resources -------------------------------------------------------------------------------------

int open_fds() { return count_entries("/proc/self/fd"); }
int threads() { return count_entries("/proc/self/task"); }

std::set<std::string> shm_names() {
  std::set<std::string> out;
  DIR* d = ::opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) out.insert(e->d_name);
  ::closedir(d);
  return out;
}

std::vector<std::string> shm_files(const std::vector<pid_t>& pids, const std::set<std::string>& before) {
  std::vector<std::string> out;
  for (const std::string& name : shm_names()) {
    if (name.rfind("purlin-", 0) != 0 || before.count(name) != 0) continue;
    bool ours = pids.empty();
    for (pid_t p : pids) {
      char prefix[64];
      std::snprintf(prefix, sizeof prefix, "purlin-%x-", static_cast<unsigned>(p));
      ours = ours || name.rfind(prefix, 0) == 0;
    }
    if (ours) out.push_back(name);
  }
  return out;
}

namespace {
constexpr char kWindowName[] = "/memfd:purlin-window";
}  // namespace

std::set<unsigned long> window_inodes(pid_t pid) {
  std::set<unsigned long> out;
  const std::string proc = "/proc/" + std::to_string(pid);
  if (DIR* d = ::opendir((proc + "/fd").c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string path = proc + "/fd/" + e->d_name;
      char link[256] = {};
      struct stat st{};
      if (::readlink(path.c_str(), link, sizeof link - 1) > 0 && std::strncmp(link, kWindowName, sizeof kWindowName - 1) == 0 &&
          ::stat(path.c_str(), &st) == 0)
        out.insert(static_cast<unsigned long>(st.st_ino));
    }
    ::closedir(d);
  }
  // "start-end perms offset dev inode path"
  if (std::FILE* f = std::fopen((proc + "/maps").c_str(), "r")) {
    char line[1024];
    while (std::fgets(line, sizeof line, f)) {
      unsigned long ino = 0;
      int path_at = 0;
      if (std::sscanf(line, "%*s %*s %*s %*s %lu %n", &ino, &path_at) == 1 && path_at > 0 &&
          std::strncmp(line + path_at, kWindowName, sizeof kWindowName - 1) == 0)
        out.insert(ino);
    }
    std::fclose(f);
  }
  return out;
}

std::vector<pid_t> window_holders(const std::set<unsigned long>& inodes) {
  std::vector<pid_t> out;
  if (inodes.empty()) return out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    for (unsigned long ino : window_inodes(static_cast<pid_t>(pid))) {
      if (inodes.count(ino) == 0) continue;
      out.push_back(static_cast<pid_t>(pid));
      break;
    }
  }
  ::closedir(d);
  return out;
}

std::uint64_t gpu_used(bool gpu) {
#if defined(PURLIN_HAVE_CUDA)
  if (gpu) {
    std::size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) return total - free_bytes;
  }
#endif
  (void)gpu;
  return 0;
}

int wait_threads(int target, double seconds) {
  const double until = now_s() + seconds;
  int n = threads();
  while (n > target && now_s() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = threads();
  }
  return n;
}

// ---- rank processes ----------------------------------------------------------------------------------

void* shared_block(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(2);
  }
  return p;
}

// ---- report ----------------------------------------------------------------------------------------

bool Report::check(bool ok, const std::string& what) {
  if (ok) return true;
  ++failures_;
  std::fprintf(stderr, "FAIL [%s] %s\n", context_.c_str(), what.c_str());
  return false;
}

bool Report::expect(ncclResult_t got, ncclResult_t want, const std::string& what, ncclComm_t comm) {
  if (got == want) return true;
  std::string detail = what + " returned " + name_of(got) + ", expected " + name_of(want);
  const char* last = ncclGetLastError(comm);
  if (last && *last) detail += " (last error: " + std::string(last) + ")";
  return check(false, detail);
}

const char* name_of(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "(unknown result)";
  }
}

ncclResult_t checked_allreduce(bool gpu, ncclComm_t comm, cudaStream_t stream, int rank, int nranks,
                               std::size_t count, std::uint64_t salt, Report& report, const std::string& what,
                               bool must_succeed) {
  std::vector<float> in(count), out(count, -1.0f);
  for (std::size_t i = 0; i < count; ++i) in[i] = value(salt, rank, i);
  Buffer send(gpu, count * sizeof(float)), recv(gpu, count * sizeof(float));
  send.upload(in.data(), count * sizeof(float));
  recv.upload(out.data(), count * sizeof(float));
  ncclResult_t r = ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, stream);
  if (r == ncclSuccess || r == ncclInProgress) r = settle(gpu, comm, stream, 120);
  if (r != ncclSuccess) {
    if (must_succeed) report.expect(r, ncclSuccess, what, comm);
    return r;
  }
  recv.download(out.data(), count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < nranks; ++q) want += value(salt, q, i);
    if (out[i] != want) {
      report.check(false, what + ": element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
                              std::to_string(want));
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

float value(std::uint64_t seed, int rank, std::size_t i) {
  const std::uint64_t key = seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(rank) * 0xbf58476d1ce4e5b9ull;
  const std::uint64_t x = rng::splitmix(key + i);
  return static_cast<float>(1 + (x % 15));  // small integers: every summation order is exact
}

}  // namespace faults
