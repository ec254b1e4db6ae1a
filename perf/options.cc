#include "options.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include <CLI/CLI.hpp>

namespace perf {
namespace {

// A non-negative integer with an optional K, M or G suffix (binary, as nccl-tests reads them).
std::optional<std::size_t> parse_size(std::string_view text) {
  std::size_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  std::string_view suffix(end, static_cast<std::size_t>(text.data() + text.size() - end));
  int shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty()) return std::nullopt;
  if (shift != 0 && value > (~std::size_t{0} >> shift)) return std::nullopt;
  return value << shift;
}

int parse_int(std::string_view text, const char* option, int min) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min) {
    throw UsageError(std::string(option) + ": expected an integer >= " + std::to_string(min) +
                     ", got '" + std::string(text) + "'");
  }
  return value;
}

std::size_t parse_size_option(std::string_view text, const char* option) {
  auto value = parse_size(text);
  if (!value) {
    throw UsageError(std::string(option) + ": expected a size such as 8, 64K, 1M or 2G, got '" +
                     std::string(text) + "'");
  }
  return *value;
}

std::vector<ncclDataType_t> parse_types(std::string_view text) {
  if (text == "all") return {std::begin(kAllTypes), std::end(kAllTypes)};
  auto type = parse_type(text);
  if (!type) throw UsageError("-d: unknown type '" + std::string(text) + "'");
  return {*type};
}

std::vector<Op> parse_ops(std::string_view text) {
  if (text == "all") return {std::begin(kAllOps), std::end(kAllOps)};
  auto op = parse_op(text);
  if (!op) throw UsageError("-o: unknown op '" + std::string(text) + "'");
  return {*op};
}

std::vector<const Collective*> parse_collectives(std::string_view text) {
  std::vector<const Collective*> list;
  if (text == "all") {
    for (const auto& c : all_collectives()) list.push_back(&c);
    return list;
  }
  // A comma-separated list, run in the order given.
  for (std::size_t at = 0; at <= text.size();) {
    std::size_t end = text.find(',', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view name = text.substr(at, end - at);
    const Collective* c = find_collective(name);
    if (c == nullptr) throw UsageError("--collective: unknown collective '" + std::string(name) + "'");
    if (std::find(list.begin(), list.end(), c) == list.end()) list.push_back(c);
    at = end + 1;
  }
  return list;
}

DatapathChoice parse_datapath(std::string_view text) {
  if (text == "auto") return DatapathChoice::automatic;
  if (text == "host") return DatapathChoice::host;
  if (text == "gpu") return DatapathChoice::gpu;
  throw UsageError("--datapath: expected auto, host or gpu, got '" + std::string(text) + "'");
}

double parse_timeout(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(value > 0)) {
    throw UsageError("--timeout: expected a positive number of seconds");
  }
  return value;
}

