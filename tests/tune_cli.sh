#!/bin/sh
# `tlm tune` end to end: shapes of a benchdnn-style file (odd extents, a
# convolution) are tuned into a private disk cache; every task is stored as
# a measured plan; `tlm run --check` of a tuned shape then takes its plan
# from that cache and passes the reference check; bad usage exits 2 and a
# missing disk cache is refused; --heldout tunes the held-out families'
# tasks (a sample of 2, measured only) and reports the speed against the
# rule's schedule; `tlm run --compile-repeats` prints
# the warm compile time.
# Usage: tune_cli.sh TLM_BINARY SHARED_DIR
set -eu
tlm=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '# odd shapes\n7x33:33x129\n1x17:17x5\nmb1ic3ih11oc8oh11kh3ph1\n' > "$tmp/shapes"
export TLM_CACHE_DIR="$tmp/cache"
"$tlm" tune --k 3 --threads 1 --rounds 2 --json "$tmp/t.json" "$tmp/shapes" > "$tmp/out"
grep -q '"tasks_tuned":[[:space:]]*3' "$tmp/t.json" || { cat "$tmp/out"; echo "tune: not 3 tasks"; exit 1; }
n=$(grep -l '"measured":true' "$tmp/cache/plans/"*.json | wc -l)
[ "$n" -eq 3 ] || { echo "tune: $n measured plans, want 3"; exit 1; }
TLM_VERBOSE=3 "$tlm" run 7x33:33x129 --check --threads 1 --min-time 0.01 > "$tmp/run" 2>&1 ||
  { cat "$tmp/run"; echo "run of a tuned shape failed its check"; exit 1; }
# the plan came from the disk cache, and it is the schedule tune stored
grep -q 'new plan 7x33:33x129.*schedule([a-z]*, disk)' "$tmp/run" ||
  { cat "$tmp/run"; echo "run did not take its plan from the disk cache"; exit 1; }
# (the JSON is printed one field a line: the schedule follows its task)
want=$(awk '/"task":[[:space:]]*"7x33:33x129/ { t = 1 }
            t && /"schedule":/ { sub(/.*"schedule":[[:space:]]*"/, ""); sub(/".*/, ""); print; exit }' "$tmp/t.json")
[ -n "$want" ] && grep -qF "schedule     $want" "$tmp/run" ||
  { cat "$tmp/run"; echo "run's schedule is not the tuned one ($want)"; exit 1; }
# --from-cache: the user's own shapes (here a transposed-B matmul and a
# convolution run by `tlm run`) are tuned from their cached plans, once
export TLM_CACHE_DIR="$tmp/cache2"
"$tlm" run 9x40:40x23 --threads 1 --min-time 0.01 > /dev/null
"$tlm" run mb1ic5ih9oc7oh9kh3ph1 --threads 1 --min-time 0.01 > /dev/null
"$tlm" tune --from-cache --k 3 --threads 1 --rounds 2 --json "$tmp/c.json" > "$tmp/out2"
grep -q '"tasks_tuned":[[:space:]]*2' "$tmp/c.json" || { cat "$tmp/out2"; echo "tune --from-cache: not 2 tasks"; exit 1; }
n=$(grep -l '"measured":true' "$tmp/cache2/plans/"*.json | wc -l)
[ "$n" -eq 2 ] || { echo "tune --from-cache: $n measured plans, want 2"; exit 1; }
"$tlm" tune --from-cache --k 3 --threads 1 --rounds 2 > "$tmp/out3"
grep -q "2 measured already" "$tmp/out3" || { cat "$tmp/out3"; echo "tune --from-cache tuned again"; exit 1; }
# plans of another target (here: another thread count, part of every key)
# are never taken for this runtime's
"$tlm" tune --from-cache --k 3 --threads 2 --rounds 2 --dry-run > "$tmp/out4"
grep -q "2 of another target" "$tmp/out4" || { cat "$tmp/out4"; echo "tune --from-cache took another target's plans"; exit 1; }
TLM_CACHE_DIR=none "$tlm" tune --heldout --shared "$2" --max-tasks 2 --k 2 --threads 1 --rounds 1 \
  --dry-run --json "$tmp/h.json" > "$tmp/out5"
grep -q '"tasks_tuned":[[:space:]]*2' "$tmp/h.json" || { cat "$tmp/out5"; echo "tune --heldout: not 2 tasks"; exit 1; }
grep -q '"changed_percent"' "$tmp/h.json" || { echo "tune --heldout: no changed_percent"; exit 1; }
# the speed against the rule's schedule (#17's figure), per task and in all
grep -q '"geomean_speedup_vs_rule"' "$tmp/h.json" && grep -q '"faster_than_rule_percent"' "$tmp/h.json" &&
  [ "$(grep -c '"speedup_vs_rule"' "$tmp/h.json")" -eq 2 ] && grep -q "against the rule's schedule" "$tmp/out5" ||
  { cat "$tmp/out5"; echo "tune --heldout: no speed against the rule"; exit 1; }
# and the confirmed figure (the kept kernel and the rule's timed again)
grep -q '"confirmed_geomean_speedup_vs_rule"' "$tmp/h.json" &&
  [ "$(grep -c '"confirmed_speedup_vs_rule"' "$tmp/h.json")" -eq 2 ] &&
  [ "$(grep -c '"candidate_ns"' "$tmp/h.json")" -eq 2 ] && grep -q "^confirmed" "$tmp/out5" ||
  { cat "$tmp/out5"; echo "tune --heldout: no confirmed speed against the rule"; exit 1; }
# tlm run --compile-repeats: the warm compiles' median and phases, for a
# matmul and a convolution
for d in 7x33:33x129 mb1ic3ih11oc8oh11kh3ph1; do
  TLM_CACHE_DIR=none "$tlm" run "$d" --threads 1 --min-time 0.01 --compile-repeats 2 > "$tmp/rep" 2>&1 &&
    grep -q 'compile_warm_ms [0-9.]* (median of 2, .*object emission' "$tmp/rep" ||
    { cat "$tmp/rep"; echo "run --compile-repeats: no warm compile line for $d"; exit 1; }
done
export TLM_CACHE_DIR="$tmp/cache"
set +e
"$tlm" tune --k 0 "$tmp/shapes" > /dev/null 2>&1
[ $? -eq 2 ] || { echo "tune --k 0: want exit 2"; exit 1; }
TLM_CACHE_DIR=none "$tlm" tune --k 2 "$tmp/shapes" > /dev/null 2>&1
[ $? -eq 1 ] || { echo "tune without a disk cache: want exit 1"; exit 1; }
echo "tune_cli: passed"
