"""A tensor-parallel transformer decode step in PyTorch, captured in a CUDA graph as serving
engines capture it, timed with our libnccl.so.2 (LD_PRELOAD) and with the framework's own NCCL.

One step is L layers for a batch of B tokens (one per sequence), bf16, hidden H, TP degree t.
Per layer: attention as its projections, QKV column-parallel (H -> 3H/t) and O row-parallel
(H/t -> H), then all_reduce; the MLP, up column-parallel (H -> 4H/t), GELU, down row-parallel
(4H/t -> H), then all_reduce; residual adds. The attention core and the KV cache are left out:
they add no communication.

For each library, t and B it captures three graphs and reports the time per replay:
  step             the decode step
  without comm     the same step without its 2L all_reduces
  comm alone       the 2L all_reduces of a [B, H] bf16 tensor and nothing else
and the communication share, 1 - (without comm) / step.

Rank r runs on GPU r modulo the visible GPUs. With fewer GPUs than t, ranks share a GPU (under
MPS): their matmuls run side by side, so a step is not what t GPUs would take; the libraries
compare at the same t. NCCL refuses several ranks on one GPU ("Duplicate GPU detected"); such a
refusal is shown in the table as such.

Usage:
  decode_bench.py --lib build-gpu/libnccl.so.2 [--tp 1,2,4] [--framework-tp 1,2]
                  [--batches 1,16,64] [--layers 32] [--hidden 8192] [--iters 20] [--out DIR]
Prints a Markdown table and writes decode_bench.md and decode_bench.json to --out. Exits 1 when
a configuration with our library failed.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x.strip()]

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lib", default=os.environ.get("PURLIN_LIB", str(REPO / "build-gpu" / "libnccl.so.2")),
                   help="our libnccl.so.2 (default: $PURLIN_LIB, else build-gpu/libnccl.so.2)")
    p.add_argument("--tp", type=ints, default=[1, 2, 4], help="TP degrees with our library (default 1,2,4)")
    p.add_argument("--framework-tp", type=ints, default=[1, 2],
                   help="TP degrees with the framework's NCCL (default 1,2; empty: none)")
    p.add_argument("--batches", type=ints, default=[1, 16, 64], help="tokens per step (default 1,16,64)")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--mlp-ratio", type=int, default=4)
    p.add_argument("--iters", type=int, default=20, help="timed replays per graph")
    p.add_argument("--warmup", type=int, default=3, help="untimed replays per graph")
    p.add_argument("--timeout", type=float, default=150,
                   help="seconds one configuration may take (less when $PURLIN_TORCH_DEADLINE, a Unix time, is near)")
    p.add_argument("--out", default=os.environ.get("OUT", "out") + "/decode_bench", help="results folder")
    p.add_argument("--dry-run", action="store_true", help="print the configurations and exit")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for t in args.tp + args.framework_tp:
        if t < 1 or args.hidden % t or (args.mlp_ratio * args.hidden) % t:
            p.error(f"TP degree {t} must divide the hidden size {args.hidden} and the MLP size")
    return args


def weight_bytes(args: argparse.Namespace) -> int:
    """Bytes of bf16 weights over all ranks: per layer 4 H^2 (attention) + 2 * ratio * H^2 (MLP)."""
    h = args.hidden
    return args.layers * (4 * h * h + 2 * args.mlp_ratio * h * h) * 2


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- one rank -----------------------------------------------------------------------------------

def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    result_path = os.environ["BENCH_RESULT"]
    result: dict = {"world": world}

    def write(extra: dict) -> None:
        if rank == 0:
            Path(result_path).write_text(json.dumps({**result, **extra}, indent=1))

    # LOCAL_RANK modulo the visible GPUs, as torchrun users pick it: with one GPU every rank shares it.
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count()))
    torch.cuda.set_device(device)
    try:
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=90), device_id=device)
        warm = torch.ones(16, device=device)
        dist.all_reduce(warm)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the refusal is a result
        write({"error": " ".join(str(e).split())[:600]})
        print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
        return 3
    maps = [line.split(None, 5) for line in open("/proc/self/maps")]
    libs = sorted({p[5].strip() for p in maps if len(p) == 6 and "/libnccl" in p[5]})
    result.update(libnccl=libs, libnccl_sha256=[sha256(p) for p in libs if Path(p).exists()],
                  nccl_version=list(torch.cuda.nccl.version()[:3]), torch=torch.__version__,
                  gpu=torch.cuda.get_device_name(device), gpus=torch.cuda.device_count())

    h, t, layers = args.hidden, world, args.layers
    q, m = h // t, args.mlp_ratio * h // t
    bf16 = torch.bfloat16
    # One tensor per kind for all layers, [L, in, out], scaled to keep activations O(1).
    wqkv = torch.randn(layers, h, 3 * q, dtype=bf16, device=device).mul_(h ** -0.5)
    wo = torch.randn(layers, q, h, dtype=bf16, device=device).mul_(q ** -0.5)
    wup = torch.randn(layers, h, m, dtype=bf16, device=device).mul_(h ** -0.5)
    wdown = torch.randn(layers, m, h, dtype=bf16, device=device).mul_(m ** -0.5)

    def step(x, comm: bool):
        for layer in range(layers):
            o = x @ wqkv[layer]
            o = o[:, :q] @ wo[layer]
            if comm:
                dist.all_reduce(o)
            x = x + o
            y = F.gelu(x @ wup[layer], approximate="tanh") @ wdown[layer]
            if comm:
                dist.all_reduce(y)
            x = x + y
        return x

    def comm_alone(buf):
        for _ in range(2 * layers):
            dist.all_reduce(buf)
        return buf

    def capture(fn, *inputs):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn(*inputs)  # warm-up: kernels chosen, workspaces allocated
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        # A private memory pool per graph: a pool shared with graphs already destroyed trips torch's
        # allocator ("use_count > 0" at capture_begin).
        with torch.cuda.graph(graph):
            fn(*inputs)
        return graph

    def timed(graph) -> float:
        dist.barrier()
        torch.cuda.synchronize()
        for _ in range(args.warmup):
            graph.replay()
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / args.iters

    rows = []
    for batch in args.batches:
        x = torch.randn(batch, h, dtype=bf16, device=device) * 0.5
        zeros = torch.zeros(batch, h, dtype=bf16, device=device)  # sums of zeros stay zero
        graphs = {"step": capture(step, x, True), "without_comm": capture(step, x, False),
                  "comm_alone": capture(comm_alone, zeros)}
        ms = {name: timed(g) for name, g in graphs.items()}
        # The slowest rank sets the step.
        worst = torch.tensor([ms["step"], ms["without_comm"], ms["comm_alone"]], dtype=torch.float64, device=device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        step_ms, without_ms, alone_ms = worst.tolist()
        rows.append({"batch": batch, "step_ms": step_ms, "without_comm_ms": without_ms, "comm_alone_ms": alone_ms,
                     "comm_share": 1 - without_ms / step_ms if step_ms > 0 else None,
                     "per_all_reduce_us": alone_ms * 1000 / (2 * layers)})
        del graphs
    write({"rows": rows})
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ---- the launcher -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(args: argparse.Namespace, library: str, tp: int, logs: Path) -> dict:
    """Runs one configuration as `tp` rank processes; returns rank 0's result."""
    tag = f"{library}-tp{tp}"
    result_path = logs / f"{tag}.json"
    result_path.unlink(missing_ok=True)
    port = free_port()
    procs, files = [], []
    for rank in range(tp):
        env = dict(os.environ)
        env.update(RANK=str(rank), WORLD_SIZE=str(tp), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0", NCCL_MULTI_RANK_GPU_ENABLE="1",
                   BENCH_RESULT=str(result_path),
                   PURLIN_TIMEOUT=env.get("PURLIN_TIMEOUT", "60"))
        preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "libnccl" not in p]
        if library == "ours":
            preload.insert(0, str(Path(args.lib).resolve()))
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
        else:
            env.pop("LD_PRELOAD", None)
        out = open(logs / f"{tag}.rank{rank}.log", "w")
        files.append(out)
        procs.append(subprocess.Popen([sys.executable, "-u", __file__, "--worker", *sys.argv[1:]], env=env,
                                      stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True))
    start = time.monotonic()
    failed_at = None
    killed = ""
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if now - start > args.timeout or (failed_at is not None and now - failed_at > 15):
            killed = "timed out" if now - start > args.timeout else "killed after another rank failed"
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            break
        time.sleep(0.2)
    for f in files:
        f.close()
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    result.update(library=library, tp=tp, seconds=round(time.monotonic() - start, 1),
                  exit_codes=[p.returncode for p in procs])
    if "rows" not in result and "error" not in result:
        tail = (logs / f"{tag}.rank0.log").read_text(errors="replace").strip().splitlines()[-3:]
        result["error"] = (killed + ": " if killed else "") + " | ".join(tail)
    return result


