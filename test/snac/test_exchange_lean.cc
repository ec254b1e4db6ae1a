// Which latency-exchange launches take a word kernel or a lean one (snac/executors/sm_exchange.h's
// exchange_word_ranks and exchange_lean_slots): the kernels that exist and the one-word form's
// condition, worked out here from the rules, not from the code under test.
#include <cstdint>

#include "snac/executors/sm_exchange.h"
#include "test/catch.h"

using purlin::DataType;
using purlin::RedOpKind;
using purlin::snac::CollKind;
using purlin::snac::ExchangeArgs;
using purlin::snac::exchange_lean_slots;
using purlin::snac::exchange_word_ranks;

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

TEST_CASE("a launch takes the word kernel compiled for the fewest ranks that hold its own", "[exchange][word]") {
  for (CollKind k : {CollKind::all_reduce, CollKind::all_reduce_direct, CollKind::reduce_scatter, CollKind::reduce_direct})
    for (DataType t : {DataType::bf16, DataType::f16, DataType::f32}) {
      CHECK(exchange_word_ranks(k, args(2, t, RedOpKind::sum)) == 2);
      CHECK(exchange_word_ranks(k, args(3, t, RedOpKind::sum)) == 4);
      CHECK(exchange_word_ranks(k, args(4, t, RedOpKind::sum)) == 4);
      CHECK(exchange_word_ranks(k, args(6, t, RedOpKind::sum)) == 8);
      CHECK(exchange_word_ranks(k, args(8, t, RedOpKind::sum)) == 8);
      CHECK(exchange_word_ranks(k, args(9, t, RedOpKind::sum)) == 0);
      // No fixed fold: the kernels for any type and operator.
      CHECK(exchange_word_ranks(k, args(2, t, RedOpKind::max)) == 0);
      CHECK(exchange_word_ranks(k, args(2, t, RedOpKind::premulsum)) == 0);
    }
  CHECK(exchange_word_ranks(CollKind::all_reduce, args(2, DataType::int32, RedOpKind::sum)) == 0);
  for (CollKind k : {CollKind::all_gather, CollKind::all_to_all, CollKind::broadcast_direct, CollKind::gather, CollKind::scatter}) {
    CHECK(exchange_word_ranks(k, args(2, DataType::int8, RedOpKind::sum)) == 2);
    CHECK(exchange_word_ranks(k, args(5, DataType::f64, RedOpKind::max)) == 8);
    CHECK(exchange_word_ranks(k, args(9, DataType::bf16, RedOpKind::sum)) == 0);
  }
  CHECK(exchange_word_ranks(CollKind::send_recv, args(2, DataType::uint8, RedOpKind::sum)) == 0);
  CHECK(exchange_word_ranks(CollKind::all_gather_v, args(2, DataType::uint8, RedOpKind::sum)) == 0);
}

TEST_CASE("UniformSide::slice cuts every part as exchange_slice cuts part(), without dividing", "[exchange][slice]") {
  using purlin::snac::Part;
  using purlin::snac::UniformSide;
  using Form = UniformSide::Form;
  char* base = reinterpret_cast<char*>(std::uintptr_t{1} << 20);
  long cases = 0, wrong = 0;
  for (Form form : {Form::packed, Form::blocks, Form::shards})
    for (int n : {2, 3, 4, 7, 8})
      for (std::uint32_t elem : {1u, 2u, 4u, 8u})
        for (std::uint64_t align : {1ull, 8ull, 64ull})
          for (std::uint64_t count : {0ull, 1ull, 3ull, 15ull, 16ull, 17ull, 255ull, 1000ull, 4097ull, 65536ull})
            for (int channels : {1, 2, 3, 8, 16, 64}) {
              UniformSide u;
              u.form = form;
              u.base = base;
              u.elem = elem;
              u.align_elems = align;
              u.bytes = count * elem;
              u.prepare(n, channels);
              for (int k = 0; k < u.parts(n); ++k)
                for (int c = 0; c < channels; ++c) {
                  const Part want = purlin::snac::exchange_slice(u.part(k, n), c, channels);
                  const Part got = u.slice(k, c);
                  ++cases;
                  if (got.ptr != want.ptr || got.bytes != want.bytes) ++wrong;
                }
            }
  CHECK(cases > 100000);
  CHECK(wrong == 0);
}
