#include "bench.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "nccl_check.h"
#include "reference.h"

namespace perf {
namespace {

constexpr std::size_t kPatternElements = std::size_t{1} << 16;

// A row's buffer: the datapath's own memory, or memory from ncclMemAlloc registered with the
// communicator (ncclCommRegister), as users of the libraries' zero-copy paths allocate it. An
// empty buffer is always the datapath's (nothing to register).
class RowBuffer {
 public:
  RowBuffer(Datapath& datapath, ncclComm_t comm, bool registered, std::size_t bytes)
      : comm_(comm), bytes_(bytes) {
    if (!registered || bytes == 0) {
      plain_.emplace(datapath, bytes);
      return;
    }
    check_nccl(ncclMemAlloc(&data_, bytes), "ncclMemAlloc (" + std::to_string(bytes) + " bytes)");
    ncclResult_t r = ncclCommRegister(comm_, data_, bytes, &handle_);
    if (r != ncclSuccess) {
      ncclMemFree(data_);
      check_nccl(r, "ncclCommRegister", comm_);
    }
  }
  ~RowBuffer() {
    if (plain_) return;
    ncclCommDeregister(comm_, handle_);
    ncclMemFree(data_);
  }
  RowBuffer(const RowBuffer&) = delete;
  RowBuffer& operator=(const RowBuffer&) = delete;

  char* data() const { return plain_ ? plain_->data() : static_cast<char*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  ncclComm_t comm_;
  std::size_t bytes_;
  std::optional<Buffer> plain_;
  void* data_ = nullptr;
  void* handle_ = nullptr;
};

ncclRedOp_t builtin_op(Op op) {
  switch (op) {
    case Op::prod: return ncclProd;
    case Op::max: return ncclMax;
    case Op::min: return ncclMin;
    case Op::avg: return ncclAvg;
    default: return ncclSum;  // sum, and the ignored argument of collectives that do not reduce
  }
}

// The operator of one row: a built-in one, or a PreMulSum created on the communicator for the
// row with this rank's own scalar, and destroyed after it.
class RowOp {
 public:
  template <class T>
  RowOp(Op op, ncclDataType_t type, ncclComm_t comm, T scalar) : comm_(comm), op_(builtin_op(op)) {
    if (op != Op::premulsum) return;
    check_nccl(ncclRedOpCreatePreMulSum(&op_, &scalar, type, ncclScalarHostImmediate, comm),
               "ncclRedOpCreatePreMulSum", comm);
    created_ = true;
  }
  ~RowOp() {
    if (created_) ncclRedOpDestroy(op_, comm_);
  }
  RowOp(const RowOp&) = delete;
  RowOp& operator=(const RowOp&) = delete;
  ncclRedOp_t get() const { return op_; }

