#!/usr/bin/env python3
"""Compares two sets of purlin-perf JSON reports, ours and a reference (the machine's NCCL run by
the same purlin-perf through LD_LIBRARY_PATH), and prints a Markdown table per collective.

Per size: both times (out of place, us), the speed-up (reference time / our time), both busbw and
our busbw as a fraction of a line rate. Per collective: the geometric mean of the speed-up over
1 KiB to 512 KiB (latency) and over 1 MiB to 1 GiB (bandwidth), and the speed-up at the largest
size.

Rows are read line by line (purlin-perf writes one JSON row per line), so a report cut short by a
time limit still gives the rows it holds; a printed report (stdout) is read too.

Usage:
  compare.py --ours A.json|A.log [B ...] --reference C.json|C.log [...] [--line-gbps 450] [--title T]
"""
from __future__ import annotations

import argparse
import json
import math
import sys

LATENCY = (1 << 10, 512 << 10)
BANDWIDTH = (1 << 20, 1 << 30)


def text_row(coll: str, line: str) -> dict | None:
    """A row of purlin-perf's printed table (size count type redop root, then time algbw busbw
    #wrong out of place and in place), as the JSON row's fields that are compared."""
    f = line.split()
    try:
        size, t, bus = int(f[0]), float(f[5]), float(f[7])
    except (IndexError, ValueError):
        return None
    return {"collective": coll, "size": size, "out_of_place": {"time_us": t, "busbw_gbps": bus}}


def rows_of(paths: list[str]) -> dict:
    """(collective, size) -> row; later files override earlier ones. A file is a JSON report or
    the printed report (for a run whose JSON was never written)."""
    rows = {}
    for path in paths:
        coll = None
        with open(path) as f:
            for line in f:
                line = line.strip().rstrip(",")
                if line.startswith("# Collective "):
                    coll = line.split()[2].rstrip(":")
                    continue
                if coll and line and not line.startswith("#"):
                    row = text_row(coll, line)
                    if row:
                        rows[(coll, row["size"])] = row
                    continue
                if not line.startswith('{"collective"'):
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the last line of a report cut short
                if row.get("unsupported") or not row.get("out_of_place"):
                    continue
                rows[(row["collective"], row["size"])] = row
    return rows


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def human(size: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ours", nargs="+", required=True)
    p.add_argument("--reference", nargs="+", required=True)
    p.add_argument("--line-gbps", type=float, default=450.0)
    p.add_argument("--title", default="Purlin against the reference")
    args = p.parse_args(argv)
    ours, ref = rows_of(args.ours), rows_of(args.reference)
    collectives = []
    for (coll, _size) in list(ref) + list(ours):
        if coll not in collectives:
            collectives.append(coll)
    out = [f"# {args.title}", ""]
    summary = ["| collective | latency speed-up (geomean 1K-512K) | bandwidth speed-up (geomean 1M-1G) "
               "| speed-up at the largest size | our best busbw (GB/s, share of line) |",
               "| --- | --- | --- | --- | --- |"]
    detail = []
    for coll in collectives:
        sizes = sorted({s for (c, s) in set(ours) | set(ref) if c == coll})
        lat, bw, last, best = [], [], None, 0.0
        detail += [f"## {coll}", "",
                   "| size | ours (us) | reference (us) | speed-up | ours busbw (GB/s) | reference busbw (GB/s) "
                   f"| ours / {args.line_gbps:g} GB/s |",
                   "| --- | --- | --- | --- | --- | --- | --- |"]
        for s in sizes:
            o, r = ours.get((coll, s)), ref.get((coll, s))
            ot = o["out_of_place"]["time_us"] if o else None
            rt = r["out_of_place"]["time_us"] if r else None
            ob = o["out_of_place"]["busbw_gbps"] if o else None
            rb = r["out_of_place"]["busbw_gbps"] if r else None
            speed = rt / ot if ot and rt else None
            if speed is not None:
                if LATENCY[0] <= s <= LATENCY[1]:
                    lat.append(speed)
                if BANDWIDTH[0] <= s <= BANDWIDTH[1]:
                    bw.append(speed)
                last = (s, speed)
            if ob:
                best = max(best, ob)
            share = ob / args.line_gbps if ob else None
            detail.append(f"| {human(s)} | {fmt(ot)} | {fmt(rt)} | {fmt(speed)} | {fmt(ob)} | {fmt(rb)} | "
                          f"{fmt(share, '.0%')} |")
        detail.append("")
        summary.append(f"| {coll} | {fmt(geomean(lat))} ({len(lat)} sizes) | {fmt(geomean(bw))} ({len(bw)} sizes) | "
                       f"{fmt(last[1]) + ' at ' + human(last[0]) if last else '-'} | "
                       f"{best:.1f} ({best / args.line_gbps:.0%}) |")
    out += ["Speed-up: the reference's time divided by ours (above 1: we are faster). Out-of-place times.", ""]
    out += summary + [""] + detail
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
