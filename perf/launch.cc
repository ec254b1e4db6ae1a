#include "launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>

#include "nccl_check.h"

namespace perf {
namespace {

// This process's place in a job started by a launcher.
struct JobEnvironment {
  const char* launcher;
  int rank;
  int size;
  int local_rank;
};

std::optional<int> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0) return std::nullopt;
  return static_cast<int>(value);
}

std::optional<JobEnvironment> detect_job() {
  struct Launcher { const char* name; const char* rank; const char* size; const char* local; };
  static constexpr Launcher kLaunchers[] = {
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
  };
  for (const auto& l : kLaunchers) {
    auto rank = env_int(l.rank);
    auto size = env_int(l.size);
    if (!rank || !size || *size < 1 || *rank >= *size) continue;
    // RANK and WORLD_SIZE are common names: count them as torchrun's only beside MASTER_ADDR.
    if (std::strcmp(l.name, "torchrun") == 0 && std::getenv("MASTER_ADDR") == nullptr) continue;
    return JobEnvironment{l.name, *rank, *size, env_int(l.local).value_or(*rank)};
  }
  return std::nullopt;
}

// The same string on every rank of one job and (as far as the launcher lets us tell) a different
// one for the next job, so that a stale id file left by an earlier run is never used.
std::string job_key() {
  static constexpr const char* kNames[] = {
      "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME", "TORCHELASTIC_RUN_ID",
      "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURM_STEP_ID"};
  std::string key;
  for (const char* name : kNames) {
    if (const char* value = std::getenv(name)) key += std::string(name) + "=" + value + ";";
  }
  return key;
}

constexpr const char kIdFileMagic[] = "purlin-perf unique id v1";

std::string encode_id(const ncclUniqueId& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text = std::string(kIdFileMagic) + "\n" + job_key() + "\n";
  for (unsigned char byte : id.internal) {
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  return text + "\n";
}

// Accepts only a complete id file of this job.
bool decode_id(const std::string& text, ncclUniqueId* id) {
  const std::string header = std::string(kIdFileMagic) + "\n" + job_key() + "\n";
  if (text.size() != header.size() + 2 * NCCL_UNIQUE_ID_BYTES + 1) return false;
  if (text.compare(0, header.size(), header) != 0) return false;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    const char* hex = text.data() + header.size() + 2 * i;
    id->internal[i] = static_cast<char>(nibble(hex[0]) << 4 | nibble(hex[1]));
  }
  return true;
}

// A short name for this run's messages, from the unique id (which differs on every run).
std::string run_tag(const ncclUniqueId& id) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (char byte : id.internal) hash = (hash ^ static_cast<unsigned char>(byte)) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

int run_guarded(const std::function<int(const RankContext&)>& rank_main, const RankContext& ctx) {
  try {
    return rank_main(ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "purlin-perf: rank %d: %s\n", ctx.rank, e.what());
    return kExitFailed;
  }
}

int launch_alone(const std::function<int(const RankContext&)>& rank_main) {
  RankContext ctx;
  try {
    check_nccl(ncclGetUniqueId(&ctx.id), "ncclGetUniqueId");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "purlin-perf: %s\n", e.what());
    return kExitFailed;
  }
  return run_guarded(rank_main, ctx);
}

int launch_in_job(const Options& options, const JobEnvironment& job,
                  const std::function<int(const RankContext&)>& rank_main) {
  RankContext ctx;
  ctx.rank = job.rank;
  ctx.nranks = job.size;
  ctx.local_rank = job.local_rank;
  try {
    if (ctx.rank == 0) {
      check_nccl(ncclGetUniqueId(&ctx.id), "ncclGetUniqueId");
      write_file_atomically(options.id_file, encode_id(ctx.id));
    } else {
      wait_for_file(options.id_file, options.timeout_s, "rank 0's unique id",
                    [&](const std::string& text) { return decode_id(text, &ctx.id); });
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "purlin-perf: rank %d: %s\n", ctx.rank, e.what());
    return kExitFailed;
  }
  Mailbox mailbox(options.id_file + "." + run_tag(ctx.id) + ".", options.timeout_s);
  ctx.mailbox = &mailbox;
  int status = run_guarded(rank_main, ctx);
  // Rank 0 has heard from every rank by now, so every rank has read the id.
  if (ctx.rank == 0) std::remove(options.id_file.c_str());
  return status;
}

