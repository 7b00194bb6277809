#!/usr/bin/env python3
"""A code-generation change measured kernel by kernel: the same schedule
compiled by two builds of tlm, side by side.

  scripts/build_ab.py OLD_TLM NEW_TLM PAIRS DESC [DESC ...]

Each DESC is a `tlm run` problem (extra `tlm run` options after a `|`,
e.g. 'mb1ic128ih28oc128oh28kh3ph1|--layout nhwc'). Every pair runs both
builds' `tlm run DESC --threads 1 --min-time 0.3`, in turn, the order
swapped each pair (ABBA), on the CPU given by AB_CPU (default 1); the ratio
is new GFLOPS / old GFLOPS of the pair. Prints, per problem, the median
ratio with its min and max over the pairs and the median GFLOPS of each
build, and one JSON line per problem to AB_JSON when it is set. The
environment (TLM_ISA, TLM_CACHE_DIR=none) passes through.
"""
import json, os, statistics, subprocess, sys


def gflops(tlm, desc, extra):
    cpu = os.environ.get("AB_CPU", "1")
    cmd = ["taskset", "-c", cpu, tlm, "run", desc, "--threads", "1", "--min-time", "0.3"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("gflops"):
            return float(line.split()[1])
    raise SystemExit("no gflops from: " + " ".join(cmd))


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    old, new, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sink = open(os.environ["AB_JSON"], "a") if os.environ.get("AB_JSON") else None
    for spec in sys.argv[4:]:
        desc, _, rest = spec.partition("|")
        extra = rest.split()
        g_old, g_new, ratio = [], [], []
        for i in range(pairs):
            if i % 2 == 0:
                a = gflops(old, desc, extra); b = gflops(new, desc, extra)
            else:
                b = gflops(new, desc, extra); a = gflops(old, desc, extra)
            g_old.append(a); g_new.append(b); ratio.append(b / a)
        rec = {"problem": desc, "options": " ".join(extra), "isa": os.environ.get("TLM_ISA", "native"),
               "pairs": pairs, "ratio_new_over_old_median": round(statistics.median(ratio), 4),
               "ratio_min": round(min(ratio), 4), "ratio_max": round(max(ratio), 4),
               "old_gflops_median": statistics.median(g_old), "new_gflops_median": statistics.median(g_new)}
        print("%-40s %s new/old %.3f (min %.3f max %.3f)  old %.1f new %.1f GFLOPS" %
              (desc, rec["isa"], rec["ratio_new_over_old_median"], rec["ratio_min"], rec["ratio_max"],
               rec["old_gflops_median"], rec["new_gflops_median"]), flush=True)
        if sink:
            sink.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
