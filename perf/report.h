// Rank 0's output: the nccl-tests-style table on stdout and, with --json, every row as JSON.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "options.h"

namespace perf {

// One printed row: the spec, the measurements combined over ranks (maximum time, total wrong) and
// the derived columns.
struct Row {
  RowSpec spec;
  std::size_t bytes = 0;   // size column: the larger of the send and receive buffers
  std::size_t count = 0;   // count column: the count argument of the call
  Measurement combined;
  double algbw[2] = {0, 0};  // GB/s, by Placement
  double busbw[2] = {0, 0};
  std::size_t minimal_bytes = 0;  // every input read once and every output written once, all ranks
  double roofline[2] = {0, 0};    // (minimal_bytes / time) / the copy roofline
  std::string plan;
  std::string unsupported;   // why the library refused the row; empty when it ran
};

class Report {
 public:
  // Opens the JSON file now, so a bad path fails before any measurement. Throws on error.
  // `copy_gbps`: the copy roofline measured on this datapath (bytes read and written per second).
  Report(const Options& options, int nranks, std::string datapath, double copy_gbps);
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  void begin_table(const Collective& coll);
  // Computes the derived columns, prints the row and keeps it for the JSON file. `refusal` says
  // why the library refused the row, when `combined.unsupported`.
  void add(const RowSpec& spec, const Measurement& combined, const std::string& plan,
           const std::string& refusal);
  void end_table();
  // Prints the summary, writes the JSON file and returns the total of wrong elements.
  std::uint64_t finish();

 private:
  struct Totals {
    std::uint64_t wrong = 0;
    std::size_t unsupported = 0;
    double avg_busbw = 0;  // as nccl-tests: over every measured row, out of place and in place
  };
  Totals totals(std::size_t first_row) const;
  bool checked(const Row& row, int placement) const;
  void write_json(const Totals& totals);

  const Options& options_;
  int nranks_;
  std::string datapath_;
  double copy_gbps_;
  std::FILE* json_ = nullptr;
  std::vector<Row> rows_;
  std::size_t table_start_ = 0;  // index in rows_ of the current table's first row
};

}  // namespace perf
