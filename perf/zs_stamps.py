#!/usr/bin/env python3
"""Where the time of zero-staged calls goes, from the stamps PURLIN_STAMPS=PREFIX writes.

Each rank's file PREFIX.zs.RANK has one line per call and CTA: the call's slot in the ring, the
CTA, then globaltimer nanoseconds: [0] the CTA's entry, [1] the arrival barrier passed, [2] its
share moved, [3] its exit (after the done barrier). Calls are matched across ranks by slot and put
in time order; the calls of the last --calls slots are summarised (medians, microseconds):

  period   from one call's first entry (any rank, any CTA) to the next call's
  skew     last entry minus first entry
  arrive   last CTA past the arrival barrier minus last entry
  move     first CTA past the arrival barrier to the last share moved
  tail     last share moved minus first share moved
  done     last exit minus last share moved
  gap      next call's first entry minus this call's last exit

Usage: zs_stamps.py PREFIX [--calls N]
"""
import argparse
import glob
import statistics


def load(prefix):
    calls = {}
    for path in glob.glob(prefix + ".zs.*"):
        with open(path) as f:
            for line in f:
                w = [int(x) for x in line.split()]
                if len(w) < 6 or 0 in w[2:6]:
                    continue
                calls.setdefault(w[0], []).append(w[2:6])
    return sorted(calls.values(), key=lambda rows: min(r[0] for r in rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    calls = load(args.prefix)[-(args.calls + 1):]
    if len(calls) < 2:
        raise SystemExit("fewer than two stamped calls")
    keys = ["period", "skew", "arrive", "move", "tail", "done", "gap"]
    got = {k: [] for k in keys}
    for now, nxt in zip(calls, calls[1:]):
        entry = [r[0] for r in now]
        passed = [r[1] for r in now]
        moved = [r[2] for r in now]
        leave = [r[3] for r in now]
        got["period"].append(min(r[0] for r in nxt) - min(entry))
        got["skew"].append(max(entry) - min(entry))
        got["arrive"].append(max(passed) - max(entry))
        got["move"].append(max(moved) - min(passed))
        got["tail"].append(max(moved) - min(moved))
        got["done"].append(max(leave) - max(moved))
        got["gap"].append(min(r[0] for r in nxt) - max(leave))
    print(f"{len(calls) - 1} calls, {len(calls[-1])} CTAs each (all ranks); medians in us")
    print(" ".join(f"{k} {statistics.median(v) / 1e3:.1f}" for k, v in got.items()))


if __name__ == "__main__":
    main()
