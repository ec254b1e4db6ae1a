// The V collectives of include/purlin/purlin.h through the library, ranks as processes on the host
// datapath: random uneven counts (zeros included) and scattered displacements, seeded random inputs,
// poisoned outputs, a reference computed here. Prints "N passed, N failed".
#include <nccl.h>
#include <purlin/purlin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "test/common/loopback.h"
#include "test/common/ranks.h"

namespace {

std::int32_t value(int rank, std::size_t i, int round) {
  return static_cast<std::int32_t>((rank + 1) * 1000003 + i * 7919 + round * 31 + 1);
}

// Counts every rank agrees on: counts[s][d] elements go from s to d.
std::vector<std::vector<std::size_t>> matrix(int n, int round) {
  std::mt19937 g(1234 + round);
  std::vector<std::vector<std::size_t>> c(n, std::vector<std::size_t>(n));
  for (auto& row : c)
    for (auto& x : row) x = g() % 4 == 0 ? 0 : g() % 3000;
  return c;
}

int run_rank(int me, int n, ncclUniqueId id) {
  if (setenv("PURLIN_DATAPATH", "host", 1) != 0) return 1;
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, n, id, me) != ncclSuccess) return 1;
  int failures = 0;
  for (int round = 0; round < 6; ++round) {
    auto c = matrix(n, round);
    // AlltoAllV: displacements leave gaps of 3 elements.
    std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
    std::size_t so = 0, ro = 0;
    for (int k = 0; k < n; ++k) {
      sc[k] = c[me][k], sd[k] = so, so += sc[k] + 3;
      rc[k] = c[k][me], rd[k] = ro, ro += rc[k] + 3;
    }
    // Odd rounds: the send and receive partitions in one buffer, apart (allowed).
    std::vector<std::int32_t> one(so + 1 + ro + 1), send_apart(so + 1), recv_apart(ro + 1);
    std::int32_t* send = round % 2 ? one.data() : send_apart.data();
    std::int32_t* recv = round % 2 ? one.data() + so + 1 : recv_apart.data();
    for (std::size_t i = 0; i <= so; ++i) send[i] = value(me, i, round);
    for (std::size_t i = 0; i <= ro; ++i) recv[i] = -7;
    // In place (a send partition over a receive partition) is refused, and the communicator stays usable.
    if (round % 2 && sc[n - 1] > 0 && rc[n - 1] > 0) {
      std::vector<std::size_t> over = sd;
      over[n - 1] = static_cast<std::size_t>(recv - send) + rd[n - 1];  // send partition n-1 at receive partition n-1
      if (ncclPurlinAlltoAllV(send, sc.data(), over.data(), recv, rc.data(), rd.data(), ncclInt32, comm, nullptr) !=
          ncclInvalidArgument)
        ++failures;
    }
    if (ncclPurlinAlltoAllV(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), ncclInt32, comm, nullptr) !=
        ncclSuccess)
      ++failures;
    for (int s = 0; s < n; ++s) {
      std::size_t their = 0;  // rank s's displacement for me
      for (int k = 0; k < me; ++k) their += c[s][k] + 3;
      for (std::size_t i = 0; i < rc[s]; ++i)
        if (recv[rd[s] + i] != value(s, their + i, round)) {
          ++failures;
          break;
        }
      if (recv[rd[s] + rc[s]] != -7) ++failures;  // gap (or the spare element at the end) untouched
    }
    // AllGatherV: rank s contributes c[s][0] elements.
    std::vector<std::size_t> gc(n), gd(n);
    std::size_t go = 0;
    for (int k = 0; k < n; ++k) gc[k] = c[k][0], gd[k] = go, go += gc[k] + 5;
    std::vector<std::int32_t> gin(gc[me] + 1), gout(go + 1, -7);
    for (std::size_t i = 0; i < gin.size(); ++i) gin[i] = value(me, i, round);
    if (ncclPurlinAllGatherV(gin.data(), gc[me], gout.data(), gc.data(), gd.data(), ncclInt32, comm, nullptr) !=
        ncclSuccess)
      ++failures;
    for (int s = 0; s < n; ++s)
      for (std::size_t i = 0; i < gc[s]; ++i)
        if (gout[gd[s] + i] != value(s, i, round)) {
          ++failures;
          break;
        }
    // ReduceScatterV: partition k has c[0][k] elements; sum over ranks in order.
    std::vector<std::size_t> pc(n), pd(n);
    std::size_t po = 0;
    for (int k = 0; k < n; ++k) pc[k] = c[0][k], pd[k] = po, po += pc[k] + 2;
    std::vector<std::int32_t> pin(po + 1), pout(pc[me] + 1, -7);
    for (std::size_t i = 0; i < pin.size(); ++i) pin[i] = value(me, i, round);
    if (ncclPurlinReduceScatterV(pin.data(), pc.data(), pd.data(), pout.data(), ncclInt32, ncclSum, comm, nullptr) !=
        ncclSuccess)
      ++failures;
    for (std::size_t i = 0; i < pc[me]; ++i) {
      std::uint32_t want = 0;
      for (int s = 0; s < n; ++s) want += static_cast<std::uint32_t>(value(s, pd[me] + i, round));
      if (static_cast<std::uint32_t>(pout[i]) != want) {
        ++failures;
        break;
      }
    }
    if (pout[pc[me]] != -7) ++failures;
  }
  int mode = 0;
  if (ncclPurlinReductionMode(comm, &mode) != ncclSuccess || mode != 1) ++failures;
  ncclCommDestroy(comm);
  return failures ? 1 : 0;
}

}  // namespace

int main() {
  loopback::use();
  int passed = 0, failed = 0;
  for (int n : {1, 2, 3, 5}) {
    setenv("PURLIN_DATAPATH", "host", 1);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    bool ok = true;
    for (const ranks::Outcome& o : ranks::run(n, [&](int r) { return run_rank(r, n, id); })) ok = ok && o.ok();
    std::printf("%s V collectives with %d ranks\n", ok ? "ok" : "FAIL", n);
    (ok ? passed : failed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
