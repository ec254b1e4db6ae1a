#!/usr/bin/env python3
"""The bandwidth bars of nccl-compare runs, one row per run, rank count and collective.

Reads nccl-compare's JSON reports (`--json`, or the `compare.json` its `--out` folder holds) and
prints a Markdown table of, per collective:

  geomean    ours / reference time, geometric mean over the sizes from --min (default 1 MiB) on
  256M, 1G   the share of the same-run device copy (read + written per second) that ours reaches on
             the collective's minimal bytes at 256 MiB and 1 GiB (as nccl-compare's last column)
  wrong      wrong values nccl-tests counted in our rows, out of place and in place

and, with --check, whether each row holds the bars given: every share at least --roofline (only
for rank counts from --roofline-ranks on), every geometric mean at most --geomean (only for runs
from a graph whose sizes start at --min or below: the mean of a run from 256 MiB is shown with its
first size and not judged), no wrong value, and our run complete (exit status 0, rows at 256 MiB and 1 GiB where
the report's sizes reach them). A report with no reference (`--only-ours`) has no geometric mean.
With --check the exit status is 1 when any row misses a bar.

Usage:
  bars.py REPORT.json [...] [--min 1M] [--check] [--roofline 0.85] [--roofline-ranks 4] [--geomean 0.9]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys


def minimal_bytes(coll: str, size: int, n: int) -> float:
    """Bytes every rank must read and write at least, summed over ranks, for nccl-tests' size."""
    table = {
        "all_reduce": 2 * n * size,
        "all_gather": n * (size / n + size),
        "reduce_scatter": n * (size + size / n),
        "alltoall": 2 * n * size,
        "alltoallv": 2 * n * size,
        "broadcast": size + n * size,
        "reduce": n * size + size,
        "gather": 2 * size,
        "scatter": 2 * size,
        "sendrecv": 2 * n * size,
    }
    if coll not in table:
        raise KeyError(f"no minimal bytes for {coll}")
    return table[coll]


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def share(coll: str, row: dict, n: int, roof_tbps: float) -> float:
    t = row.get("time_us")
    if not t or not roof_tbps or math.isnan(t) or math.isnan(roof_tbps):
        return math.nan
    return minimal_bytes(coll, row["size"], n) / (t * 1e-6) / 1e12 / roof_tbps


def key(row: dict) -> tuple:
    """A row as nccl-compare matches ours with the reference's."""
    return (row.get("type"), row.get("op"), row.get("root"), row["size"])


def name_of(path: str) -> str:
    """The run's name: its folder for a compare.json, else the file's name without .json."""
    base = os.path.basename(path)
    if base == "compare.json":
        return os.path.basename(os.path.dirname(os.path.abspath(path)))
    return base[:-5] if base.endswith(".json") else base


def rows_of(report: dict, path: str, least: int) -> list[dict]:
    args = report.get("args", {})
    mode = "graph" if args.get("graph") else "eager"
    iters = args.get("iters", "")
    nt = args.get("nt_args") or ""
    m = re.search(r"-R\s*(\d)", nt)
    reg = m.group(1) if m else "0"
    roof = report.get("roofline_tbps") or math.nan
    top = args.get("max") or 0
    out = []
    for r in report["results"]:
        coll, n = r["collective"], int(r["ranks"])
        ours = {key(x): x for x in (r["ours"].get("rows") or [])}
        ref = {key(x): x for x in ((r.get("ref") or {}).get("rows") or [])}
        paired = [(k[3], o["time_us"] / ref[k]["time_us"]) for k, o in ours.items()
                  if k[3] >= least and k in ref and ref[k].get("time_us") and o.get("time_us")]
        geo = math.exp(sum(math.log(r) for _, r in paired) / len(paired)) if paired else math.nan
        # A run that starts above --min (the -R runs from 256 MiB) has a mean of its own sizes, not
        # the one the bar is set on: shown with its first size, not judged.
        geo_from = min((size for size, _ in paired), default=0)
        whole = min((k[3] for k in ours), default=0) <= least
        wrong = sum(int(o.get("wrong") or 0) for o in ours.values())
        # The lowest share among the rows of a size (several types, ops or roots).
        shares = {}
        for k, o in ours.items():
            v, before = share(coll, o, n, roof), shares.get(k[3])
            shares[k[3]] = v if before is None or math.isnan(v) or math.isnan(before) else min(before, v)
        problems = []
        if r["ours"].get("rc", 0) != 0:
            problems.append(f"our run exited {r['ours']['rc']}")
        for size, label in ((256 << 20, "256M"), (1 << 30, "1G")):
            if least <= size <= top and math.isnan(shares.get(size, math.nan)):
                problems.append(f"no {label} time")
        out.append({"report": name_of(path), "ranks": n, "mode": mode, "iters": iters, "registered": reg,
                    "collective": coll, "geomean": geo, "geomean_from": geo_from, "geomean_whole": whole,
                    "roof_256m": shares.get(256 << 20, math.nan), "roof_1g": shares.get(1 << 30, math.nan),
                    "wrong": wrong, "problems": problems})
    return out


def verdict(row: dict, roofline: float, roofline_ranks: int, geomean: float) -> str:
    misses = list(row["problems"])
    if row["ranks"] >= roofline_ranks:
        for field, label in (("roof_256m", "256M"), ("roof_1g", "1G")):
            v = row[field]
            if not math.isnan(v) and v < roofline:
                misses.append(f"{label} {v:.3f} < {roofline:.2f}")
    if row["mode"] == "graph" and row["geomean_whole"] and not math.isnan(row["geomean"]) and row["geomean"] > geomean:
        misses.append(f"geomean {row['geomean']:.3f} > {geomean:.2f}")
    if row["wrong"]:
        misses.append(f"{row['wrong']} wrong")
    return "holds" if not misses else "misses: " + ", ".join(misses)


def size_name(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def fmt(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--min", type=parse_size, default=1 << 20, help="smallest size of the geometric mean")
    ap.add_argument("--check", action="store_true", help="add whether each row holds the bars")
    ap.add_argument("--roofline", type=float, default=0.85)
    ap.add_argument("--roofline-ranks", type=int, default=4)
    ap.add_argument("--geomean", type=float, default=0.9)
    args = ap.parse_args(argv)
    rows = []
    for path in args.reports:
        with open(path) as f:
            rows += rows_of(json.load(f), path, args.min)
    head = ["run", "ranks", "mode", "iterations", "-R", "collective", "geomean ours / ref", "roofline 256M", "roofline 1G", "wrong"]
    if args.check:
        head.append("bars")
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    missed = 0
    for r in rows:
        geo = fmt(r["geomean"])
        if not r["geomean_whole"] and geo != "-":
            geo += f" (from {size_name(r['geomean_from'])})"
        cells = [r["report"], str(r["ranks"]), r["mode"], str(r["iters"]), r["registered"], r["collective"], geo,
                 fmt(r["roof_256m"]), fmt(r["roof_1g"]), str(r["wrong"])]
        if args.check:
            v = verdict(r, args.roofline, args.roofline_ranks, args.geomean)
            missed += v != "holds"
            cells.append(v)
        print("| " + " | ".join(cells) + " |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
