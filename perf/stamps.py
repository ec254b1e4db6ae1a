#!/usr/bin/env python3
"""Where the time of one latency-exchange call goes, from the stamps PURLIN_STAMPS=PREFIX writes.

Each rank's file PREFIX.RANK has one line per call of channel 0: the call's epoch, then globaltimer
nanoseconds: [0] the kernel's entry, [1] the start of its work (before the tables), [2] the end
of the start (the previous kernel complete, the epoch checked), [3] thread 0's pushes of the first
phase issued, [4] its receive or fold done, [5] the whole CTA's (every thread's words arrived),
[6] [7] [8] the same for a second phase (0 when none), [9] the end; then, in the one-word form, thread
0's finer stamps of each of the first two phases: [10] its tables agreed, [11] its loads arrived,
[12] the start behind them (the first phase; the second repeats [11]), and [13] [14] [15] for the
second phase. Calls are grouped into windows
of epochs (--window, e.g. one size of an nccl-tests run) and each step's median printed per rank.

Usage: stamps.py PREFIX [--window FIRST:LAST ...]
"""
import argparse
import glob
import statistics


def load(prefix):
    ranks = {}
    for path in glob.glob(prefix + ".*"):
        suffix = path.rsplit(".", 1)[1]
        if not suffix.isdigit():
            continue
        rows = {}
        with open(path) as f:
            for line in f:
                t = [int(w) for w in line.split()]
                rows[t[0]] = t[1:]
        ranks[int(suffix)] = rows
    return ranks


def median_step(rows, epochs, a, b):
    v = [(rows[e][b] - rows[e][a]) / 1e3 for e in epochs if e in rows and rows[e][a] and rows[e][b]]
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix")
    ap.add_argument("--window", action="append", default=[], help="FIRST:LAST epochs (default: all)")
    args = ap.parse_args()
    ranks = load(args.prefix)
    if not ranks:
        raise SystemExit(f"no stamp files {args.prefix}.RANK")
    windows = [tuple(int(x) for x in w.split(":")) for w in args.window] or [
        (min(min(r) for r in ranks.values()), max(max(r) for r in ranks.values()))]
    steps = [("launched early, waiting", 0, 2), ("pushes", 2, 3), ("receive or fold, thread 0", 3, 4),
             ("the whole CTA's", 3, 5), ("second phase, whole CTA", 5, 8), ("start to end", 2, 9)]
    for lo, hi in windows:
        epochs = range(lo, hi + 1)
        print(f"epochs {lo}..{hi}")
        print("  rank | " + " | ".join(name for name, _, _ in steps) + " | start to next start (us)")
        for r in sorted(ranks):
            rows = ranks[r]
            cells = [median_step(rows, epochs, a, b) for _, a, b in steps]
            cycle = [(rows[e + 1][2] - rows[e][2]) / 1e3 for e in epochs if e in rows and e + 1 in rows]
            cyc = statistics.median(cycle) if cycle else float("nan")
            print(f"  {r:4d} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {cyc:.2f}")


if __name__ == "__main__":
    main()
