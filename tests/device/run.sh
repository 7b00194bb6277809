#!/bin/sh
# run.sh - the GPU check, on the machine with the GPU (#21).
#
#   tests/device/run.sh [KERNELS_DIR] [OUT_DIR]
#
# Needs there: the NVIDIA driver (libcuda.so.1), python3 with torch built
# for CUDA, optionally triton. Nothing is built there: the kernels were
# exported on the build machine by tests/device/prepare.sh (PTX + manifest,
# carried as build/device). Checks every kernel against a float64
# reference on the GPU, then times the rule's kernels against cuBLAS and
# Triton; JSON reports in OUT_DIR (default $OUT, else /tmp). About 3-5
# minutes on an H200; the timing stops after 420 s in all.
set -u
K=${1:-build/device/kernels}
O=${2:-${OUT:-/tmp}}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv 2>&1 | tee "$O/nvidia_smi.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" 2>&1
rc=0
python3 tests/device/gpu_check.py --kernels "$K/checked" --json "$O/gpu_check_correctness.json" || rc=1
python3 tests/device/gpu_check.py --kernels "$K/timed" --time --json "$O/gpu_check_timed.json" --budget-s 300 || rc=1
exit $rc
