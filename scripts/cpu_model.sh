#!/bin/sh
# Records of this CPU and one model over every CPU's records (issue #16),
# step by step and resumable (each collection step skips finished tasks):
#
#   1. verify   verification round 1 on this CPU, natively (known schedules
#               from data/records.jsonl.gz) into data/records_$TAG.jsonl.gz,
#               and under TLM_ISA=avx2 (known: data/records_avx2.jsonl.gz)
#               into data/records_${TAG}_avx2.jsonl.gz when the host runs
#               AVX-512
#   1b. reverify  after a rule change: the current rule and the 5 fastest
#               of this CPU's own records re-timed side by side (round
#               $ROUND, default 2), both ISAs as above
#   2. train    one checkpoint on every data/records*.jsonl.gz: each record
#               trains under the hardware prompt of the machine it was
#               measured on (its "hw" text), and the model lists them all
#   3. quantize -> models/candidate.tlmq
#   4. gate     held-out head-to-head with the rule (tlm eval) natively and
#               under avx2, with the candidate (TLM_MODEL), decoding plain
#               greedy (--margin 0): the summary also gives selective
#               decoding at the default margin (what tlm_run does)
#
# Usage: TAG=xeon scripts/cpu_model.sh [STEP...]   (default: every step)
# TAG names this CPU in the records' file names (the records themselves
# carry the full hw text). Time on 2 cores: about 10 min per verification
# round, 15-25 min of training, 4 min of gate.
set -eu
cd "$(dirname "$0")/.."
tlm=build/tools/tlm
shared=${SHARED:-../shared}
tag=${TAG:?TAG must name this CPU, e.g. TAG=xeon}
ckpt=${CKPT:-/tmp/tlm_cpu_model.ckpt}
cand=models/candidate.tlmq
round=${ROUND:-2}
steps=${*:-verify train quantize gate}
for step in $steps; do
  case $step in
  verify)
    nice -n 10 "$tlm" collect --shared "$shared" --known data/records.jsonl.gz \
      --out "data/records_$tag.jsonl.gz" --verify 7 --round 1
    if grep -q avx512f /proc/cpuinfo; then
      TLM_ISA=avx2 nice -n 10 "$tlm" collect --shared "$shared" --known data/records_avx2.jsonl.gz \
        --out "data/records_${tag}_avx2.jsonl.gz" --verify 7 --round 1
    fi ;;
  reverify)
    nice -n 10 "$tlm" collect --shared "$shared" --out "data/records_$tag.jsonl.gz" --verify 5 --round "$round"
    if grep -q avx512f /proc/cpuinfo; then
      TLM_ISA=avx2 nice -n 10 "$tlm" collect --shared "$shared" \
        --out "data/records_${tag}_avx2.jsonl.gz" --verify 5 --round "$round"
    fi ;;
  train)
    recs=$(ls data/records*.jsonl.gz | paste -sd, -)
    "$tlm" train --records "$recs" --out "$ckpt" --steps 1500 --pretrain 300 --threads 2 \
      --targets mean --seed 1 --shared "$shared" ;;
  quantize)
    "$tlm" quantize "$ckpt" "$cand" ;;
  gate)
    for isa in native avx2; do
      echo "== $isa, model $cand against the rule"
      TLM_CACHE_DIR=none TLM_MODEL="$cand" TLM_ISA=$isa "$tlm" eval --heldout --k 0 --random 0 \
        --margin 0 --shared "$shared" --json "/tmp/tlm_gate_$isa.json" 2>&1 | tail -24
    done ;;
  *)
    echo "unknown step '$step' (verify reverify train quantize gate)" >&2
    exit 2 ;;
  esac
done
