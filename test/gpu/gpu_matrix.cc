// The correctness matrix on a GPU: every collective (NCCL's, and the V collectives of
// include/purlin/purlin.h out of place) x type x op x in/out-of-place x count x root,
// ranks as processes (fork; run under MPS when they share a GPU) or as threads of one process
// (ncclCommInitAll), on one GPU or spread over several (--gpus), eager and CUDA-graph captured (captured once, replayed
// three times with fresh inputs). Inputs are seeded random, outputs poisoned; the reference is the
// host datapath's own arithmetic (scale_host, reduce_host), so a pass means bit-identical to the host
// datapath. PreMulSum gives every rank a scalar of its own: host-immediate, or in device memory
// (ncclScalarDevice), rewritten before every replay of a captured graph, which must read it anew.
// Then chains of separate Send/Recv calls that complete only because sends are buffered
// (test/common/chains.h), eager and captured.
//
// Usage: test_gpu_matrix [--ranks N] [--threads] [--graph] [--quick] [--filter NAME] [--gpus G] [--memalloc]
//                        [--grow]
// --memalloc: the buffers come from ncclMemAlloc (cuMem, as nccl-tests allocates) instead of cudaMalloc.
// --grow (processes, N >= 2): the communicator is grown (ncclCommGrow) from one of the first N-1
// ranks, whose rank 0 makes the id and hands it to the last rank; the first one is then destroyed.
// Rank r runs on device r % G; G defaults to 1 (every rank on device 0), 0 means every visible one.
// --filter NAME runs one collective (AllReduce, Broadcast, ...) or the chains (Chain). Prints "N passed, N failed" (or a
// skip line when no GPU is usable) and exits non-zero on failure, on an unknown argument, on a
// filter that names no collective and when no case ran.
#include <cuda_runtime.h>
#include <nccl.h>
#include <purlin/purlin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "atom/host/reduce_host.h"
#include "core/numeric.h"
#include "core/types.h"
#include "nccl_shim/nccl_next.h"
#include "test/common/chains.h"
#include "test/common/cuda_ok.h"
#include "test/common/loopback.h"
#include "test/common/ranks.h"
#include "test/common/rng.h"

namespace {

using purlin::DataType;
using purlin::RedOpKind;

// all_to_all_v: one group of a send to and a receive from every rank (itself included), each pair
// with its own count (see pair_count), so the ranks' calls have different largest messages.
// purlin_*_v: the V collectives of include/purlin/purlin.h, partitions of uneven counts (some empty)
// with gaps between them that must keep their poison (see v_count, v_pair).
enum class Coll {
  all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter, send_recv, all_to_all_v,
  purlin_all_gather_v, purlin_reduce_scatter_v, purlin_all_to_all_v
};
const char* coll_name(Coll c) {
  static const char* names[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                "AllToAll", "Gather", "Scatter", "SendRecv", "AllToAllV",
                                "PurlinAllGatherV", "PurlinReduceScatterV", "PurlinAlltoAllV"};
  return names[static_cast<int>(c)];
}
bool reduces(Coll c) {
  return c == Coll::all_reduce || c == Coll::reduce || c == Coll::reduce_scatter || c == Coll::purlin_reduce_scatter_v;
}
bool purlin_v(Coll c) {
  return c == Coll::purlin_all_gather_v || c == Coll::purlin_reduce_scatter_v || c == Coll::purlin_all_to_all_v;
}
bool rooted(Coll c) { return c == Coll::broadcast || c == Coll::reduce || c == Coll::gather || c == Coll::scatter; }

struct Options {
  int ranks = 2;
  bool threads = false;
  bool graph = false;
  bool quick = false;
  std::string filter;
  int gpus = 1;
  bool memalloc = false;
  bool grow = false;
};

std::uint64_t mix(std::uint64_t x) { return rng::splitmix(x); }

// Random sign and mantissa, magnitude 2^-24 to 2 (fp16's smallest subnormal to 2, so that 8 ranks'
// products stay finite).
float spread(std::uint64_t h) {
  const int exponent = -24 + static_cast<int>((h >> 24) % 25);
  const float mantissa = 1.0f + static_cast<float>(h & 0x7FFFFF) / 8388608.0f;
  const float v = std::ldexp(mantissa, exponent);
  return (h >> 63) ? -v : v;
}

// A value for the 16-bit types (before rounding to the type), from the element's hash (the same on
// every rank) and the rank's. Half the elements are a spread() value on every rank. In the other
// half every rank holds one magnitude from [1, 2) with a sign of its own, or (one rank in four) a
// spread() value: the large ones cancel, and whether a small one keeps its low bits depends on where
// in the rank order it comes. Partial sums in fp32 round (an fp16 value below 2^-13, a bf16 one
// below 2^-16, has bits below the ulp of a sum near 1), so a fold in another order, or in 16 bits,
// gives other bits than the rank-ordered fp32 one.
float sixteen(std::uint64_t element, std::uint64_t h) {
  if (element % 2 == 0 || h % 4 == 0) return spread(h);
  const float big = 1.0f + static_cast<float>(element >> 41) / 8388608.0f;
  return (h >> 62) & 1 ? -big : big;
}

// Element i of rank r's input for a case: small values so that prod and sums stay finite, never
// all zeros.
void fill(DataType t, std::uint64_t seed, int rank, std::size_t count, std::vector<char>* out) {
  const std::size_t es = purlin::size_of(t);
  out->resize(count * es);
  char* p = out->data();
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t h = mix(seed ^ (static_cast<std::uint64_t>(rank) << 48) ^ i);
    const std::uint64_t element = mix(mix(seed) ^ i);
    float f = static_cast<float>(static_cast<int>(h % 17) - 8) / 4.0f + 1.0f;  // -1 .. 3, steps of 0.25
    std::int64_t k = static_cast<std::int64_t>(h % 7) + 1 - 3;                // -2 .. 4
    switch (t) {
      case DataType::int8: { std::int8_t v = static_cast<std::int8_t>(k); std::memcpy(p + i * es, &v, es); break; }
      case DataType::uint8: { std::uint8_t v = static_cast<std::uint8_t>(h % 5 + 1); std::memcpy(p + i * es, &v, es); break; }
      case DataType::int32: { std::int32_t v = static_cast<std::int32_t>(k * 1000 + static_cast<std::int64_t>(h % 997)); std::memcpy(p + i * es, &v, es); break; }
      case DataType::uint32: { std::uint32_t v = static_cast<std::uint32_t>(h % 100000 + 1); std::memcpy(p + i * es, &v, es); break; }
      case DataType::int64: { std::int64_t v = static_cast<std::int64_t>(h % 2000001) - 1000000; std::memcpy(p + i * es, &v, es); break; }
      case DataType::uint64: { std::uint64_t v = h % 3 + 1; std::memcpy(p + i * es, &v, es); break; }
      case DataType::f16: { std::uint16_t v = purlin::float_to_f16(sixteen(element, h)); std::memcpy(p + i * es, &v, es); break; }
      case DataType::bf16: { std::uint16_t v = purlin::float_to_bf16(sixteen(element, h)); std::memcpy(p + i * es, &v, es); break; }
      case DataType::f32: { float v = f + static_cast<float>(h % 1000) * 1e-4f; std::memcpy(p + i * es, &v, es); break; }
      case DataType::f64: { double v = f + static_cast<double>(h % 100000) * 1e-7; std::memcpy(p + i * es, &v, es); break; }
      case DataType::f8e4m3: { std::uint8_t v = purlin::float_to_f8e4m3(f); std::memcpy(p + i * es, &v, es); break; }
      case DataType::f8e5m2: { std::uint8_t v = purlin::float_to_f8e5m2(f); std::memcpy(p + i * es, &v, es); break; }
    }
  }
}

