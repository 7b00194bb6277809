#!/bin/sh
# `tlm train` reproduces a model bit for bit from the same records and seed,
# and a different seed gives a different model; `tlm quantize` likewise.
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
    --batch 4 --layers 1 --heads 2 --width 32 --seed 5 2>/dev/null
  "$tlm" quantize "$tmp/$run.ckpt" "$tmp/$run.tlmq" 2>/dev/null
done
"$tlm" train --records "$tmp/r.jsonl.gz" --out "$tmp/c.ckpt" --steps 6 --pretrain 4 \
  --batch 4 --layers 1 --heads 2 --width 32 --seed 6 2>/dev/null
fail=0
cmp -s "$tmp/a.ckpt" "$tmp/b.ckpt" || { echo "same seed, different checkpoints"; fail=$((fail + 1)); }
cmp -s "$tmp/a.tlmq" "$tmp/b.tlmq" || { echo "same seed, different int8 models"; fail=$((fail + 1)); }
cmp -s "$tmp/a.ckpt" "$tmp/c.ckpt" && { echo "different seeds, same checkpoint"; fail=$((fail + 1)); }
echo "train_repro: $((3 - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
