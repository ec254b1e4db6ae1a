// Argument sweep: every exported function, called with each invalid argument NCCL rejects and a
// few it misses (byte sizes that overflow, buffers of another GPU, communicators and reduction
// operators already destroyed, configs from older headers), must give the exact return code, a
// non-empty ncclGetLastError that names the function (or, where NCCL refuses silently, the last
// error unchanged), and leave the communicator working: a checked AllReduce follows every case.
//
// With --header PATH (meson passes the toolkit's nccl.h) every function the header declares must
// have a case here.
//
//   test_argsweep [--datapath host|gpu] [--header nccl.h]
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#if defined(PURLIN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "nccl_shim/nccl_next.h"
#include "support.h"
#include "test/common/loopback.h"

// Purlin's additions (include/purlin/purlin.h) and the host functions of NCCL's device API, whose
// headers need CUDA's: declared here with opaque pointers.
extern "C" {
ncclResult_t ncclPurlinAllGatherV(const void*, size_t, void*, const size_t*, const size_t*, ncclDataType_t, ncclComm_t,
                                  cudaStream_t);
ncclResult_t ncclPurlinReduceScatterV(const void*, const size_t*, const size_t*, void*, ncclDataType_t, ncclRedOp_t,
                                      ncclComm_t, cudaStream_t);
ncclResult_t ncclPurlinAlltoAllV(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*,
                                 ncclDataType_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclPurlinReductionMode(ncclComm_t, int*);
ncclResult_t ncclDevCommCreate(ncclComm_t, const void*, void*);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const void*);
ncclResult_t ncclLLA2ACreateRequirement(int, int, void*, void*);
int ncclLLA2ACalcSlots(int, int);
}

namespace faults {
namespace {

constexpr cudaStream_t kStream = nullptr;

struct Case {
  std::string fn;     // the function called
  std::string what;   // the invalid argument
  ncclResult_t want;
  std::function<ncclResult_t()> call;
  bool silent = false;  // refused as NCCL refuses it: no WARN, the last error left as it was
};

std::set<std::string> declared_functions(const std::string& header) {
  std::ifstream in(header);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::set<std::string> out;
  const std::regex decl(R"((?:ncclResult_t|const\s+char\s*\*)\s+(nccl[A-Za-z0-9_]+)\s*\()");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), decl); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

ncclComm_t one_rank_comm(Report& report, const ncclConfig_t* config = nullptr) {
  ncclUniqueId id;
  if (!report.expect(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId")) return nullptr;
  ncclComm_t c = nullptr;
  ncclConfig_t copy;
  if (config) std::memcpy(&copy, config, sizeof copy);
  report.expect(ncclCommInitRankConfig(&c, 1, id, 0, config ? &copy : nullptr), ncclSuccess, "ncclCommInitRankConfig");
  return c;
}

}  // namespace
}  // namespace faults

int main(int argc, char** argv) {
  using namespace faults;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  std::string header;
  std::vector<char*> rest = {argv[0]};
  // One flag of its own taken out by hand; the rest go to faults::parse_options.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--header" && i + 1 < argc) header = argv[++i];
    else rest.push_back(argv[i]);
  }
  const Options o = parse_options(static_cast<int>(rest.size()), rest.data(), Options{});
  select_datapath(o);
  Report report("argsweep");

