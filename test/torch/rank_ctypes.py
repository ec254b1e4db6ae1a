"""One rank of the ctypes test: our library loaded the way SGLang and vLLM load NCCL.

`import torch` first (which maps the wheel's own libnccl.so.2 through libtorch_cuda.so's RPATH),
then `ctypes.CDLL(PURLIN_LIB)` with the wrappers' signatures (nccl_ctypes.py). The unique id
travels through a torch TCPStore, as the wrappers pass it through a CPU group. On torch tensors
and the current CUDA stream: every bound collective eagerly; allreduce on buffers from
ncclMemAlloc registered with ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC), eagerly and
captured in a CUDA graph; a window allocated and registered while the capture runs (as SGLang's
symmetric-memory pool does, from torch's allocator, which relaxes the thread's capture mode
around the allocation); deregistration, ncclMemFree; vLLM's sleep mode (ncclCommSuspend with
NCCL_SUSPEND_MEM, ncclCommMemStats, ncclCommResume, and a graph captured before replayed after);
ncclCommDestroy, and ncclCommAbort of a second communicator.

PURLIN_TORCH_BACKEND=gloo runs the host part with host buffers (our library's host datapath),
without windows or graphs.
"""
from __future__ import annotations

import ctypes
import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checks import (CheckFailed, Checks, SkipCheck, arm_watchdog, global_provider, mapped_libraries,  # noqa: E402
                    local_gpu, rank_and_world)

SMALL = 4099
CU_STREAM_CAPTURE_MODE_RELAXED = 2


class Rank:
    def __init__(self):
        import torch

        import reference

        self.torch, self.ref = torch, reference
        self.rank, self.world = rank_and_world()
        self.cuda = os.environ.get("PURLIN_TORCH_BACKEND", "nccl") == "nccl"
        self.device = torch.device("cuda", local_gpu(torch)) if self.cuda else torch.device("cpu")
        self.checks = Checks()
        self.nccl = None
        self.comm = None
        self.store = None

    def stream(self):
        """The current CUDA stream as the wrappers pass it (a handle), or NULL on the host."""
        return self.torch.cuda.current_stream().cuda_stream if self.cuda else None

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def to_dev(self, t):
        return t.to(self.device, copy=True)

    def exchange_id(self, key: str):
        """Rank 0 makes a unique id; every rank gets it through the store."""
        from nccl_ctypes import ncclUniqueId

        if self.rank == 0:
            self.store.set(key, bytes(self.nccl.unique_id()))
        return ncclUniqueId.from_buffer_copy(self.store.get(key))


def setup(r: Rank) -> None:
    import torch.distributed as dist

    from nccl_ctypes import Nccl

    lib = os.environ["PURLIN_LIB"]

    def load():
        r.nccl = Nccl(lib)
        return f"{len(r.nccl.fn)} functions bound from {lib}"

    if not r.checks.run("ctypes.CDLL binds the wrappers' functions", load):
        raise SystemExit(r.checks.finish())
    if r.cuda:
        r.torch.cuda.set_device(r.device)

        def which():
            # torch's own libnccl stays mapped too: the wrappers call ours through its handle.
            ours = [p for p in mapped_libraries() if Path(p).resolve() == Path(lib).resolve()]
            if not ours:
                raise CheckFailed(f"{lib} is not mapped after ctypes.CDLL")
            # Which libnccl the global scope offers matters: ours calls some of its own entry points
            # through the PLT, which a libnccl in the global scope would interpose.
            return (f"mapped: {', '.join(mapped_libraries())}; the global scope resolves ncclAllReduce to "
                    f"{global_provider('ncclAllReduce') or 'nothing'}")

        r.checks.run("library: ours is mapped beside torch's own", which)

    def queries():
        version = r.nccl.version()
        text = r.nccl.error_string(4)  # ncclInvalidArgument
        if version < 22800 or not text:
            raise CheckFailed(f"ncclGetVersion {version}, ncclGetErrorString(4) {text!r}")
        return f"version {version}; ncclGetErrorString(4) = {text!r}"

    r.checks.run("ncclGetVersion and ncclGetErrorString", queries)
    r.store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), r.world, r.rank == 0,
                            datetime.timedelta(seconds=60))

    def init():
        uid = r.exchange_id("nccl-id-main")
        r.comm = r.nccl.comm_init_rank(r.world, uid, r.rank)
        return f"rank {r.rank} of {r.world}"

    if not r.checks.run("ncclGetUniqueId through the store, ncclCommInitRank", init):
        raise SystemExit(r.checks.finish())


