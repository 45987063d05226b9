#!/usr/bin/env python3
"""Module 06 smoke test on a GPU: compile, check and time the kernels the notebooks use.

    PYTHONPATH=utilities python3 scripts/gpu_module06_smoke.py [--budget 300] [--only NAME,...|all]

By default it runs a short core set (``CORE``: fp16 and int8 block GEMMs, a fused epilogue, the
int8 pipeline, and the fp16 GEMM through nvmath's accumulator object as a cross-check of the
register-fragment path) within 300 s; ``--only all`` runs every case.

Phase 1 (cold compile): with an empty code-generation cache (a fresh folder), every case is
compiled in its own worker process, side by side; each reports its compile time: the *first
compile* a learner waits for (the workers also fill the on-disk cache).
Phase 2 (cached compile, check, time): this process compiles each case again, now from the warm
on-disk cache (a second process: the *cached compile*), checks it against the float64 reference
on shapes that are not multiples of the tiles, and times it beside the library peer at 4096^3.

A failing GEMM check prints, besides the checker's message, where the wrong elements are: a map
of the wrong fraction per (row mod 16, col mod 16), one per 16 x 16 sub-tile of the 128 x 128
block tile, and for the first wrong elements whether their value is the right value of another
element of the same tile (a permutation: the results are computed right and stored in the wrong
place) or of nothing (computed wrong).

Each case runs in try/except: a failure prints its full traceback and the others go on. The
table at the end has one row per case. With $OUT set, the log is written to
$OUT/module06_smoke.log line by line as it goes (so a run cut short still leaves it) and the
details to $OUT/module06_smoke.json after every case. A time budget skips the remaining cases,
and says so, rather than running over.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

T_START = time.time()
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "utilities"))

CHECK = dict(m=300, n=333, k=200)  # not multiples of any tile
BENCH = dict(m=4096, n=4096, k=4096)
LOG_LINES = []
LOG_FILE = None  # $OUT/module06_smoke.log, appended line by line (set in main)


def log(*parts):
    line = " ".join(str(p) for p in parts)
    LOG_LINES.append(line)
    print(line, flush=True)
    if LOG_FILE is not None:
        try:
            with open(LOG_FILE, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# Cases: each returns a dict with the kernel object(s), a check, and a benchmark pair.


def _rng():
    import numpy as np

    return np.random.default_rng(6)


def _randn(shape, dtype, scale=1.0):
    """Random GPU array (not zeros): CuPy, or Numba for bfloat16 (which CuPy may not support;
    copied as its uint16 bits, since Numba cannot copy a bfloat16 NumPy array directly)."""
    import cupy as cp
    import numpy as np

    x = _rng().standard_normal(shape) * scale
    if np.dtype(dtype).kind in "iu":
        x = np.clip(np.rint(x * 4), -64, 63)
    x = x.astype(dtype)
    if np.dtype(dtype).name == "bfloat16":
        from kernel_lab.tensor_cores import precisions

        return precisions.to_device(x)
    return cp.asarray(x)


def host(x):
    import cupy as cp

    if hasattr(x, "copy_to_host"):
        from kernel_lab.tensor_cores import precisions

        return precisions.to_host(x)
    return cp.asnumpy(x)


def empty(shape, dtype):
    import cupy as cp
    import numpy as np

    if np.dtype(dtype).name == "bfloat16":
        from numba import cuda

        return cuda.device_array(shape, dtype=dtype)
    return cp.empty(shape, dtype=dtype)


def _tk(prec):
    return {"float16": 32, "bfloat16": 32, "tf32": 16, "int8": 64, "int4": 64}[prec]


def case_block(prec, epilogue_name="identity", batch=None, fragment="registers"):
    """BlockGemm with one epilogue: builder returning (kernel, run_check, bench) callables."""
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import epilogues, gemm, references as ref
    from kernel_lab.tensor_cores.configs import GemmConfig
    from kernel_lab.tensor_cores.precisions import host_dtype

    cfg = GemmConfig(128, 128, _tk(prec), 256, prec)
    kernel = gemm.BlockGemm(cfg, epilogues.by_name(epilogue_name, cfg.tile_m), fragment=fragment)
    dt = host_dtype(prec)

    def make(m, n, k, bsz=None):
        if prec == "int4":
            a = _randn((m, k), np.int8)
            bvals = np.clip(np.rint(_rng().standard_normal((k, n)) * 3), -8, 7).astype(np.int8)
            b = cp.asarray(ref.pack_int4(bvals))
            b_ref = bvals
        else:
            shape_a = (bsz, m, k) if bsz else (m, k)
            shape_b = (1, k, n) if bsz else (k, n)
            a = _randn(shape_a, dt)
            b = _randn(shape_b, dt)
            if bsz:
                b = cp.broadcast_to(b, (bsz, k, n))  # one B shared by the batch: batch stride 0
            b_ref = np.broadcast_to(host(b[:1]), (bsz, k, n)) if bsz else host(b)
        out = empty(((bsz,) if bsz else ()) + (m, n), kernel.out_dtype)
        extra, ref_fn = (), None
        if epilogue_name == "linear":
            c = _randn((bsz or 1, m, n), np.float32)
            bias = _randn((m,), np.float32)
            extra = (1.5, 0.5, 2.0, c, bias)
            ref_fn = lambda acc: ref.linear(acc, 1.5, 0.5, cp.asnumpy(c).reshape((bsz or 1, m, n))[0] if not bsz  # noqa: E731
                                            else cp.asnumpy(c), 2.0, cp.asnumpy(bias))
        elif epilogue_name.startswith("bias_"):
            bias = _randn((m,), np.float32)
            extra = (bias,)
            ref_fn = lambda acc: ref.bias_activation(acc, cp.asnumpy(bias), epilogue_name[5:])  # noqa: E731
        elif epilogue_name == "quantize_int8":
            extra = (0.01, 3)
            ref_fn = lambda acc: ref.quantize(acc, 0.01, 3)  # noqa: E731
        return a, b, out, extra, ref_fn, b_ref

    def check():
        m, n, k = CHECK["m"], CHECK["n"], CHECK["k"]
        a, b, out, extra, ref_fn, b_ref = make(m, n, k, batch)
        t0 = time.perf_counter()
        kernel(a, b, out, *extra)
        cp.cuda.runtime.deviceSynchronize()
        acc = ref.gemm(host(a) if prec != "tf32" else ref.round_to_tf32(host(a)),
                       b_ref if prec != "tf32" else ref.round_to_tf32(b_ref))
        want = ref_fn(acc) if ref_fn else acc
        return _compare(f"{prec} {epilogue_name}" + (f" batch {batch}" if batch else ""), host(out),
                        want, prec, k, epilogue_name)

    def bench():
        m, n, k = BENCH["m"], BENCH["n"], BENCH["k"]
        a, b, out, extra, _, _ = make(m, n, k, batch)
        ours = kernel.launcher(a, b, out, *extra)
        peer_name, peer = _peer(prec, epilogue_name, a, b, extra, batch)
        return ours, peer_name, peer, 2 * m * n * k * (batch or 1)

    return kernel, check, bench


def _compare(name, got, want, prec, k, epilogue_name):
    import numpy as np

    if epilogue_name == "quantize_int8":
        fmt = "int8"
    elif prec in ("int8", "int4") and epilogue_name == "identity":
        fmt = "int32"
    else:
        fmt = {"int8": "float32", "int4": "float32"}.get(prec, prec)
    check_result(name, got, np.asarray(want), fmt=fmt, k=max(k, 1))
    return "correct"


def check_result(name, got, want, *, fmt, k, gemm_view=None):
    """kl.check_array, and on failure a map of where the wrong elements are (logged, then re-raised).

    ``gemm_view`` (got, want) gives the same results as the GEMM's M x N output, for checks whose
    arrays are arranged otherwise (a convolution's NCHW output)."""
    import kernel_lab as kl

    try:
        kl.check_array(name, got, want, fmt=fmt, k=k)
    except kl.CheckFailed as exc:
        g, w = gemm_view if gemm_view is not None else (got, want)
        try:
            diagnosis = where_wrong(name, g, w, fmt=fmt, k=k)
        except Exception:  # noqa: BLE001 - the diagnosis must not hide the failure
            diagnosis = f"[{name}] (could not map the wrong elements: {traceback.format_exc(limit=2)})"
        raise kl.CheckFailed(f"{exc}\n{diagnosis}") from None


def _map_char(frac):
    if frac <= 0:
        return "."
    if frac >= 1:
        return "#"
    return str(min(9, max(1, int(frac * 10))))


def where_wrong(name, got, want, *, fmt, k, tile=(128, 128), probes=6):
    """Text maps of the wrong elements of an M x N (or batch x M x N: batch 0) GEMM result."""
    import numpy as np

    from kernel_lab.check import EXACT_FORMATS, tolerance

    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    if g.ndim == 3:
        g, w = g[0], w[0]
    exact = fmt in EXACT_FORMATS
    if exact:
        tol = np.zeros_like(w)
    else:
        scale = float(np.sqrt(np.mean(np.square(w)))) if w.size else 0.0
        tol = tolerance(fmt, k) * (np.abs(w) + scale)
    wrong = ~(np.abs(g - w) <= tol)
    m, n = wrong.shape
    out = [f"[{name}] where the wrong elements are ({int(wrong.sum())} of {wrong.size}; "
           "'.' none wrong, 1-9 tenths wrong, '#' all wrong):"]
    r16, c16 = np.arange(m)[:, None] % 16, np.arange(n)[None, :] % 16
    cnt = np.zeros((16, 16))
    bad = np.zeros((16, 16))
    np.add.at(cnt, (np.broadcast_to(r16, (m, n)), np.broadcast_to(c16, (m, n))), 1)
    np.add.at(bad, (np.broadcast_to(r16, (m, n)), np.broadcast_to(c16, (m, n))), wrong)
    out.append("  by (row mod 16, col mod 16):   col 0123456789abcdef")
    for r in range(16):
        out.append(f"    row {r:2d}                           " +
                   "".join(_map_char(bad[r, c] / cnt[r, c]) if cnt[r, c] else " " for c in range(16)))
    tm, tn = tile
    sr, sc = tm // 16, tn // 16
    rs = (np.arange(m)[:, None] % tm) // 16
    cs = (np.arange(n)[None, :] % tn) // 16
    cnt2 = np.zeros((sr, sc))
    bad2 = np.zeros((sr, sc))
    np.add.at(cnt2, (np.broadcast_to(rs, (m, n)), np.broadcast_to(cs, (m, n))), 1)
    np.add.at(bad2, (np.broadcast_to(rs, (m, n)), np.broadcast_to(cs, (m, n))), wrong)
    out.append(f"  by 16 x 16 sub-tile of the {tm} x {tn} block tile (rows of sub-tiles down, columns across):")
    for r in range(sr):
        out.append("    " + "".join(_map_char(bad2[r, c] / cnt2[r, c]) if cnt2[r, c] else " " for c in range(sc)))
    flat = np.argwhere(wrong)[:probes]
    if len(flat):
        out.append("  first wrong elements: is the value written there the right value of another element of "
                   "its block tile? (then it was computed right and stored in the wrong place)")
    # a value computed right differs from the float64 reference only by the accumulation order:
    # match tightly (exactly for integers), not with the check's tolerance
    scale = float(np.sqrt(np.mean(np.square(w)))) if w.size else 0.0
    for r, c in flat:
        r0, c0 = r // tm * tm, c // tn * tn
        blk = w[r0:r0 + tm, c0:c0 + tn]
        close = 0.0 if exact else 1e-4 * (abs(g[r, c]) + 0.1 * scale) + 1e-30
        hits = np.argwhere(np.abs(blk - g[r, c]) <= close)
        where = ", ".join(f"({int(a)}, {int(b)})" for a, b in hits[:3]) if len(hits) else "no element of the tile"
        more = f" and {len(hits) - 3} more" if len(hits) > 3 else ""
        out.append(f"    [{int(r)}, {int(c)}] (tile position ({int(r - r0)}, {int(c - c0)})): got {g[r, c]:.6g}, "
                   f"want {w[r, c]:.6g}; the value got is the right value of tile position {where}{more}")
    return "\n".join(out)


def _peer(prec, epilogue_name, a, b, extra, batch):
    """The library call a user would make instead, or (None, None)."""
    import cupy as cp

    if epilogue_name in ("bias_relu", "bias_gelu") and prec == "float16":
        try:
            import nvmath
            from nvmath.linalg.advanced import Matmul, MatmulEpilog

            bias16 = extra[0].astype(cp.float16)
            mm = Matmul(a, b)
            mm.plan(epilog=MatmulEpilog.RELU_BIAS if epilogue_name == "bias_relu" else MatmulEpilog.GELU_BIAS,
                    epilog_inputs={"bias": bias16})
            _ = nvmath
            return f"cuBLASLt {epilogue_name.upper()} (nvmath)", lambda: mm.execute()
        except Exception as exc:  # noqa: BLE001
            return f"cuBLASLt epilogue unavailable: {type(exc).__name__}: {exc}"[:120], None
    if prec == "float16":
        return "cuBLAS (cupy.matmul)", lambda: cp.matmul(a, b)
    if prec == "int8" and batch is None:  # cuBLASLt's integer tensor-core GEMM, through nvmath-python
        from kernel_lab.tensor_cores import peers

        a8, bt8 = cp.asarray(a), cp.ascontiguousarray(cp.asarray(b).T)
        out8 = cp.empty((a8.shape[0], bt8.shape[0]), cp.int32)
        lt = peers.CublasLtInt8(a8.shape[0], bt8.shape[0], a8.shape[1])
        return "cuBLASLt int8 (nvmath-python)", lambda: lt(a8, bt8, out8)
    try:
        import torch
    except ImportError:
        return "no peer (torch not installed)", None
    if prec == "bfloat16":
        ta = torch.as_tensor(host(a).astype("float32"), device="cuda").to(torch.bfloat16)
        tb = torch.as_tensor(host(b).astype("float32"), device="cuda").to(torch.bfloat16)
        return "cuBLAS bf16 (torch.matmul)", lambda: torch.matmul(ta, tb)
    ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
    if prec == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        return "cuBLAS tf32 (torch.matmul)", lambda: torch.matmul(ta, tb)
    return "no peer", None


def case_softmax():
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import epilogues, gemm, references as ref
    from kernel_lab.tensor_cores.configs import GemmConfig

    cfg = GemmConfig(128, 128, 32, 256, "float16")
    kernel = gemm.BlockGemm(cfg, epilogues.row_softmax_partial(cfg.tile_m))

    def run(m, n, k):
        a, b = _randn((m, k), np.float16, 0.3), _randn((k, n), np.float16, 0.3)
        out = cp.empty((m, n), cp.float32)
        tiles = -(-n // cfg.tile_n)
        rmax, rsum = cp.empty((1, m, tiles), cp.float32), cp.empty((1, m, tiles), cp.float32)
        return a, b, out, rmax, rsum

    def check():
        m, n, k = CHECK["m"], CHECK["n"], CHECK["k"]
        a, b, out, rmax, rsum = run(m, n, k)
        kernel(a, b, out, 0.5, rmax, rsum)
        gemm.softmax_finish(out, rmax, rsum, cfg.tile_n)
        want = ref.row_softmax(ref.gemm(cp.asnumpy(a), cp.asnumpy(b)), 0.5)
        check_result("float16 row softmax", cp.asnumpy(out), want, fmt="float16", k=k)
        return "correct"

    def bench():
        m, n, k = BENCH["m"], BENCH["n"], BENCH["k"]
        a, b, out, rmax, rsum = run(m, n, k)
        first = kernel.launcher(a, b, out, 0.5, rmax, rsum)

        def ours():
            first()
            gemm.softmax_finish(out, rmax, rsum, cfg.tile_n)

        def peer():
            x = cp.matmul(a, b).astype(cp.float32) * 0.5
            x -= x.max(axis=1, keepdims=True)
            cp.exp(x, out=x)
            x /= x.sum(axis=1, keepdims=True)
        return ours, "cupy.matmul + softmax", peer, 2 * m * n * k

    return kernel, check, bench


def case_conv(implicit):
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import gemm, references as ref
    from kernel_lab.tensor_cores.configs import GemmConfig
    from kernel_lab.tensor_cores.validate import ConvGeometry

    cfg = GemmConfig(128, 128, 32, 256, "float16")
    kernel = gemm.BlockGemm(cfg, operand_a="im2col" if implicit else "matrix")

    def run(n, c, h, w, kf, r):
        g = ConvGeometry(n, c, h, w, r, r, r // 2)
        x = _randn((n, c, h, w), np.float16)
        wgt = _randn((kf, c, r, r), np.float16, 0.2)
        wmat = cp.ascontiguousarray(wgt.reshape(kf, -1).T)  # (C*R*S, K)
        out = cp.empty((g.gemm_m, kf), cp.float32)
        cols = None if implicit else cp.empty((g.gemm_m, g.gemm_k), cp.float16)
        return g, x, wgt, wmat, out, cols

    def launch(g, x, wmat, out, cols):
        if implicit:
            return kernel.launcher(x, wmat, out, geometry=g)
        gemm.im2col(x, g, cols)
        run_gemm = kernel.launcher(cols, wmat, out)

        def both():
            gemm.im2col(x, g, cols)
            run_gemm()
        return both

    def check():
        g, x, wgt, wmat, out, cols = run(2, 5, 9, 11, 7, 3)
        launch(g, x, wmat, out, cols)()
        got = ref.conv_as_gemm_output(cp.asnumpy(out), g.n, wgt.shape[0], g.out_h, g.out_w)
        want = ref.conv2d(cp.asnumpy(x), cp.asnumpy(wgt), g.padding)
        want_gemm = want.transpose(0, 2, 3, 1).reshape(g.gemm_m, -1)  # back to the GEMM's M x K_filters
        check_result(f"conv {'implicit' if implicit else 'im2col'}", got, want, fmt="float16", k=g.gemm_k,
              gemm_view=(cp.asnumpy(out), want_gemm))
        return "correct"

    def bench():
        g, x, wgt, wmat, out, cols = run(32, 64, 56, 56, 128, 3)
        ours = launch(g, x, wmat, out, cols)
        try:
            import torch

            tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(wgt, device="cuda")
            peer = lambda: torch.nn.functional.conv2d(tx, tw, padding=g.padding)  # noqa: E731
            name = "cuDNN (torch conv2d)"
        except ImportError:
            peer, name = None, "no peer (torch not installed)"
        return ours, name, peer, 2 * g.gemm_m * 128 * g.gemm_k

    return kernel, check, bench


def case_pipeline(prec, depth=3, epilogue_name="identity"):
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import epilogues, gemm, references as ref
    from kernel_lab.tensor_cores.configs import PipelineConfig

    cfg = PipelineConfig(128, 256, 128 if prec == "int8" else 64, 256, prec, depth)  # 06.1's pipelines
    kernel = gemm.PipelineGemm(cfg, epilogues.by_name(epilogue_name, cfg.tile_m))
    dt = np.int8 if prec == "int8" else np.float16

    def run(m, n, k):
        a, b_t = _randn((m, k), dt), _randn((n, k), dt)
        out = cp.empty((m, n), kernel.out_dtype)
        out.fill(-7 if prec == "int8" and epilogue_name == "identity" else float("nan"))  # poison
        extra = (_randn((m,), np.float32),) if epilogue_name.startswith("bias_") else ()
        return a, b_t, out, extra

    def check():
        m, n, k = CHECK["m"], CHECK["n"], CHECK["k"]
        a, b_t, out, extra = run(m, n, k)
        kernel(a, b_t, out, *extra)
        want = ref.gemm(cp.asnumpy(a), cp.asnumpy(b_t).T)
        if extra:
            want = ref.bias_activation(want, cp.asnumpy(extra[0]), epilogue_name[5:])
        fmt = "int32" if prec == "int8" and not extra else ("float32" if prec == "int8" else "float16")
        check_result(f"{prec} pipeline {epilogue_name}", cp.asnumpy(out), want, fmt=fmt, k=k)
        return "correct"

    def bench():
        m, n, k = BENCH["m"], BENCH["n"], BENCH["k"]
        a, b_t, out, extra = run(m, n, k)
        ours = kernel.launcher(a, b_t, out, *extra)
        b = cp.ascontiguousarray(b_t.T)
        if prec == "float16":
            name, peer = _peer("float16", epilogue_name, a, b, extra, None)
            return ours, name, peer, 2 * m * n * k
        name, peer = _peer("int8", "identity", a, b, (), None)
        return ours, name, peer, 2 * m * n * k

    return kernel, check, bench


CASES = {
    "block_fp16": lambda: case_block("float16"),
    "block_fp16_acc": lambda: case_block("float16", fragment="accumulator"),
    "block_bf16": lambda: case_block("bfloat16"),
    "block_tf32": lambda: case_block("tf32"),
    "block_int8": lambda: case_block("int8"),
    "block_int8_quantize": lambda: case_block("int8", "quantize_int8"),
    "block_int4_w4a8": lambda: case_block("int4"),
    "epi_linear": lambda: case_block("float16", "linear"),
    "epi_bias_relu": lambda: case_block("float16", "bias_relu"),
    "epi_bias_gelu": lambda: case_block("float16", "bias_gelu"),
    "epi_bias_sigmoid": lambda: case_block("float16", "bias_sigmoid"),
    "epi_row_softmax": case_softmax,
    "batched_fp16": lambda: case_block("float16", batch=3),
    "conv_im2col": lambda: case_conv(False),
    "conv_implicit": lambda: case_conv(True),
    "pipeline_int8": lambda: case_pipeline("int8"),
    "pipeline_fp16": lambda: case_pipeline("float16"),
    "pipeline_fp16_bias_gelu": lambda: case_pipeline("float16", epilogue_name="bias_gelu"),
    "pipeline_int8_d6": lambda: case_pipeline("int8", depth=6),
    "pipeline_fp16_d6": lambda: case_pipeline("float16", depth=6),
}
# The default run: short, and decisive about the block GEMM's result mapping (fp16 and int8, whose
# register partitions differ), an epilogue, the pipeline API, and the same fp16 GEMM through
# nvmath's accumulator object (a cross-check of the register-fragment path).
CORE = ("block_fp16", "block_int8", "epi_bias_relu", "pipeline_int8", "block_fp16_acc")


# ---------------------------------------------------------------------------------------------


def _compile_case(name, part="check"):
    """Worker: build one case and compile it, through its check's launch ("check") or, for the
    pipeline GEMMs, which compile once per global shape, through the benchmark's ("bench")."""
    import kernel_lab  # noqa: F401

    t0 = time.perf_counter()
    try:
        kernel, check, bench = CASES[name]()
        if part == "check":
            check()  # compiles, then runs the small check once (also validates the worker's result)
        else:
            bench()  # builds the launcher at the benchmark's shape: compiles for it
        from kernel_lab.tensor_cores import codegen_cache

        return name, part, time.perf_counter() - t0, None, codegen_cache.stats()
    except Exception:  # noqa: BLE001
        return name, part, time.perf_counter() - t0, traceback.format_exc(), {}


def _median_ms(fn, repeat=10):
    import statistics

    from kernel_lab.bench import time_ms

    return statistics.median(time_ms(fn, warmup=2, repeat=repeat, flush_l2=True))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=300.0, help="seconds before remaining cases are skipped")
    parser.add_argument("--only", default=",".join(CORE),
                        help=f"comma-separated case names, or 'all' (default: {','.join(CORE)})")
    parser.add_argument("--cache-dir", default="", help="KERNEL_LAB_CACHE_DIR (default: a fresh temporary folder)")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--compile-only", action="store_true",
                        help="phase 1 only: fill the code-generation cache (and run the small checks)")
    args = parser.parse_args()
    names = list(CASES) if args.only.strip() == "all" else [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    global LOG_FILE
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        LOG_FILE = out_dir / "module06_smoke.log"
        LOG_FILE.write_text("")
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="kl06-cache-")
    os.environ["KERNEL_LAB_CACHE_DIR"] = cache_dir  # inherited by the workers
    deadline = T_START + args.budget

    import kernel_lab as kl

    env = kl.setup(requires=["gpu", "nvmath", "cupy", "cc>=8.0", "cuda>=13"])
    log(f"GPU: {env.gpu.name}; {_versions()}")
    log(f"cases: {', '.join(names)}; budget {args.budget:.0f} s; cache folder (empty at start): {cache_dir}")
    rows = {n: {"case": n} for n in names}

    # Phase 1: cold compiles, in parallel worker processes.
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    workers = args.workers or max(1, min(len(names) + 4, (os.cpu_count() or 2) - 1, 16))
    log(f"phase 1: first compile of {len(names)} cases in {workers} worker processes (empty cache)")
    t1 = time.time()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
    try:
        jobs = [(n, "check") for n in names] + [(n, "bench") for n in names if n.startswith("pipeline")]
        futures = {pool.submit(_compile_case, n, part): n for n, part in jobs}
        for fut in as_completed(futures, timeout=max(30.0, deadline - time.time() - 120)):
            name, part, seconds, error, stats = fut.result()
            key = "first_compile" if part == "check" else "first_compile_bench_shape"
            rows[name][f"{key}_s"] = round(seconds, 1)
            rows[name][f"{key}_stats"] = stats
            if error:
                rows[name][f"{key}_error"] = error
                log(f"[{name}] ({part}) FAILED in the worker after {seconds:.0f} s:\n{error}")
            else:
                log(f"[{name}] first compile ({part} shape): {seconds:.0f} s, codegen {stats}")
            _save_json(out_dir, rows)
    except Exception:  # noqa: BLE001 - timeouts or a broken pool: phase 2 still runs
        log("phase 1 did not finish:\n" + traceback.format_exc())
    finally:
        # Do not wait for a worker still compiling: stop the ones this script started, by pid.
        procs = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                log(f"stopping worker process {proc.pid} (still running at the phase-1 deadline)")
                proc.terminate()
    log(f"phase 1 took {time.time() - t1:.0f} s")

    if args.compile_only:
        failed = [n for n in names if any(k.endswith("_error") for k in rows[n])]
        log(f"compile-only: {len(names) - len(failed)} of {len(names)} cases compiled and checked"
            + (f"; failed: {', '.join(failed)}" if failed else ""))
        _save_json(out_dir, rows)
        return 1 if failed else 0

    # Phase 2: cached compile (this process), check, benchmark.
    from kernel_lab.tensor_cores import codegen_cache

    codegen_cache.enable()
    for name in names:
        row = rows[name]
        if time.time() > deadline:
            row["status"] = "skipped: time budget exceeded"
            log(f"[{name}] skipped: the {args.budget:.0f} s budget is spent")
            continue
        t0 = time.perf_counter()
        try:
            before = dict(codegen_cache.stats())
            kernel, check, bench = CASES[name]()  # builds the kernel: code generation (cached) happens here too
            build_s = time.perf_counter() - t0
            row["check"] = check()
            row["cached_compile_s"] = round(build_s + (kernel.compile_seconds or 0.0), 1)
            row["cached_build_s"] = round(build_s, 1)
            after = codegen_cache.stats()
            row["cached_codegen_misses"] = after.get("misses", 0) - before.get("misses", 0)
            if time.time() + 20 < deadline:
                ours, peer_name, peer, flops = bench()
                ms = _median_ms(ours)
                row["ms"] = round(ms, 4)
                row["tflops"] = round(flops / ms / 1e9, 1)
                row["peer"] = peer_name
                if peer is not None:
                    try:
                        pms = _median_ms(peer)
                        row["peer_ms"] = round(pms, 4)
                        row["peer_tflops"] = round(flops / pms / 1e9, 1)
                        row["vs_peer"] = round(pms / ms, 2)
                    except Exception as exc:  # noqa: BLE001 - a failing peer does not fail our kernel
                        row["peer"] = f"{peer_name} FAILED: {type(exc).__name__}: {exc}"[:200]
            try:  # registers and local memory (spills) per thread of the compiled kernel(s)
                regs = kernel.dispatcher.get_regs_per_thread()
                lmem = kernel.dispatcher.get_local_mem_per_thread()
                row["regs"] = sorted(set(regs.values())) if isinstance(regs, dict) else regs
                row["local_mem"] = sorted(set(lmem.values())) if isinstance(lmem, dict) else lmem
            except Exception as exc:  # noqa: BLE001
                row["regs"] = f"unavailable: {type(exc).__name__}"
            row["status"] = "ok"
            log(f"[{name}] {json.dumps({k: v for k, v in row.items() if not k.endswith('_stats')})}")
        except Exception:  # noqa: BLE001
            row["status"] = "FAILED"
            row["error"] = traceback.format_exc()
            log(f"[{name}] FAILED:\n{row['error']}")
        _save_json(out_dir, rows)

    # Table
    log("")
    log(f"{'case':<22}{'status':<10}{'1st compile':>12}{'cached':>8}{'check':>9}{'TFLOP/s':>9}{'peer':>9}"
        f"{'vs peer':>8}  peer")
    for name in names:
        r = rows[name]
        log(f"{name:<22}{str(r.get('status', '-'))[:9]:<10}{_f(r.get('first_compile_s'), 's'):>12}"
            f"{_f(r.get('cached_compile_s'), 's'):>8}{str(r.get('check', '-'))[:8]:>9}{_f(r.get('tflops')):>9}"
            f"{_f(r.get('peer_tflops')):>9}{_f(r.get('vs_peer'), 'x'):>8}  {r.get('peer', '')}")
    log(f"GPU: {env.gpu.name}; total {time.time() - T_START:.0f} s; codegen cache {codegen_cache.stats()}; "
        f"disk {codegen_cache.disk_usage(Path(cache_dir) / 'mathdx-codegen')}")
    _save_json(out_dir, rows)
    failed = [n for n in names if rows[n].get("status") == "FAILED"]
    return 1 if failed else 0


def _save_json(out_dir, rows):
    if out_dir:
        try:
            (out_dir / "module06_smoke.json").write_text(json.dumps(rows, indent=1, default=str))
        except OSError:
            pass


def _versions() -> str:
    import importlib.metadata as md
    import platform

    parts = [f"python {platform.python_version()}"]
    for dist in ("numba", "numba-cuda", "nvmath-python", "nvidia-libmathdx-cu13", "nvidia-cuda-cccl",
                 "nvidia-cuda-nvrtc", "cupy-cuda13x", "ml_dtypes", "torch"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(parts)


def _f(v, unit=""):
    return "-" if v is None else f"{v}{unit}"


if __name__ == "__main__":
    sys.exit(main())
