"""One rank of the torch.distributed tests: backend `nccl`, every rank on CUDA device 0.

Run by harness.launch (one process per rank, torchrun's variables set). Checks, in order:
init_process_group with device_id (eager communicator creation), which libnccl serves it, then
all_reduce (sum, avg, min, max, prod x fp32, bf16, fp16, int32, int64, uint8), broadcast,
reduce, all_gather_into_tensor, all_gather, reduce_scatter_tensor, all_to_all_single (even and
uneven splits), send/recv, batch_isend_irecv, barrier, new_group, split_group, all_reduce
captured in a CUDA graph and replayed, async work handles, destroy_process_group.

Environment (set by the harness): PURLIN_LIB (our library, for the evidence checks),
PURLIN_TORCH_MODE (`preload` or `swap`: how ours was loaded), PURLIN_TORCH_BACKEND (`gloo` runs
the same checks on the CPU to check the references; the library checks are then skipped).
"""
from __future__ import annotations

import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checks import (CheckFailed, Checks, SkipCheck, arm_watchdog, expect_our_log_lines,  # noqa: E402
                    expect_ours_mapped, file_sha256, global_provider, local_gpu, mapped_libraries, rank_and_world,
                    split_version, version_of)

SMALL = 4099  # odd, so no rank gets an even share
LARGE = (1 << 20) + 5


class Rank:
    """What every check needs: torch, this rank's place, the device and the recorder."""

    def __init__(self):
        import torch
        import torch.distributed as dist

        import reference

        self.torch, self.dist, self.ref = torch, dist, reference
        self.rank, self.world = rank_and_world()
        self.backend = os.environ.get("PURLIN_TORCH_BACKEND", "nccl")
        self.mode = os.environ.get("PURLIN_TORCH_MODE", "preload")
        self.cuda = self.backend == "nccl"
        self.device = torch.device("cuda", local_gpu(torch)) if self.cuda else torch.device("cpu")
        self.checks = Checks(lenient=not self.cuda)
        self.ops = {
            "sum": dist.ReduceOp.SUM,
            "avg": getattr(dist.ReduceOp, "AVG", None),
            "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX,
            "prod": dist.ReduceOp.PRODUCT,
        }

    def op(self, name: str):
        if self.ops[name] is None:
            raise RuntimeError(f"this torch has no ReduceOp for {name}")
        return self.ops[name]

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def to_dev(self, t):
        # Always a copy: collectives work in place, and the host inputs are the reference.
        return t.to(self.device, copy=True)

    def peers(self) -> tuple[int, int]:
        return (self.rank + 1) % self.world, (self.rank - 1) % self.world


# ---- set-up and evidence -------------------------------------------------------------------------

def init(r: Rank) -> str:
    kwargs = dict(backend=r.backend, init_method="env://", rank=r.rank, world_size=r.world,
                  timeout=datetime.timedelta(seconds=60))
    if r.cuda:
        r.torch.cuda.set_device(r.device)
        kwargs["device_id"] = r.device  # eager init: the communicator is created here
    r.dist.init_process_group(**kwargs)
    return f"backend {r.dist.get_backend()}, rank {r.dist.get_rank()} of {r.dist.get_world_size()}"


def evidence(r: Rank) -> None:
    ours = os.environ["PURLIN_LIB"]
    if r.mode == "preload":
        r.checks.run("library: ours is mapped (the wheel's may be too)", expect_ours_mapped, ours, True)
    else:
        r.checks.run("library: every libnccl mapped is ours", expect_ours_mapped, ours)
    r.checks.run("library: our INFO lines in NCCL_DEBUG_FILE", expect_our_log_lines)

    def version():
        mapped = [p for p in mapped_libraries() if not p.endswith(" (deleted)")]
        if not mapped:
            raise CheckFailed("no libnccl mapped")
        code = version_of(mapped[0])
        reported = tuple(r.torch.cuda.nccl.version()[:3])
        if reported != split_version(code):
            raise CheckFailed(f"torch.cuda.nccl.version() is {reported}, our ncclGetVersion says {code}")
        return f"{reported} from ncclGetVersion {code} (the same code as NCCL {reported}: the mapping proves the library)"

    r.checks.run("library: torch.cuda.nccl.version() is ours", version)

    def how_loaded():
        preload = os.environ.get("LD_PRELOAD", "")
        if r.mode == "preload":
            if ours not in preload.split(":"):
                raise CheckFailed(f"LD_PRELOAD is {preload!r}, without {ours}")
            provider = global_provider("ncclAllReduce")
            if provider is None or file_sha256(provider) != file_sha256(ours):
                raise CheckFailed(f"the process resolves ncclAllReduce to {provider}, not to ours")
            return f"LD_PRELOAD={preload}; ncclAllReduce resolves to {provider}"
        if "libnccl" in preload:
            raise CheckFailed(f"the swap test runs without LD_PRELOAD, but it is {preload!r}")
        return "no LD_PRELOAD: libtorch_cuda.so found libnccl.so.2 through its RPATH"

    r.checks.run(f"library: loaded by {r.mode}", how_loaded)


