"""Runs the test_* functions of the given test modules without pytest, in file and definition
order, with the parameters their PARAMS lists give (as conftest.py does under pytest).

Usage: python3 test/torch/run.py test_preload.py [test_ctypes.py ...]
Prints PASSED/FAILED/SKIPPED per test and closes with 'N passed, N failed, N skipped'; exits 1
when a test failed.
"""
from __future__ import annotations

import importlib
import inspect
import sys
import time
import traceback
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def cases(module):
    functions = [f for name, f in inspect.getmembers(module, inspect.isfunction)
                 if name.startswith("test_") and f.__module__ == module.__name__]
    functions.sort(key=lambda f: f.__code__.co_firstlineno)
    params = getattr(module, "PARAMS", {})
    for f in functions:
        if f.__name__ in params:
            for value in params[f.__name__]:
                yield f"{module.__name__}::{f.__name__}[ws{value}]", f, (value,)
        else:
            yield f"{module.__name__}::{f.__name__}", f, ()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip())
        return 2
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for arg in argv:
        module = importlib.import_module(Path(arg).stem)
        for name, f, args in cases(module):
            t0 = time.monotonic()
            try:
                f(*args)
                outcome = "passed"
                why = ""
            except unittest.SkipTest as e:
                outcome, why = "skipped", str(e)
            except Exception as e:  # noqa: BLE001 - every failure is reported, the run goes on
                outcome, why = "failed", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                if not isinstance(e, AssertionError):
                    traceback.print_exc()
            counts[outcome] += 1
            print(f"{outcome.upper()} {name} ({time.monotonic() - t0:.1f} s)" + (f": {why}" if why else ""),
                  flush=True)
        if hasattr(module, "teardown_module"):
            module.teardown_module(module)
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped", flush=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
