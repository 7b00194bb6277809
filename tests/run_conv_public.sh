#!/bin/sh
# tlm run --public / --const-w on convolutions: tlm_run itself is timed and
# checked against the reference, and `path` names what it ran (a KxK over an
# im2col copy and a 1x1 as matmuls, a wide-image 3x3 in the convolution kernels,
# 256+ channels with constant weights in channel blocks),
# under each layout; the convolution kernel's path line says what tlm_run would do.
# usage: run_conv_public.sh TLM_CLI
set -eu
tlm=$1
export TLM_CACHE_DIR=none
check() { # DESC LAYOUT EXPECTED-PATH-TEXT [options]
  d=$1 l=$2 want=$3
  shift 3
  out=$("$tlm" run "$d" --layout "$l" --threads 2 --min-time 0.01 --check "$@")
  echo "$out" | grep -q "^max_rel_err .* PASS$" || { echo "FAIL: $d $l $*: no PASS"; echo "$out"; exit 1; }
  echo "$out" | grep "^path " | grep -q "$want" || { echo "FAIL: $d $l $*: path is not '$want'"; echo "$out"; exit 1; }
  echo "ok: $d $l $* ($(echo "$out" | grep '^path ' | sed 's/^path *//'))"
}
check mb1ic64ih5oc32oh5kh3ph1 nhwc "tlm_run: matmul 1 x (25 x 576) . (576 x 32), src gathered" --const-w
check mb1ic64ih5oc32oh5kh3ph1 nhwc "tlm_run: matmul 1 x (25 x 576)" --public
check mb1ic64ih5oc32oh5kh3ph1 nhwc "tlm_run would run matmul 1 x (25 x 576)"
check mb1ic13ih7oc11oh7kh1 nhwc "tlm_run: matmul 1 x (49 x 13) . (13 x 11)" --const-w
check mb1ic13ih7oc11oh7kh1 nchw "tlm_run: matmul" --public
check mb1ic5ih17oc7oh17kh3ph1 nhwc "tlm_run: convolution kernel" --const-w
check mb1ic5ih17oc7oh17kh3ph1 nchw "the convolution kernel, as tlm_run"
# channel blocks: 256+ output channels with the weights declared constant
check mb1ic16ih8oc256oh8kh3ph1 nhwc "tlm_run: 4 convolutions of 64 output channels" --const-w
check mb2ic8ih9oc320oh5kh3sh2ph1 nhwc "tlm_run: 5 convolutions of 64" --const-w --epilogue bias,relu
check mb1ic16ih8oc256oh8kh3ph1 nhwc "with the weights declared constant, 4 convolutions" --public
check mb1ic16ih8oc256oh8kh3ph1 nchw "tlm_run: convolution kernel$" --const-w
# background compiles (TLM_ASYNC=1): the shape's own kernel is checked, not its stand-in
export TLM_ASYNC=1
check mb1ic64ih5oc32oh5kh3ph1 nhwc "tlm_run: matmul 1 x (25 x 576)" --const-w
check mb1ic5ih17oc7oh17kh3ph1 nhwc "tlm_run: convolution kernel" --public
check mb1ic16ih8oc256oh8kh3ph1 nhwc "tlm_run: 4 convolutions of 64" --const-w
unset TLM_ASYNC
# no schedule of the convolution space with --public: tlm_run chooses
if "$tlm" run mb1ic5ih9oc7oh9kh3ph1 --public --schedule rule > /dev/null 2>&1; then
  echo "FAIL: --public --schedule accepted"; exit 1
fi
echo "run_conv_public: all passed"
