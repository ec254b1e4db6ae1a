// A stand-in for the real NCCL where there is no GPU: a shared library with the nccl.h functions
// Purlin's fallback resolves, loaded through PURLIN_NCCL_LIBRARY. It really performs every operation
// on host memory between the processes (or threads) of a communicator, through POSIX shared memory
// with one mailbox per ordered pair of ranks, and reduces as the e2e reference does
// (test/e2e/reference.h: rank order, 8- and 16-bit floats accumulated in float; a PreMulSum
// multiplies each rank's contribution by that rank's own scalar, as NCCL does), so results can be
// checked bit for bit. Each call is recorded in a journal that tests read with fakeNcclJournalTake().
//
// Built with -DFAKE_NCCL_BEFORE_2_28 it reports version 2.27.3 and lacks ncclAlltoAll, ncclGather and
// ncclScatter, as NCCL did before 2.28, and NCCL 2.29's ncclCommSuspend and ncclCommResume (which
// the other build has: they only record the call and the state).
#include <fcntl.h>
#include <nccl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "reference.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

#if defined(FAKE_NCCL_BEFORE_2_28)
constexpr int kVersion = 22703;
#else
constexpr int kVersion = 22809;
#endif
constexpr std::size_t kSlot = 256 << 10;    // bytes a mailbox carries at once
constexpr std::size_t kBoxHeader = 64;
constexpr std::size_t kBoxBytes = kBoxHeader + kSlot;
constexpr double kTimeout_s = 120;
constexpr std::uint64_t kCommMagic = 0x4d4d4f434b414b46ull;  // "FKAKCOMM"

struct FakeId {
  char magic[8];
  std::uint64_t key;
  char unused[NCCL_UNIQUE_ID_BYTES - 16];
};
static_assert(sizeof(FakeId) == sizeof(ncclUniqueId));

struct Mailbox {
  std::atomic<std::uint64_t> posted;  // chunks the sender wrote
  std::atomic<std::uint64_t> taken;   // chunks the receiver read
  std::uint64_t bytes;                // size of the chunk in the slot
  char* data() { return reinterpret_cast<char*>(this) + kBoxHeader; }
};
static_assert(sizeof(Mailbox) <= kBoxHeader);

struct Header {
  std::atomic<std::uint32_t> joined;
};

thread_local std::string t_last_error;

ncclResult_t failed(ncclResult_t code, const std::string& message) {
  t_last_error = message;
  std::fprintf(stderr, "fake NCCL: %s\n", message.c_str());
  return code;
}

std::mutex g_journal_mutex;
std::string g_journal;

void record(const std::string& line) {
  std::lock_guard<std::mutex> g(g_journal_mutex);
  g_journal += line;
  g_journal += '\n';
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct PreMulSum {
  bool live = false;
  ncclDataType_t type = ncclFloat32;
  std::uint64_t bits = 0;        // host immediate scalar
  const void* ptr = nullptr;     // "device" scalar: read when the operation runs
};

}  // namespace

struct ncclComm {
  std::uint64_t magic = kCommMagic;
  int rank = 0;
  int nranks = 0;
  char* base = nullptr;
  std::size_t bytes = 0;
  std::vector<PreMulSum> redops;
  std::atomic<int> async{ncclSuccess};
  bool suspended = false;

  Mailbox* box(int src, int dst) const {
    return reinterpret_cast<Mailbox*>(base + 64 + (static_cast<std::size_t>(src) * nranks + dst) * kBoxBytes);
  }
};

namespace {

// One direction of one message: this rank's buffer to or from a peer's mailbox, chunk by chunk.
struct Transfer {
  bool send;
  int peer;
  char* buf;
  std::size_t bytes;
  std::size_t done = 0;
  bool started = false;
  bool finished() const { return started && done == bytes; }

