#include "atom/host/reduce_host.h"

#include "atom/reduce.h"

namespace purlin {

void reduce_host(DataType type, const ReduceOp& op, void* dst, const void* const* srcs, int nsrc,
                 std::size_t count) {
  dispatch_reduction(type, op.kind, [&]<DataType T, RedOpKind K>() {
    reduce_range<T, K>(dst, srcs, nsrc, 0, count, op);
  });
}

}  // namespace purlin
