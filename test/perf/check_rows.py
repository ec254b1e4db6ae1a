#!/usr/bin/env python3
"""Runs purlin-perf and fails unless every row ran and its results were checked.

purlin-perf's exit status says that no element was wrong, which a row the library refuses (with
ncclInvalidArgument) does not change: a run in which every row is refused passes it. Here every row
must have run, its result must have been checked out of place (and in place where the collective
checks that) and found right, and its time must be a positive number.

Usage: check_rows.py PURLIN_PERF [purlin-perf arguments, which must include -c 1 ...]
"""
import json
import os
import subprocess
import sys
import tempfile


def problems_of(row):
    """What is wrong with one row of purlin-perf's JSON file (nothing: an empty list)."""
    name = f"{row['collective']} {row['size']} B {row['type']} {row['redop']}"
    if row["unsupported"] is not None:
        return [f"{name}: refused by the library: {row['unsupported']}"]
    if not row["check"]:
        return [f"{name}: results not checked (-c 1 missing)"]
    problems = []
    for place in ("out_of_place", "in_place"):
        result = row[place]
        if not result["time_us"] or result["time_us"] <= 0:
            problems.append(f"{name}: {place} time {result['time_us']}")
        if result["wrong"] is None and place == "out_of_place":
            problems.append(f"{name}: out-of-place result not checked")
        elif result["wrong"]:
            problems.append(f"{name}: {result['wrong']} wrong elements {place}")
    return problems


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    perf, args = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.json")
        status = subprocess.run([perf, *args, "--json", path]).returncode
        if status != 0:
            sys.exit(f"FAIL purlin-perf exited with status {status}")
        with open(path) as f:
            rows = json.load(f)["rows"]
    if not rows:
        print("FAIL purlin-perf reported no rows")
    bad_rows = 0
    for row in rows:
        problems = problems_of(row)
        bad_rows += bool(problems)
        for p in problems:
            print("FAIL " + p)
    collectives = sorted({row["collective"] for row in rows})
    in_place = sum(1 for row in rows if row["in_place"] and row["in_place"]["wrong"] is not None)
    print(f"{len(rows)} rows of {len(collectives)} collectives ({', '.join(collectives)}): "
          f"{len(rows) - bad_rows} ran and were checked ({in_place} in place too), {bad_rows} did not")
    sys.exit(1 if bad_rows or not rows else 0)


if __name__ == "__main__":
    main()
