#include "nccl_shim/forward.h"

#include <cstdint>
#include <string>

#include <fmt/format.h>

#if defined(PURLIN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace purlin::shim {
namespace {

using snac::CollKind;
using snac::Op;
using snac::Part;

std::uint64_t total(const std::vector<Part>& parts) {
  std::uint64_t bytes = 0;
  for (const Part& p : parts) bytes += p.bytes;
  return bytes;
}

Status check(const RealNccl& lib, RealComm* comm, ncclResult_t r, const char* fn) {
  if (r == ncclSuccess) return Status::ok;
  const char* last = lib.GetLastError ? lib.GetLastError(RealNccl::handle(comm)) : nullptr;
  const Status s = r > ncclSuccess && r < ncclNumResults ? static_cast<Status>(r) : Status::internal_error;
  return fail(s, fmt::format("NCCL {} {}: {}{}{}", lib.version_text(), fn, lib.GetErrorString(r),
                             last && *last ? ": " : "", last ? last : ""));
}

// The real library's operator for one forwarded call: a built-in one, or a PreMulSum made on its
// communicator for the call and destroyed after it.
class RealOp {
 public:
  RealOp(const RealNccl& lib, RealComm* comm) : lib_(lib), comm_(comm) {}
  RealOp(const RealOp&) = delete;
  RealOp& operator=(const RealOp&) = delete;
  ~RealOp() {
    if (made_) lib_.RedOpDestroy(op_, RealNccl::handle(comm_));
  }

  Status make(const ReduceOp& op, DataType type) {
    if (op.kind != RedOpKind::premulsum) {
      op_ = static_cast<ncclRedOp_t>(op.kind);
      return Status::ok;
    }
    scalar_ = op.scalar_bits;  // the element's bytes first, as host_immediate keeps them
    const bool device = op.scalar_ptr != nullptr;
    ncclResult_t r = lib_.RedOpCreatePreMulSum(&op_, device ? const_cast<void*>(op.scalar_ptr) : &scalar_,
                                               static_cast<ncclDataType_t>(type),
                                               device ? ncclScalarDevice : ncclScalarHostImmediate,
                                               RealNccl::handle(comm_));
    PURLIN_TRY(check(lib_, comm_, r, "ncclRedOpCreatePreMulSum"));
    made_ = true;
    return Status::ok;
  }
  ncclRedOp_t get() const { return op_; }

 private:
  const RealNccl& lib_;
  RealComm* comm_;
  ncclRedOp_t op_ = ncclSum;
  std::uint64_t scalar_ = 0;
  bool made_ = false;
};

// Opens an NCCL group; close() ends it (and the destructor, on an early return, too).
class RealGroup {
 public:
  RealGroup(const RealNccl& lib, RealComm* comm) : lib_(lib), comm_(comm) {}
  RealGroup(const RealGroup&) = delete;
  RealGroup& operator=(const RealGroup&) = delete;
  ~RealGroup() {
    if (open_) lib_.GroupEnd();
  }
  Status open() {
    PURLIN_TRY(check(lib_, comm_, lib_.GroupStart(), "ncclGroupStart"));
    open_ = true;
    return Status::ok;
  }
  Status close() {
    open_ = false;
    return check(lib_, comm_, lib_.GroupEnd(), "ncclGroupEnd");
  }

 private:
  const RealNccl& lib_;
  RealComm* comm_;
  bool open_ = false;
};

struct Call {
  const RealNccl& lib;
  RealComm* comm;
  ncclComm_t h;
  ncclDataType_t dt;
  std::size_t es;
  cudaStream_t stream;

