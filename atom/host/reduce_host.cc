#include "atom/host/reduce_host.h"

#include <cstring>

#include "atom/reduce.h"

namespace purlin {

void reduce_host(DataType type, const ReduceOp& op, void* dst, const void* const* srcs, int nsrc,
                 std::size_t count) {
  dispatch_reduction(type, op.kind, [&]<DataType T, RedOpKind K>() {
    reduce_range<T, K>(dst, srcs, nsrc, 0, count, op);
  });
}

void scale_host(DataType type, const ReduceOp& op, void* dst, const void* src, std::size_t count) {
  if (!scales(op)) {
    if (dst != src && count) std::memmove(dst, src, count * size_of(type));
    return;
  }
  dispatch_type(type, [&]<DataType T>() { scale_range<T>(dst, src, 0, count, op); });
}

}  // namespace purlin