// Rank r's PreMulSum scalar from `seed`: never zero, and for the floating types a value between
// 0.5 and 2.5 that few inputs multiply exactly.
std::vector<char> scalar_of(DataType t, std::uint64_t seed, int rank) {
  const std::size_t es = purlin::size_of(t);
  std::vector<char> out(es);
  const std::uint64_t h = mix(seed ^ (static_cast<std::uint64_t>(rank + 1) * 0xD6E8FEB86659FD93ull));
  const double f = 0.5 + static_cast<double>(h % 2000) / 1000.0 + 0x1p-12;
  const std::int64_t k = static_cast<std::int64_t>(h % 9) - 4 == 0 ? 5 : static_cast<std::int64_t>(h % 9) - 4;  // -4..4, not 0
  switch (t) {
    case DataType::int8: { std::int8_t v = static_cast<std::int8_t>(k); std::memcpy(out.data(), &v, es); break; }
    case DataType::uint8: { std::uint8_t v = static_cast<std::uint8_t>(h % 3 + 1); std::memcpy(out.data(), &v, es); break; }
    case DataType::int32: { std::int32_t v = static_cast<std::int32_t>(k); std::memcpy(out.data(), &v, es); break; }
    case DataType::uint32: { std::uint32_t v = static_cast<std::uint32_t>(h % 7 + 1); std::memcpy(out.data(), &v, es); break; }
    case DataType::int64: { std::int64_t v = k; std::memcpy(out.data(), &v, es); break; }
    case DataType::uint64: { std::uint64_t v = h % 5 + 1; std::memcpy(out.data(), &v, es); break; }
    case DataType::f16: { std::uint16_t v = purlin::float_to_f16(static_cast<float>(f)); std::memcpy(out.data(), &v, es); break; }
    case DataType::bf16: { std::uint16_t v = purlin::float_to_bf16(static_cast<float>(f)); std::memcpy(out.data(), &v, es); break; }
    case DataType::f32: { float v = static_cast<float>(f); std::memcpy(out.data(), &v, es); break; }
    case DataType::f64: { double v = f; std::memcpy(out.data(), &v, es); break; }
    case DataType::f8e4m3: { std::uint8_t v = purlin::float_to_f8e4m3(static_cast<float>(f)); std::memcpy(out.data(), &v, es); break; }
    case DataType::f8e5m2: { std::uint8_t v = purlin::float_to_f8e5m2(static_cast<float>(f)); std::memcpy(out.data(), &v, es); break; }
  }
  return out;
}

struct Case {
  Coll coll;
  DataType type;
  RedOpKind op;
  std::size_t count;
  int root;
  bool in_place;
};

// Elements rank s sends to rank d in an all_to_all_v case: rank 0's message to itself is the
// largest, so rank 0 cuts its call into more channels than the others do.
std::size_t pair_count(std::size_t k, int s, int d) {
  if (s == d) return k * (s == 0 ? 5 : 1) + static_cast<std::size_t>(d);
  return k * (1 + static_cast<std::size_t>(s + 2 * d) % 3) + static_cast<std::size_t>(d);
}
// The sum of part(i) for i < upto: where a partition starts after the ones before it.
template <class F>
std::size_t prefix(int upto, F part) {
  std::size_t off = 0;
  for (int i = 0; i < upto; ++i) off += part(i);
  return off;
}
// Where rank s's message to rank d starts in s's send buffer, and where rank d receives it.
std::size_t send_offset(std::size_t k, int s, int d) { return prefix(d, [&](int i) { return pair_count(k, s, i); }); }
std::size_t recv_offset(std::size_t k, int s, int d) { return prefix(s, [&](int i) { return pair_count(k, i, d); }); }

