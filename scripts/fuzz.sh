#!/bin/sh
# Builds the libFuzzer targets (fuzz/) with clang-19, ASan and UBSan in
# build-fuzz/ and runs each for SECONDS (default 60) on one core, from its
# seed corpus (fuzz/corpus/T) plus what earlier runs found
# (build-fuzz/corpus/T). Prints executions and coverage per target. A crash
# stops with exit 1 and names the input: fix the bug, then copy the input
# into fuzz/regress/T/ (ctest replays it from then on).
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   targets: parse api model cache
# `make fuzz` runs every target for FUZZ_SECONDS (default 600); `make test`
# runs each for 15 s.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-parse api model cache}
out=${FUZZ_BUILD:-build-fuzz}
cc=$(command -v clang-19 || true)
if [ -z "$cc" ]; then
  echo "fuzz: clang-19 is not installed (scripts/deps.sh installs it)" >&2
  exit 2
fi
CC=$cc cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTLM_FUZZ=ON \
  -DTLM_SANITIZE=address,undefined -DTLM_BUILD_BENCH=OFF >/dev/null
tgts=""
for t in $targets; do tgts="$tgts fuzz_$t"; done
# shellcheck disable=SC2086
cmake --build "$out" -j"$(nproc)" --target $tgts
status=0
for t in $targets; do
  mkdir -p "$out/corpus/$t" "$out/crashes/$t"
  log="$out/fuzz_$t.log"
  # -timeout: an input running over 25 s is a hang; -rss_limit_mb: a leak
  # or an allocation the checks should have refused
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$out/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=25 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$out/crashes/$t/" \
      "$out/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    res=ok
  else
    res=FAILED
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  echo "fuzz_$t: $res, ${execs:-?} executions in ${secs} s, coverage ${cov:-?} edges"
  if [ $res = FAILED ]; then
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5
    echo "  log: $log; copy the input into fuzz/regress/$t/ once fixed"
  fi
done
exit $status