# ---- collectives --------------------------------------------------------------------------------

def all_reduce(r: Rank, op: str, dtype_name: str, count: int) -> None:
    name = f"all_reduce {op} {dtype_name} n={count}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        inputs = r.ref.all_values(r.ref.seed_of(name), r.world, count, dtype, op)
        t = r.to_dev(inputs[r.rank])
        r.dist.all_reduce(t, op=r.op(op))
        got = t.cpu()
        r.checks.digest(name, r.ref.raw_bytes(got))
        return r.ref.expect_reduced(got, inputs, op, exact_fold=True)

    r.checks.run(name, body)


def broadcast(r: Rank, dtype_name: str, count: int, root: int) -> None:
    name = f"broadcast {dtype_name} n={count} root={root}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        want = r.ref.values(r.ref.seed_of(name), root, count, dtype)
        t = r.to_dev(want if r.rank == root else r.ref.poison(count, dtype))
        r.dist.broadcast(t, src=root)
        r.ref.expect_equal(t.cpu(), want)

    r.checks.run(name, body)


def reduce(r: Rank, op: str, dtype_name: str, count: int, root: int) -> None:
    name = f"reduce {op} {dtype_name} n={count} root={root}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        inputs = r.ref.all_values(r.ref.seed_of(name), r.world, count, dtype, op)
        t = r.to_dev(inputs[r.rank])
        r.dist.reduce(t, dst=root, op=r.op(op))
        got = t.cpu()
        if r.rank != root:
            return None  # nothing to check off the root
        return r.ref.expect_reduced(got, inputs, op, exact_fold=True)

    r.checks.run(name, body)


def all_gather_into_tensor(r: Rank, dtype_name: str, count: int) -> None:
    name = f"all_gather_into_tensor {dtype_name} n={count}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        inputs = r.ref.all_values(r.ref.seed_of(name), r.world, count, dtype)
        out = r.to_dev(r.ref.poison(r.world * count, dtype))
        r.dist.all_gather_into_tensor(out, r.to_dev(inputs[r.rank]))
        r.ref.expect_equal(out.cpu(), r.torch.cat(inputs))

    r.checks.run(name, body)


def all_gather_list(r: Rank, dtype_name: str, count: int) -> None:
    name = f"all_gather (list) {dtype_name} n={count}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        inputs = r.ref.all_values(r.ref.seed_of(name), r.world, count, dtype)
        outs = [r.to_dev(r.ref.poison(count, dtype)) for _ in range(r.world)]
        r.dist.all_gather(outs, r.to_dev(inputs[r.rank]))
        for src in range(r.world):
            r.ref.expect_equal(outs[src].cpu(), inputs[src], f"part from rank {src}")

    r.checks.run(name, body)


def reduce_scatter_tensor(r: Rank, op: str, dtype_name: str, count: int) -> None:
    name = f"reduce_scatter_tensor {op} {dtype_name} n={count} per rank"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        inputs = r.ref.all_values(r.ref.seed_of(name), r.world, r.world * count, dtype, op)
        out = r.to_dev(r.ref.poison(count, dtype))
        r.dist.reduce_scatter_tensor(out, r.to_dev(inputs[r.rank]), op=r.op(op))
        got = out.cpu()
        mine = [x[r.rank * count:(r.rank + 1) * count] for x in inputs]
        return r.ref.expect_reduced(got, mine, op, exact_fold=True)

    r.checks.run(name, body)


