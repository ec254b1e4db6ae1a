// purlin-perf: a benchmark in nccl-tests' form that reaches the library only through the NCCL API.
// Every rank times each row out of place and in place, checks its own output against a host
// reference, and sends its measurements to rank 0, which prints the table.
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench.h"
#include "datapath.h"
#include "launch.h"
#include "nccl_check.h"
#include "options.h"
#include "plan.h"
#include "report.h"

namespace perf {
namespace {

std::unique_ptr<Datapath> choose_datapath(const Options& o, int local_rank) {
  if (o.datapath == DatapathChoice::host) return make_host_datapath();
  std::string why_not;
  if (auto gpu = make_gpu_datapath(local_rank, o.graph, &why_not)) return gpu;
  if (o.datapath == DatapathChoice::gpu || o.graph) {
    throw std::runtime_error("the GPU datapath is not available: " + why_not);
  }
  return make_host_datapath();
}

// Destroys the communicator at the end of a run, or aborts it when the run ends in an error (the
// other ranks may be gone, and abort never waits for them).
class CommGuard {
 public:
  explicit CommGuard(ncclComm_t comm) : comm_(comm) {}
  ~CommGuard() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
  }
  CommGuard(const CommGuard&) = delete;
  CommGuard& operator=(const CommGuard&) = delete;
  void destroy() {
    ncclComm_t comm = comm_;
    comm_ = nullptr;
    check_nccl(ncclCommDestroy(comm), "ncclCommDestroy");
  }

 private:
  ncclComm_t comm_;
};

// Rank 0's view of a row: the slowest rank's time and every rank's wrong elements.
Measurement combine(const std::vector<std::string>& per_rank) {
  Measurement combined;
  for (const std::string& bytes : per_rank) {
    Measurement m;
    std::memcpy(&m, bytes.data(), std::min(bytes.size(), sizeof m));
    for (int p = 0; p < 2; ++p) {
      combined.time_us[p] = std::max(combined.time_us[p], m.time_us[p]);
      combined.host_us[p] = std::max(combined.host_us[p], m.host_us[p]);
      combined.wrong[p] += m.wrong[p];
    }
    combined.unsupported = std::max(combined.unsupported, m.unsupported);
  }
  return combined;
}

int run_rank(const Options& o, const RankContext& ctx) {
  const bool printer = ctx.rank == 0;
  if (o.root >= ctx.nranks) {
    if (printer) {
      std::fprintf(stderr, "purlin-perf: -r %d: there are only %d ranks\n", o.root, ctx.nranks);
    }
    return kExitFailed;
  }
  std::unique_ptr<Datapath> datapath = choose_datapath(o, ctx.local_rank);
  std::optional<Report> report;
  // The copy roofline, measured by rank 0 before the others start moving bytes.
  if (printer) {
    const std::size_t copy_bytes = std::string(datapath->name()) == "gpu" ? std::size_t{512} << 20 : std::size_t{64} << 20;
    report.emplace(o, ctx.nranks, datapath->name(), datapath->copy_gbps(copy_bytes));
  }

  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank), "ncclCommInitRank");
  CommGuard guard(comm);
  Bench bench(*datapath, comm, ctx.rank, ctx.nranks, o.iters, o.warmup_iters, o.check,
              o.registered, o.host_time);

  std::uint64_t row_index = 0;
  std::uint64_t my_wrong = 0;
  for (const Collective* coll : o.collectives) {
    if (report) report->begin_table(*coll);
    const std::vector<Op> ops = coll->reduces ? o.ops : std::vector<Op>{Op::none};
    for (ncclDataType_t type : o.types) {
      for (Op op : ops) {
        for (std::size_t bytes : o.sizes()) {
          const RowSpec spec{coll, type, op, coll->rooted ? o.root : -1, bytes, row_index};
          const Measurement mine = bench.run(spec);
          my_wrong += mine.wrong[0] + mine.wrong[1];
          auto all = gather_to_root(ctx, "row" + std::to_string(row_index),
                                    std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
          if (report) {
            const std::string refusal = mine.unsupported ? bench.unsupported_reason() : "";
            report->add(spec, combine(all), plan_of(spec), refusal);
          }
          ++row_index;
        }
      }
    }
    if (report) report->end_table();
  }
  guard.destroy();
  const std::uint64_t wrong = report ? report->finish() : my_wrong;
  return wrong != 0 ? kExitWrong : kExitOk;
}

}  // namespace
}  // namespace perf

int main(int argc, char** argv) {
  using namespace perf;
  bool help = false;
  Options options;
  try {
    options = parse_options(argc, argv, &help);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "purlin-perf: %s (see --help)\n", e.what());
    return kExitFailed;
  }
  if (help) {
    std::fputs(usage_text().c_str(), stdout);
    return kExitOk;
  }
  // Ranks beyond the GPU count share GPUs (local rank modulo the count): NCCL 2.30, and the library
  // as NCCL, allow that only with NCCL_MULTI_RANK_GPU_ENABLE, set here unless the caller did.
  ::setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  return launch(options, [&](const RankContext& ctx) { return run_rank(options, ctx); });
}
