// SNAC's plan (snac/runtime/plan.h): AllReduce, Broadcast and Reduce come whole from the shim and
// leave as their direct form or as their composition's shards; the shards are checked against sizes
// worked out here by hand, not by the code under test.
#include <cstdint>
#include <vector>

#include "snac/runtime/plan.h"
#include "snac/runtime/policy.h"
#include "test/catch.h"

using purlin::DataType;
using purlin::RedOpKind;
using purlin::snac::CollKind;
using purlin::snac::Op;
using purlin::snac::Part;
using purlin::snac::plan;
using purlin::snac::Policy;

namespace {

char* buffer(std::uintptr_t at) { return reinterpret_cast<char*>(at); }

Op whole_op(CollKind kind, DataType type, char* in, std::uint64_t in_bytes, char* out, std::uint64_t out_bytes,
            int root = -1) {
  Op o;
  o.kind = kind;
  o.type = type;
  o.op.kind = RedOpKind::sum;
  o.root = root;
  o.in = {Part{in, in_bytes}};
  o.out = {Part{out, out_bytes}};
  return o;
}

// A policy whose only direct bound is `direct` bytes (no latency exchange).
Policy policy_with(std::uint64_t direct) {
  Policy p{};
  p.direct_max_bytes = direct;
  p.broadcast_direct_max_bytes = direct;
  p.exchange_direct_max_bytes = direct;
  p.exchange_max_bytes = 0;
  p.exchange_call_bytes = 0;
  return p;
}

}  // namespace

TEST_CASE("a call within the direct bound runs whole, in its direct form", "[plan]") {
  const Policy p = policy_with(64u << 10);
  Op scratch;
  char* in = buffer(0x10000);
  char* out = buffer(0x90000);
  const Op ar = whole_op(CollKind::all_reduce, DataType::bf16, in, 64u << 10, out, 64u << 10);
  const Op& d = plan(ar, 1, 4, p, &scratch);
  CHECK(d.kind == CollKind::all_reduce_direct);
  REQUIRE(d.in.size() == 1);
  REQUIRE(d.out.size() == 1);
  CHECK(d.in[0].ptr == in);
  CHECK(d.in[0].bytes == (64u << 10));
  CHECK(d.out[0].ptr == out);
  CHECK(d.out[0].bytes == (64u << 10));
  CHECK(d.mid_bytes == 0);
  CHECK(d.type == DataType::bf16);

  // Broadcast away from the root: no input, and the direct form still names the whole size.
  const Op bc = whole_op(CollKind::broadcast, DataType::f32, nullptr, 0, out, 4096, 2);
  const Op& b = plan(bc, 1, 4, p, &scratch);
  CHECK(b.kind == CollKind::broadcast_direct);
  CHECK(b.root == 2);
  CHECK(b.in[0].ptr == nullptr);
  CHECK(b.in[0].bytes == 4096);
  CHECK(b.out[0].bytes == 4096);

  // Reduce away from the root: judged by its input, as at the root.
  const Op rd = whole_op(CollKind::reduce, DataType::f32, in, 4096, nullptr, 4096, 0);
  const Op& r = plan(rd, 3, 4, p, &scratch);
  CHECK(r.kind == CollKind::reduce_direct);
  CHECK(r.out[0].ptr == nullptr);
  CHECK(r.out[0].bytes == 4096);
}

TEST_CASE("a call beyond the direct bound runs as its composition, in aligned shards", "[plan]") {
  const Policy p = policy_with(1024);
  Op scratch;
  char* in = buffer(0x100000);
  char* out = buffer(0x800000);
  // 1000 bf16 elements over 3 ranks: ceil(1000 / 3) = 334, rounded up to 128 elements (256 bytes)
  // is 384; shards of 384, 384 and 232 elements.
  const Op ar = whole_op(CollKind::all_reduce, DataType::bf16, in, 2000, out, 2000);
  const std::uint64_t want_off[] = {0, 768, 1536};
  const std::uint64_t want_bytes[] = {768, 768, 464};
  for (int rank = 0; rank < 3; ++rank) {
    const Op& s = plan(ar, rank, 3, p, &scratch);
    CHECK(s.kind == CollKind::all_reduce);
    REQUIRE(s.in.size() == 3);
    REQUIRE(s.out.size() == 3);
    for (int k = 0; k < 3; ++k) {
      CHECK(s.in[k].ptr == in + want_off[k]);
      CHECK(s.in[k].bytes == want_bytes[k]);
      CHECK(s.out[k].ptr == out + want_off[k]);
      CHECK(s.out[k].bytes == want_bytes[k]);
    }
    CHECK(s.mid_bytes == want_bytes[rank]);
  }
  // 520 float32 elements over 4 ranks: ceil(520 / 4) = 130, rounded up to 64 elements is 192;
  // shards of 192, 192 and 136 elements, and an empty last one at the end.
  const Op f32 = whole_op(CollKind::all_reduce, DataType::f32, in, 2080, out, 2080);
  const Op& t = plan(f32, 3, 4, p, &scratch);
  REQUIRE(t.out.size() == 4);
  CHECK(t.out[0].bytes == 768);
  CHECK(t.out[1].bytes == 768);
  CHECK(t.out[2].ptr == out + 1536);
  CHECK(t.out[2].bytes == 544);
  CHECK(t.out[3].bytes == 0);
  CHECK(t.mid_bytes == 0);

  // Broadcast away from the root: empty input shards; Reduce away from the root: output shards that
  // name their sizes only.
  const Op bc = whole_op(CollKind::broadcast, DataType::bf16, nullptr, 0, out, 2000, 0);
  const Op& b = plan(bc, 2, 3, p, &scratch);
  CHECK(b.kind == CollKind::broadcast);
  REQUIRE(b.in.size() == 3);
  for (const Part& q : b.in) CHECK((q.ptr == nullptr && q.bytes == 0));
  CHECK(b.out[2].ptr == out + 1536);
  CHECK(b.mid_bytes == 464);
  const Op rd = whole_op(CollKind::reduce, DataType::bf16, in, 2000, nullptr, 2000, 0);
  const Op& r = plan(rd, 1, 3, p, &scratch);
  CHECK(r.kind == CollKind::reduce);
  REQUIRE(r.out.size() == 3);
  for (int k = 0; k < 3; ++k) {
    CHECK(r.out[k].ptr == nullptr);
    CHECK(r.out[k].bytes == want_bytes[k]);
  }
}

TEST_CASE("other collectives run as given, and a repeated plan reuses its storage", "[plan]") {
  const Policy p = policy_with(1024);
  Op scratch;
  Op ag;
  ag.kind = CollKind::all_gather;
  ag.in = {Part{buffer(0x1000), 64}};
  ag.out = {Part{buffer(0x2000), 64}, Part{buffer(0x2040), 64}};
  CHECK(&plan(ag, 0, 2, p, &scratch) == &ag);

  const Op ar = whole_op(CollKind::all_reduce, DataType::f32, buffer(0x10000), 1u << 20, buffer(0x200000), 1u << 20);
  const Op& first = plan(ar, 0, 8, p, &scratch);
  REQUIRE(&first == &scratch);
  const Part* storage = scratch.in.data();
  const Op& again = plan(ar, 5, 8, p, &scratch);
  CHECK(scratch.in.data() == storage);
  CHECK(again.out[5].ptr == buffer(0x200000) + 5 * (128u << 10));
  CHECK(again.mid_bytes == (128u << 10));
}
