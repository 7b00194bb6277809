#!/bin/sh
# The pipeline from AVX2 records to one model over both ISAs (issue #16),
# step by step and resumable: each step skips what is already done, so a
# session can run it again after being stopped.
#
#   1. collect   TLM_ISA=avx2 random pass into data/records_avx2.jsonl.gz
#   2. verify    TLM_ISA=avx2 verification round 1 (rule + 7 fastest, side by side)
#   3. train     one checkpoint on data/records.jsonl.gz,data/records_avx2.jsonl.gz
#   4. quantize  -> models/candidate.tlmq
#   5. gate      held-out eval under both ISAs, bench_matmul and bench_conv under
#                both ISAs with the candidate (TLM_MODEL), printed side by side
#
# Usage: scripts/two_isa_model.sh [STEP...]   (default: every step in order)
# Needs an AVX-512 host (it collects AVX2 by narrowing) and build/ built.
# Long: collection hours, verification ~1 h, training ~15 min on 2 cores.
set -eu
cd "$(dirname "$0")/.."
tlm=build/tools/tlm
shared=${SHARED:-../shared}
rec=data/records.jsonl.gz
rec2=data/records_avx2.jsonl.gz
ckpt=${CKPT:-/tmp/tlm_two_isa.ckpt}
cand=models/candidate.tlmq
steps=${*:-collect verify train quantize gate}
for step in $steps; do
  case $step in
  collect)
    TLM_ISA=avx2 nice -n 10 "$tlm" collect --shared "$shared" --out "$rec2" --schedules 16 ;;
  verify)
    TLM_ISA=avx2 nice -n 10 "$tlm" collect --shared "$shared" --out "$rec2" --verify 7 --round 1 ;;
  train)
    "$tlm" train --records "$rec,$rec2" --out "$ckpt" --steps 1500 --pretrain 300 --threads 2 \
      --targets mean --seed 1 --shared "$shared" ;;
  quantize)
    "$tlm" quantize "$ckpt" "$cand" ;;
  gate)
    W=$shared/workloads/benchdnn/conv
    for isa in native avx2; do
      for m in "$cand" default; do
        if [ "$m" = default ]; then unset TLM_MODEL; else export TLM_MODEL="$m"; fi
        echo "== $isa, model $m"
        TLM_ISA=$isa "$tlm" eval --heldout --k 0 --random 0 --shared "$shared" 2>&1 | tail -14
        TLM_ISA=$isa build/bench/bench_matmul --threads 1 --batches 9 --problems \
          1x768:768x768,32x768:768x768,128x768:768x768,512x768:768x3072,128x4096:4096x4096 2>&1 | tail -7
        TLM_ISA=$isa build/bench/bench_conv --threads 1 --batches 5 --layout nhwc \
          "$W/shapes_resnet_50" "$W/shapes_mobilenet" "$W/shapes_mobilenet_dw" 2>&1 | grep geomean
      done
    done
    unset TLM_MODEL ;;
  *)
    echo "unknown step '$step' (collect verify train quantize gate)" >&2
    exit 2 ;;
  esac
done