  Status send(const Part& p, int peer) const {
    return check(lib, comm, lib.Send(p.ptr, p.bytes / es, dt, peer, h, stream), "ncclSend");
  }
  Status recv(const Part& p, int peer) const {
    return check(lib, comm, lib.Recv(p.ptr, p.bytes / es, dt, peer, h, stream), "ncclRecv");
  }
};

// The collectives nccl.h names, each one call (or Sends and Recvs where the library predates it).
Status one_call(const Call& c, int rank, int nranks, const Op& op, ncclRedOp_t rop) {
  const RealNccl& lib = c.lib;
  const void* in = op.in.empty() ? nullptr : op.in.front().ptr;
  void* out = op.out.empty() ? nullptr : op.out.front().ptr;
  switch (op.kind) {
    case CollKind::all_reduce:
    case CollKind::all_reduce_direct:
      return check(lib, c.comm, lib.AllReduce(in, out, total(op.out) / c.es, c.dt, rop, c.h, c.stream), "ncclAllReduce");
    case CollKind::broadcast:
    case CollKind::broadcast_direct:
      return check(lib, c.comm, lib.Broadcast(in, out, total(op.out) / c.es, c.dt, op.root, c.h, c.stream),
                   "ncclBroadcast");
    case CollKind::reduce:
    case CollKind::reduce_direct:
      return check(lib, c.comm, lib.Reduce(in, out, total(op.in) / c.es, c.dt, rop, op.root, c.h, c.stream),
                   "ncclReduce");
    case CollKind::all_gather:
      return check(lib, c.comm, lib.AllGather(in, out, op.in.front().bytes / c.es, c.dt, c.h, c.stream),
                   "ncclAllGather");
    case CollKind::reduce_scatter:
      return check(lib, c.comm, lib.ReduceScatter(in, out, op.out.front().bytes / c.es, c.dt, rop, c.h, c.stream),
                   "ncclReduceScatter");
    case CollKind::all_to_all:
      if (lib.AlltoAll)
        return check(lib, c.comm, lib.AlltoAll(in, out, op.in.front().bytes / c.es, c.dt, c.h, c.stream), "ncclAlltoAll");
      for (int k = 0; k < nranks; ++k) {
        PURLIN_TRY(c.send(op.in[k], k));
        PURLIN_TRY(c.recv(op.out[k], k));
      }
      return Status::ok;
    case CollKind::gather:
      if (lib.Gather)
        return check(lib, c.comm, lib.Gather(in, out, op.in.front().bytes / c.es, c.dt, op.root, c.h, c.stream),
                     "ncclGather");
      PURLIN_TRY(c.send(op.in.front(), op.root));
      if (rank == op.root)
        for (int k = 0; k < nranks; ++k) PURLIN_TRY(c.recv(op.out[k], k));
      return Status::ok;
    case CollKind::scatter:
      if (lib.Scatter)
        return check(lib, c.comm, lib.Scatter(in, out, op.out.front().bytes / c.es, c.dt, op.root, c.h, c.stream),
                     "ncclScatter");
      if (rank == op.root)
        for (int k = 0; k < nranks; ++k) PURLIN_TRY(c.send(op.in[k], k));
      return c.recv(op.out.front(), op.root);
    case CollKind::all_gather_v:
      for (int k = 0; k < nranks; ++k) {
        const Part& dst = op.out[k];
        if (dst.bytes == 0) continue;
        PURLIN_TRY(check(lib, c.comm, lib.Broadcast(k == rank ? in : dst.ptr, dst.ptr, dst.bytes / c.es, c.dt, k, c.h,
                                                    c.stream), "ncclBroadcast"));
      }
      return Status::ok;
    case CollKind::reduce_scatter_v:
      for (int k = 0; k < nranks; ++k) {
        const Part& src = op.in[k];
        if (src.bytes == 0) continue;
        PURLIN_TRY(check(lib, c.comm, lib.Reduce(src.ptr, k == rank ? out : nullptr, src.bytes / c.es, c.dt, rop, k, c.h,
                                                 c.stream), "ncclReduce"));
      }
      return Status::ok;
    case CollKind::all_to_all_v:
      for (int k = 0; k < nranks; ++k) {
        if (op.in[k].bytes) PURLIN_TRY(c.send(op.in[k], k));
        if (op.out[k].bytes) PURLIN_TRY(c.recv(op.out[k], k));
      }
      return Status::ok;
    case CollKind::send_recv:
      break;
  }
  return fail(Status::internal_error, fmt::format("{} is not forwarded as a collective", snac::name_of(op.kind)));
}

// Whether `op` takes several NCCL calls, which then form one group.
bool several_calls(const RealNccl& lib, const Op& op) {
  switch (op.kind) {
    case CollKind::all_gather_v:
    case CollKind::reduce_scatter_v:
    case CollKind::all_to_all_v: return true;
    case CollKind::all_to_all: return !lib.AlltoAll;
    case CollKind::gather: return !lib.Gather;
    case CollKind::scatter: return !lib.Scatter;
    default: return false;
  }
}

// A private copy of an input that overlaps its output, taken in stream order: host memory for host
// buffers, stream-ordered device memory (freed after the call, in stream order) on a GPU.
class InputCopy {
 public:
  InputCopy() = default;
  InputCopy(const InputCopy&) = delete;
  InputCopy& operator=(const InputCopy&) = delete;
  ~InputCopy() {
#if defined(PURLIN_HAVE_CUDA)
    if (device_ptr_) cudaFreeAsync(device_ptr_, stream_);
#endif
  }

