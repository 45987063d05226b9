"""FP64 GEMM emulated on INT8 tensor cores, measured against native DGEMM: ``python -m kernel_lab.ozaki.bench``.

For every method (unfused, partly fused, fully fused) and size, end to end (slicing included):
time (CUDA events, median, L2 flushed), FP64-equivalent TFLOP/s (2MNK / time), the ratio to cuBLAS
DGEMM timed in the same run (CuPy), the INT8 rate inside the products, and the error against an
accurate reference (compensated dot products on a sample of rows): norm-wise, and componentwise in
units of u * (|A| @ |B|). Native DGEMM's own error is printed in the same units for comparison.
The peers follow: cuBLASLt's INT8 GEMM (the rate the products could reach) and, where cuBLAS
offers it, its own FP64 emulation.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from ..validate import KernelLabArgumentError

METHOD_LABELS = {"unfused": "unfused (a product per pair)", "partial": "partly fused (a sum per diagonal)",
                 "fused": "fully fused"}


def _inputs(n_or_shape, seed):
    import cupy as cp

    m, n, k = (n_or_shape,) * 3 if np.isscalar(n_or_shape) else n_or_shape
    rs = cp.random.RandomState(seed)
    return rs.standard_normal((m, k)), rs.standard_normal((k, n)), (m, n, k)


def measure(sizes=(2048, 4096, 8192), methods=("unfused", "partial", "fused"), slices: int = 7, config=None,
            sample_rows: int = 16, repeat: int = 7, warm: bool = True, log=print) -> dict:
    """Measure every (method, size); ``sizes`` are N (for N^3) or (M, N, K). Returns a dict of rows."""
    from . import gpu

    for mth in methods:
        if mth not in gpu.METHODS:
            raise KernelLabArgumentError(f"unknown method {mth!r}; methods: {gpu.METHODS}")
    why = gpu.why_not_here()
    if why:
        raise KernelLabArgumentError(f"the emulated GEMMs cannot run here: {why}")
    import cupy as cp

    from ..bench import time_ms
    from .reference import U64, accurate_matmul

    config = config or gpu.OzakiConfig()
    shapes = [(s,) * 3 if np.isscalar(s) else tuple(s) for s in sizes]
    if warm:
        gpu.precompile([(mth, shape, slices, config) for shape in shapes for mth in methods], log=None)
    rows = []
    for shape in shapes:
        a, b, (m, n, k) = _inputs(shape, seed=sum(shape))
        flops = 2.0 * m * n * k
        c = cp.empty((m, n))
        t_dgemm = statistics.median(time_ms(lambda: cp.matmul(a, b, out=c), repeat=repeat))
        pick = np.linspace(0, m - 1, min(sample_rows, m)).astype(int)
        a_rows, b_host = cp.asnumpy(a[pick]), cp.asnumpy(b)
        ref = accurate_matmul(a_rows, b_host)
        scale = U64 * (np.abs(a_rows) @ np.abs(b_host))

        def err(got):
            d = cp.asnumpy(got[pick]) - ref
            return float(np.linalg.norm(d) / np.linalg.norm(ref)), float(np.max(np.abs(d) / scale))

        e_dgemm = err(c)
        rows.append(dict(method="cuBLAS DGEMM", shape=shape, ms=t_dgemm, tflops=flops / t_dgemm / 1e9, ratio=1.0,
                         normwise=e_dgemm[0], componentwise=e_dgemm[1]))
        for mth in methods:
            g = gpu.OzakiGemm(slices, mth, config)
            g(a, b, c)
            t = statistics.median(time_ms(lambda: g(a, b, c), repeat=repeat))
            st = next(iter(g._shape_state.values()))
            t_slice = statistics.median(time_ms(lambda: g.slice_operands(a, b, st), repeat=repeat))
            e = err(c)
            products = slices * (slices + 1) // 2
            rows.append(dict(method=METHOD_LABELS[mth], shape=shape, ms=t, tflops=flops / t / 1e9,
                             ratio=t_dgemm / t, normwise=e[0], componentwise=e[1], slicing_ms=t_slice,
                             int8_tops=products * flops / max(t - t_slice, 1e-9) / 1e9))
            g = None  # frees its buffers before the next method allocates
            if log:
                r = rows[-1]
                log(f"{r['method']:<34} {'x'.join(map(str, shape)):>16}  {r['ms']:8.2f} ms  "
                    f"{r['tflops']:6.1f} TFLOP/s  {r['ratio']:5.2f}x DGEMM  error {r['normwise']:.1e}")
        a = b = c = None
        cp.get_default_memory_pool().free_all_blocks()
    return {"rows": rows, "slices": slices, "config": config.label()}


def peers(n: int = 8192, repeat: int = 7) -> list[dict]:
    """cuBLASLt INT8 (nvmath-python's bindings) and cuBLAS's FP64 emulation, at n^3."""
    import cupy as cp

    from ..bench import time_ms
    from ..tensor_cores import peers as pr

    out = []
    a8 = cp.random.randint(-128, 128, (n, n), dtype=cp.int8)
    b8 = cp.random.randint(-128, 128, (n, n), dtype=cp.int8)
    c32 = cp.empty((n, n), dtype=cp.int32)
    lt = pr.CublasLtInt8(n, n, n)
    t = statistics.median(time_ms(lambda: lt(a8, b8, c32), repeat=repeat))
    out.append(dict(name="cuBLASLt INT8 GEMM", n=n, ms=t, tops=2.0 * n**3 / t / 1e9))
    why = pr.emulated_dgemm_available()
    if why is None:
        a = cp.random.standard_normal((n, n))
        b = cp.random.standard_normal((n, n))
        try:
            t = statistics.median(time_ms(lambda: pr.emulated_dgemm(a, b), repeat=max(3, repeat // 2)))
            out.append(dict(name="cuBLAS FP64 emulation", n=n, ms=t, tflops=2.0 * n**3 / t / 1e9))
        except Exception as exc:  # noqa: BLE001 - a peer that does not run is reported, not fatal
            out.append(dict(name="cuBLAS FP64 emulation", n=n, error=f"{type(exc).__name__}: {exc}"))
    else:
        out.append(dict(name="cuBLAS FP64 emulation", n=n, error=why))
    return out


def format_table(result: dict) -> str:
    lines = [f"{'method':<34} {'M x N x K':>16} {'ms':>9} {'TFLOP/s':>8} {'vs DGEMM':>9} {'norm-wise':>10} "
             f"{'comp. (u)':>10}"]
    for r in result["rows"]:
        lines.append(f"{r['method']:<34} {'x'.join(map(str, r['shape'])):>16} {r['ms']:9.2f} {r['tflops']:8.1f} "
                     f"{r['ratio']:8.2f}x {r['normwise']:10.1e} {r['componentwise']:10.1f}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m kernel_lab.ozaki.bench",
                                description="FP64 GEMM emulated on INT8 tensor cores vs cuBLAS DGEMM")
    p.add_argument("--sizes", default="2048,4096,8192", help="N for N^3, or MxNxK, comma-separated")
    p.add_argument("--methods", default="unfused,partial,fused")
    p.add_argument("--slices", type=int, default=7)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--no-peers", action="store_true")
    args = p.parse_args(argv)
    import kernel_lab as kl

    kl.environment.setup_command("python -m kernel_lab.ozaki.bench", ["gpu", "nvmath", "cupy", "cc>=9.0", "cuda>=13"])
    sizes = []
    for s in args.sizes.split(","):
        dims = [int(x) for x in s.split("x")]
        sizes.append(dims[0] if len(dims) == 1 else tuple(dims))
    result = measure(sizes, args.methods.split(","), args.slices, repeat=args.repeat)
    print()
    print(f"{args.slices} slices, pipeline {result['config']}, on {kl.gpu_info().name}")
    print(format_table(result))
    if not args.no_peers:
        for r in peers(max(s if np.isscalar(s) else max(s) for s in sizes)):
            print(r)


if __name__ == "__main__":
    main()