def eager(r: Rank) -> None:
    from nccl_ctypes import REDOPS, nccl_type

    torch, ref, n = r.torch, r.ref, r.nccl

    def all_reduce(dtype_name: str, count: int, op: str):
        name = f"ncclAllReduce {op} {dtype_name} n={count} on torch tensors"

        def body():
            dtype = ref.DTYPES[dtype_name]
            inputs = ref.all_values(ref.seed_of(name), r.world, count, dtype, op)
            src = r.to_dev(inputs[r.rank])
            dst = r.to_dev(ref.poison(count, dtype))
            n.all_reduce(src.data_ptr(), dst.data_ptr(), count, nccl_type(dtype), REDOPS[op], r.comm, r.stream())
            r.sync()
            got = dst.cpu()
            r.checks.digest(name, ref.raw_bytes(got))
            return ref.expect_reduced(got, inputs, op, exact_fold=True)

        r.checks.run(name, body)

    all_reduce("float32", SMALL, "sum")
    all_reduce("bfloat16", (1 << 18) + 1, "sum")
    all_reduce("float16", SMALL, "max")

    def all_gather():
        inputs = ref.all_values(ref.seed_of("ncclAllGather"), r.world, SMALL, torch.float32)
        src = r.to_dev(inputs[r.rank])
        out = r.to_dev(ref.poison(r.world * SMALL, torch.float32))
        n.all_gather(src.data_ptr(), out.data_ptr(), SMALL, nccl_type(torch.float32), r.comm, r.stream())
        r.sync()
        ref.expect_equal(out.cpu(), torch.cat(inputs))

    def reduce_scatter():
        inputs = ref.all_values(ref.seed_of("ncclReduceScatter"), r.world, r.world * SMALL, torch.float32)
        src = r.to_dev(inputs[r.rank])
        out = r.to_dev(ref.poison(SMALL, torch.float32))
        n.reduce_scatter(src.data_ptr(), out.data_ptr(), SMALL, nccl_type(torch.float32), REDOPS["sum"], r.comm,
                         r.stream())
        r.sync()
        mine = [x[r.rank * SMALL:(r.rank + 1) * SMALL] for x in inputs]
        return ref.expect_reduced(out.cpu(), mine, "sum", exact_fold=True)

    def reduce():
        root = r.world - 1
        inputs = ref.all_values(ref.seed_of("ncclReduce"), r.world, SMALL, torch.int32, "sum")
        src = r.to_dev(inputs[r.rank])
        out = r.to_dev(ref.poison(SMALL, torch.int32))
        n.reduce(src.data_ptr(), out.data_ptr(), SMALL, nccl_type(torch.int32), REDOPS["sum"], root, r.comm, r.stream())
        r.sync()
        if r.rank == root:
            ref.expect_reduced(out.cpu(), inputs, "sum", exact_fold=True)

    def broadcast():
        root = 0
        want = ref.values(ref.seed_of("ncclBroadcast"), root, SMALL, torch.bfloat16)
        src = r.to_dev(want if r.rank == root else ref.poison(SMALL, torch.bfloat16))
        out = r.to_dev(ref.poison(SMALL, torch.bfloat16))
        n.broadcast(src.data_ptr(), out.data_ptr(), SMALL, nccl_type(torch.bfloat16), root, r.comm, r.stream())
        r.sync()
        ref.expect_equal(out.cpu(), want)

    def send_recv():
        seed = ref.seed_of("ncclSend/ncclRecv")
        nxt, prv = (r.rank + 1) % r.world, (r.rank - 1) % r.world
        mine = r.to_dev(ref.values(seed, r.rank, SMALL, torch.float32))
        got = r.to_dev(ref.poison(SMALL, torch.float32))
        n.group_start()
        n.send(mine.data_ptr(), SMALL, nccl_type(torch.float32), nxt, r.comm, r.stream())
        n.recv(got.data_ptr(), SMALL, nccl_type(torch.float32), prv, r.comm, r.stream())
        n.group_end()
        r.sync()
        ref.expect_equal(got.cpu(), ref.values(seed, prv, SMALL, torch.float32))

    r.checks.run("ncclAllGather float32", all_gather)
    r.checks.run("ncclReduceScatter sum float32", reduce_scatter)
    r.checks.run("ncclReduce sum int32 to the last rank", reduce)
    r.checks.run("ncclBroadcast bfloat16 from rank 0", broadcast)
    r.checks.run("ncclGroupStart, ncclSend to the next rank, ncclRecv from the previous, ncclGroupEnd", send_recv)