  // One step if the mailbox allows it; false when it had to wait. Fails on a size mismatch.
  bool step(ncclComm* c, ncclResult_t* error) {
    if (send) {
      Mailbox* mb = c->box(c->rank, peer);
      if (mb->posted.load(std::memory_order_acquire) != mb->taken.load(std::memory_order_acquire)) return false;
      const std::size_t chunk = std::min(kSlot, bytes - done);
      if (chunk) std::memcpy(mb->data(), buf + done, chunk);
      mb->bytes = chunk;
      mb->posted.fetch_add(1, std::memory_order_release);
      done += chunk;
    } else {
      Mailbox* mb = c->box(peer, c->rank);
      if (mb->posted.load(std::memory_order_acquire) == mb->taken.load(std::memory_order_relaxed)) return false;
      const std::size_t chunk = mb->bytes;
      if (done + chunk > bytes) {
        *error = failed(ncclInvalidUsage, "rank " + std::to_string(c->rank) + " receives " + std::to_string(bytes) +
                                              " bytes from rank " + std::to_string(peer) + ", which sends more");
        return false;
      }
      if (chunk) std::memcpy(buf + done, mb->data(), chunk);
      mb->taken.fetch_add(1, std::memory_order_release);
      done += chunk;
    }
    started = true;
    return true;
  }
};

// Buffers for the contributions of the other ranks, one per rank; shared by the transfers that
// fill them and the computation that reads them.
using Temps = std::shared_ptr<std::vector<std::vector<char>>>;
Temps temps_for(ncclComm* c, std::size_t bytes) {
  auto t = std::make_shared<std::vector<std::vector<char>>>(static_cast<std::size_t>(c->nranks));
  for (int k = 0; k < c->nranks; ++k)
    if (k != c->rank) (*t)[k].resize(bytes);
  return t;
}

// One operation of a group: its transfers, then what it computes once they are done.
struct Work {
  ncclComm* comm;
  std::vector<Transfer> transfers;
  std::function<ncclResult_t()> finish;
};

struct GroupState {
  int depth = 0;
  std::vector<Work> queued;
};
thread_local GroupState t_group;

// Moves every transfer forward until all are done. Per mailbox, only the earliest unfinished
// transfer moves, so the messages between two ranks keep their order.
ncclResult_t progress(std::vector<Work>& works) {
  const auto start = std::chrono::steady_clock::now();
  int idle = 0;  // sweeps in a row that moved nothing: past a few, wait a little (tests share CPUs)
  for (;;) {
    bool all_done = true, moved = false;
    struct Key {
      ncclComm* comm;
      int peer;
      bool send;
    };
    std::vector<Key> claimed;
    for (Work& w : works) {
      for (Transfer& t : w.transfers) {
        if (t.finished()) continue;
        all_done = false;
        bool busy = false;
        for (const Key& k : claimed) busy = busy || (k.comm == w.comm && k.peer == t.peer && k.send == t.send);
        if (busy) continue;
        claimed.push_back(Key{w.comm, t.peer, t.send});
        ncclResult_t error = ncclSuccess;
        while (!t.finished() && t.step(w.comm, &error)) moved = true;
        if (error != ncclSuccess) return error;
      }
    }
    if (all_done) return ncclSuccess;
    if (moved) {
      idle = 0;
      continue;
    }
    if (seconds_since(start) > kTimeout_s) {
      for (Work& w : works) w.comm->async.store(ncclSystemError);
      return failed(ncclSystemError, "timed out waiting for a peer");
    }
    if (++idle < 64) sched_yield();
    else ::usleep(20);
  }
}

ncclResult_t run(std::vector<Work> works) {
  if (ncclResult_t r = progress(works); r != ncclSuccess) return r;
  for (Work& w : works)
    if (w.finish)
      if (ncclResult_t r = w.finish(); r != ncclSuccess) return r;
  return ncclSuccess;
}

ncclResult_t submit(Work w) {
  if (t_group.depth > 0) {
    t_group.queued.push_back(std::move(w));
    return ncclSuccess;
  }
  std::vector<Work> one;
  one.push_back(std::move(w));
  return run(std::move(one));
}

bool valid(ncclComm* c) { return c != nullptr && c->magic == kCommMagic; }

std::string describe(const char* fn, ncclComm* c, std::size_t count, ncclDataType_t t, int op, int root) {
  return std::string(fn) + " nranks=" + std::to_string(c->nranks) + " rank=" + std::to_string(c->rank) +
         " count=" + std::to_string(count) + " type=" + std::to_string(static_cast<int>(t)) +
         " op=" + std::to_string(op) + " root=" + std::to_string(root);
}

ncclResult_t check(const char* fn, ncclComm* c, ncclDataType_t t, int root) {
  if (!valid(c)) return failed(ncclInvalidArgument, std::string(fn) + ": invalid communicator");
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= ncclNumTypes)
    return failed(ncclInvalidArgument, std::string(fn) + ": invalid type " + std::to_string(static_cast<int>(t)));
  if (root < 0 || root >= c->nranks)
    return failed(ncclInvalidArgument, std::string(fn) + ": invalid root " + std::to_string(root));
  return ncclSuccess;
}