// The Purlin V collectives' partitions. Rank r's partition of an AllGatherV or ReduceScatterV holds
// v_count elements (none for ranks 1, 5, ...), rank s's message to rank d of an AlltoAllV v_pair (none
// where s + d is 2 mod 3); each partition starts one element past the end of the one before it, and
// that element is never written.
std::size_t v_count(std::size_t k, int r) {
  return r % 4 == 1 ? 0 : k * (1 + static_cast<std::size_t>(r) % 3) + static_cast<std::size_t>(r);
}
std::size_t v_pair(std::size_t k, int s, int d) { return (s + d) % 3 == 2 ? 0 : pair_count(k, s, d); }
std::size_t v_displ(std::size_t k, int r) { return prefix(r, [&](int i) { return v_count(k, i) + 1; }); }
std::size_t v_send_displ(std::size_t k, int s, int d) { return prefix(d, [&](int i) { return v_pair(k, s, i) + 1; }); }
std::size_t v_recv_displ(std::size_t k, int s, int d) { return prefix(s, [&](int i) { return v_pair(k, i, d) + 1; }); }

// Buffer sizes in elements for a case on n ranks, on rank `me`.
void extents(const Case& c, int n, int me, std::size_t* send, std::size_t* recv) {
  std::size_t k = c.count;
  switch (c.coll) {
    case Coll::all_reduce: case Coll::broadcast: case Coll::reduce: case Coll::send_recv: *send = *recv = k; break;
    case Coll::all_gather: case Coll::gather: *send = k; *recv = k * n; break;
    case Coll::reduce_scatter: case Coll::scatter: *send = k * n; *recv = k; break;
    case Coll::all_to_all: *send = *recv = k * n; break;
    case Coll::all_to_all_v:
      *send = send_offset(k, me, n);
      *recv = recv_offset(k, n, me);
      break;
    case Coll::purlin_all_gather_v: *send = v_count(k, me); *recv = v_displ(k, n); break;
    case Coll::purlin_reduce_scatter_v: *send = v_displ(k, n); *recv = v_count(k, me); break;
    case Coll::purlin_all_to_all_v:
      *send = v_send_displ(k, me, n);
      *recv = v_recv_displ(k, n, me);
      break;
  }
}

// The byte the output buffer is poisoned with before every call, which what a collective does not
// write must keep.
constexpr unsigned char kPoison = 0xA5;

// The expected output of rank `me`, from every rank's input (regenerated here).
bool expected(const Case& c, int n, int me, std::uint64_t seed, std::uint64_t scalar_seed, std::vector<char>* out,
              bool* checked) {
  const std::size_t es = purlin::size_of(c.type);
  std::size_t send_elems = 0, recv_elems = 0;
  extents(c, n, me, &send_elems, &recv_elems);
  std::vector<std::vector<char>> in(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::size_t r_send = 0, r_recv = 0;
    extents(c, n, r, &r_send, &r_recv);
    fill(c.type, seed, r, r_send, &in[r]);
  }
  out->assign(recv_elems * es, static_cast<char>(kPoison));
  *checked = true;
  // Every rank's contribution as its producer hands it over (PreMulSum: scaled by that rank's own
  // scalar), then the consumer's fold.
  purlin::ReduceOp op{c.op, 0, nullptr, n};
  if (reduces(c.coll)) {
    for (int r = 0; r < n; ++r) {
      purlin::ReduceOp mine = op;
      const std::vector<char> s = scalar_of(c.type, scalar_seed, r);
      std::memcpy(&mine.scalar_bits, s.data(), es);
      purlin::scale_host(c.type, mine, in[r].data(), in[r].data(), in[r].size() / es);
    }
  }
  auto reduce_into = [&](char* dst, std::size_t offset, std::size_t count) {
    std::vector<const void*> srcs(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) srcs[r] = in[r].data() + offset * es;
    purlin::reduce_host(c.type, op, dst, srcs.data(), n, count);
  };
  const std::size_t k = c.count;
  switch (c.coll) {
    case Coll::all_reduce: reduce_into(out->data(), 0, k); break;
    case Coll::reduce:
      if (me != c.root) *checked = false;
      else reduce_into(out->data(), 0, k);
      break;
    case Coll::reduce_scatter: reduce_into(out->data(), static_cast<std::size_t>(me) * k, k); break;
    case Coll::broadcast: std::memcpy(out->data(), in[c.root].data(), k * es); break;
    case Coll::all_gather:
      for (int r = 0; r < n; ++r) std::memcpy(out->data() + r * k * es, in[r].data(), k * es);
      break;
    case Coll::gather:
      if (me != c.root) *checked = false;
      else for (int r = 0; r < n; ++r) std::memcpy(out->data() + r * k * es, in[r].data(), k * es);
      break;
    case Coll::scatter: std::memcpy(out->data(), in[c.root].data() + me * k * es, k * es); break;
    case Coll::all_to_all:
      for (int r = 0; r < n; ++r) std::memcpy(out->data() + r * k * es, in[r].data() + me * k * es, k * es);
      break;
    case Coll::send_recv: {
      int from = (me - 1 + n) % n;  // a ring: send to me+1, receive from me-1
      std::memcpy(out->data(), in[from].data(), k * es);
      break;
    }
    case Coll::all_to_all_v:
      for (int s = 0; s < n; ++s)
        std::memcpy(out->data() + recv_offset(k, s, me) * es, in[s].data() + send_offset(k, s, me) * es,
                    pair_count(k, s, me) * es);
      break;
    case Coll::purlin_all_gather_v:
      for (int s = 0; s < n; ++s) std::memcpy(out->data() + v_displ(k, s) * es, in[s].data(), v_count(k, s) * es);
      break;
    case Coll::purlin_reduce_scatter_v: reduce_into(out->data(), v_displ(k, me), v_count(k, me)); break;
    case Coll::purlin_all_to_all_v:
      for (int s = 0; s < n; ++s)
        std::memcpy(out->data() + v_recv_displ(k, s, me) * es, in[s].data() + v_send_displ(k, s, me) * es,
                    v_pair(k, s, me) * es);
      break;
  }
  return true;
}

