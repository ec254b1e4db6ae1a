#include "atom/host/reduce_host.h"

#include "atom/reduce.h"

namespace purlin {

void reduce_host(DataType type, const ReduceOp& op, void* dst, const void* const* srcs, int nsrc,
                 std::size_t count) {
  dispatch_reduction(type, op.kind, [&]<DataType T, RedOpKind K>() {
    reduce_range<T, K>(dst, srcs, nsrc, 0, count, op);
  });
}

void scale_host(DataType type, const ReduceOp& op, void* dst, const void* src, std::size_t count) {
  dispatch_reduction(type, RedOpKind::premulsum, [&]<DataType T, RedOpKind K>() {
    const Reducer<T, K> r(op);
    using S = typename Reducer<T, K>::S;
    const S* in = static_cast<const S*>(src);
    S* out = static_cast<S*>(dst);
    for (std::size_t i = 0; i < count; ++i) out[i] = r.finish(r.first(in[i]));
  });
}

}  // namespace purlin
