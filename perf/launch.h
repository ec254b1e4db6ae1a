// How the ranks of a run start and find each other, and how their results reach rank 0.
#pragma once

#include <nccl.h>

#include <functional>
#include <string>
#include <vector>

#include "exchange.h"
#include "options.h"

namespace perf {

struct RankContext {
  int rank = 0;
  int nranks = 1;
  int local_rank = 0;          // index among the ranks on this machine (which GPU to use)
  ncclUniqueId id{};
  const Mailbox* mailbox = nullptr;  // between the ranks; null when this is the only rank
};

// Exit statuses of purlin-perf.
inline constexpr int kExitOk = 0;
inline constexpr int kExitWrong = 1;    // some results were wrong
inline constexpr int kExitFailed = 2;   // usage, NCCL or environment error

// Starts the ranks the options and environment ask for, runs `rank_main` in each and returns this
// process's exit status. `rank_main`'s exceptions are reported (with the rank) as kExitFailed.
//   --ranks N            this process calls ncclGetUniqueId, forks N ranks and waits for them
//   mpirun or torchrun   this process is one rank; rank 0 writes the id to --id-file, others poll
//   otherwise            this process is the only rank
int launch(const Options& options, const std::function<int(const RankContext&)>& rank_main);

// On rank 0: every rank's `bytes` for `tag`, indexed by rank. Elsewhere: posts `bytes`, returns {}.
std::vector<std::string> gather_to_root(const RankContext& ctx, const std::string& tag,
                                        const std::string& bytes);

}  // namespace perf