// The PreMulSum behind operator `op` on this communicator (true), or none: a built-in operator, or
// one that is neither (which reduce_into reports).
bool premul_of(ncclComm* c, ncclRedOp_t op, PreMulSum* pre) {
  const int o = static_cast<int>(op);
  if (o < ncclNumOps) return false;
  const std::size_t slot = static_cast<std::size_t>(o - ncclNumOps);
  if (slot >= c->redops.size() || !c->redops[slot].live) return false;
  *pre = c->redops[slot];
  return true;
}

// A PreMulSum contribution of this rank: every element of `src` times the rank's own scalar, each
// product rounded to the element type.
std::vector<char> scaled(const PreMulSum& pre, const void* src, std::size_t count, ncclDataType_t dt) {
  std::vector<char> out(count * e2e::type_size(dt));
  e2e::with_type(dt, [&]<class T>() {
    using S = typename T::Storage;
    S scalar{};
    std::memcpy(&scalar, pre.ptr ? pre.ptr : &pre.bits, sizeof(S));
    const auto s = T::load(scalar);
    for (std::size_t i = 0; i < count; ++i) {
      S v;
      std::memcpy(&v, static_cast<const char*>(src) + i * sizeof(S), sizeof(S));
      const S y = T::store(e2e::acc_mul(s, T::load(v)));
      std::memcpy(out.data() + i * sizeof(S), &y, sizeof(S));
    }
  });
  return out;
}

// out[i] = the reduction over contributions (rank order) of element i, as test/e2e/reference.h
// defines it. A PreMulSum's contributions come scaled by their ranks already: they are summed.
ncclResult_t reduce_into(ncclComm* c, char* out, const std::vector<const char*>& from, std::size_t count,
                         ncclDataType_t dt, ncclRedOp_t op) {
  using e2e::acc_add;
  using e2e::acc_div;
  using e2e::acc_mul;
  PreMulSum pre;
  const bool is_premul = premul_of(c, op, &pre);
  if (!is_premul && (static_cast<int>(op) < 0 || static_cast<int>(op) >= ncclNumOps))
    return failed(ncclInvalidArgument, "unknown operator");
  const int o = is_premul ? static_cast<int>(ncclSum) : static_cast<int>(op);
  const int n = static_cast<int>(from.size());
  return e2e::with_type(dt, [&]<class T>() {
    using S = typename T::Storage;
    using A = typename T::Acc;
    auto* dst = reinterpret_cast<S*>(out);
    for (std::size_t i = 0; i < count; ++i) {
      auto x = [&](int k) {
        S v;
        std::memcpy(&v, from[k] + i * sizeof(S), sizeof(S));
        return T::load(v);
      };
      A acc = x(0);
      for (int k = 1; k < n; ++k) {
        const A v = x(k);
        switch (o) {
          case ncclProd: acc = acc_mul(acc, v); break;
          case ncclMax: acc = v > acc ? v : acc; break;
          case ncclMin: acc = v < acc ? v : acc; break;
          default: acc = acc_add(acc, v); break;
        }
      }
      if (o == ncclAvg) acc = acc_div(acc, n);
      dst[i] = T::store(acc);
    }
    return ncclSuccess;
  });
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (dst != src && bytes) std::memmove(dst, src, bytes);
}

