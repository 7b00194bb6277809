#!/bin/sh
# `tlm train` reproduces a model bit for bit from the same records and seed,
# and a different seed gives a different model; `tlm quantize` likewise.
# A local-search round (`collect --mutate`) adds only schedules not measured
# before, measures the rule, and resumes without measuring anything twice.
# A verification round (`collect --verify`) re-times the rule and each
# task's fastest schedules, resumes, and training takes its targets from it
# (from the latest round, or averaged over two rounds with --targets mean).
# Usage: train_repro.sh TLM_BINARY SHARED_DIR
set -eu
tlm=$1
shared=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TLM_CACHE_DIR=none
"$tlm" collect --shared "$shared" --out "$tmp/r.jsonl.gz" --max-tasks 6 --schedules 4 \
  --min-time-ms 1 2>/dev/null
for run in a b; do
  "$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/$run.ckpt" --steps 6 --pretrain 4 \
    --batch 4 --layers 1 --heads 2 --width 32 --seed 5 2>"$tmp/$run.trainlog"
  "$tlm" quantize "$tmp/$run.ckpt" "$tmp/$run.tlmq" 2>/dev/null
done
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/c.ckpt" --steps 6 --pretrain 4 \
  --batch 4 --layers 1 --heads 2 --width 32 --seed 6 2>/dev/null
fail=0
"$tlm" collect --shared "$shared" --out "$tmp/r.jsonl.gz" --max-tasks 6 --mutate 3 --round 1 \
  --min-time-ms 1 2>/dev/null || { echo "collect --mutate failed"; fail=$((fail + 1)); }
"$tlm" collect --shared "$shared" --out "$tmp/r.jsonl.gz" --max-tasks 6 --mutate 3 --round 1 \
  --min-time-ms 1 2>"$tmp/resume.log" || { echo "collect --mutate resume failed"; fail=$((fail + 1)); }
grep -q "collect: 0 schedules measured" "$tmp/resume.log" ||
  { echo "a finished round measured again"; fail=$((fail + 1)); }