def all_to_all_even(r: Rank, dtype_name: str, count: int) -> None:
    name = f"all_to_all_single even {dtype_name} n={count} per pair"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        inputs = r.ref.all_values(r.ref.seed_of(name), r.world, r.world * count, dtype)
        out = r.to_dev(r.ref.poison(r.world * count, dtype))
        r.dist.all_to_all_single(out, r.to_dev(inputs[r.rank]))
        want = r.torch.cat([inputs[src][r.rank * count:(r.rank + 1) * count] for src in range(r.world)])
        r.ref.expect_equal(out.cpu(), want)

    r.checks.run(name, body)


def uneven_split(src: int, dst: int) -> int:
    """Elements rank `src` sends to rank `dst`: 0, 53 or 106 (some pairs send nothing)."""
    return ((src + 2 * dst + 1) % 3) * 53


def all_to_all_uneven(r: Rank, dtype_name: str) -> None:
    name = f"all_to_all_single uneven {dtype_name}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        seed = r.ref.seed_of(name)
        w = r.world
        inputs = [r.ref.values(seed, a, sum(uneven_split(a, b) for b in range(w)), dtype) for a in range(w)]
        in_splits = [uneven_split(r.rank, b) for b in range(w)]
        out_splits = [uneven_split(a, r.rank) for a in range(w)]
        out = r.to_dev(r.ref.poison(sum(out_splits), dtype))
        r.dist.all_to_all_single(out, r.to_dev(inputs[r.rank]), output_split_sizes=out_splits,
                                 input_split_sizes=in_splits)
        parts = []
        for a in range(w):
            offset = sum(uneven_split(a, b) for b in range(r.rank))
            parts.append(inputs[a][offset:offset + uneven_split(a, r.rank)])
        r.ref.expect_equal(out.cpu(), r.torch.cat(parts))
        return f"sends {in_splits}, receives {out_splits}"

    r.checks.run(name, body)


def send_recv(r: Rank, dtype_name: str, count: int) -> None:
    name = f"send/recv ring {dtype_name} n={count}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        seed = r.ref.seed_of(name)
        nxt, prv = r.peers()
        mine = r.to_dev(r.ref.values(seed, r.rank, count, dtype))
        buf = r.to_dev(r.ref.poison(count, dtype))
        # Even ranks send first, odd ranks receive first: no cycle of blocked sends.
        if r.rank % 2 == 0:
            r.dist.send(mine, dst=nxt)
            r.dist.recv(buf, src=prv)
        else:
            r.dist.recv(buf, src=prv)
            r.dist.send(mine, dst=nxt)
        r.ref.expect_equal(buf.cpu(), r.ref.values(seed, prv, count, dtype))

    r.checks.run(name, body)


def batch_isend_irecv(r: Rank, dtype_name: str, count: int) -> None:
    name = f"batch_isend_irecv both directions {dtype_name} n={count}"

    def body():
        dtype = r.ref.DTYPES[dtype_name]
        seed_a, seed_b = r.ref.seed_of(name + " a"), r.ref.seed_of(name + " b")
        nxt, prv = r.peers()
        a = r.to_dev(r.ref.values(seed_a, r.rank, count, dtype))
        b = r.to_dev(r.ref.values(seed_b, r.rank, count, dtype))
        from_prev = r.to_dev(r.ref.poison(count, dtype))
        from_next = r.to_dev(r.ref.poison(count, dtype))
        # Per peer, sends and receives match in the order issued (also with 2 ranks, where the
        # next and the previous rank are the same).
        ops = [r.dist.P2POp(r.dist.isend, a, nxt), r.dist.P2POp(r.dist.isend, b, prv),
               r.dist.P2POp(r.dist.irecv, from_prev, prv), r.dist.P2POp(r.dist.irecv, from_next, nxt)]
        for work in r.dist.batch_isend_irecv(ops):
            work.wait()
        r.ref.expect_equal(from_prev.cpu(), r.ref.values(seed_a, prv, count, dtype), "from the previous rank")
        r.ref.expect_equal(from_next.cpu(), r.ref.values(seed_b, nxt, count, dtype), "from the next rank")

    r.checks.run(name, body)


def barrier(r: Rank, when: str) -> None:
    def body():
        t0 = time.monotonic()
        r.dist.barrier()
        r.sync()
        return f"{time.monotonic() - t0:.3f} s"

    r.checks.run(f"barrier {when}", body)