char* ptr(const void* p, std::size_t offset = 0) { return const_cast<char*>(static_cast<const char*>(p)) + offset; }

// A reduction of every rank's `bytes` at `mine` (this rank) and in the temps (the others), into `out`.
// For a PreMulSum this rank's contributions (what it sends and what it keeps) are scaled copies,
// made when the operation is submitted, which is also when a device scalar is read.
Work reducing(ncclComm* c, const char* mine, void* out, std::size_t count, ncclDataType_t dt, ncclRedOp_t op,
              const std::function<const void*(int)>& send_part, bool receives) {
  Work w{c, {}, {}};
  const std::size_t bytes = count * e2e::type_size(dt);
  PreMulSum pre;
  const bool is_premul = premul_of(c, op, &pre);
  // This rank's scaled contributions, one per receiving rank; they live as long as the work.
  auto own = std::make_shared<std::vector<std::vector<char>>>(static_cast<std::size_t>(c->nranks));
  auto contribution = [&](int k, const void* part) -> const char* {
    if (!is_premul) return static_cast<const char*>(part);
    (*own)[k] = scaled(pre, part, count, dt);
    return (*own)[k].data();
  };
  Temps temps = temps_for(c, receives ? bytes : 0);
  for (int k = 0; k < c->nranks; ++k) {
    if (k == c->rank) continue;
    if (const void* part = send_part(k)) w.transfers.push_back(Transfer{true, k, ptr(contribution(k, part)), bytes});
    if (receives) w.transfers.push_back(Transfer{false, k, (*temps)[k].data(), bytes});
  }
  if (receives) {
    const char* kept = contribution(c->rank, mine);
    w.finish = [c, kept, own, out, count, dt, op, bytes, temps] {
      std::vector<const char*> from(c->nranks);
      for (int k = 0; k < c->nranks; ++k) from[k] = k == c->rank ? kept : (*temps)[k].data();
      std::vector<char> result(bytes);
      if (ncclResult_t r = reduce_into(c, result.data(), from, count, dt, op); r != ncclSuccess) return r;
      copy(out, result.data(), bytes);
      return ncclSuccess;
    };
  } else {
    w.finish = [own] { return ncclSuccess; };
  }
  return w;
}

}  // namespace

// ---- Identity, communicators, errors -----------------------------------------------------------------