// Reaps the forked ranks; when one fails, stops the others (they would wait for it forever).
int wait_for_ranks(std::vector<pid_t>& pids) {
  int worst = kExitOk;
  std::size_t running = pids.size();
  bool stopping = false;
  while (running > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int rank = -1;
    for (std::size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] == pid) {
        rank = static_cast<int>(r);
        pids[r] = -1;
      }
    }
    if (rank < 0) continue;
    --running;
    int code = kExitFailed;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status) && !stopping) {
      std::fprintf(stderr, "purlin-perf: rank %d died of signal %d (%s)\n", rank,
                   WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    if (code > worst) worst = code;
    if (code >= kExitFailed && !stopping) {
      stopping = true;
      for (pid_t other : pids) {
        if (other > 0) ::kill(other, SIGTERM);
      }
    }
  }
  return worst;
}

int launch_forked(const Options& options,
                  const std::function<int(const RankContext&)>& rank_main) {
  RankContext ctx;
  ctx.nranks = options.fork_ranks;
  try {
    check_nccl(ncclGetUniqueId(&ctx.id), "ncclGetUniqueId");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "purlin-perf: %s\n", e.what());
    return kExitFailed;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string directory =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/purlin-perf.XXXXXX";
  if (::mkdtemp(directory.data()) == nullptr) {
    std::fprintf(stderr, "purlin-perf: cannot create %s: %s\n", directory.c_str(),
                 std::strerror(errno));
    return kExitFailed;
  }
  Mailbox mailbox(directory + "/", options.timeout_s);
  ctx.mailbox = &mailbox;

  std::fflush(nullptr);  // nothing buffered may be written twice
  std::vector<pid_t> pids;
  int status = kExitOk;
  for (int r = 0; r < options.fork_ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ctx.rank = r;
      ctx.local_rank = r;
      int code = run_guarded(rank_main, ctx);
      std::fflush(nullptr);
      // _exit: the parent's library state (a bootstrap thread object, say) must not be torn down
      // by a child that only inherited a copy of it.
      ::_exit(code);
    }
    if (pid < 0) {
      std::fprintf(stderr, "purlin-perf: fork failed: %s\n", std::strerror(errno));
      for (pid_t started : pids) ::kill(started, SIGTERM);
      status = kExitFailed;
      break;
    }
    pids.push_back(pid);
  }
  int ranks_status = wait_for_ranks(pids);
  if (ranks_status > status) status = ranks_status;
  std::error_code ignored;
  std::filesystem::remove_all(directory, ignored);
  return status;
}

}  // namespace

int launch(const Options& options, const std::function<int(const RankContext&)>& rank_main) {
  auto job = detect_job();
  if (options.fork_ranks > 0) {
    if (job && job->size > 1) {
      std::fprintf(stderr, "purlin-perf: --ranks cannot be used under %s (job of %d ranks)\n",
                   job->launcher, job->size);
      return kExitFailed;
    }
    return launch_forked(options, rank_main);
  }
  if (job && job->size > 1) {
    if (options.id_file.empty()) {
      std::fprintf(stderr, "purlin-perf: started by %s as rank %d of %d: --id-file PATH is needed "
                   "(a path all ranks can read)\n", job->launcher, job->rank, job->size);
      return kExitFailed;
    }
    return launch_in_job(options, *job, rank_main);
  }
  return launch_alone(rank_main);
}

std::vector<std::string> gather_to_root(const RankContext& ctx, const std::string& tag,
                                        const std::string& bytes) {
  if (ctx.nranks == 1) return {bytes};
  if (ctx.rank != 0) {
    ctx.mailbox->post(tag + ".rank" + std::to_string(ctx.rank), bytes);
    return {};
  }
  std::vector<std::string> all(static_cast<std::size_t>(ctx.nranks));
  all[0] = bytes;
  for (int r = 1; r < ctx.nranks; ++r) {
    all[static_cast<std::size_t>(r)] = ctx.mailbox->take(tag + ".rank" + std::to_string(r));
  }
  return all;
}

}  // namespace perf