struct Rank {
  int me = 0, n = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int passed = 0, failed = 0;
  // Two buffers sized for the largest case, allocated once: cudaMalloc and cudaFree synchronise the
  // device, which would stall ranks that share this process while a peer's kernel waits for them.
  char* buf = nullptr;
  char* other = nullptr;
  char* scalar = nullptr;  // a PreMulSum scalar in device memory (8 bytes)
  std::size_t capacity = 0;
  char* chain = nullptr;   // the messages of the Send/Recv chains
};

ncclResult_t issue(Rank& R, const Case& c, void* send, void* recv, ncclRedOp_t op) {
  const ncclDataType_t t = static_cast<ncclDataType_t>(c.type);
  switch (c.coll) {
    case Coll::all_reduce: return ncclAllReduce(send, recv, c.count, t, op, R.comm, R.stream);
    case Coll::broadcast: return ncclBroadcast(send, recv, c.count, t, c.root, R.comm, R.stream);
    case Coll::reduce: return ncclReduce(send, recv, c.count, t, op, c.root, R.comm, R.stream);
    case Coll::all_gather: return ncclAllGather(send, recv, c.count, t, R.comm, R.stream);
    case Coll::reduce_scatter: return ncclReduceScatter(send, recv, c.count, t, op, R.comm, R.stream);
    case Coll::all_to_all: return ncclAlltoAll(send, recv, c.count, t, R.comm, R.stream);
    case Coll::gather: return ncclGather(send, recv, c.count, t, c.root, R.comm, R.stream);
    case Coll::scatter: return ncclScatter(send, recv, c.count, t, c.root, R.comm, R.stream);
    case Coll::send_recv: {
      ncclGroupStart();
      ncclSend(send, c.count, t, (R.me + 1) % R.n, R.comm, R.stream);
      ncclRecv(recv, c.count, t, (R.me - 1 + R.n) % R.n, R.comm, R.stream);
      return ncclGroupEnd();
    }
    case Coll::all_to_all_v: {
      const std::size_t es = purlin::size_of(c.type);
      ncclGroupStart();
      for (int d = 0; d < R.n; ++d) {
        ncclSend(static_cast<char*>(send) + send_offset(c.count, R.me, d) * es, pair_count(c.count, R.me, d), t, d,
                 R.comm, R.stream);
        ncclRecv(static_cast<char*>(recv) + recv_offset(c.count, d, R.me) * es, pair_count(c.count, d, R.me), t,
                 d, R.comm, R.stream);
      }
      return ncclGroupEnd();
    }
    case Coll::purlin_all_gather_v: case Coll::purlin_reduce_scatter_v: {
      std::vector<std::size_t> counts(static_cast<std::size_t>(R.n)), displs(static_cast<std::size_t>(R.n));
      for (int r = 0; r < R.n; ++r) {
        counts[r] = v_count(c.count, r);
        displs[r] = v_displ(c.count, r);
      }
      if (c.coll == Coll::purlin_all_gather_v)
        return ncclPurlinAllGatherV(send, v_count(c.count, R.me), recv, counts.data(), displs.data(), t, R.comm,
                                    R.stream);
      return ncclPurlinReduceScatterV(send, counts.data(), displs.data(), recv, t, op, R.comm, R.stream);
    }
    case Coll::purlin_all_to_all_v: {
      const std::size_t n = static_cast<std::size_t>(R.n);
      std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
      for (int p = 0; p < R.n; ++p) {
        sc[p] = v_pair(c.count, R.me, p);
        sd[p] = v_send_displ(c.count, R.me, p);
        rc[p] = v_pair(c.count, p, R.me);
        rd[p] = v_recv_displ(c.count, p, R.me);
      }
      return ncclPurlinAlltoAllV(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), t, R.comm, R.stream);
    }
  }
  return ncclInternalError;
}