FAKE_API ncclResult_t ncclGetVersion(int* version) {
  if (!version) return failed(ncclInvalidArgument, "ncclGetVersion: null");
  *version = kVersion;
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclGetUniqueId(ncclUniqueId* out) {
  if (!out) return failed(ncclInvalidArgument, "ncclGetUniqueId: null");
  FakeId id{};
  std::memcpy(id.magic, "FAKENCCL", 8);
  std::random_device rd;
  id.key = (static_cast<std::uint64_t>(rd()) << 32 | rd()) ^ static_cast<std::uint64_t>(::getpid()) ^
           static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::memcpy(out, &id, sizeof id);
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId commId, int rank) {
  FakeId id;
  std::memcpy(&id, &commId, sizeof id);
  if (!out || nranks < 1 || rank < 0 || rank >= nranks || std::memcmp(id.magic, "FAKENCCL", 8) != 0)
    return failed(ncclInvalidArgument, "ncclCommInitRank: invalid arguments or id");
  char name[64];
  std::snprintf(name, sizeof name, "/fakenccl-%016llx", static_cast<unsigned long long>(id.key));
  const std::size_t bytes = 64 + static_cast<std::size_t>(nranks) * nranks * kBoxBytes;
  const int fd = ::shm_open(name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return failed(ncclSystemError, std::string("shm_open ") + name + ": " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return failed(ncclSystemError, std::string("ftruncate: ") + std::strerror(errno));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return failed(ncclSystemError, std::string("mmap: ") + std::strerror(errno));
  auto* c = new ncclComm();
  c->rank = rank;
  c->nranks = nranks;
  c->base = static_cast<char*>(base);
  c->bytes = bytes;
  auto* header = reinterpret_cast<Header*>(c->base);
  header->joined.fetch_add(1);
  const auto start = std::chrono::steady_clock::now();
  while (header->joined.load() < static_cast<std::uint32_t>(nranks)) {
    if (seconds_since(start) > kTimeout_s) {
      ::munmap(base, bytes);
      delete c;
      return failed(ncclSystemError, "ncclCommInitRank: the other ranks never joined");
    }
    ::usleep(100);
  }
  if (rank == 0) ::shm_unlink(name);  // every rank has it mapped
  record("CommInitRank nranks=" + std::to_string(nranks) + " rank=" + std::to_string(rank));
  *out = c;
  return ncclSuccess;
}

static ncclResult_t release(ncclComm_t c, const char* what) {
  if (!valid(c)) return failed(ncclInvalidArgument, std::string(what) + ": invalid communicator");
  record(std::string(what) + " nranks=" + std::to_string(c->nranks) + " rank=" + std::to_string(c->rank));
  c->magic = 0;
  ::munmap(c->base, c->bytes);
  delete c;
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclCommDestroy(ncclComm_t c) { return release(c, "CommDestroy"); }
FAKE_API ncclResult_t ncclCommAbort(ncclComm_t c) { return release(c, "CommAbort"); }

FAKE_API ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* e) {
  if (!valid(c) || !e) return failed(ncclInvalidArgument, "ncclCommGetAsyncError: invalid arguments");
  *e = static_cast<ncclResult_t>(c->async.load());
  return ncclSuccess;
}

FAKE_API const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error (fake)";
    case ncclInvalidArgument: return "invalid argument (fake)";
    case ncclInvalidUsage: return "invalid usage (fake)";
    case ncclSystemError: return "system error (fake)";
    default: return "error (fake)";
  }
}

FAKE_API const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

FAKE_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t c) {
  if (!valid(c) || !op || !scalar) return failed(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid arguments");
  PreMulSum p;
  p.live = true;
  p.type = datatype;
  if (residence == ncclScalarHostImmediate) std::memcpy(&p.bits, scalar, e2e::type_size(datatype));
  else p.ptr = scalar;
  std::size_t slot = 0;
  while (slot < c->redops.size() && c->redops[slot].live) ++slot;
  if (slot == c->redops.size()) c->redops.push_back(p);
  else c->redops[slot] = p;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(slot));
  record(std::string("RedOpCreatePreMulSum nranks=") + std::to_string(c->nranks) +
         (residence == ncclScalarHostImmediate ? " host" : " device"));
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
  const int o = static_cast<int>(op);
  if (!valid(c) || o < ncclNumOps || static_cast<std::size_t>(o - ncclNumOps) >= c->redops.size())
    return failed(ncclInvalidArgument, "ncclRedOpDestroy: invalid operator");
  c->redops[o - ncclNumOps].live = false;
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0) return failed(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group.depth > 0) return ncclSuccess;
  std::vector<Work> works = std::move(t_group.queued);
  t_group.queued.clear();
  return run(std::move(works));
}