def skip_without_cuda(r: Rank, name: str) -> None:
    """Reports check `name` skipped: it needs CUDA (the gloo run has none)."""
    def skip():
        raise SkipCheck(f"{name}: needs CUDA")

    r.checks.run(name, skip)


class Windows:
    """Buffers from ncclMemAlloc, registered as symmetric windows, seen by torch as tensors."""

    def __init__(self, r: Rank):
        self.r = r
        self.held = []  # (ptr, window)

    def make(self, count: int, dtype):
        import dlpack

        size = count * self.r.torch.empty((), dtype=dtype).element_size()
        ptr = self.r.nccl.mem_alloc(size)
        try:
            win = self.r.nccl.window_register(self.r.comm, ptr, size)
        except Exception:
            self.r.nccl.mem_free(ptr)
            raise
        self.held.append((ptr, win))
        return dlpack.tensor_at(ptr, count, dtype, self.r.device.index)

    def release(self) -> str:
        for ptr, win in reversed(self.held):
            self.r.nccl.window_deregister(self.r.comm, win)
            self.r.nccl.mem_free(ptr)
        count = len(self.held)
        self.held = []
        return f"{count} windows deregistered and freed"


def windows_and_graphs(r: Rank) -> None:
    from nccl_ctypes import REDOPS, nccl_type

    torch, ref, n = r.torch, r.ref, r.nccl
    if not r.cuda:
        skip_without_cuda(r, "windows and CUDA graphs")
        return
    windows = Windows(r)
    count = (1 << 16) + 3
    dtype = torch.bfloat16
    held = {}

    def allreduce(src, dst):
        n.all_reduce(src.data_ptr(), dst.data_ptr(), count, nccl_type(dtype), REDOPS["sum"], r.comm, r.stream())

    def eager_window():
        held["in"], held["out"] = windows.make(count, dtype), windows.make(count, dtype)
        inputs = ref.all_values(ref.seed_of("window eager"), r.world, count, dtype)
        held["in"].copy_(r.to_dev(inputs[r.rank]))
        held["out"].fill_(1234.5)
        allreduce(held["in"], held["out"])
        r.sync()
        return ref.expect_reduced(held["out"].cpu(), inputs, "sum", exact_fold=True)

    if not r.checks.run("ncclMemAlloc + ncclCommWindowRegister(SYMMETRIC), ncclAllReduce eager", eager_window):
        windows.release()
        return

    def replay_and_check(graph, src, dst, label):
        for trial in range(3):
            inputs = ref.all_values(ref.seed_of(f"{label} {trial}"), r.world, count, dtype)
            src.copy_(r.to_dev(inputs[r.rank]))
            graph.replay()
            torch.cuda.synchronize()
            try:
                ref.expect_reduced(dst.cpu(), inputs, "sum", exact_fold=True)
            except CheckFailed as e:
                raise CheckFailed(f"replay {trial}: {e}") from None
        return "captured once, replayed 3 times with fresh inputs"

    def graph_window():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            allreduce(held["in"], held["out"])
        return replay_and_check(graph, held["in"], held["out"], "window graph")

    r.checks.run("ncclAllReduce on windows captured in a CUDA graph", graph_window)

    def graph_register_during_capture():
        driver = ctypes.CDLL("libcuda.so.1")
        staged = r.to_dev(ref.poison(count, dtype))
        out = r.to_dev(ref.poison(count, dtype))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            # torch's allocator relaxes the thread's capture mode around a pool's allocation
            # (cudaMallocMaybeCapturing); SGLang's pool calls ncclMemAlloc there.
            mode = ctypes.c_int(CU_STREAM_CAPTURE_MODE_RELAXED)
            if driver.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)) != 0:
                raise CheckFailed("cuThreadExchangeStreamCaptureMode failed")
            try:
                win_in = windows.make(count, dtype)
            finally:
                driver.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
            win_in.copy_(staged)
            allreduce(win_in, out)
        return replay_and_check(graph, staged, out, "window registered during capture")

    r.checks.run("window allocated and registered during capture, ncclAllReduce replayed",
                 graph_register_during_capture)
    held.clear()
    torch.cuda.synchronize()
    r.checks.run("ncclCommWindowDeregister and ncclMemFree", windows.release)


