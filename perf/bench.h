// One row of the table on one rank: time the call out of place and in place, then check each.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "collective.h"
#include "datapath.h"
#include "element.h"

namespace perf {

struct RowSpec {
  const Collective* coll;
  ncclDataType_t type;
  Op op;               // Op::none for the collectives that do not reduce
  int root;            // -1 for the collectives without a root
  std::size_t bytes;   // the requested size (-b ... -e); the row's size column may be smaller
  std::uint64_t seed;  // distinct per row, so every row checks fresh data
};

enum Placement { kOutOfPlace = 0, kInPlace = 1 };

// What one rank measured; rank 0 combines these over the ranks.
struct Measurement {
  double time_us[2] = {0, 0};       // by Placement: average time per call
  double host_us[2] = {0, 0};       // by Placement: CPU time per call in the entry point (--host-time)
  std::uint64_t wrong[2] = {0, 0};  // by Placement: wrong output elements (0 when not checked)
  std::uint64_t unsupported = 0;    // 1: the library refused the row with ncclInvalidArgument
};

class Bench {
 public:
  // `registered`: buffers from ncclMemAlloc, registered with ncclCommRegister (GPU datapath).
  // `host_time`: also time `iters` eager calls on the CPU clock (Measurement::host_us).
  Bench(Datapath& datapath, ncclComm_t comm, int rank, int nranks, int iters, int warmup,
        bool check, bool registered = false, bool host_time = false);
  // A row the library refuses with ncclInvalidArgument (which leaves the communicator usable, and
  // which every rank sees alike) comes back as `unsupported`; other errors throw.
  Measurement run(const RowSpec& spec);
  // Why the last unsupported row was refused.
  const std::string& unsupported_reason() const { return unsupported_reason_; }

 private:
  template <class T> Measurement run_typed(const RowSpec& spec);

  Datapath& datapath_;
  ncclComm_t comm_;
  int rank_, nranks_, iters_, warmup_;
  bool check_;
  bool registered_;
  bool host_time_;
  std::string unsupported_reason_;
};

}  // namespace perf
