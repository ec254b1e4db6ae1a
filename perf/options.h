// purlin-perf's command line, parsed and validated once.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective.h"
#include "datapath.h"
#include "element.h"

namespace perf {

struct Options {
  std::size_t min_bytes = 32u << 20;        // -b
  std::size_t max_bytes = 32u << 20;        // -e
  std::size_t step_factor = 2;              // -f
  int iters = 20;                           // -n
  int warmup_iters = 5;                     // -w
  bool check = true;                        // -c
  std::vector<ncclDataType_t> types = {ncclFloat32};                 // -d
  std::vector<Op> ops = {Op::sum};                                   // -o
  int root = 0;                                                      // -r
  std::vector<const Collective*> collectives = {find_collective("all_reduce")};  // --collective
  std::string json_path;                    // --json
  int fork_ranks = 0;                       // --ranks (0: this process is one rank)
  std::string id_file;                      // --id-file
  DatapathChoice datapath = DatapathChoice::automatic;  // --datapath
  bool graph = false;                       // --graph (GPU datapath only)
  bool registered = false;                  // --registered (GPU datapath only)
  bool host_time = false;                   // --host-time
  double timeout_s = 300.0;                 // --timeout: longest wait for another rank
  std::vector<std::string> args;            // the command line, for the JSON report

  // The row sizes: min_bytes, then times step_factor while within max_bytes.
  std::vector<std::size_t> sizes() const;
};

// Bad usage; the message says what and main prints the usage after it.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws UsageError. `-h` / `--help` sets *help and returns defaults.
Options parse_options(int argc, char** argv, bool* help);
std::string usage_text();

}  // namespace perf
