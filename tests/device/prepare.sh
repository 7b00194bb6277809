#!/bin/sh
# prepare.sh - on the build machine (no GPU needed): exports the GPU kernels
# the device check runs, as PTX for sm_90 with their manifest, into
# build/device/kernels (an ignored folder the `device` tool carries).
#
#   tests/device/prepare.sh [BUILD_DIR] [SHARED_DIR]
#
# Groups: "gpt2" (GPT-2-124M's projections at decode and prefill token
# counts: the rule's kernel each), "bert" (the shared BERT file, rule), the
# other shared matmul files (rule), then correctness sets with random schedules and epilogues: the shared
# 2-D shapes, the GPT-J harness at 32 tokens, odd built-in shapes.
set -eu
BUILD=${1:-build}
SHARED=${2:-../shared}
TLM="$BUILD/tools/tlm"
OUT="$BUILD/device/kernels"
MM="$SHARED/workloads/benchdnn/matmul"
[ -x "$TLM" ] || { echo "prepare.sh: $TLM not built (make build)" >&2; exit 2; }
rm -rf "$OUT"
mkdir -p "$OUT"
GPT2=""
for m in 1 128 512 2048; do
  GPT2="$GPT2 ${m}x768:768x2304 ${m}x768:768x768 ${m}x768:768x3072 ${m}x3072:3072x768"
done
# rule kernels for timing: the GPT-2 and BERT shapes first, then the
# other shared matmul files (timed until gpu_check's budget runs out)
"$TLM" gpu export --sm 90 --random 0 --out "$OUT/timed" --group gpt2 $GPT2 --group bert "$MM/shapes_bert" \
  --group transformer "$MM/shapes_transformer" --group 2d "$MM/shapes_2d" \
  --group gptj32 "$MM/harness_matmul_gpt-j_32-32_inf_lb_f32" \
  --group gptj2016 "$MM/harness_matmul_gpt-j_2016-32_inf_lb_f32"
# correctness: random schedules and epilogues, odd shapes
"$TLM" gpu export --sm 90 --random 3 --seed 7 --out "$OUT/checked" \
  "$MM/shapes_2d" "$MM/shapes_transformer" "$MM/harness_matmul_gpt-j_32-32_inf_lb_f32" \
  1x1:1x1 7x13:13x5 37x129:129x61 2x3x17:2x17x19 1x97:97x67 129x17:17x130 \
  3x1x31:1x31x7 5x300:300x3 2x2x5x9:2x2x9x11 1000x999:999x1001 \
  softmax:1x1 softmax:12x128 softmax:37x4097 softmax:2048x2048 layernorm:1x768 layernorm:128x768 \
  layernorm:5x1001 rmsnorm:1x4096 rmsnorm:33x4096 rmsnorm:7x13
python3 tests/device/gpu_check.py --kernels "$OUT/timed" --dry-run
python3 tests/device/gpu_check.py --kernels "$OUT/checked" --dry-run