// Runs one case on one rank: eager, or captured once and replayed three times with fresh inputs.
void run_case(Rank& R, const Case& c, bool graph, std::uint64_t base_seed) {
  const std::size_t es = purlin::size_of(c.type);
  std::size_t send_elems = 0, recv_elems = 0;
  extents(c, R.n, R.me, &send_elems, &recv_elems);
  const std::size_t send_bytes = send_elems * es, recv_bytes = recv_elems * es;
  // In place: input and output share one buffer at the offsets NCCL's in-place convention names.
  const std::size_t alloc = std::max(send_bytes, recv_bytes) + 4096;
  if (alloc > R.capacity) {
    std::printf("FAIL buffers too small for %zu bytes\n", alloc);
    R.failed++;
    return;
  }
  const std::size_t slot = static_cast<std::size_t>(R.me) * c.count * es;
  char* buf = R.buf;
  char* other = c.in_place ? nullptr : R.other;
  char* send = buf;
  char* recv = buf;
  if (c.in_place) {
    if (c.coll == Coll::all_gather || c.coll == Coll::gather) send = buf + slot;
    if (c.coll == Coll::reduce_scatter || c.coll == Coll::scatter) recv = buf + slot;
  } else {
    send = other;
  }

  ncclRedOp_t op = static_cast<ncclRedOp_t>(static_cast<int>(c.op));
  const std::uint64_t scalar_seed = mix(base_seed ^ 0x5CA1A8);
  // A device scalar in every other case; it changes with every replay (the seed of replay rep).
  const bool device_scalar = c.op == RedOpKind::premulsum && (base_seed & 2) != 0;
  auto scalar_seed_of = [&](int rep) { return device_scalar ? mix(scalar_seed + static_cast<std::uint64_t>(rep)) : scalar_seed; };
  if (c.op == RedOpKind::premulsum) {
    const std::vector<char> sc = scalar_of(c.type, scalar_seed, R.me);
    if (device_scalar) CUDA_OK(cudaMemcpyAsync(R.scalar, sc.data(), es, cudaMemcpyHostToDevice, R.stream));
    ncclRedOpCreatePreMulSum(&op, device_scalar ? static_cast<void*>(R.scalar) : const_cast<char*>(sc.data()),
                             static_cast<ncclDataType_t>(c.type), device_scalar ? ncclScalarDevice : ncclScalarHostImmediate,
                             R.comm);
  }
  const int replays = graph ? 3 : 1;
  cudaGraphExec_t exec = nullptr;
  for (int rep = 0; rep < replays; ++rep) {
    const std::uint64_t seed = mix(base_seed + rep);
    std::vector<char> in, want;
    fill(c.type, seed, R.me, send_elems, &in);
    // Inputs and poison go in on the rank's stream, so the collective sees them complete.
    CUDA_OK(cudaMemsetAsync(buf, kPoison, alloc, R.stream));
    if (other) CUDA_OK(cudaMemsetAsync(other, 0x5A, alloc, R.stream));
    // A V collective's rank may send or receive nothing: no copy then.
    if (send_bytes) CUDA_OK(cudaMemcpyAsync(send, in.data(), send_bytes, cudaMemcpyHostToDevice, R.stream));
    std::vector<char> sc_rep;
    if (device_scalar) {
      sc_rep = scalar_of(c.type, scalar_seed_of(rep), R.me);
      CUDA_OK(cudaMemcpyAsync(R.scalar, sc_rep.data(), es, cudaMemcpyHostToDevice, R.stream));
    }
    if (graph) {
      if (rep == 0) {
        cudaGraph_t g;
        CUDA_OK(cudaStreamBeginCapture(R.stream, cudaStreamCaptureModeThreadLocal));
        ncclResult_t e = issue(R, c, send, recv, op);
        CUDA_OK(cudaStreamEndCapture(R.stream, &g));
        if (e != ncclSuccess) {
          std::printf("FAIL capture %s: %s\n", coll_name(c.coll), ncclGetErrorString(e));
          R.failed++;
          break;
        }
        CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
        CUDA_OK(cudaGraphDestroy(g));
      }
      CUDA_OK(cudaGraphLaunch(exec, R.stream));
    } else {
      ncclResult_t e = issue(R, c, send, recv, op);
      if (e != ncclSuccess) {
        std::printf("FAIL %s: %s (%s)\n", coll_name(c.coll), ncclGetErrorString(e), ncclGetLastError(R.comm));
        R.failed++;
        break;
      }
    }
    CUDA_OK(cudaStreamSynchronize(R.stream));
    bool checked;
    expected(c, R.n, R.me, seed, scalar_seed_of(rep), &want, &checked);
    if (!checked) continue;  // this rank has no output (not the root)
    std::vector<char> got(recv_bytes);
    if (recv_bytes) CUDA_OK(cudaMemcpyAsync(got.data(), recv, recv_bytes, cudaMemcpyDeviceToHost, R.stream));
    CUDA_OK(cudaStreamSynchronize(R.stream));
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < recv_bytes; ++i)
      if (got[i] != want[i]) {
        if (!bad) first = i;
        ++bad;
      }
    if (bad) {
      R.failed++;
      std::printf("FAIL rank %d/%d %s %s %s count %zu root %d %s %s rep %d: %zu bytes wrong, first at byte %zu "
                  "(got %02x want %02x)\n",
                  R.me, R.n, coll_name(c.coll), purlin::name_of(c.type), purlin::name_of(c.op), c.count, c.root,
                  c.in_place ? "in-place" : "out-of-place", graph ? "graph" : "eager", rep, bad, first,
                  static_cast<unsigned char>(got[first]), static_cast<unsigned char>(want[first]));
    } else {
      R.passed++;
    }
  }
  if (c.op == RedOpKind::premulsum) ncclRedOpDestroy(op, R.comm);
  if (exec) cudaGraphExecDestroy(exec);
}