  Status take(int device, const Op& op, cudaStream_t stream, Op* out) {
    char* from = op.in.front().ptr;
    char* to = nullptr;
    if (device < 0) {
      host_.assign(from, from + op.input_bytes);
      to = host_.data();
    } else {
#if defined(PURLIN_HAVE_CUDA)
      stream_ = stream;
      void* p = nullptr;
      cudaError_t e = cudaMallocAsync(&p, op.input_bytes, stream);
      if (e == cudaSuccess) {
        device_ptr_ = p;
        e = cudaMemcpyAsync(p, from, op.input_bytes, cudaMemcpyDefault, stream);
      }
      if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(Status::cuda_error, fmt::format("copying an in-place AlltoAll's input: {}", cudaGetErrorString(e)));
      }
      to = static_cast<char*>(p);
#else
      (void)stream;
      return fail(Status::internal_error, "a device buffer in a build without CUDA");
#endif
    }
    *out = op;
    out->copy_input = false;
    for (Part& p : out->in) p.ptr = to + (p.ptr - from);
    return Status::ok;
  }

 private:
  std::vector<char> host_;
  void* device_ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

Status forward_op(const RealNccl& lib, RealComm* comm, int rank, int nranks, int device, const Op& given,
                  cudaStream_t stream) {
  if (comm == nullptr) return fail(Status::remote_error, "the NCCL communicator was aborted");
  InputCopy copy;
  Op staged;
  if (given.copy_input) PURLIN_TRY(copy.take(device, given, stream, &staged));
  const Op& op = given.copy_input ? staged : given;
  const Call c{lib, comm, RealNccl::handle(comm), static_cast<ncclDataType_t>(op.type), size_of(op.type), stream};
  const bool reduces = op.kind == CollKind::all_reduce || op.kind == CollKind::reduce ||
                       op.kind == CollKind::reduce_scatter || op.kind == CollKind::reduce_scatter_v;
  RealOp rop(lib, comm);
  if (reduces) PURLIN_TRY(rop.make(op.op, op.type));
  if (!several_calls(lib, op)) return one_call(c, rank, nranks, op, rop.get());
  RealGroup group(lib, comm);
  PURLIN_TRY(group.open());
  PURLIN_TRY(one_call(c, rank, nranks, op, rop.get()));
  return group.close();
}

Status forward_p2p(const RealNccl& lib, RealComm* comm, const std::vector<snac::PeerOp>& p2p, cudaStream_t stream) {
  if (p2p.empty()) return Status::ok;
  if (comm == nullptr) return fail(Status::remote_error, "the NCCL communicator was aborted");
  const Call c{lib, comm, RealNccl::handle(comm), ncclUint8, 1, stream};
  RealGroup group(lib, comm);
  PURLIN_TRY(group.open());
  for (const snac::PeerOp& p : p2p) {
    const Part part{p.buf, p.bytes};
    PURLIN_TRY(p.send ? c.send(part, p.peer) : c.recv(part, p.peer));
  }
  return group.close();
}

}  // namespace purlin::shim
