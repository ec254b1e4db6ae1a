#!/usr/bin/env python3
"""Renders purlin-perf reports as one PNG per collective and a Markdown table.

Each PNG has two panels against the size (log scale): the time per call (out of place) and the bus
bandwidth, one line per run. The bandwidth panel draws, for each run whose rows carry purlin-perf's
`roofline` share, the bus bandwidth a call would reach at the copy roofline (busbw / share), and a
horizontal line at --line-gbps when given (a link's rate, say). summary.md holds the times, one
column per run.

Usage:
  plot.py --run LABEL=FILE[,FILE...] [--run LABEL=FILE ...] --out DIR [--line-gbps 450 --line-label NVLink4]
          [--title TEXT]
FILE is a purlin-perf JSON report or its printed report (perf/compare.py reads both the same way);
several files of one run (a latency and a bandwidth sweep, say) form one line.
Needs matplotlib (the PNGs); without it only summary.md is written.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import human, rows_of  # noqa: E402


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="LABEL=FILE[,FILE...]")
    p.add_argument("--out", required=True)
    p.add_argument("--line-gbps", type=float)
    p.add_argument("--line-label", default="line rate")
    p.add_argument("--title", default="")
    args = p.parse_args(argv)
    runs = []
    for item in args.run:
        label, _, path = item.partition("=")
        if not path:
            p.error(f"--run {item}: expected LABEL=FILE[,FILE...]")
        runs.append((label, rows_of(path.split(","))))
    os.makedirs(args.out, exist_ok=True)
    collectives: list[str] = []
    for _, rows in runs:
        for coll, _size in rows:
            if coll not in collectives:
                collectives.append(coll)

    lines = [f"# {args.title or 'purlin-perf'}", "", "Time per call, out of place (us).", ""]
    for coll in collectives:
        sizes = sorted({s for _, rows in runs for (c, s) in rows if c == coll})
        lines += [f"## {coll}", "", "| size | " + " | ".join(label for label, _ in runs) + " |",
                  "| --- |" + " --- |" * len(runs)]
        for s in sizes:
            cells = []
            for _, rows in runs:
                r = rows.get((coll, s))
                cells.append(f"{r['out_of_place']['time_us']:.2f}" if r else "-")
            lines.append(f"| {human(s)} | " + " | ".join(cells) + " |")
        lines.append("")
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(lines))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: no matplotlib here: wrote summary.md only", file=sys.stderr)
        return 0
    for coll in collectives:
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
        for label, rows in runs:
            pts = sorted((s, r["out_of_place"]) for (c, s), r in rows.items() if c == coll)
            if not pts:
                continue
            xs = [s for s, _ in pts]
            line, = left.plot(xs, [o["time_us"] for _, o in pts], marker=".", label=label)
            right.plot(xs, [o["busbw_gbps"] for _, o in pts], marker=".", color=line.get_color(), label=label)
            roof = [(s, o["busbw_gbps"] / o["roofline"]) for s, o in pts if o.get("roofline")]
            if roof:
                right.plot([s for s, _ in roof], [b for _, b in roof], linestyle="--", color=line.get_color(),
                           label=f"{label}: copy roofline")
        if args.line_gbps:
            right.axhline(args.line_gbps, color="grey", linestyle=":", label=args.line_label)
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (bytes)")
            ax.grid(True, which="both", alpha=0.3)
        left.set_yscale("log")
        left.set_ylabel("time per call (us)")
        right.set_ylabel("bus bandwidth (GB/s)")
        left.legend(fontsize=8)
        right.legend(fontsize=8)
        fig.suptitle(f"{coll}{': ' + args.title if args.title else ''}")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, f"{coll}.png"), dpi=110)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