std::vector<Case> cases(const Options& o, int n) {
  std::vector<Case> out;
  std::vector<std::size_t> counts = o.quick ? std::vector<std::size_t>{1, 1000, 65537}
                                            : std::vector<std::size_t>{1, 7, 1000, 65537, 1048579};
  const Coll colls[] = {Coll::all_reduce, Coll::broadcast, Coll::reduce, Coll::all_gather, Coll::reduce_scatter,
                        Coll::all_to_all, Coll::gather, Coll::scatter, Coll::send_recv, Coll::all_to_all_v,
                        Coll::purlin_all_gather_v, Coll::purlin_reduce_scatter_v, Coll::purlin_all_to_all_v};
  for (Coll c : colls) {
    if (!o.filter.empty() && o.filter != coll_name(c)) continue;
    // Point-to-point messages of whole 8-byte words, several per thread of a channel: the pair
    // exchange's flat form (the other counts are odd or small).
    std::vector<std::size_t> these = counts;
    if (c == Coll::send_recv || c == Coll::all_to_all_v || c == Coll::purlin_all_to_all_v) these.push_back(65536);
    for (int t = 0; t < purlin::kNumDataTypes; ++t) {
      int nops = reduces(c) ? 6 : 1;
      for (int k = 0; k < nops; ++k) {
        for (std::size_t count : these) {
          // The largest count with every type and op would take long: all types with sum, all ops with
          // float and bf16.
          if (count > 100000 && reduces(c) && k != 0 && t != static_cast<int>(DataType::f32) &&
              t != static_cast<int>(DataType::bf16))
            continue;
          if (!reduces(c) && t != static_cast<int>(DataType::int8) && t != static_cast<int>(DataType::f32) &&
              count > 1000)
            continue;  // copies are type-blind: bytes are bytes
          for (int ip = 0; ip < 2; ++ip) {
            std::vector<int> roots = rooted(c) ? std::vector<int>{0, n - 1} : std::vector<int>{0};
            if (n == 1) roots = {0};
            for (int root : roots) {
              // Out of place only: the V collectives take no in-place convention (an AlltoAllV in place
              // is refused: test/shim/test_purlin_v).
              if ((c == Coll::send_recv || c == Coll::all_to_all_v || purlin_v(c)) && ip) continue;
              out.push_back(Case{c, static_cast<DataType>(t), static_cast<RedOpKind>(k), count, root, ip == 1});
            }
          }
        }
      }
    }
  }
  return out;
}

// ---- Chains of separate Send/Recv calls (test/common/chains.h) ----------------------------------

// The chain of README's former limitation (4 ranks or more), eight buffered sends to one peer, and
// random chains that complete only because sends are buffered; the same on every rank.
std::vector<chains::Chain> chain_set(int n) {
  std::vector<chains::Chain> out;
  if (n >= 4) out.push_back(chains::readme_chain(n));
  if (n >= 3) out.push_back(chains::two_buffered_chain(n));
  if (n >= 2) out.push_back(chains::deep_chain(n));
  // Sends of 1 and 4 MiB posted before their receives, as NCCL's buffers let finish.
  if (n >= 2) out.push_back(chains::swap_chain(n, (std::size_t{1} << 20) / 4));
  if (n >= 2) out.push_back(chains::swap_chain(n, (std::size_t{4} << 20) / 4));
  for (std::uint64_t seed = 1, found = 0; n >= 2 && found < 3 && seed < 1000; ++seed) {
    chains::Chain c = chains::random_chain(seed, n);
    if (!chains::needs_buffering(c)) continue;
    out.push_back(std::move(c));
    ++found;
  }
  return out;
}

// Where each of this rank's messages of a chain lives in R.chain, and the bytes they take.
std::size_t chain_layout(const chains::Chain& c, int me, std::vector<std::size_t>* at) {
  std::size_t used = 0;
  if (me < static_cast<int>(c.size()))
    for (const chains::P2p& op : c[static_cast<std::size_t>(me)]) {
      if (at) at->push_back(used);
      used += (op.count * 4 + 255) / 256 * 256;
    }
  return used;
}

bool run_chains(const Options& o) { return o.filter.empty() || o.filter == "Chain"; }

// Every call of the chain on the rank's stream, eager or captured into one graph, then every
// received message compared with its sender's content.
void run_chain(Rank& R, const chains::Chain& chain, std::size_t index, bool graph) {
  std::vector<std::size_t> at;
  const std::size_t used = chain_layout(chain, R.me, &at);
  if (used == 0) return;
  const auto& ops = chain[static_cast<std::size_t>(R.me)];
  CUDA_OK(cudaMemsetAsync(R.chain, 0xA5, used, R.stream));
  std::vector<std::vector<std::uint32_t>> content(ops.size());
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (!ops[k].send) continue;
    content[k].resize(ops[k].count);
    for (std::size_t i = 0; i < ops[k].count; ++i) content[k][i] = chains::element(ops[k].id, i);
    CUDA_OK(cudaMemcpyAsync(R.chain + at[k], content[k].data(), ops[k].count * 4, cudaMemcpyHostToDevice, R.stream));
  }
  auto issue_all = [&]() -> ncclResult_t {
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const chains::P2p& op = ops[k];
      const ncclResult_t e = op.send ? ncclSend(R.chain + at[k], op.count, ncclInt32, op.peer, R.comm, R.stream)
                                     : ncclRecv(R.chain + at[k], op.count, ncclInt32, op.peer, R.comm, R.stream);
      if (e != ncclSuccess) return e;
    }
    return ncclSuccess;
  };
  ncclResult_t e = ncclSuccess;
  if (graph) {
    cudaGraph_t g;
    CUDA_OK(cudaStreamBeginCapture(R.stream, cudaStreamCaptureModeThreadLocal));
    e = issue_all();
    CUDA_OK(cudaStreamEndCapture(R.stream, &g));
    if (e == ncclSuccess) {
      cudaGraphExec_t exec;
      CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
      CUDA_OK(cudaGraphLaunch(exec, R.stream));
      CUDA_OK(cudaStreamSynchronize(R.stream));
      CUDA_OK(cudaGraphExecDestroy(exec));
    }
    CUDA_OK(cudaGraphDestroy(g));
  } else {
    e = issue_all();
  }
  CUDA_OK(cudaStreamSynchronize(R.stream));
  if (e != ncclSuccess) {
    std::printf("FAIL rank %d/%d Chain %zu %s: %s (%s)\n", R.me, R.n, index, graph ? "graph" : "eager",
                ncclGetErrorString(e), ncclGetLastError(R.comm));
    R.failed++;
    return;
  }
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].send) continue;
    std::vector<std::uint32_t> got(ops[k].count);
    CUDA_OK(cudaMemcpy(got.data(), R.chain + at[k], ops[k].count * 4, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != chains::element(ops[k].id, i)) {
        std::printf("FAIL rank %d/%d Chain %zu %s: message %u from %d, element %zu is %08x, want %08x\n", R.me, R.n,
                    index, graph ? "graph" : "eager", ops[k].id, ops[k].peer, i, got[i],
                    chains::element(ops[k].id, i));
        R.failed++;
        return;
      }
  }
  R.passed++;
}

