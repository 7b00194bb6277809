#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/*): run once
from the repository root after a build; the files are committed. Inputs:
the shared workloads' descriptors, record tasks, a model from
build/fuzz/fuzz_seed_model and a real disk-cache entry written by
build/tools/tlm run."""
import glob, json, os, shutil, struct, subprocess, sys, tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.environ.get("SHARED", os.path.join(root, "..", "shared"))
build = os.environ.get("BUILD", os.path.join(root, "build"))
out = os.path.join(root, "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- parse: descriptors (first lines of each benchdnn file), task specs,
# schedules
n = 0
for path in sorted(glob.glob(os.path.join(shared, "workloads", "benchdnn", "*", "*"))):
    lines = [l.strip() for l in open(path) if l.strip() and not l.startswith("#")]
    for l in lines[:3]:
        write("parse", "bd%03d" % n, l)
        n += 1
specs = [
    ("13x40:40x24 tA0 tB0 bias0 act0 res0",
     "vec=16 tile_n3=32 tile_m3=12 tile_b3=1 tile_k1=256 unroll_k1=4 tile_n2=1 tile_m2=6 "
     "tile_b2=1 tile_n1=1 tile_m1=1 tile_b1=1 order0=0 order1=0 order2=0 pack_b=0 parallel=2 "
     "epilogue_at=3"),
    ("12x128x64:12x64x128 tA0 tB1 bias0 act0 res0", "vec=8"),
    ("7x768:768x2304 tA0 tB0 bias1 act2 res1", ""),
    ("conv:g1mb1_ic16ih10iw10_oc8oh10ow10_kh3kw3_sh1sw1_ph1pw1_dh0dw0 nhwc bias1 bn0 act1 res0",
     "vec_axis=1 vec=16 tile_v=16 tile_rows=8 unroll=4 red_order=0 tile_c2=1 tile_w2=64 order=0 "
     "parallel=2"),
    ("conv:g32mb1_ic32ih112iw112_oc32oh112ow112_kh3kw3_sh1sw1_ph1pw1_dh0dw0 nhwc bias1 bn0 act1 res0", ""),
    ("conv:g1mb1_ic3ih224iw224_oc64oh112ow112_kh7kw7_sh2sw2_ph3pw3_dh0dw0 nchw bias0 bn1 act0 res1", ""),
    ("pool:max n1 c64 ih80 iw80 oh40 ow40 kh3 kw3 sh2 sw2 ph1 pw1 nhwc", ""),
    ("pool:avg n2 c5 ih7 iw7 oh1 ow1 kh0 kw0 sh1 sw1 ph0 pw0 nchw", ""),
    ("eltwise:act2 bin0 1103x3072", ""),
    ("eltwise:act3 bin2 1089x11008", ""),
    ("softmax:12x1000", ""), ("layernorm:1x1", ""), ("rmsnorm:7x4097", ""),
    ("swiglu:7x11008", ""), ("gelu:1x3072", ""),
    ("mb1ic16id1ih1iw1oc16od2oh2ow1kd3kh3kw1dd1dh1ph1pd1", ""),
]
for i, (t, s) in enumerate(specs):
    write("parse", "spec%02d" % i, t + ("\n" + s if s else ""))

# ---- api: operators and tensors as fuzz_api.c reads them (fdp.h)
def tensor(shape, offset, dense=True):
    b = bytes([0, len(shape) - 1])
    for e in shape:
        b += bytes([e - 1]) if e <= 19 else bytes([176]) + struct.pack(">H", e)
    b += bytes([0])  # dense strides
    b += bytes([0]) + struct.pack(">H", offset)
    return b

def op(kind_byte, fields, ins, outs):
    b = bytes([kind_byte]) + bytes(fields) + bytes([len(ins), 0])
    off = 0
    for s in ins + outs:
        b += tensor(s, off)
        n = 1
        for e in s:
            n *= e
        off += n + 64
    return b

F = {"0": 0, "1e-5": 1, "1": 2}  # fdp_float table indices
write("api", "matmul", op(0, [0, 0, 0, 0, 0], [[5, 7], [7, 9]], [[5, 9]]))
write("api", "matmul_epi", op(0, [0, 1, 1, 2, 1], [[3, 5, 7], [3, 9, 7], [9], [3, 5, 9]], [[3, 5, 9]]))
write("api", "softmax", op(1, [F["0"], F["1"], 1], [[5, 13]], [[5, 13]]))
write("api", "layernorm", op(2, [F["1e-5"], F["1"], 0], [[3, 17], [17], [17]], [[3, 17]]))
write("api", "rmsnorm", op(3, [F["1e-5"], F["1"], 0], [[3, 17], [17]], [[3, 17]]))
# conv NHWC 1x6x6x4 -> 1x6x6x8, 3x3 pad 1, bias, relu: layout, wlayout,
# groups, (stride, pad, dilation) x 3, bias, scale_shift, residual, act
write("api", "conv3x3", op(4, [1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1],
                          [[1, 6, 6, 4], [8, 4, 3, 3], [8]], [[1, 6, 6, 8]]))
write("api", "conv1x1", op(4, [1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 0, 0, 0],
                          [[1, 5, 5, 8], [6, 8, 1, 1]], [[1, 5, 5, 6]]))
write("api", "dwconv", op(4, [1, 0, 166, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1],
                         [[1, 6, 6, 4], [4, 1, 3, 3], [4]], [[1, 6, 6, 4]]))
# pool: layout, alg, (kernel, stride, pad) x 3
write("api", "maxpool", op(5, [1, 0, 1, 1, 0, 3, 2, 0, 3, 2, 0], [[1, 7, 7, 3]], [[1, 3, 3, 3]]))
write("api", "avgpool", op(5, [0, 1, 1, 1, 0, 3, 1, 1, 3, 1, 1], [[2, 3, 5, 5]], [[2, 3, 5, 5]]))
write("api", "eltwise", op(6, [3, 2], [[4, 9], [4, 9]], [[4, 9]]))
write("api", "eltwise_row", op(6, [0, 1], [[4, 9], [9]], [[4, 9]]))

# ---- model: a small model, as given (mode 0) and without its checksum
# for the fix-up mode (mode 1)
with tempfile.TemporaryDirectory() as tmp:
    mp = os.path.join(tmp, "m.tlmq")
    subprocess.run([os.path.join(build, "fuzz", "fuzz_seed_model"), mp], check=True)
    data = open(mp, "rb").read()
    write("model", "small", b"\x00" + data)
    write("model", "small_fix", b"\x01" + data[:-8])
    write("model", "header_only", b"\x00" + data[:64])

# ---- cache: a real plan and kernel entry from `tlm run`
with tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, TLM_CACHE_DIR=tmp, TLM_MODEL="none")
    subprocess.run([os.path.join(build, "tools", "tlm"), "run", "5x7:7x9"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    plan = open(glob.glob(os.path.join(tmp, "plans", "*.json"))[0], "rb").read()
    meta = glob.glob(os.path.join(tmp, "kernels", "*.json"))[0]
    kmeta = open(meta, "rb").read()
    obj = open(meta[:-5] + ".o", "rb").read()
    def entry(mode, m, o=b""):
        return bytes([mode]) + struct.pack(">H", len(m)) + m + o
    write("cache", "plan", entry(0, plan))
    write("cache", "plan_merged", entry(2, plan))
    write("cache", "kernel", entry(1, kmeta, obj))
    write("cache", "kernel_merged", entry(3, kmeta, obj))
    write("cache", "kernel_fields", entry(3, b'{"symbol":"tlm_x","decisions":[1,2]}', obj[:256]))
    write("cache", "plan_fields", entry(2, b'{"decisions":[16,4,1e9,-1,2.5]}'))
print("corpus written under", out)
