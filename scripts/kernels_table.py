#!/usr/bin/env python3
"""Markdown tables of a `tlm bench kernels --json` report, by input file.

usage: scripts/kernels_table.py REPORT [RERATE]

REPORT is the report `tlm bench kernels --json` writes (a full run, whole or
in parts). RERATE, optional, is what scripts/rerate_kernels.py writes for
that report: each task's current-rule schedule timed beside Search-N's; its
TLM-1 / Search-N ratios then replace the report's for the tasks it holds (the
report's own were measured under the rule of the session that ran them).

Prints the summary (geometric means over the tasks measured) and one row a
file: tasks, TLM-1 / Search-N, TLM-10 / Search-N, TLM-1 / oneDNN, TLM-1 /
OpenBLAS, Search-N's time to kernel over TLM-1's. Every ratio is of speeds
(time of the second over time of the first), from the warm medians."""
import json
import math
import sys


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(task, a, b, key="median_ns"):
    """speed of contender a over contender b: b's time / a's time"""
    x, y = task.get(a), task.get(b)
    if not isinstance(x, dict) or not isinstance(y, dict):
        return None
    tx, ty = x.get(key), y.get(key)
    if not tx or not ty or tx <= 0 or ty <= 0:
        return None
    return ty / tx


def main():
    if len(sys.argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        rep = json.load(f)
    rerated = {}
    if len(sys.argv) == 3:
        with open(sys.argv[2]) as f:
            for row in json.load(f):
                rerated[row[0]] = row[3]  # [task, family, old, new, schedule]
    files = [p.rsplit("/", 1)[-1] for p in rep["files"]]
    by_file = {f: [] for f in files}
    tasks = [t for t in rep["tasks"] if not t.get("skipped")]
    for t in tasks:
        by_file.setdefault(t["files"][0], []).append(t)

    def tlm1_vs_search(t):
        return rerated.get(t["task"], ratio(t, "tlm1", "searchN"))

    def row(ts):
        return (
            len(ts),
            geomean([tlm1_vs_search(t) for t in ts]),
            geomean([ratio(t, "tlm10", "searchN") for t in ts]),
            geomean([ratio(t, "tlm1", "onednn") for t in ts]),
            geomean([ratio(t, "tlm1", "openblas") for t in ts]),
            geomean([ratio(t, "tlm1", "searchN", "time_to_kernel_ms") for t in ts]),
        )

    n, s1, s10, dnn, blas, ttk = row(tasks)
    print(f"tasks {n} of {rep.get('tasks_in_files')}, complete: {rep.get('complete')}"
          f"{', TLM-1 / Search-N re-timed under the current rule for ' + str(len(rerated)) + ' tasks' if rerated else ''}")
    print()
    print("| | |\n|---|---|")
    print(f"| TLM-1 / Search-{rep.get('search_trials')} | **{fmt(s1, 3)}** |")
    print(f"| TLM-10 / Search-{rep.get('search_trials')} | {fmt(s10, 3)} |")
    print(f"| TLM-1 / oneDNN | {fmt(dnn, 3)} |")
    print(f"| TLM-1 / OpenBLAS | {fmt(blas, 3)} |")
    print(f"| Search's time to kernel / TLM-1's | **{fmt(ttk, 0)}x** |")
    wrong = sum(t.get("wrong_kernels", 0) for t in tasks)
    print(f"| wrong kernels | {wrong} |")
    print()
    print("| file | tasks | TLM-1 / Search-N | TLM-10 / Search-N | TLM-1 / oneDNN | TLM-1 / OpenBLAS "
          "| Search-N time to kernel / TLM-1 |")
    print("|---|---|---|---|---|---|---|")
    for f in files:
        ts = by_file.get(f, [])
        if not ts:
            continue
        n, s1, s10, dnn, blas, ttk = row(ts)
        print(f"| {f} | {n} | {fmt(s1)} | {fmt(s10)} | {fmt(dnn)} | {fmt(blas)} | {fmt(ttk, 0)}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