 private:
  ncclComm_t comm_;
  ncclRedOp_t op_;
  bool created_ = false;
};

// Host images of a call's buffers before it runs: the input, and the output poisoned with the
// complement of the expected result wherever the input does not already occupy it, so an element
// the library fails to write is always counted wrong.
template <class T>
struct Images {
  std::vector<T> send;     // out of place: the send buffer
  std::vector<T> recv;     // out of place: the receive buffer (empty when nothing is checked)
  std::vector<T> inplace;  // in place: the one buffer
};

template <class T>
Images<T> make_images(Placement placement, const Counts& c, std::vector<T> input,
                      const std::vector<T>& expected, bool input_read) {
  Images<T> images;
  if (placement == kOutOfPlace) {
    images.recv.resize(expected.size());
    std::transform(expected.begin(), expected.end(), images.recv.begin(), complement<T>);
    images.send = std::move(input);
    return images;
  }
  images.inplace.resize(c.inplace_elements());
  std::copy(input.begin(), input.end(),
            images.inplace.begin() + static_cast<std::ptrdiff_t>(c.inplace_send));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const std::size_t at = c.inplace_recv + i;
    const bool holds_input = input_read && at >= c.inplace_send && at < c.inplace_send + c.send;
    if (!holds_input) images.inplace[at] = complement(expected[i]);
  }
  return images;
}

template <class T>
void upload(Datapath& datapath, char* buffer, const std::vector<T>& image) {
  datapath.upload(buffer, image.data(), image.size() * sizeof(T));
}

}  // namespace

Bench::Bench(Datapath& datapath, ncclComm_t comm, int rank, int nranks, int iters, int warmup,
             bool check, bool registered, bool host_time)
    : datapath_(datapath), comm_(comm), rank_(rank), nranks_(nranks), iters_(iters),
      warmup_(warmup), check_(check), registered_(registered), host_time_(host_time) {}

Measurement Bench::run(const RowSpec& spec) {
  try {
    return visit_type(spec.type,
                      [&](auto tag) { return run_typed<typename decltype(tag)::type>(spec); });
  } catch (const NcclError& e) {
    if (e.result != ncclInvalidArgument) throw;
    unsupported_reason_ = e.what();
    Measurement m;
    m.unsupported = 1;
    return m;
  }
}

template <class T>
Measurement Bench::run_typed(const RowSpec& spec) {
  const Collective& coll = *spec.coll;
  const Counts counts = coll.counts(spec.bytes / sizeof(T), nranks_, rank_);
  const int root = std::max(spec.root, 0);
  const bool input_read = coll.reads_input(rank_, root);
  const bool output_written = coll.writes_output(rank_, root);
  RowOp op(spec.op, spec.type, comm_, Element<T>::premul_scalar(rank_));
  const CallArgs args{counts.param, spec.type, op.get(), root, rank_, nranks_, comm_,
                      datapath_.stream()};

  Measurement m;
  for (Placement placement : {kOutOfPlace, kInPlace}) {
    Reference<T> reference(coll, counts, spec.op, rank_, nranks_, root, mix(spec.seed + placement));
    std::vector<T> expected = check_ ? reference.expected() : std::vector<T>{};
    // Unchecked rows only time the calls: a repeated pattern of inputs does for them.
    std::vector<T> input = check_ ? reference.inputs() : reference.inputs(kPatternElements);
    Images<T> images = make_images(placement, counts, std::move(input), expected, input_read);

    // Out of place: a send and a receive buffer. In place: one buffer holding both areas at
    // nccl-tests' offsets.
    const bool in_place = placement == kInPlace;
    RowBuffer buffer(datapath_, comm_, registered_,
                     (in_place ? counts.inplace_elements() : counts.send) * sizeof(T));
    RowBuffer recv_buffer(datapath_, comm_, registered_, in_place ? 0 : counts.recv * sizeof(T));
    char* send = buffer.data() + (in_place ? counts.inplace_send * sizeof(T) : 0);
    char* recv = in_place ? buffer.data() + counts.inplace_recv * sizeof(T) : recv_buffer.data();
    auto load = [&] {
      if (in_place) {
        upload(datapath_, buffer.data(), images.inplace);
      } else {
        upload(datapath_, send, images.send);
        upload(datapath_, recv, images.recv);
      }
    };
    auto call = [&] {
      ncclResult_t result = coll.issue(send, recv, args);
      if (result != ncclSuccess) {
        check_nccl(result, std::string(coll.api) + " (count " + std::to_string(args.count) + ", " +
                               name_of(spec.type) + ", " + name_of(spec.op) + ")", comm_);
      }
    };

    load();
    m.time_us[placement] = datapath_.time_calls(call, warmup_, iters_);
    if (host_time_) {
      // The entry point's CPU time: eager calls on the wall clock, not waiting for the work they
      // enqueue (on the host datapath a call completes before it returns: there it is all of it).
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters_; ++i) call();
      const auto stop = std::chrono::steady_clock::now();
      datapath_.finish();
      m.host_us[placement] = std::chrono::duration<double, std::micro>(stop - start).count() / iters_;
    }

    if (!check_ || (in_place && !coll.checks_in_place())) continue;
    load();
    call();  // every rank takes part, also those whose output is not checked
    datapath_.finish();
    if (!output_written) continue;
    std::vector<T> got(expected.size());
    datapath_.download(got.data(), recv, got.size() * sizeof(T));
    m.wrong[placement] = count_wrong(got, expected, spec.op, nranks_);
  }
  return m;
}

}  // namespace perf
