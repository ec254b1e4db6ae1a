#!/usr/bin/env python3
"""perf/bars.py against what nccl-compare printed itself, and its verdicts on made-up reports.

1. For nccl-compare reports kept under perf/results, every roofline share bars.py computes at
   256 MiB and 1 GiB equals the last column of the compare.md nccl-compare wrote beside the JSON
   (to its two decimals), and every geometric mean equals that file's "geomean >= 1 MiB" column.
2. On reports made up here: a share under the bar, a geometric mean over it from a graph, wrong
   values, our run's failure and a missing 1 GiB row are each reported as misses (exit status 1);
   the same geometric mean eager or of a run that starts at 256 MiB, and a share under the bar with
   fewer ranks than --roofline-ranks, are not (exit status 0).

Usage: test_bars.py BARS_PY RESULTS_DIR
"""
import importlib.util
import io
import json
import math
import os
import re
import sys
import tempfile
from contextlib import redirect_stdout

REPORTS = [
    "2026-12-06-h100-bars/runs/g8",
    "2026-12-06-h100-bars/runs/e4",
    "2026-12-06-h100-bars/runs/g2",
    "2026-12-06-h100-ordinary-buffers/runs/r2-g0-ag8",
]


def load_bars(path):
    spec = importlib.util.spec_from_file_location("bars", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def printed(folder):
    """nccl-compare's own figures: {(collective, size): roofline} and {collective: geomean}."""
    roof, geo = {}, {}
    with open(os.path.join(folder, "compare.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[1].isdigit():
                roof[(cells[0], int(cells[1]))] = cells[5]
            elif len(cells) == 3 and re.fullmatch(r"[a-z_]+", cells[0]) and cells[2] not in ("nan", "---"):
                geo[cells[0]] = cells[2]
    return roof, geo


def check_printed(bars, results):
    failures = 0
    for rel in REPORTS:
        folder = os.path.join(results, rel)
        with open(os.path.join(folder, "compare.json")) as f:
            rows = bars.rows_of(json.load(f), rel, 1 << 20)
        roof, geo = printed(folder)
        if not rows:
            print(f"FAIL {rel}: no rows")
            failures += 1
        for r in rows:
            for key, size in (("roof_256m", 256 << 20), ("roof_1g", 1 << 30)):
                want = roof.get((r["collective"], size))
                if want is None:
                    print(f"FAIL {rel} {r['collective']} {size}: not in compare.md")
                    failures += 1
                elif f"{r[key]:.2f}" != want:
                    print(f"FAIL {rel} {r['collective']} {size}: roofline {r[key]:.4f}, compare.md {want}")
                    failures += 1
            want = geo.get(r["collective"])
            if want is None or f"{r['geomean']:.2f}" != want:
                print(f"FAIL {rel} {r['collective']}: geomean {r['geomean']:.4f}, compare.md {want}")
                failures += 1
    return failures


def report(graph, ranks, coll, times, ref_times, wrong=0, roof=3.0, rc=0, sizes=None):
    """A made-up nccl-compare report: one collective, sizes 1 MiB, 256 MiB and 1 GiB unless given
    (fewer when `times` is shorter: our run stopped early)."""
    sizes = sizes or [1 << 20, 256 << 20, 1 << 30]
    row = {"type": "bfloat16", "op": "sum", "root": -1}
    ours = [dict(row, size=s, time_us=t, wrong=wrong) for s, t in zip(sizes, times)]
    ref = [dict(row, size=s, time_us=t, wrong=0) for s, t in zip(sizes, ref_times)]
    return {"roofline_tbps": roof, "args": {"graph": 20 if graph else 0, "iters": 20, "nt_args": "-R 1",
                                            "max": 1 << 30},
            "results": [{"ranks": ranks, "collective": coll, "ours": {"rows": ours, "rc": rc},
                         "ref": {"rows": ref, "rc": 0}}]}


def at_share(coll, size, ranks, share, roof=3.0):
    """The time in us at which `coll` of `size` reaches `share` of a `roof` TB/s copy."""
    return bars_mod.minimal_bytes(coll, size, ranks) / (share * roof * 1e12) * 1e6


def check_verdicts(bars):
    failures = 0
    g = 1 << 30
    m = 256 << 20
    cases = [
        # (what, report, expected substrings of the verdict, or "holds")
        ("all held", report(True, 8, "all_gather", [10, at_share("all_gather", m, 8, 0.9), at_share("all_gather", g, 8, 0.9)],
                            [20, 2000, 8000]), "holds"),
        ("256M under 0.85", report(True, 8, "all_gather", [10, at_share("all_gather", m, 8, 0.84), at_share("all_gather", g, 8, 0.9)],
                                   [20, 2000, 8000]), "256M 0.840 < 0.85"),
        ("geomean over 0.9 from a graph", report(True, 4, "all_reduce", [10, at_share("all_reduce", m, 4, 0.9), at_share("all_reduce", g, 4, 0.9)],
                                                 [10, at_share("all_reduce", m, 4, 0.9), at_share("all_reduce", g, 4, 0.9)]), "geomean 1.000 > 0.90"),
        ("geomean over 0.9 eager", report(False, 4, "all_reduce", [10, at_share("all_reduce", m, 4, 0.9), at_share("all_reduce", g, 4, 0.9)],
                                          [10, at_share("all_reduce", m, 4, 0.9), at_share("all_reduce", g, 4, 0.9)]), "holds"),
        ("geomean over 0.9 from 256 MiB on", report(True, 8, "alltoall", [at_share("alltoall", m, 8, 0.99), at_share("alltoall", g, 8, 1.0)],
                                                    [at_share("alltoall", m, 8, 0.9), at_share("alltoall", g, 8, 0.91)],
                                                    sizes=[m, g]), "holds"),
        ("2 ranks under 0.85", report(True, 2, "reduce_scatter", [10, at_share("reduce_scatter", m, 2, 0.5), at_share("reduce_scatter", g, 2, 0.5)],
                                      [20, 2000, 8000]), "holds"),
        ("wrong values", report(True, 8, "alltoall", [10, at_share("alltoall", m, 8, 0.9), at_share("alltoall", g, 8, 0.9)],
                                [20, 2000, 8000], wrong=3), "9 wrong"),
        ("our run failed", report(True, 8, "all_reduce", [], [20, 2000, 8000], rc=3), "our run exited 3"),
        ("no 1 GiB row", report(True, 8, "all_reduce", [10, at_share("all_reduce", m, 8, 0.9)], [20, 2000, 8000]),
         "no 1G time"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for what, rep, want in cases:
            path = os.path.join(tmp, "r.json")
            with open(path, "w") as f:
                json.dump(rep, f)
            out = io.StringIO()
            with redirect_stdout(out):
                rc = bars.main([path, "--check"])
            if rc != (0 if want == "holds" else 1):
                print(f"FAIL {what}: exit status {rc}")
                failures += 1
            last = out.getvalue().strip().splitlines()[-1]
            verdict = last.strip().strip("|").split("|")[-1].strip()
            ok = verdict == "holds" if want == "holds" else (verdict.startswith("misses") and want in verdict)
            if not ok:
                print(f"FAIL {what}: verdict '{verdict}', expected '{want}'")
                failures += 1
            if "| 1 |" not in last:
                print(f"FAIL {what}: -R 1 not in the row: {last}")
                failures += 1
    return failures


if __name__ == "__main__":
    bars_mod = load_bars(sys.argv[1])
    n = check_printed(bars_mod, sys.argv[2]) + check_verdicts(bars_mod)
    print("OK" if n == 0 else f"{n} failures")
    sys.exit(1 if n else 0)