def expect_group_works(r: Rank, group, members: list[int]) -> str:
    """all_reduce and all_gather inside `group`, whose ranks are `members` (global, sorted)."""
    torch = r.torch
    t = r.to_dev(torch.full((16,), float(r.rank + 1)))
    r.dist.all_reduce(t, group=group)
    want = float(sum(m + 1 for m in members))
    got = t.cpu()
    if not bool((got == want).all()):
        raise CheckFailed(f"all_reduce in the group gave {got[0].item()}, want {want}")
    gathered = r.to_dev(torch.full((len(members),), -1, dtype=torch.int64))
    r.dist.all_gather_into_tensor(gathered, r.to_dev(torch.tensor([r.rank], dtype=torch.int64)), group=group)
    order = gathered.cpu().tolist()
    if order != members:
        raise CheckFailed(f"all_gather in the group gave ranks {order}, want {members}")
    return f"group {members}"


def new_group(r: Rank) -> None:
    def body():
        members = sorted({0, r.world - 1})
        group = r.dist.new_group(ranks=members)
        if r.rank not in members:
            if group != r.dist.GroupMember.NON_GROUP_MEMBER:
                raise CheckFailed(f"a rank outside {members} got {group}")
            return f"not in {members}"
        return expect_group_works(r, group, members)

    r.checks.run("new_group [0, world-1]", body)


def split_group(r: Rank) -> None:
    def body():
        if not hasattr(r.dist, "split_group"):
            if not r.cuda:
                raise SkipCheck("this torch has no split_group")
            raise CheckFailed("torch.distributed has no split_group")
        if not r.cuda:
            raise SkipCheck("split_group needs the nccl backend")
        evens = [x for x in range(r.world) if x % 2 == 0]
        odds = [x for x in range(r.world) if x % 2 == 1]
        group = r.dist.split_group(split_ranks=[evens, odds])
        if group is None:
            raise CheckFailed("split_group returned None to a member")
        return expect_group_works(r, group, evens if r.rank % 2 == 0 else odds)

    r.checks.run("split_group even and odd ranks", body)


def cuda_graph(r: Rank) -> None:
    name = "all_reduce in a CUDA graph: sum float32 n=4099 and sum bfloat16 n=65537"

    def body():
        if not r.cuda:
            raise SkipCheck("needs CUDA")
        torch, ref = r.torch, r.ref
        shapes = (("float32", SMALL), ("bfloat16", (1 << 16) + 1))
        ins = [r.to_dev(ref.poison(n, ref.DTYPES[d])) for d, n in shapes]
        outs = [r.to_dev(ref.poison(n, ref.DTYPES[d])) for d, n in shapes]

        def step():
            for i, o in zip(ins, outs):
                o.copy_(i)
                r.dist.all_reduce(o)

        # Warm up on a side stream, as torch's documentation asks before capturing collectives.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        replays = 3
        for trial in range(replays):
            expected = []
            for (d, n), i in zip(shapes, ins):
                inputs = ref.all_values(ref.seed_of(f"{name} {d} replay {trial}"), r.world, n, ref.DTYPES[d])
                i.copy_(r.to_dev(inputs[r.rank]))
                expected.append(inputs)
            graph.replay()
            torch.cuda.synchronize()
            for (d, _), o, inputs in zip(shapes, outs, expected):
                try:
                    ref.expect_reduced(o.cpu(), inputs, "sum", exact_fold=True)
                except CheckFailed as e:
                    raise CheckFailed(f"replay {trial}, {d}: {e}") from None
        r.checks.digest(name, b"".join(ref.raw_bytes(o) for o in outs))
        return f"captured once, replayed {replays} times with fresh inputs"

    r.checks.run(name, body)


