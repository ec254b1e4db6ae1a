// Which latency-exchange launches take a lean kernel (snac/executors/sm_exchange.h's
// exchange_lean_slots): the one-word form's condition and the kernels that have one, worked out
// here from the rules, not from the code under test.
#include "snac/executors/sm_exchange.h"
#include "test/catch.h"

using purlin::DataType;
using purlin::RedOpKind;
using purlin::snac::CollKind;
using purlin::snac::ExchangeArgs;
using purlin::snac::exchange_lean_slots;

namespace {

ExchangeArgs args(int nranks, DataType type, RedOpKind op) {
  ExchangeArgs a;
  a.nranks = nranks;
  a.type = type;
  a.op.kind = op;
  return a;
}

}  // namespace

TEST_CASE("a reduction of bf16, f16 or f32 sums takes the lean kernel of the fewest slots that hold its ranks", "[exchange]") {
  for (DataType t : {DataType::bf16, DataType::f16, DataType::f32})
    for (CollKind k : {CollKind::all_reduce, CollKind::all_reduce_direct, CollKind::reduce_scatter, CollKind::reduce_direct}) {
      CHECK(exchange_lean_slots(k, args(2, t, RedOpKind::sum), 128, 128) == 2);
      CHECK(exchange_lean_slots(k, args(3, t, RedOpKind::sum), 128, 128) == 4);
      CHECK(exchange_lean_slots(k, args(4, t, RedOpKind::sum), 256, 256) == 4);
      CHECK(exchange_lean_slots(k, args(5, t, RedOpKind::sum), 32, 32) == 8);
      CHECK(exchange_lean_slots(k, args(8, t, RedOpKind::sum), 32, 64) == 8);
      CHECK(exchange_lean_slots(k, args(9, t, RedOpKind::sum), 32, 64) == 0);
      // More words in a slice than threads: the batched form, in the kernel of every form.
      CHECK(exchange_lean_slots(k, args(2, t, RedOpKind::sum), 257, 256) == 0);
    }
}

TEST_CASE("reductions without a fixed fold and copies beyond 4 ranks keep the kernel of every form", "[exchange]") {
  CHECK(exchange_lean_slots(CollKind::all_reduce, args(2, DataType::bf16, RedOpKind::max), 32, 32) == 0);
  CHECK(exchange_lean_slots(CollKind::all_reduce, args(2, DataType::bf16, RedOpKind::premulsum), 32, 32) == 0);
  CHECK(exchange_lean_slots(CollKind::reduce_scatter, args(2, DataType::int32, RedOpKind::sum), 32, 32) == 0);
  for (CollKind k : {CollKind::all_gather, CollKind::all_to_all, CollKind::broadcast_direct, CollKind::gather, CollKind::scatter}) {
    CHECK(exchange_lean_slots(k, args(2, DataType::int8, RedOpKind::sum), 32, 32) == 2);
    CHECK(exchange_lean_slots(k, args(4, DataType::f64, RedOpKind::max), 32, 32) == 4);
    CHECK(exchange_lean_slots(k, args(5, DataType::bf16, RedOpKind::sum), 32, 32) == 0);
  }
  CHECK(exchange_lean_slots(CollKind::send_recv, args(2, DataType::uint8, RedOpKind::sum), 32, 32) == 0);
  CHECK(exchange_lean_slots(CollKind::all_gather_v, args(2, DataType::uint8, RedOpKind::sum), 32, 32) == 0);
}