void allocate(Rank& R, const Options& o) {
  std::vector<Case> all = cases(o, R.n);
  std::size_t most = 0;
  for (const Case& c : all) {
    std::size_t s = 0, r = 0;
    extents(c, R.n, R.me, &s, &r);
    most = std::max(most, std::max(s, r) * purlin::size_of(c.type) + 4096);
  }
  R.capacity = most;
  const auto alloc = [&](void** p, std::size_t bytes) {
    if (!o.memalloc) {
      CUDA_OK(cudaMalloc(p, bytes));
    } else if (ncclMemAlloc(p, bytes) != ncclSuccess) {
      std::printf("FAIL rank %d: ncclMemAlloc of %zu bytes\n", R.me, bytes);
      std::exit(1);
    }
  };
  alloc(reinterpret_cast<void**>(&R.buf), most);
  alloc(reinterpret_cast<void**>(&R.other), most);
  CUDA_OK(cudaMalloc(&R.scalar, 8));
  std::size_t chain_most = 256;
  if (run_chains(o))
    for (const chains::Chain& c : chain_set(R.n)) chain_most = std::max(chain_most, chain_layout(c, R.me, nullptr));
  alloc(reinterpret_cast<void**>(&R.chain), chain_most);
}

// The communicator reports the device memory it holds, persistent or suspendable, and is not
// suspended (ncclCommMemStats, as NCCL's memory manager answers it).
void check_mem_stats(Rank& R) {
  std::uint64_t total = 0, persist = 0, suspend = 1, suspended = 1;
  const bool called = ncclCommMemStats(R.comm, ncclStatGpuMemTotal, &total) == ncclSuccess &&
                      ncclCommMemStats(R.comm, ncclStatGpuMemPersist, &persist) == ncclSuccess &&
                      ncclCommMemStats(R.comm, ncclStatGpuMemSuspend, &suspend) == ncclSuccess &&
                      ncclCommMemStats(R.comm, ncclStatGpuMemSuspended, &suspended) == ncclSuccess;
  if (called && total > 0 && total == persist + suspend && suspended == 0) {
    R.passed++;
    return;
  }
  R.failed++;
  std::printf("FAIL rank %d ncclCommMemStats: %s, total %llu, persist %llu, suspendable %llu\n", R.me,
              called ? "answered" : ncclGetLastError(R.comm), static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(persist), static_cast<unsigned long long>(suspend));
}

void run_rank(Rank& R, const Options& o) {
  std::vector<Case> all = cases(o, R.n);
  if (!R.buf) allocate(R, o);
  check_mem_stats(R);
  std::uint64_t seed = 1;
  for (const Case& c : all) {
    run_case(R, c, false, seed);
    if (o.graph) run_case(R, c, true, seed + 1000);
    seed += 7919;
  }
  if (run_chains(o)) {
    const std::vector<chains::Chain> set = chain_set(R.n);
    for (std::size_t i = 0; i < set.size(); ++i) {
      run_chain(R, set[i], i, false);
      if (o.graph) run_chain(R, set[i], i, true);
    }
  }
  CUDA_OK(cudaStreamSynchronize(R.stream));
}

// --grow: ranks 0..n-2 make a communicator, rank 0 makes the id to grow it by and writes it to
// the pipe, which the last rank reads; all n grow it (the existing ranks keep their ranks); the
// first communicator is destroyed.
bool grow_comm(int r, int n, const ncclUniqueId& id, const int grow_pipe[2], ncclComm_t* out) {
  ncclUniqueId grow_id{};
  ncclResult_t rc = ncclSuccess;
  if (r < n - 1) {
    ncclComm_t first = nullptr;
    if (ncclCommInitRank(&first, n - 1, id, r) != ncclSuccess) {
      std::printf("FAIL init rank %d of %d: %s\n", r, n - 1, ncclGetLastError(nullptr));
      return false;
    }
    if (r == 0) {
      if (ncclCommGetUniqueId(first, &grow_id) != ncclSuccess ||
          write(grow_pipe[1], &grow_id, sizeof(grow_id)) != static_cast<ssize_t>(sizeof(grow_id))) {
        std::printf("FAIL rank 0: an id to grow with: %s\n", ncclGetLastError(first));
        return false;
      }
    }
    rc = ncclCommGrow(first, n, r == 0 ? &grow_id : nullptr, -1, out, nullptr);
    ncclCommDestroy(first);
  } else {
    if (read(grow_pipe[0], &grow_id, sizeof(grow_id)) != static_cast<ssize_t>(sizeof(grow_id))) {
      std::printf("FAIL rank %d: no id to grow with\n", r);
      return false;
    }
    rc = ncclCommGrow(nullptr, n, &grow_id, r, out, nullptr);
  }
  if (rc != ncclSuccess) std::printf("FAIL rank %d: ncclCommGrow: %s\n", r, ncclGetLastError(nullptr));
  return rc == ncclSuccess;
}