  ncclComm_t comm = one_rank_comm(report);
  ncclComm_t dead = one_rank_comm(report);
  if (!comm || !dead) return 1;
  report.expect(ncclCommDestroy(dead), ncclSuccess, "ncclCommDestroy");
  float scalar = 2.0f;
  ncclRedOp_t dead_op = ncclSum, live_op = ncclSum;
  report.expect(ncclRedOpCreatePreMulSum(&dead_op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess,
                "ncclRedOpCreatePreMulSum");
  report.expect(ncclRedOpDestroy(dead_op, comm), ncclSuccess, "ncclRedOpDestroy");
  report.expect(ncclRedOpCreatePreMulSum(&live_op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), ncclSuccess,
                "ncclRedOpCreatePreMulSum");

  constexpr std::size_t c = 64;
  Buffer sendb(o.gpu, 4 * c * sizeof(double)), recvb(o.gpu, 4 * c * sizeof(double));
  void* s = sendb.data();
  void* r = recvb.data();
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 4 + 1;  // x 4 bytes overflows
  const auto bad_type = static_cast<ncclDataType_t>(ncclNumTypes);
  const auto neg_type = static_cast<ncclDataType_t>(-1);
  const auto uncreated = static_cast<ncclRedOp_t>(ncclNumOps + 7);
  const auto neg_op = static_cast<ncclRedOp_t>(-1);
  ncclUniqueId id0{};  // zeros: not an id
  ncclUniqueId fresh;
  ncclGetUniqueId(&fresh);
  ncclComm_t out = nullptr;
  int iv = 0;
  ncclResult_t rv = ncclSuccess;
  void* handle = nullptr;
  ncclWindow_t win = nullptr;
  int self[1] = {0};
  int out_of_range[1] = {1};
  size_t counts[1] = {c}, displs[1] = {0}, wrong[1] = {c + 1};
  size_t far[1] = {std::numeric_limits<std::size_t>::max() / 2}, too_many[1] = {huge};
  int bogus_handle = 0;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ncclSimInfo_t bad_sim = NCCL_SIM_INFO_INITIALIZER;
  bad_sim.magic = 0;
  auto cfg = [](auto edit) {
    ncclConfig_t cf = NCCL_CONFIG_INITIALIZER;
    edit(cf);
    return cf;
  };
  ncclConfig_t cfg_size = cfg([](ncclConfig_t& x) { x.size = 8; });
  ncclConfig_t cfg_magic = cfg([](ncclConfig_t& x) { x.magic = 0xbadc0de; });
  ncclConfig_t cfg_blocking = cfg([](ncclConfig_t& x) { x.blocking = 2; });
  // Fields NCCL checks although Purlin has no use for them.
  const std::vector<std::pair<std::string, ncclConfig_t>> bad_fields = {
      {"cgaClusterSize -1", cfg([](ncclConfig_t& x) { x.cgaClusterSize = -1; })},
      {"minCTAs 0", cfg([](ncclConfig_t& x) { x.minCTAs = 0; })},
      {"maxCTAs -2", cfg([](ncclConfig_t& x) { x.maxCTAs = -2; })},
      {"minCTAs 8 > maxCTAs 4", cfg([](ncclConfig_t& x) { x.minCTAs = 8; x.maxCTAs = 4; })},
      // As NCCL 2.30.7: minCTAs is compared with an unset maxCTAs (INT_MIN).
      {"minCTAs 4, maxCTAs unset", cfg([](ncclConfig_t& x) { x.minCTAs = 4; })},
      {"splitShare 2", cfg([](ncclConfig_t& x) { x.splitShare = 2; })},
      {"collnetEnable 2", cfg([](ncclConfig_t& x) { x.collnetEnable = 2; })},
      {"CTAPolicy 8", cfg([](ncclConfig_t& x) { x.CTAPolicy = 8; })},
      {"shrinkShare -1", cfg([](ncclConfig_t& x) { x.shrinkShare = -1; })},
      {"nvlsCTAs 0", cfg([](ncclConfig_t& x) { x.nvlsCTAs = 0; })},
      {"nChannelsPerNetPeer 65", cfg([](ncclConfig_t& x) { x.nChannelsPerNetPeer = 65; })},
      {"nvlinkCentricSched 3", cfg([](ncclConfig_t& x) { x.nvlinkCentricSched = 3; })},
  };

  const ncclResult_t A = ncclInvalidArgument, U = ncclInvalidUsage, C = ncclUnhandledCudaError, OK = ncclSuccess;
  std::vector<Case> cases = {
      {"ncclGetVersion", "version NULL", A, [] { return ncclGetVersion(nullptr); }, true},
      {"ncclGetUniqueId", "uniqueId NULL", A, [] { return ncclGetUniqueId(nullptr); }},
      {"ncclCommInitRank", "newcomm NULL", A, [&] { return ncclCommInitRank(nullptr, 1, fresh, 0); }},
      {"ncclCommInitRank", "nranks 0", A, [&] { return ncclCommInitRank(&out, 0, fresh, 0); }},
      {"ncclCommInitRank", "rank == nranks", A, [&] { return ncclCommInitRank(&out, 2, fresh, 2); }},
      {"ncclCommInitRank", "rank -1", A, [&] { return ncclCommInitRank(&out, 2, fresh, -1); }},
      {"ncclCommInitRank", "an id ncclGetUniqueId did not make", A, [&] { return ncclCommInitRank(&out, 1, id0, 0); }},
      {"ncclCommInitRankConfig", "config size 8", A, [&] { return ncclCommInitRankConfig(&out, 1, fresh, 0, &cfg_size); }},
      {"ncclCommInitRankConfig", "config magic", A, [&] { return ncclCommInitRankConfig(&out, 1, fresh, 0, &cfg_magic); }},
      {"ncclCommInitRankConfig", "config blocking 2", A,
       [&] { return ncclCommInitRankConfig(&out, 1, fresh, 0, &cfg_blocking); }},
      {"ncclCommInitRankScalable", "nId 0", A, [&] { return ncclCommInitRankScalable(&out, 1, 0, 0, &fresh, nullptr); }},
      {"ncclCommInitRankScalable", "nId > nranks", A, [&] { return ncclCommInitRankScalable(&out, 1, 0, 2, &fresh, nullptr); }},
      {"ncclCommInitRankScalable", "commIds NULL", A, [&] { return ncclCommInitRankScalable(&out, 1, 0, 1, nullptr, nullptr); }},
      {"ncclCommInitAll", "comms NULL", A, [] { return ncclCommInitAll(nullptr, 1, nullptr); }},
      {"ncclCommInitAll", "ndev 0", A, [&] { return ncclCommInitAll(&out, 0, nullptr); }},
      {"ncclCommInitAll", "devlist {-1}", A, [&] {
         const int devs[1] = {-1};
         return ncclCommInitAll(&out, 1, devs);
       }},
      {"ncclCommFinalize", "a destroyed comm", A, [&] { return ncclCommFinalize(dead); }},
      {"ncclCommDestroy", "a destroyed comm", A, [&] { return ncclCommDestroy(dead); }},
      {"ncclCommAbort", "a destroyed comm", A, [&] { return ncclCommAbort(dead); }},
      {"ncclCommRevoke", "flags 1", A, [&] { return ncclCommRevoke(comm, 1); }},
      {"ncclCommRevoke", "a destroyed comm", A, [&] { return ncclCommRevoke(dead, NCCL_REVOKE_DEFAULT); }},
      {"ncclCommSplit", "comm NULL", A, [&] { return ncclCommSplit(nullptr, 0, 0, &out, nullptr); }},
      {"ncclCommSplit", "a destroyed comm", A, [&] { return ncclCommSplit(dead, 0, 0, &out, nullptr); }},
      {"ncclCommSplit", "newcomm NULL", A, [&] { return ncclCommSplit(comm, 0, 0, nullptr, nullptr); }},
      // A negative colour other than NCCL_SPLIT_NOCOLOR is no error: it names a group, as in NCCL.
      {"ncclCommSplit", "config magic", A, [&] { return ncclCommSplit(comm, 0, 0, &out, &cfg_magic); }},
      // As NCCL: a rank that joins no child does not read the config.
      {"ncclCommSplit", "NOCOLOR, config magic", OK,
       [&] { return ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &out, &cfg_magic); }},
      {"ncclCommShrink", "comm NULL", A, [&] { return ncclCommShrink(nullptr, out_of_range, 1, &out, nullptr, 0); }},
      {"ncclCommShrink", "a destroyed comm", A, [&] { return ncclCommShrink(dead, out_of_range, 1, &out, nullptr, 0); }},
      {"ncclCommShrink", "newcomm NULL", A, [&] { return ncclCommShrink(comm, out_of_range, 1, nullptr, nullptr, 0); }},
      {"ncclCommShrink", "exclude list NULL", A, [&] { return ncclCommShrink(comm, nullptr, 1, &out, nullptr, 0); }},
      {"ncclCommShrink", "exclude count 0", A, [&] { return ncclCommShrink(comm, self, 0, &out, nullptr, 0); }},
      {"ncclCommShrink", "rank out of range", A, [&] { return ncclCommShrink(comm, out_of_range, 1, &out, nullptr, 0); }},
      {"ncclCommShrink", "the caller excluded", A, [&] { return ncclCommShrink(comm, self, 1, &out, nullptr, 0); }},
      {"ncclCommShrink", "flags 2", A, [&] { return ncclCommShrink(comm, out_of_range, 1, &out, nullptr, 2); }},
      {"ncclCommGetAsyncError", "comm NULL", A, [&] { return ncclCommGetAsyncError(nullptr, &rv); }},
      {"ncclCommGetAsyncError", "a destroyed comm", A, [&] { return ncclCommGetAsyncError(dead, &rv); }},
      {"ncclCommGetAsyncError", "asyncError NULL", A, [&] { return ncclCommGetAsyncError(comm, nullptr); }},
      {"ncclCommCount", "comm NULL", A, [&] { return ncclCommCount(nullptr, &iv); }},
      {"ncclCommCount", "a destroyed comm", A, [&] { return ncclCommCount(dead, &iv); }},
      {"ncclCommCount", "count NULL", A, [&] { return ncclCommCount(comm, nullptr); }},
      {"ncclCommCuDevice", "comm NULL", A, [&] { return ncclCommCuDevice(nullptr, &iv); }},
      {"ncclCommCuDevice", "a destroyed comm", A, [&] { return ncclCommCuDevice(dead, &iv); }},
      {"ncclCommCuDevice", "device NULL", A, [&] { return ncclCommCuDevice(comm, nullptr); }},
      {"ncclCommUserRank", "comm NULL", A, [&] { return ncclCommUserRank(nullptr, &iv); }},
      {"ncclCommUserRank", "a destroyed comm", A, [&] { return ncclCommUserRank(dead, &iv); }},
      {"ncclCommUserRank", "rank NULL", A, [&] { return ncclCommUserRank(comm, nullptr); }},
      // NCCL's code: its CUDA calls fail on these (cudaMalloc of NULL; no allocation at the pointer).
      {"ncclMemAlloc", "ptr NULL", C, [] { return ncclMemAlloc(nullptr, 64); }},
      {"ncclMemFree", "a pointer ncclMemAlloc did not return", C, [&] { return ncclMemFree(&bogus_handle); }},
      {"ncclCommRegister", "comm NULL", A, [&] { return ncclCommRegister(nullptr, r, 64, &handle); }},
      {"ncclCommRegister", "a destroyed comm", A, [&] { return ncclCommRegister(dead, r, 64, &handle); }},
      {"ncclCommRegister", "handle NULL", A, [&] { return ncclCommRegister(comm, r, 64, nullptr); }},
      // On a GPU, as NCCL 2.30.7 with cuMem on: the driver knows no allocation at NULL.
      {"ncclCommRegister", "buff NULL", o.gpu ? C : A, [&] { return ncclCommRegister(comm, nullptr, 64, &handle); }},
      {"ncclCommDeregister", "comm NULL", A, [&] { return ncclCommDeregister(nullptr, &bogus_handle); }},
      {"ncclCommDeregister", "a handle it never gave", U, [&] { return ncclCommDeregister(comm, &bogus_handle); }},
      {"ncclCommWindowRegister", "comm NULL", A, [&] { return ncclCommWindowRegister(nullptr, r, 64, &win, 0); }},
      {"ncclCommWindowRegister", "win NULL", A, [&] { return ncclCommWindowRegister(comm, r, 64, nullptr, 0); }},
      {"ncclCommWindowRegister", "buff NULL", A, [&] { return ncclCommWindowRegister(comm, nullptr, 64, &win, 0); }},
      {"ncclCommWindowDeregister", "comm NULL", A, [&] { return ncclCommWindowDeregister(nullptr, nullptr); }},
      {"ncclCommWindowDeregister", "a window it never gave", A,
       [&] { return ncclCommWindowDeregister(comm, reinterpret_cast<ncclWindow_t>(&bogus_handle)); }},
      {"ncclRedOpCreatePreMulSum", "op NULL", A,
       [&] { return ncclRedOpCreatePreMulSum(nullptr, &scalar, ncclFloat32, ncclScalarHostImmediate, comm); }},
      {"ncclRedOpCreatePreMulSum", "scalar NULL", A,
       [&] { return ncclRedOpCreatePreMulSum(&live_op, nullptr, ncclFloat32, ncclScalarHostImmediate, comm); }},
      {"ncclRedOpCreatePreMulSum", "datatype 12", A,
       [&] { return ncclRedOpCreatePreMulSum(&live_op, &scalar, bad_type, ncclScalarHostImmediate, comm); }},
      {"ncclRedOpCreatePreMulSum", "residence 5", A, [&] {
         return ncclRedOpCreatePreMulSum(&live_op, &scalar, ncclFloat32, static_cast<ncclScalarResidence_t>(5), comm);
       }},
      {"ncclRedOpCreatePreMulSum", "comm NULL", A,
       [&] { return ncclRedOpCreatePreMulSum(&live_op, &scalar, ncclFloat32, ncclScalarHostImmediate, nullptr); }},
      {"ncclRedOpCreatePreMulSum", "a destroyed comm", A,
       [&] { return ncclRedOpCreatePreMulSum(&live_op, &scalar, ncclFloat32, ncclScalarHostImmediate, dead); }},
      {"ncclRedOpDestroy", "a built-in op", A, [&] { return ncclRedOpDestroy(ncclSum, comm); }},
      {"ncclRedOpDestroy", "a built-in op, comm NULL (the op is checked first)", A,
       [&] { return ncclRedOpDestroy(ncclMax, nullptr); }},
      {"ncclRedOpDestroy", "a negative op", A, [&] { return ncclRedOpDestroy(static_cast<ncclRedOp_t>(-1), comm); }},
      {"ncclRedOpDestroy", "an op already destroyed", A, [&] { return ncclRedOpDestroy(dead_op, comm); }},
      {"ncclRedOpDestroy", "comm NULL", A, [&] { return ncclRedOpDestroy(live_op, nullptr); }},
      {"ncclRedOpDestroy", "a destroyed comm", A, [&] { return ncclRedOpDestroy(live_op, dead); }},
      {"ncclGroupEnd", "no ncclGroupStart", U, [] { return ncclGroupEnd(); }},
      {"ncclGroupSimulateEnd", "no ncclGroupStart", U, [&] { return ncclGroupSimulateEnd(&sim); }},
      // simInfo NULL is no error (NCCL: the group simply ends; test/e2e's Api/group_error).
      {"ncclGroupSimulateEnd", "simInfo magic", A, [&] {
         ncclGroupStart();
         return ncclGroupSimulateEnd(&bad_sim);
       }},
      {"ncclPurlinAllGatherV", "recvcounts NULL", A,
       [&] { return ncclPurlinAllGatherV(s, c, r, nullptr, displs, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAllGatherV", "recvcounts[rank] != sendcount", A,
       [&] { return ncclPurlinAllGatherV(s, c, r, wrong, displs, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAllGatherV", "a destroyed comm", A,
       [&] { return ncclPurlinAllGatherV(s, c, r, counts, displs, ncclFloat32, dead, kStream); }},
      {"ncclPurlinAllGatherV", "displs NULL", A,
       [&] { return ncclPurlinAllGatherV(s, c, r, counts, nullptr, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAllGatherV", "recvbuff NULL", A,
       [&] { return ncclPurlinAllGatherV(s, c, nullptr, counts, displs, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAllGatherV", "a displacement whose byte offset overflows", A,
       [&] { return ncclPurlinAllGatherV(s, c, r, counts, far, ncclFloat32, comm, kStream); }},
      {"ncclPurlinReduceScatterV", "recvcounts NULL", A,
       [&] { return ncclPurlinReduceScatterV(s, nullptr, displs, r, ncclFloat32, ncclSum, comm, kStream); }},
      {"ncclPurlinReduceScatterV", "sendbuff NULL", A,
       [&] { return ncclPurlinReduceScatterV(nullptr, counts, displs, r, ncclFloat32, ncclSum, comm, kStream); }},
      {"ncclPurlinReduceScatterV", "recvbuff NULL", A,
       [&] { return ncclPurlinReduceScatterV(s, counts, displs, nullptr, ncclFloat32, ncclSum, comm, kStream); }},
      {"ncclPurlinReduceScatterV", "a displacement whose byte offset overflows", A,
       [&] { return ncclPurlinReduceScatterV(s, counts, far, r, ncclFloat32, ncclSum, comm, kStream); }},
      {"ncclPurlinReduceScatterV", "displacements NULL", A,
       [&] { return ncclPurlinReduceScatterV(s, counts, nullptr, r, ncclFloat32, ncclSum, comm, kStream); }},
      {"ncclPurlinReduceScatterV", "an op already destroyed", A,
       [&] { return ncclPurlinReduceScatterV(s, counts, displs, r, ncclFloat32, dead_op, comm, kStream); }},
      {"ncclPurlinAlltoAllV", "sendcounts NULL", A,
       [&] { return ncclPurlinAlltoAllV(s, nullptr, displs, r, counts, displs, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAlltoAllV", "datatype 12", A,
       [&] { return ncclPurlinAlltoAllV(s, counts, displs, r, counts, displs, bad_type, comm, kStream); }},
      {"ncclPurlinAlltoAllV", "rdispls NULL", A,
       [&] { return ncclPurlinAlltoAllV(s, counts, displs, r, counts, nullptr, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAlltoAllV", "a count whose byte size overflows", A,
       [&] { return ncclPurlinAlltoAllV(s, too_many, displs, r, counts, displs, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAlltoAllV", "sendbuff NULL", A,
       [&] { return ncclPurlinAlltoAllV(nullptr, counts, displs, r, counts, displs, ncclFloat32, comm, kStream); }},
      {"ncclPurlinAlltoAllV", "recvbuff NULL", A,
       [&] { return ncclPurlinAlltoAllV(s, counts, displs, nullptr, counts, displs, ncclFloat32, comm, kStream); }},
      {"ncclPurlinReductionMode", "mode NULL", A, [&] { return ncclPurlinReductionMode(comm, nullptr); }},
      {"ncclPurlinReductionMode", "comm NULL", A, [&] { return ncclPurlinReductionMode(nullptr, &iv); }},
      {"ncclDevCommCreate", "not offered", U, [&] { return ncclDevCommCreate(comm, nullptr, nullptr); }},
      {"ncclDevCommDestroy", "not offered", U, [&] { return ncclDevCommDestroy(comm, nullptr); }},
      {"ncclLLA2ACreateRequirement", "not offered", U, [] { return ncclLLA2ACreateRequirement(1, 1, nullptr, nullptr); }},
  };

  // Every collective and Send/Recv: the arguments NCCL checks, and byte sizes that overflow.
  struct Coll {
    std::string fn;
    bool reduces, rooted, p2p;
    std::function<ncclResult_t(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t)> call;
  };
  const std::vector<Coll> colls = {
      {"ncclAllReduce", true, false, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t op, int, ncclComm_t m) {
         return ncclAllReduce(a, b, n, t, op, m, kStream);
       }},
      {"ncclBroadcast", false, true, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t, int root, ncclComm_t m) {
         return ncclBroadcast(a, b, n, t, root, m, kStream);
       }},
      {"ncclBcast", false, true, false,
       [](const void*, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t, int root, ncclComm_t m) {
         return ncclBcast(b, n, t, root, m, kStream);
       }},
      {"ncclReduce", true, true, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t m) {
         return ncclReduce(a, b, n, t, op, root, m, kStream);
       }},
      {"ncclAllGather", false, false, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t, int, ncclComm_t m) {
         return ncclAllGather(a, b, n, t, m, kStream);
       }},
      {"ncclReduceScatter", true, false, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t op, int, ncclComm_t m) {
         return ncclReduceScatter(a, b, n, t, op, m, kStream);
       }},
      {"ncclAlltoAll", false, false, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t, int, ncclComm_t m) {
         return ncclAlltoAll(a, b, n, t, m, kStream);
       }},
      {"ncclGather", false, true, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t, int root, ncclComm_t m) {
         return ncclGather(a, b, n, t, root, m, kStream);
       }},
      {"ncclScatter", false, true, false,
       [](const void* a, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t, int root, ncclComm_t m) {
         return ncclScatter(a, b, n, t, root, m, kStream);
       }},
      {"ncclSend", false, true, true,
       [](const void* a, void*, std::size_t n, ncclDataType_t t, ncclRedOp_t, int peer, ncclComm_t m) {
         return ncclSend(a, n, t, peer, m, kStream);
       }},
      {"ncclRecv", false, true, true,
       [](const void*, void* b, std::size_t n, ncclDataType_t t, ncclRedOp_t, int peer, ncclComm_t m) {
         return ncclRecv(b, n, t, peer, m, kStream);
       }},
  };
  // The fields NCCL 2.29 and 2.30 added, from a caller built against 2.30.7's header.
  auto cfg230 = [](auto edit) {
    const ncclConfig_t base = NCCL_CONFIG_INITIALIZER;
    PurlinConfigV23000 cf{};
    std::memcpy(&cf, &base, sizeof(base));
    cf.size = sizeof(cf);
    cf.version = NCCL_VERSION(2, 30, 7);
    cf.graphUsageMode = cf.numRmaCtx = cf.maxP2pPeers = cf.graphStreamOrdering = NCCL_CONFIG_UNDEF_INT;
    edit(cf);
    return cf;
  };
  const std::vector<std::pair<std::string, PurlinConfigV23000>> bad_fields_230 = {
      {"graphUsageMode 3", cfg230([](PurlinConfigV23000& x) { x.graphUsageMode = 3; })},
      {"numRmaCtx -1", cfg230([](PurlinConfigV23000& x) { x.numRmaCtx = -1; })},
      {"maxP2pPeers 0", cfg230([](PurlinConfigV23000& x) { x.maxP2pPeers = 0; })},
      {"graphStreamOrdering 2", cfg230([](PurlinConfigV23000& x) { x.graphStreamOrdering = 2; })},
  };
  for (const auto& [what, bad] : bad_fields_230) {
    ncclConfig_t* config = reinterpret_cast<ncclConfig_t*>(const_cast<PurlinConfigV23000*>(&bad));
    cases.push_back({"ncclCommInitRankConfig", "2.30 config " + what, A,
                     [&out, &fresh, config] { return ncclCommInitRankConfig(&out, 1, fresh, 0, config); }});
    cases.push_back({"ncclCommSplit", "2.30 config " + what, A,
                     [&out, &comm, config] { return ncclCommSplit(comm, 0, 0, &out, config); }});
  }
  for (const auto& [what, bad] : bad_fields) {
    ncclConfig_t* config = const_cast<ncclConfig_t*>(&bad);
    cases.push_back({"ncclCommInitRankConfig", "config " + what, A,
                     [&out, &fresh, config] { return ncclCommInitRankConfig(&out, 1, fresh, 0, config); }});
    cases.push_back({"ncclCommSplit", "config " + what, A, [&out, &comm, config] { return ncclCommSplit(comm, 0, 0, &out, config); }});
  }
  for (const Coll& k : colls) {
    auto add = [&](const std::string& what, auto&& fn) { cases.push_back({k.fn, what, A, fn}); };
    const auto call = k.call;
    add("comm NULL", [=] { return call(s, r, c, ncclFloat32, ncclSum, 0, nullptr); });
    add("a destroyed comm", [=] { return call(s, r, c, ncclFloat32, ncclSum, 0, dead); });
    add("datatype 12", [=] { return call(s, r, c, bad_type, ncclSum, 0, comm); });
    add("datatype -1", [=] { return call(s, r, c, neg_type, ncclSum, 0, comm); });
    add("a count whose byte size overflows", [=] { return call(s, r, huge, ncclFloat32, ncclSum, 0, comm); });
    if (k.fn != "ncclRecv" && k.fn != "ncclBcast") add("sendbuff NULL", [=] { return call(nullptr, r, c, ncclFloat32, ncclSum, 0, comm); });
    if (k.fn != "ncclSend") add("recvbuff NULL", [=] { return call(s, nullptr, c, ncclFloat32, ncclSum, 0, comm); });
    if (k.rooted) {
      const std::string who = k.p2p ? "peer" : "root";
      add(who + " -1", [=] { return call(s, r, c, ncclFloat32, ncclSum, -1, comm); });
      add(who + " nranks", [=] { return call(s, r, c, ncclFloat32, ncclSum, 1, comm); });
    }
    if (k.reduces) {
      add("op -1", [=] { return call(s, r, c, ncclFloat32, neg_op, 0, comm); });
      add("an op never created", [=] { return call(s, r, c, ncclFloat32, uncreated, 0, comm); });
      add("an op already destroyed", [=] { return call(s, r, c, ncclFloat32, dead_op, 0, comm); });
      add("an op created for another type", [=] { return call(s, r, c, ncclInt32, live_op, 0, comm); });
    }
  }

  // On the host datapath a registration of 0 bytes is refused; on a GPU NCCL registers it.
  if (!o.gpu) cases.push_back({"ncclCommRegister", "size 0", A, [&] { return ncclCommRegister(comm, r, 0, &handle); }});

  // Buffers of another GPU: only where a second GPU exists, on a communicator made under
  // NCCL_CHECK_MODE=DEBUG_LOCAL (NCCL asks the driver about buffers only then).
#if defined(PURLIN_HAVE_CUDA)
  void* other_gpu = nullptr;
  int devices = 0;
  ncclComm_t checked = nullptr;
  if (o.gpu && cudaGetDeviceCount(&devices) == cudaSuccess && devices > 1) {
    int mine = 0;
    cudaGetDevice(&mine);
    cudaSetDevice((mine + 1) % devices);
    cudaMalloc(&other_gpu, c * sizeof(float));
    cudaSetDevice(mine);
    ::setenv("NCCL_CHECK_MODE", "DEBUG_LOCAL", 1);
    checked = one_rank_comm(report);
    ::unsetenv("NCCL_CHECK_MODE");
    cases.push_back({"ncclAllReduce", "sendbuff on another GPU", A,
                     [&] { return ncclAllReduce(other_gpu, r, c, ncclFloat32, ncclSum, checked, kStream); }});
    cases.push_back({"ncclBroadcast", "recvbuff on another GPU", A,
                     [&] { return ncclBroadcast(s, other_gpu, c, ncclFloat32, 0, checked, kStream); }});
  } else {
    std::printf("cases with buffers of another GPU: skipped (%s)\n", o.gpu ? "one GPU here" : "host datapath");
  }
#else
  std::printf("cases with buffers of another GPU: skipped (no CUDA in this build)\n");
#endif

  // Run every case, then prove the communicator still works.
  std::map<std::string, int> per_function;
  int n = 0;
  for (const Case& k : cases) {
    report.set_context("argsweep " + k.fn + " (" + k.what + ")");
    out = nullptr;
    const std::string before = ncclGetLastError(nullptr);
    const ncclResult_t got = k.call();
    report.expect(got, k.want, k.fn + " with " + k.what);
    const char* last = ncclGetLastError(nullptr);
    if (k.silent) {
      report.check(last && before == last, "ncclGetLastError changed to: " + std::string(last ? last : ""));
    } else {
      report.check(last && *last, "ncclGetLastError is empty");
      report.check(last && std::strstr(last, k.fn.c_str()), "ncclGetLastError does not name " + k.fn + ": " + (last ? last : ""));
    }
    report.check(out == nullptr, "a failed call returned a communicator");
    if (got == ncclSuccess && out) ncclCommDestroy(out);
    checked_allreduce(o.gpu, comm, kStream, 0, 1, 1 + (n * 37) % 5000, static_cast<std::uint64_t>(n), report,
                      "AllReduce after " + k.fn + " (" + k.what + ")");
    ++per_function[k.fn];
    ++n;
  }
  report.set_context("argsweep");

  // Calls that answer with something other than a code.
  report.check(ncclGetErrorString(static_cast<ncclResult_t>(99)) != nullptr &&
                   *ncclGetErrorString(static_cast<ncclResult_t>(99)) != '\0',
               "ncclGetErrorString of an unknown code is empty");
  report.check(ncclGetLastError(dead) != nullptr, "ncclGetLastError of a destroyed comm is NULL");
  report.check(ncclLLA2ACalcSlots(1, 1) == 0, "ncclLLA2ACalcSlots is offered");
  report.check(*ncclGetLastError(nullptr) != '\0', "ncclLLA2ACalcSlots left no last error");
  per_function["ncclGetErrorString"]++;
  per_function["ncclGetLastError"]++;
  // ncclGroupStart takes no argument: nesting and an empty group are fine.
  report.expect(ncclGroupStart(), OK, "ncclGroupStart");
  report.expect(ncclGroupStart(), OK, "a nested ncclGroupStart");
  report.expect(ncclGroupEnd(), OK, "the inner ncclGroupEnd");
  report.expect(ncclGroupEnd(), OK, "the outer ncclGroupEnd of an empty group");
  per_function["ncclGroupStart"]++;

  // Arguments NCCL accepts: NULL comms for destroy, abort, finalize and revoke; ncclMemFree(NULL);
  // configs from older headers (only the fields within their size are read: garbage beyond it).
  report.expect(ncclCommDestroy(nullptr), OK, "ncclCommDestroy(NULL)");
  report.expect(ncclCommAbort(nullptr), OK, "ncclCommAbort(NULL)");
  report.expect(ncclCommFinalize(nullptr), OK, "ncclCommFinalize(NULL)");
  report.expect(ncclCommRevoke(nullptr, NCCL_REVOKE_DEFAULT), OK, "ncclCommRevoke(NULL)");
  report.expect(ncclMemFree(nullptr), OK, "ncclMemFree(NULL)");
  // ncclMemAlloc of 0 bytes is cudaMalloc's: success and a NULL pointer where a GPU is usable,
  // NCCL's CUDA error where none is.
  void* none = &bogus_handle;
  const ncclResult_t zero = ncclMemAlloc(&none, 0);
  report.check(zero == OK || (!o.gpu && zero == ncclUnhandledCudaError),
               std::string("ncclMemAlloc of 0 bytes: ") + ncclGetErrorString(zero));
  report.check(none == nullptr, "ncclMemAlloc of 0 bytes left a pointer");
  for (std::size_t size : {offsetof(ncclConfig_t, cgaClusterSize), offsetof(ncclConfig_t, splitShare),
                           offsetof(ncclConfig_t, collnetEnable), offsetof(ncclConfig_t, nChannelsPerNetPeer)}) {
    ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
    std::memset(reinterpret_cast<char*>(&old) + size, 0x7f, sizeof(old) - size);
    old.size = size;
    old.blocking = 1;
    ncclComm_t c2 = one_rank_comm(report, &old);
    if (report.check(c2 != nullptr, "a config of " + std::to_string(size) + " bytes (an older header) was refused")) {
      checked_allreduce(o.gpu, c2, kStream, 0, 1, 100, 5, report, "AllReduce on a comm from an older config");
      report.expect(ncclCommDestroy(c2), OK, "ncclCommDestroy");
    }
  }

  // Configs NCCL accepts: fields that the caller's version did not have are taken as unset whatever
  // they hold (a 2.13 caller's blocking, a 2.26 caller's collnetEnable and nvlsCTAs, a 2.28 caller's
  // graphUsageMode); a 2.30 caller's valid fields.
  {
    PurlinConfigV23000 v213 = cfg230([](PurlinConfigV23000& x) {
      x.version = NCCL_VERSION(2, 13, 0);
      x.blocking = 2;
      x.minCTAs = -3;
    });
    PurlinConfigV23000 v226 = cfg230([](PurlinConfigV23000& x) {
      x.version = NCCL_VERSION(2, 26, 0);
      x.collnetEnable = 5;
      x.nvlsCTAs = 0;
    });
    PurlinConfigV23000 v228 = cfg230([](PurlinConfigV23000& x) {
      x.version = NCCL_VERSION(2, 28, 9);
      x.graphUsageMode = 9;
      x.maxP2pPeers = -1;
    });
    PurlinConfigV23000 v230 = cfg230([](PurlinConfigV23000& x) {
      x.blocking = 1;
      x.graphUsageMode = 1;
      x.numRmaCtx = 0;
      x.maxP2pPeers = 4;
      x.graphStreamOrdering = 0;
    });
    const std::pair<const char*, PurlinConfigV23000*> configs[] = {
        {"2.13", &v213}, {"2.26", &v226}, {"2.28", &v228}, {"2.30", &v230}};
    for (const auto& [what, config] : configs) {
      ncclUniqueId id;
      ncclComm_t c2 = nullptr;
      report.expect(ncclGetUniqueId(&id), OK, "ncclGetUniqueId");
      report.expect(ncclCommInitRankConfig(&c2, 1, id, 0, reinterpret_cast<ncclConfig_t*>(config)), OK,
                    std::string("a config of version ") + what);
      if (c2) {
        checked_allreduce(o.gpu, c2, kStream, 0, 1, 100, 5, report, std::string("AllReduce, config ") + what);
        report.expect(ncclCommDestroy(c2), OK, "ncclCommDestroy");
      }
    }
  }

  // Coverage: every function nccl.h declares has a case.
  if (!header.empty()) {
    const auto declared = declared_functions(header);
    report.check(declared.size() > 30, "found only " + std::to_string(declared.size()) + " functions in " + header);
    for (const std::string& f : declared) {
      if (f.rfind("pnccl", 0) == 0) continue;
      report.check(per_function.count(f) > 0, f + " (declared in nccl.h) has no case");
      report.check(dlsym(RTLD_DEFAULT, f.c_str()) != nullptr, f + " is not exported");
    }
  }

  report.expect(ncclRedOpDestroy(live_op, comm), OK, "ncclRedOpDestroy");
  report.expect(ncclCommDestroy(comm), OK, "ncclCommDestroy");
#if defined(PURLIN_HAVE_CUDA)
  if (checked) report.expect(ncclCommDestroy(checked), OK, "ncclCommDestroy");
  if (other_gpu) cudaFree(other_gpu);
#endif
  std::printf("argument sweep: %d cases over %zu functions, %d failures\n", n, per_function.size(), report.failures());
  return report.exit_code();
}