def sleep_mode(r: Rank) -> None:
    """vLLM's sleep mode: a graph captured on torch tensors, the communicator's memory suspended
    (collectives refused meanwhile) and resumed, then the same graph replayed and eager calls."""
    from nccl_ctypes import (NCCL_SUSPEND_MEM, REDOPS, STAT_PERSIST, STAT_SUSPEND, STAT_SUSPENDED, STAT_TOTAL,
                             nccl_type)

    torch, ref, n = r.torch, r.ref, r.nccl
    if not r.cuda:
        skip_without_cuda(r, "ncclCommSuspend and ncclCommResume")
        return
    count, dtype = (1 << 20) + 5, torch.bfloat16
    src = r.to_dev(ref.poison(count, dtype))
    dst = r.to_dev(ref.poison(count, dtype))

    def allreduce():
        return n.fn["ncclAllReduce"](src.data_ptr(), dst.data_ptr(), count, nccl_type(dtype), REDOPS["sum"], r.comm,
                                     r.stream())

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        n.check(allreduce(), "ncclAllReduce")

    def run(label, replay):
        inputs = ref.all_values(ref.seed_of(label), r.world, count, dtype)
        src.copy_(r.to_dev(inputs[r.rank]))
        dst.fill_(1234.5)
        if replay:
            graph.replay()
        else:
            n.check(allreduce(), "ncclAllReduce")
        torch.cuda.synchronize()
        return ref.expect_reduced(dst.cpu(), inputs, "sum", exact_fold=True)

    r.checks.run("ncclAllReduce captured on torch tensors, replayed before the suspend", lambda: run("sleep 0", True))

    def suspend():
        total, persist = n.mem_stat(r.comm, STAT_TOTAL), n.mem_stat(r.comm, STAT_PERSIST)
        suspendable = n.mem_stat(r.comm, STAT_SUSPEND)
        if total != persist + suspendable or (r.world > 1 and suspendable == 0):
            raise CheckFailed(f"total {total}, persistent {persist}, suspendable {suspendable}")
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        n.comm_suspend(r.comm, NCCL_SUSPEND_MEM)
        free_after = torch.cuda.mem_get_info()[0]
        if n.mem_stat(r.comm, STAT_SUSPENDED) != 1:
            raise CheckFailed("ncclCommMemStats does not say suspended")
        if free_after < free_before + suspendable:
            raise CheckFailed(f"free device memory {free_before} -> {free_after} B, {suspendable} B suspendable")
        refused = allreduce()
        if refused != 5:  # ncclInvalidUsage
            raise CheckFailed(f"ncclAllReduce while suspended returned {refused}, not ncclInvalidUsage")
        return f"{suspendable} of {total} B suspended; free device memory +{(free_after - free_before) >> 20} MiB"

    if not r.checks.run("ncclCommSuspend(NCCL_SUSPEND_MEM): memory given back, ncclAllReduce refused", suspend):
        return

    def resume():
        n.comm_resume(r.comm)
        if n.mem_stat(r.comm, STAT_SUSPENDED) != 0:
            raise CheckFailed("ncclCommMemStats still says suspended")

    r.checks.run("ncclCommResume", resume)
    r.checks.run("the graph captured before the suspend, replayed after the resume", lambda: run("sleep 1", True))
    r.checks.run("ncclAllReduce eager after the resume", lambda: run("sleep 2", False))


def teardown(r: Rank) -> None:
    def destroy():
        t0 = time.monotonic()
        r.nccl.comm_destroy(r.comm)
        return f"{time.monotonic() - t0:.2f} s"

    r.checks.run("ncclCommDestroy", destroy)

    def abort():
        from nccl_ctypes import REDOPS, nccl_type

        uid = r.exchange_id("nccl-id-second")
        comm = r.nccl.comm_init_rank(r.world, uid, r.rank)
        t = r.to_dev(r.torch.ones(1024))
        r.nccl.all_reduce(t.data_ptr(), t.data_ptr(), 1024, nccl_type(r.torch.float32), REDOPS["sum"], comm, r.stream())
        r.sync()
        if float(t[0]) != r.world:
            raise CheckFailed(f"allreduce on the second communicator gave {float(t[0])}")
        t0 = time.monotonic()
        r.nccl.comm_abort(comm)
        took = time.monotonic() - t0
        if took > 10:
            raise CheckFailed(f"ncclCommAbort took {took:.1f} s")
        return f"{took:.2f} s"

    r.checks.run("second communicator: ncclCommInitRank, ncclAllReduce, ncclCommAbort", abort)


def main() -> int:
    arm_watchdog(float(os.environ.get("PURLIN_RANK_STACKS_AFTER_S", "80")))
    r = Rank()
    r.checks.note(f"torch {r.torch.__version__}, world {r.world}, loading {os.environ['PURLIN_LIB']} with ctypes")
    setup(r)
    eager(r)
    windows_and_graphs(r)
    sleep_mode(r)
    teardown(r)
    return r.checks.finish()


if __name__ == "__main__":
    sys.exit(main())