#if !defined(FAKE_NCCL_BEFORE_2_28)
FAKE_API ncclResult_t ncclCommSuspend(ncclComm_t c, int flags) {
  if (!valid(c)) return failed(ncclInvalidArgument, "ncclCommSuspend: invalid communicator");
  if (c->suspended) return failed(ncclInvalidUsage, "ncclCommSuspend: already suspended");
  c->suspended = (flags & 1) != 0;
  record("CommSuspend nranks=" + std::to_string(c->nranks) + " flags=" + std::to_string(flags));
  return ncclSuccess;
}

FAKE_API ncclResult_t ncclCommResume(ncclComm_t c) {
  if (!valid(c)) return failed(ncclInvalidArgument, "ncclCommResume: invalid communicator");
  if (!c->suspended) return failed(ncclInvalidUsage, "ncclCommResume: not suspended");
  c->suspended = false;
  record("CommResume nranks=" + std::to_string(c->nranks));
  return ncclSuccess;
}
#endif

// Every entry of the journal since the last call, one per line; the journal is then empty.
FAKE_API const char* fakeNcclJournalTake() {
  thread_local std::string copy;
  std::lock_guard<std::mutex> g(g_journal_mutex);
  copy = std::move(g_journal);
  g_journal.clear();
  return copy.c_str();
}

// ---- Collectives and point-to-point --------------------------------------------------------------------

FAKE_API ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                     ncclComm_t c, cudaStream_t) {
  if (ncclResult_t r = check("ncclAllReduce", c, dt, 0); r != ncclSuccess) return r;
  record(describe("AllReduce", c, count, dt, op, -1));
  return submit(reducing(c, ptr(send), recv, count, dt, op, [&](int) { return send; }, true));
}

FAKE_API ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                  int root, ncclComm_t c, cudaStream_t) {
  if (ncclResult_t r = check("ncclReduce", c, dt, root); r != ncclSuccess) return r;
  record(describe("Reduce", c, count, dt, op, root));
  const bool is_root = c->rank == root;
  return submit(reducing(c, ptr(send), recv, count, dt, op,
                         [&](int k) -> const void* { return !is_root && k == root ? send : nullptr; }, is_root));
}

FAKE_API ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t dt,
                                         ncclRedOp_t op, ncclComm_t c, cudaStream_t) {
  if (ncclResult_t r = check("ncclReduceScatter", c, dt, 0); r != ncclSuccess) return r;
  record(describe("ReduceScatter", c, recvcount, dt, op, -1));
  const std::size_t bytes = recvcount * e2e::type_size(dt);
  return submit(reducing(c, ptr(send, c->rank * bytes), recv, recvcount, dt, op,
                         [&](int k) -> const void* { return ptr(send, k * bytes); }, true));
}

FAKE_API ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t dt, int root,
                                     ncclComm_t c, cudaStream_t) {
  if (ncclResult_t r = check("ncclBroadcast", c, dt, root); r != ncclSuccess) return r;
  record(describe("Broadcast", c, count, dt, -1, root));
  const std::size_t bytes = count * e2e::type_size(dt);
  Work w{c, {}, {}};
  if (c->rank == root) {
    for (int k = 0; k < c->nranks; ++k)
      if (k != root) w.transfers.push_back(Transfer{true, k, ptr(send), bytes});
    w.finish = [=] {
      copy(recv, send, bytes);
      return ncclSuccess;
    };
  } else {
    w.transfers.push_back(Transfer{false, root, ptr(recv), bytes});
  }
  return submit(std::move(w));
}

FAKE_API ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t c,
                                     cudaStream_t) {
  if (ncclResult_t r = check("ncclAllGather", c, dt, 0); r != ncclSuccess) return r;
  record(describe("AllGather", c, count, dt, -1, -1));
  const std::size_t bytes = count * e2e::type_size(dt);
  Work w{c, {}, {}};
  for (int k = 0; k < c->nranks; ++k) {
    if (k == c->rank) continue;
    w.transfers.push_back(Transfer{true, k, ptr(send), bytes});
    w.transfers.push_back(Transfer{false, k, ptr(recv, k * bytes), bytes});
  }
  const int me = c->rank;
  w.finish = [=] {
    copy(ptr(recv, me * bytes), send, bytes);
    return ncclSuccess;
  };
  return submit(std::move(w));
}

