"""SGLang's and vLLM's way of loading NCCL: torch imported (its own libnccl mapped), then our
library opened with ctypes.CDLL and called through the wrappers' bindings; 2 and 4 rank
processes on one GPU (rank_ctypes.py)."""
import harness

PARAMS = {"test_ctypes_loading": harness.world_sizes()}


def test_ctypes_loading(world_size):
    harness.require_machine()
    harness.require_time()
    harness.run_ranks(f"ctypes ws={world_size}", "rank_ctypes.py", world_size, preload=False, timeout_s=90)
