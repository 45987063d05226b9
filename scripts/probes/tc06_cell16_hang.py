#!/usr/bin/env python3
"""Where 06.1's int8 comparison cell (code cell 16) stops on an H100: it ran past 350 s twice,
after every earlier cell had finished. Runs that cell's statements one at a time, printing each
before it starts and its duration after; faulthandler prints every thread's stack each 20 s, so a
hang names its line.

    PYTHONPATH=utilities python3 scripts/probes/tc06_cell16_hang.py
"""
import faulthandler
import sys
import time

faulthandler.dump_traceback_later(20, repeat=True)

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402

kl.setup(requires=["gpu", "nvmath", "cupy"])
import cupy as cp  # noqa: E402

from kernel_lab.tensor_cores import codegen_cache, gemm, peers  # noqa: E402
from kernel_lab.tensor_cores.configs import GemmConfig, PipelineConfig  # noqa: E402

codegen_cache.enable(quiet=False)
N = 4096
flops = 2 * N**3
t_start = time.perf_counter()


def step(label, fn):
    print(f"[{time.perf_counter() - t_start:6.1f} s] {label} ...", flush=True)
    t0 = time.perf_counter()
    out = fn()
    cp.cuda.runtime.deviceSynchronize()
    print(f"           done in {time.perf_counter() - t0:.1f} s", flush=True)
    return out


pipe = gemm.PipelineGemm(PipelineConfig(128, 128, 64, 128, "int8", depth=3))
int8_block = gemm.BlockGemm(GemmConfig(128, 128, 64, 256, "int8"))
a8 = cp.asarray(np.random.default_rng(4).integers(-127, 128, (N, N), dtype=np.int8))
bt8 = cp.asarray(np.random.default_rng(5).integers(-127, 128, (N, N), dtype=np.int8))
out8 = cp.empty((N, N), dtype=cp.int32)
b8 = cp.ascontiguousarray(bt8.T)
lt = step("CublasLtInt8(N, N, N)", lambda: peers.CublasLtInt8(N, N, N))
out_lt = cp.empty((N, N), dtype=cp.int32)
step("lt(a8, bt8, out_lt)", lambda: lt(a8, bt8, out_lt))
launch = step("pipe.launcher (compile int8 pipeline at 4096)", lambda: pipe.launcher(a8, bt8, out8))
step("int8 pipeline, one launch", launch)
print("agree:", bool(cp.array_equal(out_lt, out8)), flush=True)
step("benchmark int8 pipeline", lambda: kl.benchmark("int8 pipeline", launch, flops=flops))
blaunch = step("int8 BlockGemm launcher (compile)", lambda: int8_block.launcher(a8, b8, out8))
step("int8 BlockGemm, one launch", blaunch)
step("benchmark int8 BlockGemm", lambda: kl.benchmark("int8 BlockGemm", blaunch, flops=flops))
try:
    import torch

    ta, tb = torch.as_tensor(a8, device="cuda"), torch.as_tensor(b8, device="cuda")
    step("torch._int_mm once", lambda: torch._int_mm(ta, tb))
    step("benchmark torch._int_mm", lambda: kl.benchmark("torch._int_mm", lambda: torch._int_mm(ta, tb), flops=flops))
except ImportError:
    print("no torch")
step("benchmark cuBLASLt", lambda: kl.benchmark("cuBLASLt int8", lambda: lt(a8, bt8, out_lt), flops=flops))
print("all steps finished", flush=True)
faulthandler.cancel_dump_traceback_later()
sys.exit(0)