def async_handles(r: Rank) -> None:
    name = "async work handles: 3 all_reduce and 1 all_gather_into_tensor in flight, then wait()"

    def body():
        torch, ref = r.torch, r.ref
        seed = ref.seed_of(name)
        a = ref.all_values(seed, r.world, SMALL, torch.float32, "sum")
        b = ref.all_values(seed + 1, r.world, 1000, torch.int32, "max")
        c = ref.all_values(seed + 2, r.world, (1 << 18) + 1, torch.bfloat16, "sum")
        d = ref.all_values(seed + 3, r.world, 1000, torch.float32)
        ta, tb, tc = r.to_dev(a[r.rank]), r.to_dev(b[r.rank]), r.to_dev(c[r.rank])
        gathered = r.to_dev(ref.poison(r.world * 1000, torch.float32))
        works = [r.dist.all_reduce(ta, async_op=True),
                 r.dist.all_reduce(tb, op=r.op("max"), async_op=True),
                 r.dist.all_reduce(tc, async_op=True),
                 r.dist.all_gather_into_tensor(gathered, r.to_dev(d[r.rank]), async_op=True)]
        for work in works:
            work.wait()
        r.sync()
        if not all(work.is_completed() for work in works):
            raise CheckFailed("a work handle is not completed after wait() and a device synchronize")
        ref.expect_reduced(ta.cpu(), a, "sum", exact_fold=True)
        ref.expect_reduced(tb.cpu(), b, "max", exact_fold=True)
        ref.expect_reduced(tc.cpu(), c, "sum", exact_fold=True)
        ref.expect_equal(gathered.cpu(), torch.cat(d), "all_gather_into_tensor")

    r.checks.run(name, body)


def destroy(r: Rank) -> None:
    def body():
        t0 = time.monotonic()
        r.dist.destroy_process_group()
        if r.dist.is_initialized():
            raise CheckFailed("still initialized after destroy_process_group")
        return f"{time.monotonic() - t0:.2f} s"

    r.checks.run("destroy_process_group", body)


def main() -> int:
    arm_watchdog(float(os.environ.get("PURLIN_RANK_STACKS_AFTER_S", "100")))
    r = Rank()
    torch = r.torch
    r.checks.note(f"torch {torch.__version__}, world {r.world}, backend {r.backend}, mode {r.mode}" +
                  (f", {torch.cuda.get_device_name(0)}" if r.cuda else ""))
    if not r.checks.run("init_process_group", init, r):
        return r.checks.finish()

    # The first all_reduce doubles as the warm-up before the evidence is read.
    all_reduce(r, "sum", "float32", SMALL)
    if r.cuda:
        evidence(r)
    for op in r.ref.OPS:
        for dtype_name in r.ref.DTYPES:
            if (op, dtype_name) != ("sum", "float32"):
                all_reduce(r, op, dtype_name, SMALL)
    for op, dtype_name in (("sum", "float32"), ("sum", "bfloat16"), ("avg", "float16"), ("max", "int64")):
        all_reduce(r, op, dtype_name, LARGE)

    broadcast(r, "float32", SMALL, root=r.world - 1)
    broadcast(r, "bfloat16", LARGE, root=0)
    broadcast(r, "int64", 1000, root=r.world // 2)
    reduce(r, "sum", "float32", SMALL, root=r.world - 1)
    reduce(r, "max", "int32", SMALL, root=0)
    reduce(r, "sum", "bfloat16", LARGE, root=1 % r.world)
    all_gather_into_tensor(r, "float32", SMALL)
    all_gather_into_tensor(r, "uint8", 4097)
    all_gather_into_tensor(r, "bfloat16", (1 << 19) + 3)
    all_gather_list(r, "float32", 1000)
    all_gather_list(r, "int64", 333)
    reduce_scatter_tensor(r, "sum", "float32", SMALL)
    reduce_scatter_tensor(r, "avg", "bfloat16", 1000)
    reduce_scatter_tensor(r, "sum", "bfloat16", (1 << 18) + 1)
    reduce_scatter_tensor(r, "max", "int32", SMALL)
    all_to_all_even(r, "int64", 257)
    all_to_all_even(r, "bfloat16", SMALL)
    all_to_all_uneven(r, "float32")
    all_to_all_uneven(r, "int32")
    send_recv(r, "float32", SMALL)
    send_recv(r, "bfloat16", (1 << 18) + 3)
    batch_isend_irecv(r, "bfloat16", 1000)
    barrier(r, "after the point-to-point checks")
    new_group(r)
    split_group(r)
    cuda_graph(r)
    async_handles(r)
    barrier(r, "before destroy")
    destroy(r)
    return r.checks.finish()


if __name__ == "__main__":
    sys.exit(main())
