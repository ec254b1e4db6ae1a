"""Launches rank processes for the PyTorch tests and judges what they print.

Each rank is a separate `python3 rank_*.py` process with the variables torchrun would set (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each on GPU LOCAL_RANK modulo the visible
devices: with one GPU every rank shares it, under MPS. A rank prints one line per check:

    START <name>              before the check runs (names the check a hung rank was in)
    PASS <name>[ :: detail]
    FAIL <name> :: detail
    SKIP <name> :: reason
    DIGEST <name> <hex>       fingerprint of a result that every rank must hold bit-identical
    NOTE <text>
    RESULT passed=N failed=N skipped=N

The launcher kills every rank when the launch runs past its time limit, or a while after the first
rank failed (its peers would otherwise wait for it until their own timeouts), and merges the ranks'
lines into one line per check. Nothing here imports torch: the launching process stays free of
CUDA and of any libnccl.
"""
from __future__ import annotations

import dataclasses
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# Seconds a launch may run when the caller gives no limit, and seconds the other ranks get after
# the first one failed.
DEFAULT_TIMEOUT_S = 120
GRACE_AFTER_FAILURE_S = 20

LINE = re.compile(r"^(START|PASS|FAIL|SKIP|DIGEST|NOTE|RESULT) (.*)$")


def library_path() -> Path:
    """Our libnccl.so.2: $PURLIN_LIB, else build-gpu/libnccl.so.2 in the repository."""
    return Path(os.environ.get("PURLIN_LIB") or REPO / "build-gpu" / "libnccl.so.2").resolve()


def output_dir() -> Path:
    """Where launches keep their logs: $PURLIN_TORCH_OUT, else out/torch in the repository."""
    out = Path(os.environ.get("PURLIN_TORCH_OUT") or REPO / "out" / "torch")
    out.mkdir(parents=True, exist_ok=True)
    return out


def backend() -> str:
    """`nccl` (the tests proper) or `gloo` (checks the tests' own host references on a CPU)."""
    return os.environ.get("PURLIN_TORCH_BACKEND", "nccl")


def skip(reason: str):
    # pytest reports unittest.SkipTest as a skip; run.py does the same.
    raise unittest.SkipTest(reason)


def require_machine() -> None:
    """Skips the calling test where it cannot run: no torch, no GPU, or no library to test."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        skip("torch is not installed")
    if backend() == "gloo":
        return
    if shutil.which("nvidia-smi") is None or subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True).returncode != 0:
        skip("no GPU on this machine")
    if not library_path().is_file():
        skip(f"no library at {library_path()} (build it, or set PURLIN_LIB)")


def world_sizes() -> list[int]:
    """Rank counts to test: $PURLIN_TORCH_WORLDS (comma-separated), else 2 and 4."""
    return [int(w) for w in os.environ.get("PURLIN_TORCH_WORLDS", "2,4").split(",") if w.strip()]


def seconds_left() -> float | None:
    """Seconds until $PURLIN_TORCH_DEADLINE (a Unix time the runner sets), or None."""
    deadline = os.environ.get("PURLIN_TORCH_DEADLINE")
    return float(deadline) - time.time() if deadline else None


def require_time(needed_s: float = 20) -> None:
    """Fails the calling test when the run's time budget is used up: not run is not passed."""
    left = seconds_left()
    assert left is None or left >= needed_s, (
        f"not run: {max(left, 0):.0f} s left of the run's time budget, {needed_s:.0f} s needed")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _without_our_preload(value: str) -> str:
    kept = [p for p in value.split(":") if p and Path(p).name != "libnccl.so.2"]
    return ":".join(kept)


