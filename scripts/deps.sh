#!/bin/sh
# Installs the Debian 12 packages tlm needs, only those that are missing.
# Non-interactive; uses sudo when not root. Usage: scripts/deps.sh [--bench]
set -eu
# clang-19 and its runtime libraries: the libFuzzer targets (fuzz/)
pkgs="cmake make gcc pkg-config llvm-19-dev libxxhash-dev libcjson-dev zlib1g-dev libdnnl-dev
  clang-19 libclang-rt-19-dev"
# --bench: the benchmarks' optional peers and plots (`tlm bench kernels`:
# OpenBLAS opened at run time, LIBXSMM linked when found at build time,
# gnuplot for --plot)
if [ "${1:-}" = "--bench" ]; then
  pkgs="$pkgs libopenblas0-pthread libxsmm-dev gnuplot-nox"
fi
missing=""
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -z "$missing" ]; then
  exit 0
fi
echo "tlm: installing missing packages:$missing"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
