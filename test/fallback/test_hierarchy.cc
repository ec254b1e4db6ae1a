// Unit tests of the hand-over's decisions, without any NCCL: PURLIN_FALLBACK's parsing, the host
// layout, the route of each collective, and the steps of the hierarchical plans.
#include <string>
#include <vector>

#include "core/config.h"
#include "snac/runtime/hierarchy.h"
#include "snac/runtime/hosts.h"
#include "test/catch.h"

using namespace purlin;
using namespace purlin::snac;

TEST_CASE("PURLIN_FALLBACK names operations, all or none", "[fallback][config]") {
  std::string bad;
  CHECK(parse_fallback("", &bad) == 0u);
  CHECK(parse_fallback("none", &bad) == 0u);
  CHECK(parse_fallback("all", &bad) == fallback_op::all);
  CHECK(parse_fallback("AllReduce, send", &bad) == (fallback_op::all_reduce | fallback_op::send_recv));
  CHECK(parse_fallback("recv", &bad) == fallback_op::send_recv);
  CHECK(parse_fallback("bcast,all_gather_v,ReduceScatterV,alltoallv", &bad) ==
        (fallback_op::broadcast | fallback_op::all_gather_v | fallback_op::reduce_scatter_v | fallback_op::all_to_all_v));
  CHECK(parse_fallback("reduce,gather,scatter,alltoall,reducescatter,allgather", &bad) ==
        (fallback_op::reduce | fallback_op::gather | fallback_op::scatter | fallback_op::all_to_all |
         fallback_op::reduce_scatter | fallback_op::all_gather));
  CHECK_FALSE(parse_fallback("allreduce,allreduse", &bad).has_value());
  CHECK(bad == "allreduse");
  CHECK(fallback_names(0) == "none");
  CHECK(fallback_names(fallback_op::all) == "all");
  CHECK(fallback_names(fallback_op::all_reduce | fallback_op::send_recv) == "allreduce,sendrecv");
  CHECK(parse_fallback(fallback_names(fallback_op::broadcast | fallback_op::all_to_all_v), &bad) ==
        (fallback_op::broadcast | fallback_op::all_to_all_v));
}

TEST_CASE("Hosts are numbered by their lowest rank", "[fallback][hosts]") {
  HostLayout l = HostLayout::from_ids({70, 90, 70, 90});
  CHECK(l.hosts() == 2);
  CHECK(l.members(0) == std::vector<int>{0, 2});
  CHECK(l.members(1) == std::vector<int>{1, 3});
  CHECK(l.host_of(3) == 1);
  CHECK(l.local_rank(2) == 1);
  CHECK(l.local_size(1) == 2);
  CHECK(l.uniform());
  CHECK(l.rail_of(3) == std::vector<int>{2, 3});
  CHECK(l.rail_of(0) == std::vector<int>{0, 1});
  CHECK(l.same_host(0, 2));
  CHECK_FALSE(l.same_host(0, 1));

  HostLayout u = HostLayout::from_ids({5, 5, 9});
  CHECK(u.hosts() == 2);
  CHECK_FALSE(u.uniform());
  CHECK(HostLayout::from_ids({1, 1, 1}).hosts() == 1);
}

TEST_CASE("LSA teams are the runs of consecutive ranks on one host, of one size", "[fallback][hosts]") {
  // One host: the whole communicator; NCCL_LSA_TEAM_SIZE cuts it to a divisor.
  CHECK(HostLayout::from_ids({4, 4, 4, 4, 4, 4}).lsa_size() == 6);
  CHECK(HostLayout::from_ids({4, 4, 4, 4, 4, 4}).lsa_size(4) == 2);
  CHECK(HostLayout::from_ids({4, 4, 4, 4, 4, 4}).lsa_size(3) == 3);
  CHECK(HostLayout::from_ids({4}).lsa_size() == 1);
  // Hosts in blocks of two, then of three and six (their greatest common divisor).
  CHECK(HostLayout::from_ids({1, 1, 2, 2}).lsa_size() == 2);
  CHECK(HostLayout::from_ids({1, 1, 1, 2, 2, 2, 2, 2, 2}).lsa_size() == 3);
  CHECK(HostLayout::from_ids({1, 1, 1, 2, 2, 2, 2, 2, 2}).lsa_size(6) == 3);
  // Interleaved hosts, or blocks of unequal lengths with no common divisor: every rank alone.
  CHECK(HostLayout::from_ids({1, 2, 1, 2}).lsa_size() == 1);
  CHECK(HostLayout::from_ids({1, 1, 2}).lsa_size() == 1);
  // A host that comes back after another counts as a new run.
  CHECK(HostLayout::from_ids({1, 1, 2, 2, 1, 1}).lsa_size() == 2);
  CHECK(HostLayout::from_ids({1, 1, 2, 2, 1, 1, 1, 1}).lsa_size() == 2);
}