gzip -dc "$tmp/r.jsonl.gz" > "$tmp/r.jsonl"
nmut=$(grep -c '"kind":"mutant"' "$tmp/r.jsonl" || true)
[ "$nmut" -ge 6 ] || { echo "only $nmut mutants"; fail=$((fail + 1)); }
# every mutant's (task, schedule) occurs once in the whole file
dups=$(sed -n 's/.*"task":"\([^"]*\)".*"kind":"\([a-z]*\)".*"sched":\(\[[^]]*\]\).*/\2 \1 \3/p' "$tmp/r.jsonl" |
  awk '{k = substr($0, index($0, " ") + 1); n[k]++; if ($1 == "mutant") m[k] = 1}
       END {d = 0; for (k in m) if (n[k] > 1) d++; print d}')
[ "$dups" = 0 ] || { echo "$dups mutants repeat a measured schedule"; fail=$((fail + 1)); }
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/d.ckpt" --steps 2 --batch 4 --layers 1 \
  --heads 2 --width 32 2>/dev/null || { echo "train on mutated records failed"; fail=$((fail + 1)); }
"$tlm" collect --shared "$shared" --out "$tmp/r.jsonl.gz" --max-tasks 6 --verify 2 --round 1 \
  --min-time-ms 1 2>/dev/null || { echo "collect --verify failed"; fail=$((fail + 1)); }
"$tlm" collect --shared "$shared" --out "$tmp/r.jsonl.gz" --max-tasks 6 --verify 2 --round 1 \
  --min-time-ms 1 2>"$tmp/vresume.log" || { echo "collect --verify resume failed"; fail=$((fail + 1)); }
grep -q "collect: 0 schedules measured" "$tmp/vresume.log" ||
  { echo "a finished verification round measured again"; fail=$((fail + 1)); }
gzip -dc "$tmp/r.jsonl.gz" > "$tmp/r.jsonl"
nver=$(grep -c '"kind":"verify"' "$tmp/r.jsonl" || true)
nrule=$(grep '"kind":"verify"' "$tmp/r.jsonl" | grep -c '"rule":true' || true)
ntask=$(grep '"kind":"verify"' "$tmp/r.jsonl" | sed 's/.*"task":"\([^"]*\)".*/\1/' | sort -u | wc -l)
# each verified task: its rule once, plus up to 2 others
[ "$nrule" -ge 1 ] && [ "$nrule" = "$ntask" ] && [ "$nver" -gt "$nrule" ] && [ "$nver" -le $((3 * nrule)) ] ||
  { echo "verify: $nver records, $nrule rules, $ntask tasks"; fail=$((fail + 1)); }
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/e.ckpt" --steps 2 --batch 4 --layers 1 \
  --heads 2 --width 32 2>"$tmp/vtrain.log" || { echo "train on verified records failed"; fail=$((fail + 1)); }
grep -q "^tlm train: $ntask tasks' targets from a verification round" "$tmp/vtrain.log" ||
  { echo "training ignored the verification round"; cat "$tmp/vtrain.log"; fail=$((fail + 1)); }
"$tlm" collect --shared "$shared" --out "$tmp/r.jsonl.gz" --max-tasks 6 --verify 2 --round 2 \
  --min-time-ms 1 2>/dev/null || { echo "collect --verify round 2 failed"; fail=$((fail + 1)); }
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/f.ckpt" --steps 2 --batch 4 --layers 1 \
  --heads 2 --width 32 --targets mean 2>"$tmp/mtrain.log" &&
  grep -q "^tlm train: $ntask tasks' targets from a verification round" "$tmp/mtrain.log" ||
  { echo "train --targets mean over two rounds failed"; cat "$tmp/mtrain.log"; fail=$((fail + 1)); }
# tlm bound: the winner of round 1 timed again in round 2, over every task
"$tlm" bound --records "$tmp/r.jsonl.gz" >"$tmp/bound.txt" 2>&1 &&
  grep -qE "^ +1 +2 +$ntask +[0-9]+ \( *[0-9]+%\)" "$tmp/bound.txt" ||
  { echo "tlm bound: no line for rounds 1 and 2 over $ntask tasks"; cat "$tmp/bound.txt"; fail=$((fail + 1)); }
# target picking among a task's equals, and pretraining on scaled copies of
# the tasks: both run, say what they did, and stay deterministic
for run in g h; do
  "$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/$run.ckpt" --steps 2 --pretrain 2 --batch 4 \
    --layers 1 --heads 2 --width 32 --targets mean --equal-within 0.5 --rule-margin 0 \
    --pick consensus --pretrain-variants 2 2>"$tmp/$run.log" ||
    { echo "train --pick consensus failed"; cat "$tmp/$run.log"; fail=$((fail + 1)); }
done
grep -q "targets moved to an equal within 50.0% with more agreement with its family" "$tmp/g.log" ||
  { echo "--pick consensus said nothing"; cat "$tmp/g.log"; fail=$((fail + 1)); }
pre0=$(sed -n 's/.*(\([0-9]*\) pretraining sentences).*/\1/p' "$tmp/a.trainlog")
pre1=$(sed -n 's/.*(\([0-9]*\) pretraining sentences).*/\1/p' "$tmp/g.log")
[ -n "$pre1" ] && [ "$pre1" -gt "${pre0:-0}" ] ||
  { echo "--pretrain-variants added no sentences ($pre0 -> $pre1)"; fail=$((fail + 1)); }
cmp -s "$tmp/g.ckpt" "$tmp/h.ckpt" || { echo "--pick consensus is not deterministic"; fail=$((fail + 1)); }
# --skip-family leaves out one family's tasks
fam1=$(gzip -dc "$tmp/r.jsonl.gz" | sed -n 's/.*"family":"\([^"]*\)".*/\1/p' |
  grep -v -E '^(gpt2-355m:|benchdnn:transformer|benchdnn:gptj-2016|benchdnn-conv:efficientdet|pool:mobilenet)' | head -1)
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/s.ckpt" --steps 1 --batch 4 --layers 1 \
  --heads 2 --width 32 --skip-family "$fam1" 2>"$tmp/skip.log" || true
n0=$(sed -n 's/^tlm train: \([0-9]*\) training tasks.*/\1/p' "$tmp/a.trainlog")
n1=$(sed -n 's/^tlm train: \([0-9]*\) training tasks.*/\1/p' "$tmp/skip.log")
[ -n "$n0" ] && [ -n "$n1" ] && [ "$n1" -lt "$n0" ] ||
  { echo "--skip-family $fam1 kept $n1 of $n0 tasks"; fail=$((fail + 1)); }
# --rule-targets drop leaves out the tasks taught the rule; --good teaches
# up to K schedules per task that beat the rule by the factor
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/d.ckpt" --steps 1 --batch 4 --layers 1 \
  --heads 2 --width 32 --rule-margin 0.5 --rule-targets drop 2>"$tmp/drop.log" || true
nd=$(sed -n 's/^tlm train: --rule-targets drop: \([0-9]*\) tasks taught nothing.*/\1/p' "$tmp/drop.log")
n2=$(sed -n 's/^tlm train: \([0-9]*\) training tasks.*/\1/p' "$tmp/drop.log")
[ -n "$nd" ] && [ -n "$n2" ] && [ -n "$n0" ] && [ "$nd" -ge 1 ] && [ $((n2 + nd)) -eq "$n0" ] ||
  { echo "--rule-targets drop: $nd dropped, $n2 of $n0 kept"; cat "$tmp/drop.log"; fail=$((fail + 1)); }
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/k.ckpt" --steps 1 --batch 4 --layers 1 \
  --heads 2 --width 32 --good 0.01 --good-per-task 2 2>"$tmp/good.log" ||
  { echo "train --good failed"; cat "$tmp/good.log"; fail=$((fail + 1)); }
gs=$(sed -n 's/^tlm train: --good 0.01: \([0-9]*\) sentences on \([0-9]*\) tasks.*/\1 \2/p' "$tmp/good.log")
# (how many tasks have a schedule 1% faster than the rule depends on the
# timings and on how good the rule is; zero is possible, the bounds are not)
[ -n "$gs" ] && [ "${gs% *}" -ge "${gs#* }" ] && [ "${gs% *}" -le $((2 * ${gs#* })) ] &&
  [ "${gs#* }" -le "$n0" ] ||
  { echo "--good 0.01 --good-per-task 2: sentences and tasks '$gs'"; cat "$tmp/good.log"; fail=$((fail + 1)); }
# synthetic models: hundreds of training tasks, none the same as a held-out one
"$tlm" collect --shared "$shared" --list --synthetic 8 --synthetic-conv 6 >"$tmp/list.txt" 2>/dev/null ||
  { echo "collect --list --synthetic failed"; fail=$((fail + 1)); }
clash=$(awk '{f = $1; $1 = ""; t = substr($0, 2)
  if (f ~ /^synth/) s[t] = 1
  else if (f ~ /^(gpt2-355m:|benchdnn:transformer|benchdnn:gptj-2016|benchdnn-conv:efficientdet|pool:mobilenet)/) h[t] = 1}
  END {n = 0; for (t in s) if (t in h) n++; print length(s), n}' "$tmp/list.txt")
[ "${clash% *}" -ge 600 ] && [ "${clash#* }" = 0 ] ||
  { echo "synthetic tasks, clashes with held-out ones: $clash"; fail=$((fail + 1)); }
nconv=$(grep -c '^synthconv[0-9]*-r[0-9]*:\(stem\|expand\|dw\|se\|project\) ' "$tmp/list.txt")
[ "$nconv" -ge 200 ] || { echo "only $nconv synthetic convolutions"; fail=$((fail + 1)); }
# records of two ISAs (TLM_ISA=avx2 on a wider host, into a second file):
# one model over both, each sentence on its own ISA's target, and the
# model says it has seen both
host_isa=$("$tlm" run 1x8:8x8 --threads 1 --min-time 0.01 2>/dev/null | sed -n 's/.*; host \([a-z0-9]*\);.*/\1/p' | head -1)
if [ "$host_isa" = avx512 ]; then
  TLM_ISA=avx2 "$tlm" collect --shared "$shared" --out "$tmp/r2.jsonl.gz" --max-tasks 3 --schedules 2 \
    --min-time-ms 1 2>/dev/null || { echo "collect under TLM_ISA=avx2 failed"; fail=$((fail + 1)); }
  "$tlm" train --records "$tmp/r.jsonl.gz,$tmp/r2.jsonl.gz" --out "$tmp/x.ckpt" --steps 1 --batch 4 \
    --layers 1 --heads 2 --width 32 2>"$tmp/xisa.log" &&
    grep -q "^tlm train: sentences on the targets of avx2,avx512" "$tmp/xisa.log" ||
    { echo "training on two ISAs' records"; cat "$tmp/xisa.log"; fail=$((fail + 1)); }
fi
# records that never timed the current rule (its records dropped, as if
# measured under an older rule) cannot say whether their best beats it:
# skipped by default, taught their best or the rule when asked
gzip -dc "$tmp/r.jsonl.gz" | grep -v '"kind":"default"' | grep -v '"rule":true' | gzip >"$tmp/u.jsonl.gz"
for mode in skip best rule; do
  "$tlm" train --records "$tmp/u.jsonl.gz" --out "$tmp/u.ckpt" --steps 1 --batch 4 --layers 1 \
    --heads 2 --width 32 --unmeasured-rule $mode 2>"$tmp/u_$mode.log" || true
done
us=$(sed -n 's/.*rule not measured on \([0-9]*\) (skipped).*/\1/p' "$tmp/u_skip.log")
ns=$(sed -n 's/^tlm train: \([0-9]*\) training tasks.*/\1/p' "$tmp/u_skip.log")
nb=$(sed -n 's/^tlm train: \([0-9]*\) training tasks.*/\1/p' "$tmp/u_best.log")
nr=$(sed -n 's/^tlm train: \([0-9]*\) training tasks.*/\1/p' "$tmp/u_rule.log")
[ -n "$us" ] && [ "$us" -ge 1 ] && [ -n "$ns" ] && [ "$nb" = $((ns + us)) ] && [ "$nr" = "$nb" ] ||
  { echo "--unmeasured-rule: $us unmeasured, tasks $ns / $nb / $nr"; cat "$tmp/u_skip.log"; fail=$((fail + 1)); }
# quantize --only-hw keeps a prompt the checkpoint has, refuses one it has not
hw=$(sed -n 's/^tlm train: hardware prompt //p' "$tmp/a.trainlog" | head -1)
"$tlm" quantize "$tmp/a.ckpt" "$tmp/o.tlmq" --only-hw "$hw" 2>"$tmp/only.log" &&
  grep -q "1 hardware prompts" "$tmp/only.log" ||
  { echo "quantize --only-hw '$hw'"; cat "$tmp/only.log"; fail=$((fail + 1)); }
rc=0
"$tlm" quantize "$tmp/a.ckpt" "$tmp/p.tlmq" --only-hw "isa:none" 2>/dev/null || rc=$?
[ "$rc" = 2 ] && [ ! -e "$tmp/p.tlmq" ] || { echo "quantize --only-hw of an unknown prompt: rc $rc"; fail=$((fail + 1)); }
cmp -s "$tmp/a.ckpt" "$tmp/b.ckpt" || { echo "same seed, different checkpoints"; fail=$((fail + 1)); }
cmp -s "$tmp/a.tlmq" "$tmp/b.tlmq" || { echo "same seed, different int8 models"; fail=$((fail + 1)); }
cmp -s "$tmp/a.ckpt" "$tmp/c.ckpt" && { echo "different seeds, same checkpoint"; fail=$((fail + 1)); }
echo "train_repro: $((30 - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
