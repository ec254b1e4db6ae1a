"""One rank of a fault scenario (PURLIN_FAULT):

- `absent`: rank 0 never joins the collective the other ranks start. It stays alive (it serves
  the TCPStore) for PURLIN_FAULT_HOLD_S, then destroys its process group, whose peers are gone
  by then, and exits 0. The other ranks block in the all_reduce until torch's watchdog times it
  out, aborts the communicator (ncclCommAbort) and ends the process.
- `mismatch`: every rank calls all_reduce with a different count. A rank whose call returns
  waits until PURLIN_FAULT_HOLD_S and leaves with os._exit(0); a rank still blocked is ended by
  the watchdog.

Run with TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (abort the communicators, then end the process) and a
process-group timeout of PURLIN_FAULT_TIMEOUT_S. test_faults.py judges how the processes ended.
"""
from __future__ import annotations

import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checks import Checks, arm_watchdog, local_gpu, rank_and_world  # noqa: E402


def main() -> int:
    scenario = os.environ["PURLIN_FAULT"]
    timeout_s = float(os.environ.get("PURLIN_FAULT_TIMEOUT_S", "6"))
    hold_s = float(os.environ.get("PURLIN_FAULT_HOLD_S", "20"))
    arm_watchdog(hold_s + 30)
    import torch
    import torch.distributed as dist

    rank, world = rank_and_world()
    checks = Checks()
    device = torch.device("cuda", local_gpu(torch))
    torch.cuda.set_device(device)

    def init():
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s), device_id=device)
        t = torch.ones(1024, device=device)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        if float(t[0]) != world:
            raise RuntimeError(f"warm-up all_reduce gave {float(t[0])}")
        return f"timeout {timeout_s:.0f} s"

    if not checks.run("init and a first all_reduce", init):
        return checks.finish()
    start = time.monotonic()
    checks.note(f"scenario {scenario} starts")

    if scenario == "absent" and rank == 0:
        time.sleep(hold_s)

        def destroy():
            t0 = time.monotonic()
            dist.destroy_process_group()
            return f"{time.monotonic() - t0:.2f} s, after the other ranks had gone"

        checks.run("the absent rank destroys its process group", destroy)
        return checks.finish()

    count = 1024 * (1 + rank) if scenario == "mismatch" else 1024
    t = torch.ones(count, device=device)
    checks.emit("START the faulty all_reduce")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    checks.note(f"rank {rank}: the all_reduce returned after {time.monotonic() - start:.1f} s")
    print(f"rank {rank}: the all_reduce returned after {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
    time.sleep(max(0.0, hold_s - (time.monotonic() - start)))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