namespace {

Op op_of(CollKind kind, RedOpKind red = RedOpKind::sum) {
  Op op;
  op.kind = kind;
  op.type = DataType::f32;
  op.op.kind = red;
  return op;
}

}  // namespace

TEST_CASE("Routes: Purlin on one host, NCCL across hosts, hierarchical where rails exist", "[fallback][route]") {
  const HostLayout one = HostLayout::from_ids({1, 1, 1, 1});
  const HostLayout two = HostLayout::from_ids({1, 2, 1, 2});
  const HostLayout singles = HostLayout::from_ids({1, 2});
  const HostLayout uneven = HostLayout::from_ids({1, 1, 2});

  SECTION("one host, nothing forced: Purlin") {
    for (CollKind k : {CollKind::all_reduce, CollKind::all_gather, CollKind::send_recv, CollKind::all_to_all_v})
      CHECK(choose_route(op_of(k), one, 0, "").route == Route::native);
  }
  SECTION("PURLIN_FALLBACK forwards exactly what it names, on any layout") {
    const std::uint32_t forced = fallback_op::all_reduce | fallback_op::send_recv;
    auto r = choose_route(op_of(CollKind::all_reduce), one, forced, "");
    CHECK(r.route == Route::nccl);
    CHECK(r.why.find("PURLIN_FALLBACK") != std::string::npos);
    CHECK(choose_route(op_of(CollKind::send_recv), two, forced, "").route == Route::nccl);
    CHECK(choose_route(op_of(CollKind::all_reduce), two, forced, "").route == Route::nccl);
    CHECK(choose_route(op_of(CollKind::all_gather), one, forced, "").route == Route::native);
  }
  SECTION("what the datapath declines goes to NCCL, saying why") {
    auto r = choose_route(op_of(CollKind::reduce), one, 0, "fp8 is not served here");
    CHECK(r.route == Route::nccl);
    CHECK(r.why == "fp8 is not served here");
    CHECK(choose_route(op_of(CollKind::all_reduce), two, 0, "no datapath").route == Route::nccl);
  }
  SECTION("across hosts") {
    CHECK(choose_route(op_of(CollKind::all_reduce), two, 0, "").route == Route::hierarchical);
    CHECK(choose_route(op_of(CollKind::all_reduce, RedOpKind::premulsum), two, 0, "").route == Route::hierarchical);
    CHECK(choose_route(op_of(CollKind::all_reduce, RedOpKind::avg), two, 0, "").route == Route::nccl);
    CHECK(choose_route(op_of(CollKind::broadcast), two, 0, "").route == Route::hierarchical);
    CHECK(choose_route(op_of(CollKind::send_recv), two, 0, "").route == Route::hierarchical);
    for (CollKind k : {CollKind::reduce, CollKind::all_gather, CollKind::reduce_scatter, CollKind::all_to_all,
                       CollKind::gather, CollKind::scatter, CollKind::all_gather_v, CollKind::reduce_scatter_v,
                       CollKind::all_to_all_v})
      CHECK(choose_route(op_of(k), two, 0, "").route == Route::nccl);
    CHECK(choose_route(op_of(CollKind::all_reduce), singles, 0, "").route == Route::nccl);
    CHECK(choose_route(op_of(CollKind::broadcast), uneven, 0, "").route == Route::nccl);
    CHECK(choose_route(op_of(CollKind::send_recv), uneven, 0, "").route == Route::hierarchical);
  }
}

namespace {

char* at(std::uintptr_t a) { return reinterpret_cast<char*>(a); }

}  // namespace