def describe_library(result: dict, ours_sha: str) -> str:
    shas = result.get("libnccl_sha256") or []
    if not shas:
        return result["library"]
    # Under LD_PRELOAD torch still maps the wheel's libnccl.so.2 beside ours; ours resolves first.
    ours_mapped = any(s == ours_sha for s in shas)
    if result["library"] == "ours":
        return "ours" if ours_mapped else "ours? (WARNING: our libnccl is not mapped)"
    version = ".".join(str(v) for v in result.get("nccl_version", []))
    return f"framework NCCL {version}" + (" (WARNING: our libnccl is mapped)" if ours_mapped else "")


def table(results: list[dict], args: argparse.Namespace, ours_sha: str, command: str) -> str:
    first = next((r for r in results if "gpu" in r), {})
    lines = [
        "# Decode step, tensor-parallel, CUDA graph",
        "",
        f"- Command: `{command}`",
        f"- Date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
        f"- GPU: {first.get('gpu', '?')}; torch {first.get('torch', '?')}",
        f"- Model: {args.layers} layers, hidden {args.hidden}, MLP {args.mlp_ratio}x, bf16; "
        f"{weight_bytes(args) / 2**30:.1f} GiB of weights split over the TP ranks; "
        f"{2 * args.layers} all_reduces of [batch, {args.hidden}] per step",
        f"- Our library: {args.lib} (sha256 {ours_sha[:16]})",
        f"- GPUs visible: {first.get('gpus', '?')}; rank r runs on GPU r modulo that count (ranks sharing a GPU "
        "are processes under MPS): compare libraries at the same TP degree.",
        f"- Times: mean of {args.iters} graph replays after {args.warmup}, the slowest rank's.",
        "",
        "| library | TP | batch | step (ms) | without all_reduce (ms) | comm share | all_reduces alone (ms) "
        "| per all_reduce (us) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        name = describe_library(r, ours_sha)
        if "rows" not in r:
            why = r.get("error", "?")[:300].replace("|", "/")
            lines.append(f"| {name} | {r['tp']} | - | not possible: {why} | | | | |")
            continue
        for row in r["rows"]:
            share = f"{100 * row['comm_share']:.1f}%" if row["comm_share"] is not None else "-"
            lines.append(f"| {name} | {r['tp']} | {row['batch']} | {row['step_ms']:.3f} | {row['without_comm_ms']:.3f} "
                         f"| {share} | {row['comm_alone_ms']:.3f} | {row['per_all_reduce_us']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    configs = [("ours", t) for t in args.tp] + [("framework", t) for t in args.framework_tp]
    command = "python3 perf/decode_bench.py " + " ".join(argv)
    if args.dry_run:
        print(f"{command}\nweights {weight_bytes(args) / 2**30:.1f} GiB over the TP ranks")
        for library, t in configs:
            print(f"  {library} TP={t}: {t} rank processes, {weight_bytes(args) / t / 2**30:.1f} GiB each, "
                  f"batches {args.batches}")
        return 0
    if not Path(args.lib).is_file():
        print(f"decode_bench: no library at {args.lib}", file=sys.stderr)
        return 2
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ours_sha = sha256(args.lib)
    results = []
    deadline = float(os.environ["PURLIN_TORCH_DEADLINE"]) if os.environ.get("PURLIN_TORCH_DEADLINE") else None
    limit = args.timeout
    for library, t in configs:
        if deadline is not None:
            left = deadline - time.time()
            if left < 30:
                results.append({"library": library, "tp": t, "error": f"not run: {max(left, 0):.0f} s left of the budget"})
                continue
            args.timeout = min(limit, left - 5)
        print(f"decode_bench: {library} TP={t} ...", flush=True)
        results.append(run_config(args, library, t, logs))
        if "error" in results[-1]:
            print(f"decode_bench: {library} TP={t}: {results[-1]['error'][:300]}", flush=True)
    text = table(results, args, ours_sha, command)
    print(text, flush=True)
    (out / "decode_bench.md").write_text(text)
    (out / "decode_bench.json").write_text(json.dumps({"command": command, "results": results}, indent=1))
    ours_failed = [r for r in results if r["library"] == "ours" and "rows" not in r]
    return 1 if ours_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
