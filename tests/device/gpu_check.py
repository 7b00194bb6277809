#!/usr/bin/env python3
"""gpu_check.py - tlm's GPU kernels on a real NVIDIA GPU (#21).

Runs on the device machine, where no tlm build is needed: the kernels come
as PTX with a manifest from `tlm gpu export` (tests/device/prepare.sh, run
on the build machine). For each kernel of the manifest:

  1. loads its PTX with the CUDA driver (cuModuleLoadDataEx through ctypes,
     as libtlm does through dlopen), launches it on torch's current stream
     with the argument list of the manifest (the operands' slots filled
     with torch buffers' addresses), and checks C against a float64
     reference computed by torch on the GPU: the largest
     |c - ref| / (|A| |B| + |bias| + |residual| + 1e-3) must stay within
     1e-5 + K / 2^23, as tlm's CPU tests require;
  2. with --time, for the rule's kernels without epilogue: times tlm, cuBLAS
     (torch.matmul, TF32 off) and, when triton imports, a Triton matmul in
     fp32 (IEEE products, no TF32), side by side: CUDA events around
     batches of launches, the median of --repeats batches.

Writes a JSON report (--json) and prints one line per kernel and a summary
(geometric means of tlm / cuBLAS and tlm / Triton over the timed kernels,
per group of shapes). Exit status 1 when any kernel is wrong or fails to
load or launch.

--dry-run checks the manifest and the argument lists without a GPU (what
the build machine's tests run).
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

GA_A, GA_B, GA_C, GA_BIAS, GA_R = 0, 1, 2, 3, 4


def load_manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    ks = m["kernels"]
    for k in ks:
        if k.get("op", "matmul") != "matmul":
            if len(k["args"]) != m["gra_count"] or k["args"][0] != -1 or k["args"][1] != -2:
                raise ValueError("%s: row kernel arguments" % k["ptx"])
            if (k["args"][2] == -3) != (k["op"] != "softmax") or (k["args"][3] == -4) != (k["op"] == "layernorm"):
                raise ValueError("%s: gamma/beta slots disagree with %s" % (k["ptx"], k["op"]))
            if not os.path.exists(os.path.join(d, k["ptx"])):
                raise ValueError("missing " + k["ptx"])
            continue
        if len(k["args"]) != m["ga_count"]:
            raise ValueError("%s: %d arguments, manifest says %d" % (k["ptx"], len(k["args"]), m["ga_count"]))
        for slot, want in ((GA_A, -1), (GA_B, -2), (GA_C, -3)):
            if k["args"][slot] != want:
                raise ValueError("%s: operand slot %d is %d" % (k["ptx"], slot, k["args"][slot]))
        if (k["args"][GA_BIAS] == -4) != bool(k["bias"]) or (k["args"][GA_R] == -5) != bool(k["residual"]):
            raise ValueError("%s: epilogue slots disagree with the epilogue" % k["ptx"])
        if not os.path.exists(os.path.join(d, k["ptx"])):
            raise ValueError("missing " + k["ptx"])
        if k["threads"] < 32 or k["threads"] > 1024 or min(k["grid"]) < 1:
            raise ValueError("%s: bad launch %s x %d" % (k["ptx"], k["grid"], k["threads"]))
    return m


class Driver:
    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        P, vp, u = ctypes.POINTER, ctypes.c_void_p, ctypes.c_uint
        self.cu.cuModuleLoadDataEx.argtypes = [P(vp), ctypes.c_char_p, u, P(ctypes.c_int), P(vp)]
        self.cu.cuModuleGetFunction.argtypes = [P(vp), vp, ctypes.c_char_p]
        self.cu.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, P(vp), P(vp)]
        self.cu.cuGetErrorString.argtypes = [ctypes.c_int, P(ctypes.c_char_p)]
        self.modules = {}

    def check(self, r, what):
        if r != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(r, ctypes.byref(s))
            raise RuntimeError("%s: CUDA error %d %s" % (what, r, s.value.decode() if s.value else ""))

    def function(self, path, name):
        if path not in self.modules:
            with open(path, "rb") as f:
                ptx = f.read() + b"\0"
            log = ctypes.create_string_buffer(8192)
            opts = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER, ..._SIZE_BYTES
            vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(8192))
            mod = ctypes.c_void_p()
            r = self.cu.cuModuleLoadDataEx(ctypes.byref(mod), ptx, 2, opts, vals)
            if r != 0:
                raise RuntimeError("cuModuleLoadDataEx %s: %d %s" % (path, r, log.value.decode(errors="replace")))
            fn = ctypes.c_void_p()
            self.check(self.cu.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
            self.modules[path] = fn
        return self.modules[path]

    def launcher(self, fn, grid, threads, args):
        """A launch with its argument arrays built once: f(stream) is one
        ctypes call (microseconds, not tens of them)."""
        vals = (ctypes.c_int64 * len(args))(*args)
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(vals) + 8 * i for i in range(len(args))])
        cu, check = self.cu, self.check

        def f(stream):
            check(cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], threads, 1, 1, 0,
                                    ctypes.c_void_p(stream), params, None), "cuLaunchKernel")
        f.keep = (vals, params)
        return f

    def launch(self, fn, grid, threads, args, stream):
        self.launcher(fn, grid, threads, args)(stream)


def make_operands(torch, k, gen):
    def rnd(shape):
        return (torch.rand(shape, generator=gen, device="cuda", dtype=torch.float32) * 2 - 1).contiguous()
    A, B = rnd(k["a_shape"]), rnd(k["b_shape"])
    N = k["c_shape"][-1]
    bias = rnd([N]) if k["bias"] else None
    res = rnd(k["c_shape"]) if k["residual"] else None
    C = torch.full(k["c_shape"], float("nan"), device="cuda", dtype=torch.float32)
    return A, B, bias, res, C


def reference(torch, k, A, B, bias, res):
    a = A.double().transpose(-1, -2) if k["transpose_a"] else A.double()
    b = B.double().transpose(-1, -2) if k["transpose_b"] else B.double()
    x = torch.matmul(a, b)
    den = torch.matmul(a.abs(), b.abs())
    if bias is not None:
        x = x + bias.double()
        den = den + bias.double().abs()
    act = k["act"]
    if act == "relu":
        x = torch.relu(x)
    elif act == "relu6":
        x = torch.clamp(x, 0, 6)
    elif act == "gelu":
        x = torch.nn.functional.gelu(x, approximate="tanh")
    elif act == "silu":
        x = torch.nn.functional.silu(x)
    if res is not None:
        x = x + res.double()
        den = den + res.double().abs()
    return x, den + 1e-3


def check_row(torch, drv, d, k, gen, stream):
    """A row kernel against a float64 torch reference: the largest
    |y - ref| / (1 + |ref|), which must stay within 2e-5."""
    R, C = int(k["rows"]), int(k["cols"])
    x = (torch.rand((R, C), generator=gen, device="cuda", dtype=torch.float32) * 8 - 4).contiguous()
    g = torch.rand((C,), generator=gen, device="cuda", dtype=torch.float32) + 0.5
    b = torch.rand((C,), generator=gen, device="cuda", dtype=torch.float32) - 0.5
    y = torch.full((R, C), float("nan"), device="cuda", dtype=torch.float32)
    ptr = {-1: x.data_ptr(), -2: y.data_ptr(), -3: g.data_ptr(), -4: b.data_ptr()}
    args = [ptr.get(v, v) if v < 0 else v for v in k["args"]]
    fn = drv.function(os.path.join(d, k["ptx"]), k["kernel"])
    drv.launch(fn, k["grid"], k["threads"], args, stream)
    torch.cuda.synchronize()
    xd = x.double()
    if k["op"] == "softmax":
        z = xd * k["scale"]
        if k["causal"]:
            mask = torch.ones((R, C), device="cuda", dtype=torch.bool).tril(C - R)
            z = z.masked_fill(~mask, float("-inf"))
            ref = torch.softmax(z, dim=-1).nan_to_num(0.0)
        else:
            ref = torch.softmax(z, dim=-1)
    elif k["op"] == "layernorm":
        ref = torch.nn.functional.layer_norm(xd, (C,), g.double(), b.double(), k["eps"])
    else:
        ref = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + k["eps"]) * g.double()
    err = ((y.double() - ref).abs() / (1 + ref.abs())).max().item()
    return err, bool(err <= 2e-5)


def time_graph(torch, fn, repeats, inner):
    """Times `inner` calls of fn captured in a CUDA graph and replayed
    (no launch overhead from Python in the figure; the same for every
    contender); falls back to direct launches when capture fails."""
    try:
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(inner):
                fn()
        g.replay()
        torch.cuda.synchronize()
    except Exception:
        torch.cuda.synchronize()
        return tuple(time_ms(torch, fn, repeats, inner)) + ("direct",)
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / inner)
    return statistics.median(times), min(times), max(times), "graph"


def time_ms(torch, fn, repeats, inner):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / inner)
    return statistics.median(times), min(times), max(times)


def triton_matmul():
    """An fp32 Triton matmul (blocked, K loop, IEEE products, 64-bit offsets)
    for 2-D and batched row-major operands; None when triton does not import."""
    try:
        import triton
        import triton.language as tl
    except Exception:
        return None

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
               for bm, bn, bk, w, s in ((128, 128, 32, 8, 3), (128, 64, 32, 4, 4),
                                        (64, 128, 32, 4, 4), (64, 64, 32, 4, 4), (32, 64, 32, 4, 4))]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # 64-bit offsets: row x stride passes 2^31 when C has more elements
        # than that (48384x4096:4096x50400), and int32 offsets then wrap
        pm, pn, z = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
        rm = pm * BM + tl.arange(0, BM).to(tl.int64)
        rn = pn * BN + tl.arange(0, BN).to(tl.int64)
        rk = tl.arange(0, BK).to(tl.int64)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ka = k0 + rk
            x = tl.load(a + z * sab + rm[:, None] * sam + ka[None, :] * sak,
                        mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(b + z * sbb + ka[:, None] * sbk + rn[None, :] * sbn,
                        mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(x, y, input_precision="ieee")
        tl.store(c + z * scb + rm[:, None] * scm + rn[None, :] * scn, acc,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    def run(A, B, C):
        if A.dim() == 2:
            A3, B3, C3 = A.unsqueeze(0), B.unsqueeze(0), C.unsqueeze(0)
        else:
            A3, B3, C3 = A.reshape(-1, *A.shape[-2:]), B, C.reshape(-1, *C.shape[-2:])
            if B.dim() == 2:
                B3 = B.unsqueeze(0)
            else:
                B3 = B.reshape(-1, *B.shape[-2:])
        Z, M, K = A3.shape
        N = B3.shape[-1]
        if C3.shape[0] != Z or B3.shape[0] not in (1, Z):
            raise ValueError("batch broadcast of A: not run by this Triton kernel")
        sbb = B3.stride(0) if B3.shape[0] == Z else 0
        grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]), Z)
        kernel[grid](A3, B3, C3, M, N, K, A3.stride(0), A3.stride(1), A3.stride(2), sbb,
                     B3.stride(-2), B3.stride(-1), C3.stride(0), C3.stride(1), C3.stride(2))

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", required=True, help="folder of tlm gpu export")
    ap.add_argument("--json", help="report file")
    ap.add_argument("--time", action="store_true", help="time the rule's kernels against cuBLAS and Triton")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--budget-s", type=float, default=420, help="stop timing after this many seconds")
    ap.add_argument("--dry-run", action="store_true", help="check the manifest only (no GPU)")
    a = ap.parse_args()
    m = load_manifest(a.kernels)
    if a.dry_run:
        print("gpu_check: manifest of %d kernels for sm_%d is consistent" % (len(m["kernels"]), m["sm"]))
        return 0
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    assert torch.cuda.is_available(), "no CUDA device for torch"
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # makes the primary context current on this thread
    dev = torch.cuda.get_device_properties(0)
    cc = dev.major * 10 + dev.minor
    print("gpu_check: %s, sm_%d, %d SMs; kernels built for sm_%d; torch %s" %
          (dev.name, cc, dev.multi_processor_count, m["sm"], torch.__version__))
    drv = Driver()
    tri = triton_matmul() if a.time else None
    if a.time and tri is None:
        print("gpu_check: triton does not import: no Triton contender")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    results, failures, t0, lost = [], 0, time.time(), None
    stream = torch.cuda.current_stream().cuda_stream
    for k in m["kernels"]:
        # the kernel's sentence in the tensor language: with a time, a GPU record
        r = {"desc": k["desc"], "schedule": k["schedule"], "rule": k["rule"], "sentence": k.get("sentence", "")}
        for f in ("act", "bias", "residual", "transpose_a", "transpose_b", "causal"):
            if f in k:
                r[f] = k[f]
        if k.get("op", "matmul") != "matmul":
            try:
                r["op"] = k["op"]
                r["max_rel_err"], r["ok"] = check_row(torch, drv, a.kernels, k, gen, stream)
            except Exception as e:
                r["ok"], r["error"] = False, str(e)[:500]
            if not r["ok"]:
                failures += 1
            results.append(r)
            print("%-28s %-44s %s err %.2e %s" % (k["desc"], k["schedule"], "ok  " if r["ok"] else "FAIL",
                                                  r.get("max_rel_err", float("nan")), r.get("error", "")), flush=True)
            continue
        try:
            A, B, bias, res, C = make_operands(torch, k, gen)
            ptr = {-1: A.data_ptr(), -2: B.data_ptr(), -3: C.data_ptr(),
                   -4: bias.data_ptr() if bias is not None else 0,
                   -5: res.data_ptr() if res is not None else 0}
            args = [ptr.get(x, x) if x < 0 else x for x in k["args"]]
            fn = drv.function(os.path.join(a.kernels, k["ptx"]), k["kernel"])
            go = drv.launcher(fn, k["grid"], k["threads"], args)
            launch = lambda: go(torch.cuda.current_stream().cuda_stream)  # the capture stream too
            launch()
            torch.cuda.synchronize()
            ref, den = reference(torch, k, A, B, bias, res)
            Kdim = k["a_shape"][-2] if k["transpose_a"] else k["a_shape"][-1]
            err = ((C.double() - ref).abs() / den).max().item()
            tol = 1e-5 + Kdim / 8388608.0
            r["max_rel_err"] = err
            r["ok"] = bool(err <= tol)  # NaN (an element never written) fails too
            if not r["ok"]:
                failures += 1
            if (a.time and k["rule"] and r["ok"] and k["act"] == "none" and not k["bias"]
                    and not k["residual"] and time.time() - t0 < a.budget_s):
                flops = k["flops"]
                inner = max(1, min(200, int(2e9 / max(flops, 1))))
                tm, tlo, thi, how = time_graph(torch, launch, a.repeats, inner)
                av = A.transpose(-1, -2) if k["transpose_a"] else A
                bv = B.transpose(-1, -2) if k["transpose_b"] else B
                cm, clo, chi, chow = time_graph(torch, lambda: torch.matmul(av, bv, out=C), a.repeats, inner)
                r.update(tlm_ms=tm, tlm_ms_min=tlo, tlm_ms_max=thi, cublas_ms=cm, cublas_ms_min=clo,
                         cublas_ms_max=chi, tlm_gflops=flops / tm / 1e6, cublas_gflops=flops / cm / 1e6,
                         tlm_over_cublas=cm / tm, timing=how, cublas_timing=chow)
                if tri is not None and not k["transpose_a"] and not k["transpose_b"]:
                    try:
                        tri(A, B, C)  # autotunes once per shape, before any capture
                        xm, xlo, xhi, xhow = time_graph(torch, lambda: tri(A, B, C), a.repeats, inner)
                        r.update(triton_ms=xm, triton_gflops=flops / xm / 1e6, tlm_over_triton=xm / tm)
                    except Exception as e:  # a contender failing does not fail the check
                        r["triton_error"] = str(e)[:300]
                        try:  # ... unless it took the CUDA context with it
                            torch.cuda.synchronize()
                        except Exception:
                            lost = "Triton on " + k["desc"]
        except Exception as e:
            r["ok"] = False
            r["error"] = str(e)[:500]
            failures += 1
        results.append(r)
        line = "%-28s %-44s %s err %.2e" % (k["desc"], k["schedule"], "ok  " if r["ok"] else "FAIL",
                                           r.get("max_rel_err", float("nan")))
        if "tlm_ms" in r:
            line += "  tlm %.1f GFLOPS, cuBLAS %.1f (%.2fx)" % (r["tlm_gflops"], r["cublas_gflops"], r["tlm_over_cublas"])
            if "triton_gflops" in r:
                line += ", Triton %.1f (%.2fx)" % (r["triton_gflops"], r["tlm_over_triton"])
        if "error" in r:
            line += "  " + r["error"]
        print(line, flush=True)
        if lost is None and not r["ok"] and "illegal" in r.get("error", ""):
            lost = "tlm's kernel for " + k["desc"]
        if lost is not None:
            # every later launch would report this error again: stop, and
            # say which launch lost the context instead of failing the rest
            print("gpu_check: the CUDA context was lost after %s: %d kernels not run" %
                  (lost, len(m["kernels"]) - len(results)), flush=True)
            break

    def geomean(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    timed = [r for r in results if "tlm_over_cublas" in r]
    summary = {
        "device": dev.name, "sm": cc, "kernels": len(results), "wrong_or_failed": failures,
        "timed": len(timed), "not_run": len(m["kernels"]) - len(results), "context_lost_after": lost,
        "geomean_tlm_over_cublas": geomean([r["tlm_over_cublas"] for r in timed]),
        "geomean_tlm_over_triton": geomean([r["tlm_over_triton"] for r in timed if "tlm_over_triton" in r]),
    }
    for tag, descs in m.get("groups", {}).items():
        sel = [r for r in timed if r["desc"] in descs]
        summary["geomean_tlm_over_cublas_" + tag] = geomean([r["tlm_over_cublas"] for r in sel])
        summary["geomean_tlm_over_triton_" + tag] = geomean([r["tlm_over_triton"] for r in sel if "tlm_over_triton" in r])
        summary["timed_" + tag] = len(sel)
    both = [r for r in timed if r["desc"] in m.get("groups", {}).get("gpt2", []) + m.get("groups", {}).get("bert", [])]
    summary["geomean_tlm_over_cublas_gpt2_bert"] = geomean([r["tlm_over_cublas"] for r in both])
    print("gpu_check: %d kernels, %d wrong or failed; tlm / cuBLAS geomean %s (GPT-2 + BERT %s), tlm / Triton %s" %
          (len(results), failures, summary["geomean_tlm_over_cublas"],
           summary["geomean_tlm_over_cublas_gpt2_bert"], summary["geomean_tlm_over_triton"]))
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"summary": summary, "kernels": results}, f, indent=1)
        os.replace(tmp, a.json)
    return 1 if failures or lost is not None else 0


if __name__ == "__main__":
    sys.exit(main())
