// Every collective through the ncclXxx API, ranks as processes on the host datapath: each element
// type, each reduction operator, in place and out of place, counts from 0 to 1M+3; every root up
// to 4 ranks, and with more the roots 0, 1, n/2 and n-1 (the 3- and 4-rank runs cover every
// position of a root; with 8, the rooted collectives at every root took 211 s of the run's 379 on
// two cores).
// Each output element is compared bit for bit with the host reference, and the bytes around every
// buffer must stay untouched. One communicator per process serves the whole matrix. PreMulSum
// gives every rank a scalar of its own, host-immediate in half the cases and by pointer
// (ncclScalarDevice, host memory on this datapath) in the others, where the value is written only
// after the operator was created: it must be read when the collective runs.
//
//   e2e_collectives --ranks N [--filter PATTERN] [--list]
//
// Case names read "AllReduce/float16/sum/count=7/inplace" ("/root=2" for rooted collectives;
// no operator for the copies), so "--filter 'Reduce*/fp8*'" or "--filter count=1000/" select a part.
//
// The whole matrix runs at every rank count.
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "buffers.h"
#include "harness.h"
#include "plans.h"
#include "reference.h"
#include "test/common/loopback.h"

namespace e2e {
namespace {

constexpr std::size_t kCounts[] = {0, 1, 7, 1000, 65537, 1048579};

// The roots a rooted collective runs with among n ranks.
std::vector<int> roots_for(int n) {
  std::vector<int> roots;
  if (n <= 4) {
    for (int r = 0; r < n; ++r) roots.push_back(r);
  } else {
    roots = {0, 1, n / 2, n - 1};
  }
  return roots;
}

struct Rank {
  RankEnv& env;
  Slab& slab;
};

template <class T>
void run_one(Rank& rk, const CollInfo& ci, ncclDataType_t dt, Op op, std::size_t count, int root, bool in_place,
             const std::string& name) {
  Reporter& report = rk.env.report;
  const int r = rk.env.rank, n = rk.env.nranks;
  const std::uint64_t seed = hash_string(name);
  const Content<T> content{Inputs{seed, op == Op::prod}, n, op, seed >> 7};
  rk.slab.reset();
  // Element-aligned but otherwise varied buffer addresses.
  const Staged<T> call(rk.slab, ci.coll, r, n, count, root, in_place, content, seed >> 20);

  ncclRedOp_t nop = builtin(op);
  typename T::Storage scalar = content.scalar(r);  // this rank's own
  if (ci.reduces && op == Op::premulsum) {
    const bool by_pointer = (seed >> 3) & 1;
    if (by_pointer) scalar = content.scalar(r + 1);  // another value, replaced before the call
    if (!report.expect(ncclRedOpCreatePreMulSum(&nop, &scalar, dt, by_pointer ? ncclScalarDevice : ncclScalarHostImmediate,
                                                rk.env.comm),
                       "ncclRedOpCreatePreMulSum", rk.env.comm)) {
      return;  // the peers will hang in the collective: the parent's time limit reports it
    }
    if (by_pointer) scalar = content.scalar(r);
  }
  const ncclResult_t rc = issue(ci.coll, call.send, call.recv, count, dt, nop, root, rk.env.comm, r, n);
  if (ci.reduces && op == Op::premulsum) report.expect(ncclRedOpDestroy(nop, rk.env.comm), "ncclRedOpDestroy");
  if (!report.expect(rc, std::string("nccl") + ci.name, rk.env.comm)) return;
  call.check(report, "");
}

std::string case_name(const CollInfo& ci, ncclDataType_t dt, Op op, std::size_t count, bool in_place, int root) {
  std::string name = std::string(ci.name) + "/" + type_name(dt);
  if (ci.reduces) name += std::string("/") + op_name(op);
  name += "/count=" + std::to_string(count);
  name += in_place ? "/inplace" : "/outofplace";
  if (ci.rooted) name += "/root=" + std::to_string(root);
  return name;
}

void run_matrix(RankEnv& env) {
  const int n = env.nranks;
  std::size_t largest = 0;
  for (std::size_t c : kCounts) largest = std::max(largest, c);
  const std::size_t max_bytes = largest * static_cast<std::size_t>(n) * sizeof(double);
  Slab slab(Slab::room({max_bytes, max_bytes}));
  Rank rk{env, slab};

  for (const CollInfo& ci : kColls) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t ran = 0;
    const std::vector<Op> ops = ci.reduces ? std::vector<Op>(std::begin(kAllOps), std::end(kAllOps))
                                           : std::vector<Op>{Op::sum};
    const std::vector<int> roots = ci.rooted ? roots_for(n) : std::vector<int>{0};
    std::vector<bool> forms;
    if (ci.out_of_place) forms.push_back(false);
    if (ci.in_place) forms.push_back(true);
    for (ncclDataType_t dt : kAllTypes) {
      for (Op op : ops) {
        for (std::size_t count : kCounts) {
          for (bool in_place : forms) {
            for (int root : roots) {
              const std::string name = case_name(ci, dt, op, count, in_place, root);
              ran += run_case(env.report, name, [&] {
                with_type(dt, [&]<class T>() { run_one<T>(rk, ci, dt, op, count, root, in_place, name); });
              });
            }
          }
        }
      }
    }
    if (env.rank == 0 && !env.options.list && ran > 0) {
      std::printf("[%d ranks] %-13s %5llu cases in %6.1f s\n", n, ci.name, static_cast<unsigned long long>(ran),
                  seconds_since(t0));
    }
  }
}

}  // namespace
}  // namespace e2e

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  loopback::use();
  const auto started = std::chrono::steady_clock::now();
  const e2e::Options options = e2e::parse_options(argc, argv);
  const e2e::Totals totals = e2e::run_ranks(options, options.nranks, /*join=*/true, /*extra_ids=*/0, e2e::run_matrix);
  return e2e::finish(options, totals, started);
}