int usable_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  loopback::use();
  Options o;
  // Six flags read by hand: not worth a parser library as a dependency of the test binaries.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) o.ranks = std::atoi(argv[++i]);
    else if (a == "--threads") o.threads = true;
    else if (a == "--graph") o.graph = true;
    else if (a == "--quick") o.quick = true;
    else if (a == "--filter" && i + 1 < argc) o.filter = argv[++i];
    else if (a == "--gpus" && i + 1 < argc) o.gpus = std::atoi(argv[++i]);
    else if (a == "--memalloc") o.memalloc = true;
    else if (a == "--grow") o.grow = true;
    else {
      std::fprintf(stderr, "test_gpu_matrix: bad argument '%s'\nusage: test_gpu_matrix [--ranks N] [--threads] "
                   "[--graph] [--quick] [--filter NAME] [--gpus G] [--memalloc] [--grow]\n", a.c_str());
      return 2;
    }
  }
  if (o.grow && (o.threads || o.ranks < 2)) {
    std::fprintf(stderr, "test_gpu_matrix: --grow needs processes and at least 2 ranks\n");
    return 2;
  }
  if (cases(o, o.ranks).empty() && o.filter != "Chain") {
    std::printf("FAIL --filter %s names no collective (", o.filter.c_str());
    for (int c = 0; c <= static_cast<int>(Coll::all_to_all_v); ++c)
      std::printf("%s%s", c ? ", " : "", coll_name(static_cast<Coll>(c)));
    std::printf(", Chain)\n0 passed, 1 failed\n");
    return 1;
  }
  // Only ranks touch CUDA: a process that initialised CUDA cannot hand it to the children it forks.
  auto gpus_used = [&o] {
    const int visible = std::max(usable_gpus(), 1);
    return o.gpus <= 0 ? visible : std::min(o.gpus, visible);
  };
  auto device_of = [&](int rank) { return rank % gpus_used(); };
  if (o.threads && usable_gpus() == 0) {
    std::printf("SKIPPED: no CUDA device usable on this machine\n0 passed, 0 failed, 1 skipped\n");
    return 77;
  }
  int passed = 0, failed = 0;
  if (o.threads) {
    std::vector<ncclComm_t> comms(o.ranks);
    std::vector<int> devs(o.ranks);
    for (int r = 0; r < o.ranks; ++r) devs[r] = device_of(r);
    if (ncclResult_t e = ncclCommInitAll(comms.data(), o.ranks, devs.data()); e != ncclSuccess) {
      std::printf("FAIL ncclCommInitAll: %s (%s)\n0 passed, 1 failed\n", ncclGetErrorString(e), ncclGetLastError(nullptr));
      return 1;
    }
    std::vector<Rank> ranks(o.ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < o.ranks; ++r) {
      ranks[r].me = r;
      ranks[r].n = o.ranks;
      ranks[r].comm = comms[r];
      CUDA_OK(cudaSetDevice(devs[r]));
      allocate(ranks[r], o);  // before any kernel runs: allocation may synchronise the device
    }
    for (int r = 0; r < o.ranks; ++r) {
      threads.emplace_back([&, r] {
        CUDA_OK(cudaSetDevice(devs[r]));
        CUDA_OK(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking));
        run_rank(ranks[r], o);
      });
    }
    for (auto& t : threads) t.join();
    for (auto& R : ranks) {
      passed += R.passed;
      failed += R.failed;
      ncclCommDestroy(R.comm);
    }
  } else {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    int pipes[2], grow_pipe[2];
    if (pipe(pipes) != 0 || pipe(grow_pipe) != 0) return 1;
    ranks::Group group(o.ranks, [&](int r) {
      close(pipes[0]);
      if (usable_gpus() == 0) {
        int result[2] = {-1, 0};
        (void)!write(pipes[1], result, sizeof(result));
        return 0;
      }
      Rank R;
      R.me = r;
      R.n = o.ranks;
      CUDA_OK(cudaSetDevice(device_of(r)));
      CUDA_OK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
      if (!o.grow) {
        if (ncclCommInitRank(&R.comm, o.ranks, id, r) != ncclSuccess) {
          std::printf("FAIL init rank %d\n", r);
          return 2;
        }
      } else if (!grow_comm(r, o.ranks, id, grow_pipe, &R.comm)) {
        return 2;
      }
      run_rank(R, o);
      ncclCommDestroy(R.comm);
      int result[2] = {R.passed, R.failed};
      (void)!write(pipes[1], result, sizeof(result));
      return 0;
    });
    close(pipes[1]);
    group.wait();  // the results fit in the pipe: read them once every rank has ended
    bool skipped = false;
    for (int r = 0; r < o.ranks; ++r) {
      int result[2] = {0, 0};
      if (read(pipes[0], result, sizeof(result)) == sizeof(result)) {
        if (result[0] < 0) skipped = true;
        else {
          passed += result[0];
          failed += result[1];
        }
      } else {
        failed++;
      }
    }
    for (const ranks::Outcome& out : group.outcomes())
      if (!out.ok()) failed++;
    if (skipped) {
      std::printf("SKIPPED: no CUDA device usable on this machine\n0 passed, 0 failed, 1 skipped\n");
      return 77;
    }
  }
  if (passed + failed == 0) {
    std::printf("FAIL no case ran\n");
    failed = 1;
  }
  const int gpus = o.gpus == 1 ? 1 : gpus_used();  // every rank has finished with CUDA by now
  std::printf("%s %d ranks on %d GPU%s (%s%s%s): %d passed, %d failed\n", failed ? "FAILED" : "OK", o.ranks, gpus,
              gpus == 1 ? "" : "s", o.threads ? "threads" : "processes", o.grow ? ", grown" : "",
              o.graph ? ", eager and graph" : ", eager", passed, failed);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
