#!/bin/sh
# `tlm bench kernels` run in parts: 3 small matmuls from two files (a line
# repeated in one, a task in both) run once each with their counts; a run
# stopped after its first task (--max-tasks 1) is continued by --resume,
# which keeps that task's entry and measures the other two; a resume with
# other parameters, and one of a truncated or hand-broken report, are
# refused with exit 2 and leave the report as it was; --max-gflop skips a
# task (in the report, not in the summary) and --search-budget-s stops the
# search early and says so.
# Usage: bench_kernels_cli.sh TLM_BINARY
set -eu
tlm=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '# small matmuls\n7x33:33x129\n16x40x40:16x40x64\n7x33:33x129\n' > "$tmp/a"
printf '16x40x40:16x40x64\n1x17:17x5\n' > "$tmp/b"
export TLM_CACHE_DIR=none
bench() { "$tlm" bench kernels --trials 8 --rounds 1 --threads 1 "$@"; }
fail() { echo "bench_kernels_cli: $*"; exit 1; }
# a field of a task's entry (the report is printed one field a line, the
# task's text first): field TASK_PREFIX NAME FILE
field() {
  awk -v t="\"task\":[[:space:]]*\"$1" -v f="\"$2\":" '
    $0 ~ t { in_task = 1; next }
    in_task && /"task":/ { exit }
    in_task && $0 ~ f { sub(/.*":[[:space:]]*/, ""); sub(/,$/, ""); print; exit }' "$3"
}

bench --list "$tmp/a" "$tmp/b" > "$tmp/list"
grep -q '^3 tasks from 5 lines' "$tmp/list" || { cat "$tmp/list"; fail "--list: not 3 tasks from 5 lines"; }

bench --json "$tmp/r.json" --max-tasks 1 "$tmp/a" "$tmp/b" > "$tmp/out1" ||
  { cat "$tmp/out1"; fail "first part failed"; }
grep -q '"tasks_done":[[:space:]]*1,' "$tmp/r.json" || fail "first part: not 1 task done"
grep -q '"complete":[[:space:]]*false' "$tmp/r.json" || fail "first part: complete"
first_ns=$(field 7x33:33x129 median_ns "$tmp/r.json")
[ -n "$first_ns" ] || fail "first part: no time for 7x33:33x129"

bench --json "$tmp/r.json" --resume "$tmp/a" "$tmp/b" > "$tmp/out2" ||
  { cat "$tmp/out2"; fail "resumed part failed"; }
grep -q 'resumed .*: 1 of 3 tasks done' "$tmp/out2" || { cat "$tmp/out2"; fail "not resumed"; }
grep -q '"tasks_done":[[:space:]]*3,' "$tmp/r.json" || fail "resumed: not 3 tasks done"
grep -q '"complete":[[:space:]]*true' "$tmp/r.json" || fail "resumed: not complete"
grep -q '"tasks":[[:space:]]*3,' "$tmp/r.json" || fail "resumed: the summary is not over 3 tasks"
# every task says whose kernels failed the reference check (none here)
[ "$(grep -c '"wrong_contenders":[[:space:]]*\[\]' "$tmp/r.json")" -eq 3 ] ||
  fail "not 3 tasks with an empty wrong_contenders"
for t in 7x33:33x129 16x40x40:16x40x64 1x17:17x5; do
  n=$(grep -c "\"task\":[[:space:]]*\"$t " "$tmp/r.json")
  [ "$n" -eq 1 ] || fail "resumed: $t in the report $n times"
done
[ "$(field 7x33:33x129 count "$tmp/r.json")" = 2 ] || fail "7x33:33x129 (twice in a): count not 2"
[ "$(field 16x40x40:16x40x64 count "$tmp/r.json")" = 2 ] || fail "16x40x40:16x40x64 (a and b): count not 2"
[ "$(field 1x17:17x5 count "$tmp/r.json")" = 1 ] || fail "1x17:17x5: count not 1"
[ "$(field 7x33:33x129 median_ns "$tmp/r.json")" = "$first_ns" ] ||
  fail "the first part's task was measured again"
grep -c '"tasks_measured"' "$tmp/r.json" | grep -qx 2 || fail "not 2 sessions"

# refused: other parameters, a truncated report, a broken entry; the report untouched
cp "$tmp/r.json" "$tmp/keep.json"
refused() { # refused WHY OUTPUT_PATTERN ARGS...
  why=$1 pat=$2
  shift 2
  set +e
  bench "$@" > "$tmp/out3" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { cat "$tmp/out3"; fail "$why: exit $rc, want 2"; }
  grep -q "$pat" "$tmp/out3" || { cat "$tmp/out3"; fail "$why: no message like '$pat'"; }
}
refused "other trials" 'run with search_trials 8, this run has 9' --trials 9 --json "$tmp/r.json" --resume "$tmp/a" "$tmp/b"
refused "other seed" 'run with seed' --seed 5 --json "$tmp/r.json" --resume "$tmp/a" "$tmp/b"
refused "other files" 'run with files' --json "$tmp/r.json" --resume "$tmp/b" "$tmp/a"
cmp -s "$tmp/r.json" "$tmp/keep.json" || fail "a refused resume changed the report"
head -c 1500 "$tmp/keep.json" > "$tmp/cut.json"
refused "truncated" 'not valid JSON' --json "$tmp/cut.json" --resume "$tmp/a" "$tmp/b"
cmp -s "$tmp/cut.json" "$tmp/r.json" && fail "the truncated report was rewritten"
sed 's/"median_ns":[[:space:]]*[0-9.e+]*/"median_ns": "fast"/' "$tmp/keep.json" > "$tmp/bad.json"
refused "broken entry" 'no valid tlm1.median_ns' --json "$tmp/bad.json" --resume "$tmp/a" "$tmp/b"
refused "no --json" 'needs --json' --resume "$tmp/a"

# --max-gflop skips 16x40x40:16x40x64 (3.3 MFLOP); a 0.2 s budget stops the
# search long before 100000 trials
bench --trials 100000 --search-budget-s 0.2 --max-gflop 0.001 --json "$tmp/s.json" "$tmp/a" "$tmp/b" \
  > "$tmp/out4" || { cat "$tmp/out4"; fail "budgeted run failed"; }
field 16x40x40:16x40x64 skipped "$tmp/s.json" | grep -q 'above --max-gflop' ||
  fail "16x40x40:16x40x64 not skipped"
grep -q '"tasks_skipped":[[:space:]]*1,' "$tmp/s.json" || fail "summary: not 1 skipped"
[ "$(field 1x17:17x5 search_budget_hit "$tmp/s.json")" = true ] || fail "1x17:17x5: budget not hit"
grep -q 'search budget hit on 2 tasks' "$tmp/out4" || { cat "$tmp/out4"; fail "no budget line"; }
echo "bench_kernels_cli: ok"
