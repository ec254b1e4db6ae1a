"""Faults under torch's watchdog, our library preloaded, 2 and 4 rank processes (rank_faults.py):
a rank that never arrives, and all_reduce with different counts on different ranks. Each must
end in torch's watchdog error with ncclCommGetAsyncError and ncclCommAbort cooperating: the
blocked ranks end within the launch's limit (abort returned and let them go), nothing is left
for the launcher to kill, and the rank that stayed away can still destroy its process group.
"""
import re

import harness

# Abort the communicators, then end the process; no flight-recorder dumps to wait for.
ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "0",
    "PURLIN_FAULT_TIMEOUT_S": "6",
    "PURLIN_FAULT_HOLD_S": "20",
}
LIMIT_S = 75
PARAMS = {"test_fault_absent_rank": harness.world_sizes(), "test_fault_mismatched_counts": harness.world_sizes()}
WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|timed out|NCCL error|ncclRemoteError|"
                      r"DistBackendError|ncclInternalError|ncclSystemError", re.IGNORECASE)


def _stderr(rank) -> str:
    return rank.stderr.read_text(errors="replace") if rank.stderr and rank.stderr.exists() else ""


def _watchdog_line(rank) -> str:
    for line in _stderr(rank).splitlines():
        if WATCHDOG.search(line):
            return " ".join(line.split())[:200]
    return ""


def _verdicts(launch, checks: list[tuple[str, bool, str]]) -> None:
    lines, failures = [], []
    for name, ok, detail in checks:
        line = f"{'PASS' if ok else 'FAIL'} [{launch.label}] {name}" + (f" :: {detail}" if detail else "")
        lines.append(line)
        if not ok:
            failures.append(line)
    lines.append(f"{'FAIL' if failures else 'PASS'} [{launch.label}] {len(checks)} checks in {launch.elapsed_s:.1f} s "
                 f"(logs: {launch.logdir})")
    harness.emit_lines(lines)
    assert not failures, "\n".join(failures)


def _warm(launch) -> tuple[str, bool, str]:
    bad = [r.rank for r in launch.ranks
           if not any(k == "PASS" and rest.startswith("init and a first all_reduce") for k, rest in r.lines)]
    return "every rank initialised and ran a first all_reduce", not bad, f"not rank(s) {bad}" if bad else ""


def _ended(rank) -> str:
    if rank.killed:
        where = rank.last_started()
        return f"killed by the launcher ({rank.killed}" + (f"; it was in \"{where}\")" if where else ")")
    return f"exited with status {rank.returncode} after {rank.exited_after_s:.1f} s"


def test_fault_absent_rank(world_size):
    harness.require_machine()
    if harness.backend() != "nccl":
        harness.skip("needs the nccl backend")
    harness.require_time(LIMIT_S)
    launch = harness.launch(f"fault absent rank ws={world_size}", "rank_faults.py", world_size, preload=True,
                            timeout_s=LIMIT_S, grace_s=LIMIT_S, extra_env={**ENV, "PURLIN_FAULT": "absent"})
    absent, waiting = launch.ranks[0], launch.ranks[1:]
    checks = [_warm(launch)]
    # torch's watchdog reports the timeout and tears the process group down; whether the process
    # then exits non-zero is torch's choice. What matters: each ended by itself, with that error.
    ended = [r for r in waiting if not r.killed and _watchdog_line(r)]
    checks.append(("every blocked rank was ended by the watchdog, not left hanging", len(ended) == len(waiting),
                   "; ".join(f"rank {r.rank}: {_ended(r)}; {_watchdog_line(r) or 'no watchdog error in its stderr'}"
                             for r in waiting)))
    destroyed = any(k == "PASS" and rest.startswith("the absent rank destroys") for k, rest in absent.lines)
    checks.append(("the absent rank destroyed its process group and exited 0",
                   not absent.killed and absent.returncode == 0 and destroyed, _ended(absent)))
    _verdicts(launch, checks)


def test_fault_mismatched_counts(world_size):
    harness.require_machine()
    if harness.backend() != "nccl":
        harness.skip("needs the nccl backend")
    harness.require_time(LIMIT_S)
    launch = harness.launch(f"fault mismatched counts ws={world_size}", "rank_faults.py", world_size, preload=True,
                            timeout_s=LIMIT_S, grace_s=LIMIT_S, extra_env={**ENV, "PURLIN_FAULT": "mismatch"})
    checks = [_warm(launch)]
    hanging = [r for r in launch.ranks if r.killed]
    checks.append(("no rank left hanging", not hanging, "; ".join(f"rank {r.rank}: {_ended(r)}" for r in launch.ranks)))
    caught = [r for r in launch.ranks if _watchdog_line(r)]
    returned = [rest for r in launch.ranks for k, rest in r.lines if k == "NOTE" and "returned" in rest]
    checks.append(("the mismatch ended in the watchdog's error", bool(caught),
                   "; ".join(f"rank {r.rank}: {_watchdog_line(r)}" for r in caught) or
                   "no rank's stderr shows the watchdog's error" + (f" ({'; '.join(returned)})" if returned else "")))
    _verdicts(launch, checks)