TEST_CASE("Hierarchical AllReduce: ReduceScatterV in the host, AllReduce on the rail, AllGatherV", "[fallback][plan]") {
  const HostLayout two = HostLayout::from_ids({1, 2, 1, 2});  // host 0: ranks 0, 2; host 1: ranks 1, 3
  Op op = op_of(CollKind::all_reduce, RedOpKind::premulsum);
  op.op.scalar_bits = 0x40000000;  // 2.0f
  const std::uintptr_t send = 0x100000, recv = 0x200000;
  op.in = {Part{at(send), 4000}};  // 1000 floats (the shim's own shards do not matter here)
  op.out = {Part{at(recv), 4000}};

  // Rank 2: host 0, local rank 1. Shards of 64-float multiples: [0, 512) and [512, 1000).
  std::vector<Step> steps = hierarchical_plan(op, two, 2);
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].where == Step::Where::host);
  CHECK(steps[0].op.kind == CollKind::reduce_scatter_v);
  CHECK(steps[0].op.op.kind == RedOpKind::premulsum);
  REQUIRE(steps[0].op.in.size() == 2);
  CHECK(steps[0].op.in[0].ptr == at(send));
  CHECK(steps[0].op.in[0].bytes == 512 * 4);
  CHECK(steps[0].op.in[1].ptr == at(send + 512 * 4));
  CHECK(steps[0].op.in[1].bytes == 488 * 4);
  REQUIRE(steps[0].op.out.size() == 1);
  CHECK(steps[0].op.out[0].ptr == at(recv + 512 * 4));
  CHECK(steps[0].op.out[0].bytes == 488 * 4);

  CHECK(steps[1].where == Step::Where::rail);
  CHECK(steps[1].op.kind == CollKind::all_reduce);
  CHECK(steps[1].op.op.kind == RedOpKind::sum);  // the scalar was applied within the host
  CHECK(steps[1].op.in[0].ptr == at(recv + 512 * 4));
  CHECK(steps[1].op.out[0].ptr == at(recv + 512 * 4));
  CHECK(steps[1].op.out[0].bytes == 488 * 4);

  CHECK(steps[2].where == Step::Where::host);
  CHECK(steps[2].op.kind == CollKind::all_gather_v);
  CHECK(steps[2].op.in[0].ptr == at(recv + 512 * 4));
  REQUIRE(steps[2].op.out.size() == 2);
  CHECK(steps[2].op.out[0].ptr == at(recv));
  CHECK(steps[2].op.out[0].bytes == 512 * 4);

  SECTION("a rank whose shard is empty takes no rail step") {
    op.in = {Part{at(send), 40}};
    op.out = {Part{at(recv), 40}};
    std::vector<Step> small = hierarchical_plan(op, two, 3);  // local rank 1 of 2: shard [10, 10)
    REQUIRE(small.size() == 2);
    CHECK(small[0].op.out[0].bytes == 0);
    CHECK(small[1].op.kind == CollKind::all_gather_v);
    CHECK(hierarchical_plan(op, two, 1).size() == 3);  // local rank 0 holds all ten
  }
}

TEST_CASE("Hierarchical Broadcast: Scatter on the root's host, Broadcast on the rails, AllGatherV", "[fallback][plan]") {
  const HostLayout blocks = HostLayout::from_ids({1, 1, 2, 2});
  Op op = op_of(CollKind::broadcast);
  op.type = DataType::f64;
  op.root = 3;  // host 1, local rank 1
  const std::uintptr_t send = 0x100000, recv = 0x200000;
  op.in = {Part{at(send), 800}};
  op.out = {Part{at(recv), 800}};

  std::vector<Step> root = hierarchical_plan(op, blocks, 3);
  REQUIRE(root.size() == 3);
  CHECK(root[0].op.kind == CollKind::scatter);
  CHECK(root[0].op.root == 1);
  REQUIRE(root[0].op.in.size() == 2);
  CHECK(root[0].op.in[0].ptr == at(send));
  CHECK(root[0].op.in[0].bytes == 64 * 8);
  CHECK(root[0].op.in[1].bytes == 36 * 8);
  CHECK(root[0].op.out[0].ptr == at(recv + 64 * 8));
  // Its shards differ in size (64 and 36 elements): no rank may take it for a uniform Scatter.
  CHECK(root[0].op.ragged);
  CHECK(root[1].where == Step::Where::rail);
  CHECK(root[1].op.kind == CollKind::broadcast);
  CHECK(root[1].op.root == 1);  // the root's host
  CHECK(root[2].op.kind == CollKind::all_gather_v);

  std::vector<Step> peer = hierarchical_plan(op, blocks, 2);  // root's host, not the root
  REQUIRE(peer.size() == 3);
  CHECK(peer[0].op.in[0].ptr == nullptr);
  CHECK(peer[0].op.out[0].ptr == at(recv));
  CHECK(peer[0].op.ragged);

  std::vector<Step> other = hierarchical_plan(op, blocks, 0);  // the other host: no Scatter
  REQUIRE(other.size() == 2);
  CHECK(other[0].where == Step::Where::rail);
  CHECK(other[0].op.out[0].ptr == at(recv));
  CHECK(other[0].op.out[0].bytes == 64 * 8);
  CHECK(other[1].op.kind == CollKind::all_gather_v);
}
