#!/bin/bash
# Rule A/B: for each problem, the schedule the rule of build OLD picks and the
# one of build NEW, timed side by side in one process of NEW
# (`tlm run P --schedule OLD --vs NEW`; speed A/B is NEW's time over OLD's).
# Usage: scripts/schedule_ab.sh OLD_BUILD NEW_BUILD native|avx2 THREADS PROBLEM...
# e.g. scripts/schedule_ab.sh build-rule13 build avx2 2 9x4096:4096x50400 12x768:768x3072
# Pin it (taskset) for one thread; TLM_CACHE_DIR=none is set here. AB_ARGS: more
# arguments of tlm run for every problem (e.g. AB_ARGS='--layout nhwc' for convolutions).
set -eu
old=$1 new=$2 isa=$3 t=$4
shift 4
env_isa=()
[ "$isa" = avx2 ] && env_isa=(TLM_ISA=avx2)
sched() { env "${env_isa[@]}" TLM_CACHE_DIR=none "$1/tools/tlm" run "$2" ${AB_ARGS:-} --threads "$t" --min-time 0.01 2>&1 |
          sed -n 's/^schedule  *//p'; }
for p in "$@"; do
  o=$(sched "$old" "$p")
  n=$(sched "$new" "$p")
  if [ -z "$o" ] || [ -z "$n" ]; then echo "$isa t$t $p: no schedule"; continue; fi
  if [ "$o" = "$n" ]; then echo "$isa t$t $p same"; continue; fi
  env "${env_isa[@]}" TLM_CACHE_DIR=none "$new/tools/tlm" run "$p" ${AB_ARGS:-} --threads "$t" --min-time 0.4 \
    --schedule "$o" --vs "$n" 2>&1 | sed -n "s/^speed A\/B */$isa t$t $p /p"
done