// The parser writes into `o`. Every value is taken as text and read by the helpers above, so the
// messages and the size suffixes are ours; the callbacks run once parsing is done, with the last
// value of an option given twice (as getopt did).
void describe(CLI::App& app, Options& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "this text");
  app.get_formatter()->column_width(28);
  const auto add = [&](const char* names, const char* type, const char* text, auto read) {
    app.add_option_function<std::string>(names, read, text)->type_name(type);
  };
  add("-b,--minbytes", "SIZE", "smallest size (bytes; K, M, G suffixes), default 32M",
      [&o](const std::string& v) { o.min_bytes = parse_size_option(v, "-b"); });
  add("-e,--maxbytes", "SIZE", "largest size, default 32M",
      [&o](const std::string& v) { o.max_bytes = parse_size_option(v, "-e"); });
  add("-f,--stepfactor", "N", "multiply the size by N between rows, default 2",
      [&o](const std::string& v) { o.step_factor = static_cast<std::size_t>(parse_int(v, "-f", 2)); });
  add("-n,--iters", "N", "timed iterations per row, default 20",
      [&o](const std::string& v) { o.iters = parse_int(v, "-n", 1); });
  add("-w,--warmup_iters", "N", "untimed iterations before them, default 5",
      [&o](const std::string& v) { o.warmup_iters = parse_int(v, "-w", 0); });
  add("-c,--check", "0|1", "check results after timing, default 1",
      [&o](const std::string& v) { o.check = parse_int(v, "-c", 0) != 0; });
  add("-d,--datatype", "TYPE",
      "int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "bfloat16 f8e4m3 f8e5m2, or all; default float",
      [&o](const std::string& v) { o.types = parse_types(v); });
  add("-o,--op", "OP", "sum prod max min avg premulsum, or all; default sum",
      [&o](const std::string& v) { o.ops = parse_ops(v); });
  add("-r,--root", "N", "root rank of broadcast, reduce, gather, scatter; default 0",
      [&o](const std::string& v) { o.root = parse_int(v, "-r", 0); });
  add("--collective", "NAME",
      "all_reduce all_gather reduce_scatter alltoall broadcast\n"
      "reduce gather scatter sendrecv, a comma-separated list of\n"
      "them, or all; default all_reduce",
      [&o](const std::string& v) { o.collectives = parse_collectives(v); });
  add("--json", "FILE", "also write every row to FILE as JSON",
      [&o](const std::string& v) { o.json_path = v; });
  add("--ranks", "N", "fork N ranks on this machine",
      [&o](const std::string& v) { o.fork_ranks = parse_int(v, "--ranks", 1); });
  add("--id-file", "PATH",
      "under mpirun or torchrun: the file through which rank 0\n"
      "hands the unique id to the other ranks (shared file system)",
      [&o](const std::string& v) { o.id_file = v; });
  add("--datapath", "D", "auto, host or gpu: where the buffers live; default auto",
      [&o](const std::string& v) { o.datapath = parse_datapath(v); });
  add("--graph", "0|1",
      "GPU datapath: capture 128 calls in a CUDA graph and time its\n"
      "replays (-n rounds up to whole graphs; -w > 0: one untimed\n"
      "replay first)",
      [&o](const std::string& v) { o.graph = parse_int(v, "--graph", 0) != 0; });
  add("--registered", "0|1",
      "GPU datapath: buffers from ncclMemAlloc, registered with\n"
      "ncclCommRegister (default 0: cudaMalloc)",
      [&o](const std::string& v) { o.registered = parse_int(v, "--registered", 0) != 0; });
  add("--host-time", "0|1",
      "also time -n eager calls on the CPU clock without waiting for\n"
      "them: the time spent in the ncclXxx entry point per call",
      [&o](const std::string& v) { o.host_time = parse_int(v, "--host-time", 0) != 0; });
  add("--timeout", "SECONDS", "longest wait for another rank, default 300",
      [&o](const std::string& v) { o.timeout_s = parse_timeout(v); });
}

}  // namespace

std::vector<std::size_t> Options::sizes() const {
  std::vector<std::size_t> list;
  for (std::size_t size = min_bytes; size <= max_bytes; size *= step_factor) {
    list.push_back(size);
    if (size > max_bytes / step_factor) break;  // the next step would overflow or pass the end
  }
  return list;
}

std::string usage_text() {
  CLI::App app("purlin-perf: a benchmark in nccl-tests' form", "purlin-perf");
  Options unused;
  describe(app, unused);
  return app.help();
}

Options parse_options(int argc, char** argv, bool* help) {
  Options o;
  *help = false;
  for (int i = 0; i < argc; ++i) o.args.emplace_back(argv[i]);
  CLI::App app("purlin-perf: a benchmark in nccl-tests' form", "purlin-perf");
  describe(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    *help = true;
    return Options{};
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  if (o.min_bytes == 0) throw UsageError("-b: the smallest size must be at least 1 byte");
  if (o.min_bytes > o.max_bytes) throw UsageError("-b is larger than -e");
  if (o.graph && o.datapath == DatapathChoice::host) {
    throw UsageError("--graph 1 needs the GPU datapath");
  }
  if (o.registered && o.datapath == DatapathChoice::host) {
    throw UsageError("--registered 1 needs the GPU datapath");
  }
  return o;
}

}  // namespace perf
