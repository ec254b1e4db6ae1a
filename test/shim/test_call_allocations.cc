// A repeated call outside any group allocates nothing on the calling thread: every collective of
// the NCCL API, and Send/Recv, each called again and again on the same buffers, ranks as processes
// on the host datapath. This binary counts the calling thread's operator new (the library's
// allocations resolve to it); each call's result is checked once, against a reference computed
// here, so the calls counted are calls that work. Prints "N passed, N failed".
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "test/common/loopback.h"
#include "test/common/ranks.h"

namespace {
thread_local std::uint64_t t_news = 0;
}

void* operator new(std::size_t n) {
  ++t_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

constexpr std::size_t kCount = 1000;  // elements per rank's part
constexpr int kWarm = 5, kCalls = 200;

float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 97)) * 0.5f; }

struct Case {
  const char* name;
  // One call; `check` says whether to compare its output with the reference (returns failures).
  std::function<int(bool check)> call;
};

int run_rank(int me, int n, ncclUniqueId id) {
  if (setenv("PURLIN_DATAPATH", "host", 1) != 0) return 1;
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, n, id, me) != ncclSuccess) return 1;
  std::vector<float> in(kCount * n), out(kCount * n);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(me, i);
  auto sum_of = [&](std::size_t i) {
    float s = 0;
    for (int r = 0; r < n; ++r) s += value(r, i);
    return s;
  };
  auto ok = [](ncclResult_t r) { return r == ncclSuccess ? 0 : 1; };
  const int peer = (me + 1) % n, from = (me + n - 1) % n;
  std::vector<Case> cases = {
      {"AllReduce",
       [&](bool check) {
         int bad = ok(ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr));
         for (std::size_t i = 0; check && i < kCount; ++i) bad += out[i] != sum_of(i);
         return bad;
       }},
      {"AllGather",
       [&](bool check) {
         int bad = ok(ncclAllGather(in.data(), out.data(), kCount, ncclFloat32, comm, nullptr));
         for (std::size_t i = 0; check && i < kCount * n; ++i) bad += out[i] != value(static_cast<int>(i / kCount), i % kCount);
         return bad;
       }},
      {"ReduceScatter",
       [&](bool check) {
         int bad = ok(ncclReduceScatter(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr));
         for (std::size_t i = 0; check && i < kCount; ++i) bad += out[i] != sum_of(me * kCount + i);
         return bad;
       }},
      {"AlltoAll",
       [&](bool check) {
         int bad = ok(ncclAlltoAll(in.data(), out.data(), kCount, ncclFloat32, comm, nullptr));
         for (std::size_t i = 0; check && i < kCount * n; ++i)
           bad += out[i] != value(static_cast<int>(i / kCount), me * kCount + i % kCount);
         return bad;
       }},
      {"Broadcast",
       [&](bool check) {
         int bad = ok(ncclBroadcast(in.data(), out.data(), kCount, ncclFloat32, n - 1, comm, nullptr));
         for (std::size_t i = 0; check && i < kCount; ++i) bad += out[i] != value(n - 1, i);
         return bad;
       }},
      {"Reduce",
       [&](bool check) {
         int bad = ok(ncclReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, 0, comm, nullptr));
         for (std::size_t i = 0; check && me == 0 && i < kCount; ++i) bad += out[i] != sum_of(i);
         return bad;
       }},
      {"Send/Recv",
       [&](bool check) {
         // Outside a group a Send and a Recv each run alone: the ranks pair them even with odd.
         int bad = 0;
         if (me % 2 == 0) {
           bad += ok(ncclSend(in.data(), kCount, ncclFloat32, peer, comm, nullptr));
           bad += ok(ncclRecv(out.data(), kCount, ncclFloat32, from, comm, nullptr));
         } else {
           bad += ok(ncclRecv(out.data(), kCount, ncclFloat32, from, comm, nullptr));
           bad += ok(ncclSend(in.data(), kCount, ncclFloat32, peer, comm, nullptr));
         }
         for (std::size_t i = 0; check && i < kCount; ++i) bad += out[i] != value(from, i);
         return bad;
       }},
  };
  int failures = 0;
  for (const Case& c : cases) {
    if (n % 2 == 1 && std::string(c.name) == "Send/Recv") continue;  // the pairing needs an even count
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = -1.0f;
    int bad = c.call(true);
    for (int k = 1; k < kWarm; ++k) bad += c.call(false);
    const std::uint64_t before = t_news;
    for (int k = 0; k < kCalls; ++k) bad += c.call(false);
    const std::uint64_t news = t_news - before;
    if (bad || news) {
      std::printf("FAIL rank %d %s: %d wrong or failed, %llu allocations in %d calls\n", me, c.name, bad,
                  static_cast<unsigned long long>(news), kCalls);
      ++failures;
    }
  }
  ncclCommDestroy(comm);
  return failures ? 1 : 0;
}

}  // namespace

int main() {
  loopback::use();
  int passed = 0, failed = 0;
  for (int n : {2, 3}) {
    setenv("PURLIN_DATAPATH", "host", 1);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    bool all = true;
    for (const ranks::Outcome& o : ranks::run(n, [&](int r) { return run_rank(r, n, id); })) all = all && o.ok();
    std::printf("%s repeated calls with %d ranks allocate nothing\n", all ? "ok" : "FAIL", n);
    (all ? passed : failed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
