#!/bin/sh
# mock_check.sh - runs tests/device/gpu_check.py without a GPU: torch from
# tests/device/mock (numpy), libcuda.so.1 from tests/fake_cuda.c (which
# computes what a kernel must from its launch arguments, without
# activations or the causal mask: kernels with those are expected to
# differ). Keeps the device check's Python from rotting between the
# sessions that have a GPU. Exit 77 (skipped) without python3-numpy.
#
#   tests/device/mock_check.sh TLM FAKE_LIBCUDA
set -eu
TLM=$1
FAKE=$2
PY=/usr/bin/python3
[ -x "$PY" ] && "$PY" -c "import numpy" 2>/dev/null || { echo "mock_check: no python3-numpy: skipped"; exit 77; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/lib"
ln -s "$FAKE" "$D/lib/libcuda.so.1"
"$TLM" gpu export --out "$D/timed" --random 0 --group gpt2 1x768:768x768 16x768:768x2304 \
  --group bert 12x128x64:12x64x128 >/dev/null
"$TLM" gpu export --out "$D/checked" --random 3 --seed 3 7x13:13x5 2x3x17:2x17x19 3x1x31:1x31x7 \
  37x129:129x61 5x9:9x3 softmax:5x33 layernorm:4x100 rmsnorm:3x77 >/dev/null
HERE=$(dirname "$0")
export PYTHONPATH="$HERE/mock" LD_LIBRARY_PATH="$D/lib"
"$PY" "$HERE/gpu_check.py" --kernels "$D/checked" --json "$D/c.json" >/dev/null || true
"$PY" "$HERE/gpu_check.py" --kernels "$D/timed" --time --repeats 2 --json "$D/t.json" >/dev/null
"$PY" - "$D/c.json" "$D/t.json" <<'PYEOF'
import json, sys
c, t = (json.load(open(f)) for f in sys.argv[1:3])
bad = [k for k in c["kernels"] if not k["ok"] and k.get("act", "none") == "none" and not k.get("causal")]
assert not bad, "kernels the fake computes came back wrong: %s" % bad
assert any(k["ok"] for k in c["kernels"]), "nothing checked"
assert t["summary"]["timed"] == 3 and t["summary"]["wrong_or_failed"] == 0, t["summary"]
assert all(k["sentence"].startswith("op:") for k in c["kernels"] + t["kernels"])
print("mock_check: %d kernels checked, %d timed (mock figures)" % (len(c["kernels"]), t["summary"]["timed"]))
PYEOF
