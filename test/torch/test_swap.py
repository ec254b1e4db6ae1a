"""The swap: no LD_PRELOAD, our libnccl.so.2 in the place of the wheel's (swap.py), then every
check of rank_collectives.py with 2 and 4 rank processes. The loader must really pick ours: the
probe and every rank check that each mapped libnccl has our file's bytes.

PURLIN_SWAP_MODE: `mirror` (a scratch tree of links; the installation is left alone), `inplace`
(replace the wheel's file, restored afterwards), or `auto` (the default: mirror, and in place when
the mirror does not lead the loader to ours). In place needs PURLIN_SWAP_INPLACE=1: it changes
the installation while it runs.
"""
import os
import shutil

import harness

PARAMS = {"test_swap_collectives": harness.world_sizes()}

_state: dict = {}  # mode, env, scratch, layout: prepared once for the module


def _ours_only(found: dict) -> str:
    from checks import file_sha256

    paths = found["libnccl"]
    want = file_sha256(harness.library_path())
    if paths and all(not p.endswith(" (deleted)") and file_sha256(p) == want for p in paths):
        return ""
    return f"import torch mapped {paths or 'no libnccl'}, not ours"


def _prepare() -> tuple[str, dict]:
    if "mode" in _state:
        if _state["mode"] is None:
            raise AssertionError(_state["why"])
        return _state["mode"], _state["env"]
    import swap

    mode = os.environ.get("PURLIN_SWAP_MODE", "auto")
    try:
        layout = swap.Layout()
    except LookupError as e:
        harness.skip(str(e))
    _state["layout"] = layout
    why = []
    if mode in ("auto", "mirror"):
        scratch = swap.scratch_dir()
        _state["scratch"] = scratch
        mirror = swap.build_mirror(layout, harness.library_path(), scratch)
        env = {"PYTHONPATH": swap.probe_env(mirror)["PYTHONPATH"]}
        found = swap.probe(swap.probe_env(mirror))
        problem = _ours_only(found)
        if not problem:
            _state.update(mode="mirror", env=env, found=found)
            return "mirror", env
        why.append(f"mirror: {problem}")
        print(f"NOTE [swap] the scratch mirror did not lead the loader to ours: {problem}", flush=True)
    if mode in ("auto", "inplace"):
        if os.environ.get("PURLIN_SWAP_INPLACE") != "1":
            why.append("in place: not allowed (set PURLIN_SWAP_INPLACE=1 on a machine that is thrown away)")
        else:
            swap.swap_in_place(layout, harness.library_path())
            found = swap.probe(swap.probe_env())
            problem = _ours_only(found)
            if not problem:
                _state.update(mode="inplace", env={}, found=found)
                return "inplace", {}
            why.append(f"in place: {problem}")
    _state.update(mode=None, why="; ".join(why) or f"unknown PURLIN_SWAP_MODE {mode!r}")
    raise AssertionError(_state["why"])


def teardown_module(module=None):
    """Puts the wheel's file back and removes the scratch tree (run.py calls this too)."""
    import swap

    if _state.get("layout") is not None and swap.restore(_state["layout"]):
        print(f"NOTE [swap] restored {_state['layout'].wheel_nccl}", flush=True)
    if _state.get("scratch"):
        shutil.rmtree(_state["scratch"], ignore_errors=True)
    _state.clear()


def test_swap_loader_picks_ours():
    harness.require_machine()
    if harness.backend() != "nccl":
        harness.skip("the swap needs the real torch installation")
    harness.require_time(40)
    mode, _ = _prepare()
    where = _state["found"]
    harness.emit_lines([f"PASS [swap] mode {mode}: import torch maps {', '.join(where['libnccl'])} "
                        f"(torch from {where['torch']})"])


def test_swap_collectives(world_size):
    harness.require_machine()
    if harness.backend() != "nccl":
        harness.skip("the swap needs the real torch installation")
    harness.require_time()
    mode, env = _prepare()
    harness.run_ranks(f"swap {mode} ws={world_size}", "rank_collectives.py", world_size, preload=False,
                      extra_env={**env, "PURLIN_TORCH_MODE": "swap"})
