#include "options.h"

#include <getopt.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>

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

enum LongOnly { kCollective = 256, kJson, kRanks, kIdFile, kDatapath, kGraph, kTimeout, kRegistered, kHostTime };

}  // namespace

std::vector<std::size_t> Options::sizes() const {
  std::vector<std::size_t> list;
  for (std::size_t size = min_bytes; size <= max_bytes; size *= step_factor) {
    list.push_back(size);
    if (size > max_bytes / step_factor) break;  // the next step would overflow or pass the end
  }
  return list;
}

const char* usage_text() {
  return
      "usage: purlin-perf [options]\n"
      "  -b, --minbytes SIZE       smallest size (bytes; K, M, G suffixes), default 32M\n"
      "  -e, --maxbytes SIZE       largest size, default 32M\n"
      "  -f, --stepfactor N        multiply the size by N between rows, default 2\n"
      "  -n, --iters N             timed iterations per row, default 20\n"
      "  -w, --warmup_iters N      untimed iterations before them, default 5\n"
      "  -c, --check 0|1           check results after timing, default 1\n"
      "  -d, --datatype TYPE       int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "                            bfloat16 f8e4m3 f8e5m2, or all; default float\n"
      "  -o, --op OP               sum prod max min avg premulsum, or all; default sum\n"
      "  -r, --root N              root rank of broadcast, reduce, gather, scatter; default 0\n"
      "      --collective NAME     all_reduce all_gather reduce_scatter alltoall broadcast\n"
      "                            reduce gather scatter sendrecv, a comma-separated list of\n"
      "                            them, or all; default all_reduce\n"
      "      --json FILE           also write every row to FILE as JSON\n"
      "      --ranks N             fork N ranks on this machine\n"
      "      --id-file PATH        under mpirun or torchrun: the file through which rank 0\n"
      "                            hands the unique id to the other ranks (shared file system)\n"
      "      --datapath D          auto, host or gpu: where the buffers live; default auto\n"
      "      --graph 0|1           GPU datapath: capture 128 calls in a CUDA graph and time its\n"
      "                            replays (-n rounds up to whole graphs; -w > 0: one untimed\n"
      "                            replay first)\n"
      "      --registered 0|1      GPU datapath: buffers from ncclMemAlloc, registered with\n"
      "                            ncclCommRegister (default 0: cudaMalloc)\n"
      "      --host-time 0|1       also time -n eager calls on the CPU clock without waiting for\n"
      "                            them: the time spent in the ncclXxx entry point per call\n"
      "      --timeout SECONDS     longest wait for another rank, default 300\n"
      "  -h, --help                this text\n";
}

Options parse_options(int argc, char** argv, bool* help) {
  static const option kLong[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"datatype", required_argument, nullptr, 'd'},
      {"op", required_argument, nullptr, 'o'},
      {"root", required_argument, nullptr, 'r'},
      {"collective", required_argument, nullptr, kCollective},
      {"json", required_argument, nullptr, kJson},
      {"ranks", required_argument, nullptr, kRanks},
      {"id-file", required_argument, nullptr, kIdFile},
      {"datapath", required_argument, nullptr, kDatapath},
      {"graph", required_argument, nullptr, kGraph},
      {"timeout", required_argument, nullptr, kTimeout},
      {"registered", required_argument, nullptr, kRegistered},
      {"host-time", required_argument, nullptr, kHostTime},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};

  Options o;
  *help = false;
  for (int i = 0; i < argc; ++i) o.args.emplace_back(argv[i]);
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:f:n:w:c:d:o:r:h", kLong, nullptr)) != -1) {
    std::string_view arg = optarg != nullptr ? optarg : "";
    switch (c) {
      case 'b': o.min_bytes = parse_size_option(arg, "-b"); break;
      case 'e': o.max_bytes = parse_size_option(arg, "-e"); break;
      case 'f': o.step_factor = static_cast<std::size_t>(parse_int(arg, "-f", 2)); break;
      case 'n': o.iters = parse_int(arg, "-n", 1); break;
      case 'w': o.warmup_iters = parse_int(arg, "-w", 0); break;
      case 'c': o.check = parse_int(arg, "-c", 0) != 0; break;
      case 'd': o.types = parse_types(arg); break;
      case 'o': o.ops = parse_ops(arg); break;
      case 'r': o.root = parse_int(arg, "-r", 0); break;
      case kCollective: o.collectives = parse_collectives(arg); break;
      case kJson: o.json_path = arg; break;
      case kRanks: o.fork_ranks = parse_int(arg, "--ranks", 1); break;
      case kIdFile: o.id_file = arg; break;
      case kDatapath: o.datapath = parse_datapath(arg); break;
      case kGraph: o.graph = parse_int(arg, "--graph", 0) != 0; break;
      case kRegistered: o.registered = parse_int(arg, "--registered", 0) != 0; break;
      case kHostTime: o.host_time = parse_int(arg, "--host-time", 0) != 0; break;
      case kTimeout: {
        char* end = nullptr;
        o.timeout_s = std::strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(o.timeout_s > 0)) {
          throw UsageError("--timeout: expected a positive number of seconds");
        }
        break;
      }
      case 'h': *help = true; return o;
      case ':': throw UsageError(std::string("option ") + argv[optind - 1] + " needs a value");
      default: throw UsageError(std::string("unknown option ") + argv[optind - 1]);
    }
  }
  if (optind < argc) throw UsageError(std::string("unexpected argument '") + argv[optind] + "'");
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