def rank_env(rank: int, world: int, port: int, logdir: Path, preload: bool,
             extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one rank process."""
    env = dict(os.environ)
    env.update({
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        "NCCL_NVLS_ENABLE": "0",
        # The bootstrap on loopback: no test's traffic reaches another interface.
        "NCCL_SOCKET_IFNAME": "lo",
        # Ranks share the GPU where there are fewer GPUs than ranks: NCCL 2.30, and the library as
        # NCCL, allow that only with this set.
        "NCCL_MULTI_RANK_GPU_ENABLE": "1",
        # INFO, one log file per process: the ranks look for our INFO lines in their own.
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_FILE": str(logdir / "nccl.%p.log"),
        # Our library gives up waiting for a peer well before the launch's limit.
        "PURLIN_TIMEOUT": env.get("PURLIN_TIMEOUT", "45"),
        "PURLIN_BOOTSTRAP_TIMEOUT": env.get("PURLIN_BOOTSTRAP_TIMEOUT", "45"),
        "PURLIN_LIB": str(library_path()),
        "PURLIN_TORCH_BACKEND": backend(),
        "PURLIN_TORCH_LOGDIR": str(logdir),
    })
    preloads = _without_our_preload(env.get("LD_PRELOAD", ""))
    if preload and backend() == "nccl":
        preloads = ":".join(p for p in (str(library_path()), preloads) if p)
    if preloads:
        env["LD_PRELOAD"] = preloads
    else:
        env.pop("LD_PRELOAD", None)
    env.update(extra or {})
    return env


@dataclasses.dataclass
class Rank:
    rank: int
    returncode: int | None = None
    killed: str = ""  # why the launcher killed it, if it did
    exited_after_s: float | None = None
    lines: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    stdout: Path | None = None
    stderr: Path | None = None

    def last_started(self) -> str:
        done = {rest.split(" :: ")[0] for kind, rest in self.lines if kind in ("PASS", "FAIL", "SKIP")}
        for kind, rest in reversed(self.lines):
            if kind == "START" and rest not in done:
                return rest
        return ""

    def stderr_tail(self, lines: int = 6) -> str:
        if not self.stderr or not self.stderr.exists():
            return ""
        text = self.stderr.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])


@dataclasses.dataclass
class Launch:
    label: str
    world: int
    ranks: list[Rank]
    elapsed_s: float
    logdir: Path


def _no_core_files() -> None:
    # A rank the watchdog ends with SIGABRT would otherwise write a core file of its GPU process.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _kill(proc: subprocess.Popen) -> None:
    # Each rank leads its own process group (start_new_session): end that group, and only it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def launch(label: str, script: str, world: int, *, preload: bool, timeout_s: float = DEFAULT_TIMEOUT_S,
           extra_env: dict[str, str] | None = None, per_rank_env=None, args: tuple[str, ...] = (),
           grace_s: float = GRACE_AFTER_FAILURE_S, python: str | None = None) -> Launch:
    """Runs `script` (a file in this folder) as `world` rank processes and waits for them.

    `per_rank_env(rank)` may add variables to one rank. A rank that exits non-zero starts a grace
    period after which the ranks still running are killed."""
    left = seconds_left()
    if left is not None:
        timeout_s = max(1.0, min(timeout_s, left))
    logdir = output_dir() / re.sub(r"[^A-Za-z0-9_.=-]+", "_", label)
    if logdir.exists():
        shutil.rmtree(logdir)
    logdir.mkdir(parents=True)
    port = free_port()
    ranks = [Rank(r) for r in range(world)]
    procs: list[subprocess.Popen] = []
    files = []
    start = time.monotonic()
    for r in range(world):
        env = rank_env(r, world, port, logdir, preload, extra_env)
        if per_rank_env:
            env.update(per_rank_env(r))
        ranks[r].stdout = logdir / f"rank{r}.out"
        ranks[r].stderr = logdir / f"rank{r}.err"
        out = open(ranks[r].stdout, "w")
        err = open(ranks[r].stderr, "w")
        files += [out, err]
        procs.append(subprocess.Popen([python or sys.executable, "-u", str(HERE / script), *args], env=env,
                                      stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=str(REPO),
                                      start_new_session=True, preexec_fn=_no_core_files))
    failed_at = None
    while True:
        now = time.monotonic()
        running = 0
        for r, p in enumerate(procs):
            if ranks[r].returncode is None and p.poll() is not None:
                ranks[r].returncode = p.returncode
                ranks[r].exited_after_s = now - start
                if p.returncode != 0 and failed_at is None:
                    failed_at = now
            if ranks[r].returncode is None:
                running += 1
        if running == 0:
            break
        why = ""
        if now - start > timeout_s:
            why = f"still running after the launch's limit of {timeout_s:.0f} s"
        elif failed_at is not None and now - failed_at > grace_s:
            why = f"still running {grace_s:.0f} s after another rank failed"
        if why:
            for r, p in enumerate(procs):
                if ranks[r].returncode is None:
                    _kill(p)
                    p.wait()
                    ranks[r].returncode = p.returncode
                    ranks[r].killed = why
                    ranks[r].exited_after_s = time.monotonic() - start
            break
        time.sleep(0.2)
    for f in files:
        f.close()
    for rank in ranks:
        for raw in rank.stdout.read_text(errors="replace").splitlines():
            m = LINE.match(raw.strip())
            if m:
                rank.lines.append((m.group(1), m.group(2)))
    return Launch(label, world, ranks, time.monotonic() - start, logdir)


def _rank_list(ranks: list[int]) -> str:
    return ",".join(str(r) for r in ranks)


def judge(launch: Launch, require_all_ranks: bool = True) -> tuple[list[str], list[str]]:
    """One line per check over all ranks, plus one per rank that did not end well.

    Returns (lines, failures). A check fails when a rank reports FAIL, when a rank that reported
    other checks never reported it, or when the ranks' DIGEST lines for it differ."""
    tag = f"[{launch.label}]"
    names: list[str] = []
    status: dict[str, dict[int, tuple[str, str]]] = {}
    digests: dict[str, dict[int, str]] = {}
    notes: list[str] = []
    for rank in launch.ranks:
        for kind, rest in rank.lines:
            if kind in ("PASS", "FAIL", "SKIP"):
                name, _, detail = rest.partition(" :: ")
                if name not in status:
                    names.append(name)
                    status[name] = {}
                status[name][rank.rank] = (kind, detail)
            elif kind == "DIGEST":
                name, _, hexdigest = rest.rpartition(" ")
                digests.setdefault(name, {})[rank.rank] = hexdigest
            elif kind == "NOTE" and rank.rank == 0:
                notes.append(f"NOTE {tag} {rest}")
    lines = list(notes)
    failures: list[str] = []
    everyone = [r.rank for r in launch.ranks]
    for name in names:
        per = status[name]
        bad = [f"rank {r}: {d}" for r, (k, d) in sorted(per.items()) if k == "FAIL"]
        missing = [r for r in everyone if r not in per] if require_all_ranks else []
        if missing:
            bad.append(f"no result from rank(s) {_rank_list(missing)}")
        if name in digests and len(set(digests[name].values())) > 1:
            groups: dict[str, list[int]] = {}
            for r, h in sorted(digests[name].items()):
                groups.setdefault(h, []).append(r)
            bad.append("results differ between ranks: " +
                       "; ".join(f"ranks {_rank_list(rs)} hold {h[:12]}" for h, rs in groups.items()))
        if bad:
            line = f"FAIL {tag} {name} :: " + "; ".join(bad)
            failures.append(line)
        elif all(k == "SKIP" for k, _ in per.values()):
            line = f"SKIP {tag} {name} :: {next(iter(per.values()))[1]}"
        else:
            detail = next((d for k, d in per.values() if k == "PASS" and d), "")
            same = " (bit-identical on all ranks)" if name in digests and len(digests[name]) == len(everyone) else ""
            line = f"PASS {tag} {name}{same}" + (f" :: {detail}" if detail else "")
        lines.append(line)
    for rank in launch.ranks:
        ended = f"{rank.exited_after_s:.1f} s" if rank.exited_after_s is not None else "?"
        if rank.killed:
            where = rank.last_started()
            line = (f"FAIL {tag} rank {rank.rank} killed, {rank.killed}" +
                    (f"; it was in \"{where}\"" if where else "") + f"; stderr: {rank.stderr_tail()}")
            failures.append(line)
            lines.append(line)
        elif rank.returncode != 0:
            line = (f"FAIL {tag} rank {rank.rank} exited with status {rank.returncode} after {ended}; "
                    f"stderr: {rank.stderr_tail()}")
            failures.append(line)
            lines.append(line)
        elif not any(kind == "RESULT" for kind, _ in rank.lines):
            line = f"FAIL {tag} rank {rank.rank} exited 0 without its RESULT line"
            failures.append(line)
            lines.append(line)
    lines.append(f"{'FAIL' if failures else 'PASS'} {tag} {len(names)} checks on {launch.world} ranks in "
                 f"{launch.elapsed_s:.1f} s (logs: {launch.logdir})")
    return lines, failures


def emit_lines(lines: list[str]) -> None:
    """Prints result lines and appends them to summary.txt."""
    text = "\n".join(lines)
    print(text, flush=True)
    with open(output_dir() / "summary.txt", "a") as f:
        f.write(text + "\n")


def report(launch: Launch, require_all_ranks: bool = True) -> list[str]:
    """Prints the judged lines, appends them to summary.txt, returns the failures."""
    lines, failures = judge(launch, require_all_ranks)
    emit_lines(lines)
    return failures


def run_ranks(label: str, script: str, world: int, *, preload: bool, **kwargs) -> None:
    """Launches, reports, and fails the calling test on any failure."""
    failures = report(launch(label, script, world, preload=preload, **kwargs))
    assert not failures, f"{len(failures)} failure(s) in {label}:\n" + "\n".join(failures)