#if !defined(FAKE_NCCL_BEFORE_2_28)
FAKE_API ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t c,
                                    cudaStream_t) {
  if (ncclResult_t r = check("ncclAlltoAll", c, dt, 0); r != ncclSuccess) return r;
  record(describe("AlltoAll", c, count, dt, -1, -1));
  const std::size_t bytes = count * e2e::type_size(dt);
  Work w{c, {}, {}};
  Temps temps = temps_for(c, bytes);
  for (int k = 0; k < c->nranks; ++k) {
    if (k == c->rank) continue;
    w.transfers.push_back(Transfer{true, k, ptr(send, k * bytes), bytes});
    w.transfers.push_back(Transfer{false, k, (*temps)[k].data(), bytes});
  }
  const int me = c->rank, n = c->nranks;
  w.finish = [=] {
    std::vector<char> own(ptr(send, me * bytes), ptr(send, (me + 1) * bytes));  // before recv is written
    for (int k = 0; k < n; ++k) copy(ptr(recv, k * bytes), k == me ? own.data() : (*temps)[k].data(), bytes);
    return ncclSuccess;
  };
  return submit(std::move(w));
}

FAKE_API ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t dt, int root,
                                  ncclComm_t c, cudaStream_t) {
  if (ncclResult_t r = check("ncclGather", c, dt, root); r != ncclSuccess) return r;
  record(describe("Gather", c, count, dt, -1, root));
  const std::size_t bytes = count * e2e::type_size(dt);
  Work w{c, {}, {}};
  if (c->rank != root) {
    w.transfers.push_back(Transfer{true, root, ptr(send), bytes});
  } else {
    for (int k = 0; k < c->nranks; ++k)
      if (k != root) w.transfers.push_back(Transfer{false, k, ptr(recv, k * bytes), bytes});
    w.finish = [=] {
      copy(ptr(recv, root * bytes), send, bytes);
      return ncclSuccess;
    };
  }
  return submit(std::move(w));
}

FAKE_API ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t dt, int root,
                                   ncclComm_t c, cudaStream_t) {
  if (ncclResult_t r = check("ncclScatter", c, dt, root); r != ncclSuccess) return r;
  record(describe("Scatter", c, count, dt, -1, root));
  const std::size_t bytes = count * e2e::type_size(dt);
  Work w{c, {}, {}};
  if (c->rank == root) {
    for (int k = 0; k < c->nranks; ++k)
      if (k != root) w.transfers.push_back(Transfer{true, k, ptr(send, k * bytes), bytes});
    w.finish = [=] {
      copy(recv, ptr(send, root * bytes), bytes);
      return ncclSuccess;
    };
  } else {
    w.transfers.push_back(Transfer{false, root, ptr(recv), bytes});
  }
  return submit(std::move(w));
}
#endif

FAKE_API ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t dt, int peer, ncclComm_t c,
                                cudaStream_t) {
  if (ncclResult_t r = check("ncclSend", c, dt, peer); r != ncclSuccess) return r;
  record(describe("Send", c, count, dt, -1, peer));
  Work w{c, {Transfer{true, peer, ptr(send), count * e2e::type_size(dt)}}, {}};
  return submit(std::move(w));
}

FAKE_API ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t) {
  if (ncclResult_t r = check("ncclRecv", c, dt, peer); r != ncclSuccess) return r;
  record(describe("Recv", c, count, dt, -1, peer));
  Work w{c, {Transfer{false, peer, ptr(recv), count * e2e::type_size(dt)}}, {}};
  return submit(std::move(w));
}
