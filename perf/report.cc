#include "report.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

namespace perf {
namespace {

// `value` in at most `width` characters, with as many decimals (up to 2) as fit.
std::string fit(double value, int width) {
  char text[64];
  for (int decimals = 2; decimals >= 0; --decimals) {
    std::snprintf(text, sizeof text, "%*.*f", width, decimals, value);
    if (static_cast<int>(std::strlen(text)) <= width) return text;
  }
  std::snprintf(text, sizeof text, "%*.1e", width, value);
  if (static_cast<int>(std::strlen(text)) <= width) return text;
  std::snprintf(text, sizeof text, "%*.0e", width, value);
  return text;
}

std::string join_names(const std::vector<ncclDataType_t>& types) {
  std::string text;
  for (auto type : types) {
    if (!text.empty()) text += ' ';
    text += name_of(type);
  }
  return text;
}

std::string join_names(const std::vector<Op>& ops) {
  std::string text;
  for (auto op : ops) {
    if (!text.empty()) text += ' ';
    text += name_of(op);
  }
  return text;
}

// Column layout shared by the header and the rows.
// nccl-tests' widths, but for the redop column, widened to fit "premulsum".
constexpr const char* kLeadFormat = "%12s  %12s  %8s  %9s  %6s";
constexpr const char* kHeaderLeadFormat = "# %10s  %12s  %8s  %9s  %6s";  // same widths after "# "
constexpr int kLeadWidth = 12 + 2 + 12 + 2 + 8 + 2 + 9 + 2 + 6;
constexpr const char* kGroupFormat = "  %7s  %6s  %6s  %6s";
constexpr int kGroupWidth = 2 + 7 + 2 + 6 + 2 + 6 + 2 + 6;

std::string centered(std::string_view text, int width) {
  int left = (width - static_cast<int>(text.size())) / 2;
  std::string line(static_cast<std::size_t>(std::max(left, 0)), ' ');
  line += text;
  line.resize(static_cast<std::size_t>(width), ' ');
  return line;
}

}  // namespace

Report::Report(const Options& options, int nranks, std::string datapath, double copy_gbps)
    : options_(options), nranks_(nranks), datapath_(std::move(datapath)), copy_gbps_(copy_gbps) {
  if (!options_.json_path.empty()) {
    json_ = std::fopen(options_.json_path.c_str(), "w");
    if (json_ == nullptr) {
      throw std::runtime_error("cannot open " + options_.json_path + ": " + std::strerror(errno));
    }
  }
  int version = 0;
  ncclGetVersion(&version);
  std::printf("# purlin-perf: NCCL API %d.%d.%d, library version code %d\n", NCCL_MAJOR,
              NCCL_MINOR, NCCL_PATCH, version);
  std::printf("# Copy roofline: %.1f GB/s (a copy on the %s datapath, bytes read and written); column\n"
              "# roof: every input read once and every output written once, over all ranks, per\n"
              "# second, as a share of it\n",
              copy_gbps_, datapath_.c_str());
}

Report::~Report() {
  if (json_ != nullptr) std::fclose(json_);
}

void Report::begin_table(const Collective& coll) {
  table_start_ = rows_.size();
  const auto sizes = options_.sizes();
  std::printf("#\n# Collective %s: ranks %d, datapath %s, type %s, op %s, root %s\n", coll.name,
              nranks_, datapath_.c_str(), join_names(options_.types).c_str(),
              coll.reduces ? join_names(options_.ops).c_str() : "none",
              coll.rooted ? std::to_string(options_.root).c_str() : "none");
  std::printf("# Sizes %zu to %zu bytes (factor %zu), iterations %d after %d warm-up, check %d, "
              "graph %d, registered %d\n#\n",
              sizes.front(), sizes.back(), options_.step_factor, options_.iters,
              options_.warmup_iters, options_.check ? 1 : 0, options_.graph ? 1 : 0,
              options_.registered ? 1 : 0);
  // Built in place: "#" + std::string(...) trips GCC 12's false -Wrestrict once json.hpp is in.
  std::string groups(kLeadWidth, ' ');
  groups[0] = '#';
  groups += centered("out-of-place", kGroupWidth) + centered("in-place", kGroupWidth);
  groups.erase(groups.find_last_not_of(' ') + 1);
  std::printf("%s\n", groups.c_str());
  std::printf(kHeaderLeadFormat, "size", "count", "type", "redop", "root");
  for (int i = 0; i < 2; ++i) std::printf(kGroupFormat, "time", "algbw", "busbw", "#wrong");
  std::printf("  %6s", "roof");
  if (options_.host_time) std::printf("  %7s", "host");
  std::printf("  plan\n");
  std::printf(kHeaderLeadFormat, "(B)", "(elements)", "", "", "");
  std::printf(kGroupFormat, "(us)", "(GB/s)", "(GB/s)", "");
  std::printf("  %7s  %6s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "", "(%)");
  if (options_.host_time) std::printf("  %7s", "(us)");
  std::printf("\n");
  std::fflush(stdout);
}

void Report::add(const RowSpec& spec, const Measurement& combined, const std::string& plan,
                 const std::string& refusal) {
  Row row;
  row.spec = spec;
  row.combined = combined;
  row.plan = plan;
  if (combined.unsupported) row.unsupported = refusal.empty() ? "refused on another rank" : refusal;
  const std::size_t element = size_of(spec.type);
  const Counts counts = spec.coll->counts(spec.bytes / element, nranks_, 0);
  row.bytes = spec.coll->row_bytes(counts, element);
  row.count = counts.param;
  for (int p = 0; p < 2; ++p) {
    const double seconds = combined.time_us[p] * 1e-6;
    row.algbw[p] = seconds > 0 ? static_cast<double>(row.bytes) / 1e9 / seconds : 0.0;
    row.busbw[p] = row.algbw[p] * spec.coll->bus_factor(nranks_);
  }
  const int root = std::max(spec.root, 0);
  for (int r = 0; r < nranks_; ++r) {
    const Counts c = spec.coll->counts(spec.bytes / element, nranks_, r);
    if (spec.coll->reads_input(r, root)) row.minimal_bytes += c.send * element;
    if (spec.coll->writes_output(r, root)) row.minimal_bytes += c.recv * element;
  }
  for (int p = 0; p < 2; ++p) {
    const double seconds = combined.time_us[p] * 1e-6;
    row.roofline[p] = seconds > 0 && copy_gbps_ > 0
                          ? static_cast<double>(row.minimal_bytes) / seconds / 1e9 / copy_gbps_ : 0.0;
  }

  std::printf(kLeadFormat, std::to_string(row.bytes).c_str(), std::to_string(row.count).c_str(),
              name_of(spec.type), name_of(spec.op), std::to_string(spec.root).c_str());
  if (!row.unsupported.empty()) {
    std::printf("  unsupported: %s\n", row.unsupported.c_str());
    std::fflush(stdout);
    rows_.push_back(std::move(row));
    return;
  }
  for (int p = 0; p < 2; ++p) {
    std::printf(kGroupFormat, fit(combined.time_us[p], 7).c_str(), fit(row.algbw[p], 6).c_str(),
                fit(row.busbw[p], 6).c_str(),
                checked(row, p) ? std::to_string(combined.wrong[p]).c_str() : "N/A");
  }
  std::printf("  %s", fit(100.0 * row.roofline[kOutOfPlace], 6).c_str());
  if (options_.host_time) std::printf("  %s", fit(combined.host_us[kOutOfPlace], 7).c_str());
  std::printf("  %s\n", row.plan.c_str());
  std::fflush(stdout);
  rows_.push_back(std::move(row));
}

bool Report::checked(const Row& row, int placement) const {
  return options_.check && (placement == kOutOfPlace || row.spec.coll->checks_in_place());
}

Report::Totals Report::totals(std::size_t first_row) const {
  Totals t;
  std::size_t measured = 0;
  for (std::size_t i = first_row; i < rows_.size(); ++i) {
    const Row& row = rows_[i];
    if (!row.unsupported.empty()) {
      ++t.unsupported;
      continue;
    }
    ++measured;
    t.wrong += row.combined.wrong[0] + row.combined.wrong[1];
    t.avg_busbw += row.busbw[0] + row.busbw[1];
  }
  if (measured != 0) t.avg_busbw /= 2.0 * static_cast<double>(measured);
  return t;
}

void Report::end_table() {
  if (options_.collectives.size() < 2 || rows_.size() == table_start_) return;
  std::printf("# Avg bus bandwidth of %s: %g\n", rows_[table_start_].spec.coll->name,
              totals(table_start_).avg_busbw);
}

std::uint64_t Report::finish() {
  const Totals t = totals(0);
  std::printf("#\n# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(t.wrong),
              t.wrong != 0 ? "FAILED" : "OK");
  if (t.unsupported != 0) {
    std::printf("# Unsupported rows     : %zu (refused by the library with ncclInvalidArgument)\n",
                t.unsupported);
  }
  std::printf("# Avg bus bandwidth    : %g\n#\n", t.avg_busbw);
  std::fflush(stdout);
  if (json_ != nullptr) write_json(t);
  return t.wrong;
}

void Report::write_json(const Totals& totals) {
  using nlohmann::ordered_json;
  // nlohmann writes a NaN or an infinity as null, as readers expect of a time never measured.
  int version = 0;
  ncclGetVersion(&version);
  ordered_json rows = ordered_json::array();
  for (const Row& row : rows_) {
    const bool ran = row.unsupported.empty();
    ordered_json j = {
        {"collective", row.spec.coll->name},
        {"ranks", nranks_},
        {"datapath", datapath_},
        {"size", row.bytes},
        {"count", row.count},
        {"minimal_bytes", row.minimal_bytes},
        {"type", name_of(row.spec.type)},
        {"redop", name_of(row.spec.op)},
        {"root", row.spec.root},
        {"iterations", options_.iters},
        {"warmup_iterations", options_.warmup_iters},
        {"graph", options_.graph ? 1 : 0},
        {"registered", options_.registered ? 1 : 0},
        {"check", options_.check ? 1 : 0},
    };
    for (int p = 0; p < 2; ++p) {
      ordered_json placement;  // null when the library refused the row
      if (ran) {
        placement = {{"time_us", row.combined.time_us[p]},
                     {"algbw_gbps", row.algbw[p]},
                     {"busbw_gbps", row.busbw[p]},
                     {"wrong", checked(row, p) ? ordered_json(row.combined.wrong[p]) : nullptr},
                     {"roofline", row.roofline[p]}};
        if (options_.host_time) placement["host_us"] = row.combined.host_us[p];
      }
      j[p == kOutOfPlace ? "out_of_place" : "in_place"] = std::move(placement);
    }
    j["unsupported"] = ran ? ordered_json(nullptr) : ordered_json(row.unsupported);
    j["plan"] = row.plan;
    rows.push_back(std::move(j));
  }
  const ordered_json head = {
      {"tool", "purlin-perf"},
      {"nccl_header_version", NCCL_VERSION_CODE},
      {"nccl_library_version", version},
      {"copy_gbps", copy_gbps_},
      {"args", options_.args},
  };
  const ordered_json tail = {
      {"out_of_bounds", totals.wrong},
      {"unsupported_rows", totals.unsupported},
      {"avg_busbw_gbps", totals.avg_busbw},
  };
  // One row a line: perf/compare.py reads the rows line by line, also from a file cut short.
  const auto dump = [](const ordered_json& value) {
    return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  };
  std::string out = "{";
  const auto fields = [&](const ordered_json& object) {
    for (const auto& [key, value] : object.items()) {
      out += (out.size() > 1 ? ",\n  " : "\n  ") + dump(key) + ": " + dump(value);
    }
  };
  fields(head);
  out += ",\n  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) out += (i ? ",\n    " : "\n    ") + dump(rows[i]);
  out += "\n  ]";
  fields(tail);
  out += "\n}\n";
  if (std::fwrite(out.data(), 1, out.size(), json_) != out.size() || std::fflush(json_) != 0) {
    throw std::runtime_error("cannot write " + options_.json_path);
  }
}

}  // namespace perf
