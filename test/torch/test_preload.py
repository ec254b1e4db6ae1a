"""torch.distributed (backend nccl) on our libnccl.so.2 through LD_PRELOAD: 2 and 4 rank
processes on one GPU, every check of rank_collectives.py."""
import harness

PARAMS = {"test_preload_collectives": harness.world_sizes()}


def test_preload_collectives(world_size):
    harness.require_machine()
    harness.require_time()
    harness.run_ranks(f"preload ws={world_size}", "rank_collectives.py", world_size, preload=True,
                      extra_env={"PURLIN_TORCH_MODE": "preload"})
