"""06.5's detective checks (kernel_lab.checks.detective): the script compute-sanitizer runs on a GPU
is sound (run here by the simulator instead), and each planted bug, as course/ hands it out, is
reported with the tool's words, while its fix passes. The notebook cells themselves run in
tests/test_module06_cpu_cells.py."""

import os
import subprocess
import sys
import textwrap

KERNELS = textwrap.dedent('''
    import numpy as np
    from numba import cuda
    from kernel_lab.checks import detective
    TILE, ROWS = detective.TILE, detective.ROWS

    @cuda.jit
    def tiled_gemm(a, b, c, m, n, k):
        sa = cuda.shared.array((TILE, TILE), np.float32)
        sb = cuda.shared.array((TILE, TILE), np.float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row, col = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
        acc = np.float32(0)
        for k0 in range(0, k, TILE):
            sa[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < k else np.float32(0)
            sb[ty, tx] = b[k0 + ty, col] if k0 + ty < k and col < n else np.float32(0)
            cuda.syncthreads()
            for kk in range(TILE):
                acc += sa[ty, kk] * sb[kk, tx]
            cuda.syncthreads()
        if row < m and col < n:
            c[row, col] = acc

    @cuda.jit
    def bias_relu(x, bias, out, m, n):
        row = cuda.blockIdx.y * ROWS + cuda.threadIdx.y
        col = cuda.blockIdx.x * 32 + cuda.threadIdx.x
        if row < m and col < n:
            out[row, col] = max(x[row, col] + bias[row], np.float32(0))
''')

SCRIPT = textwrap.dedent('''
    import sys
    import kernel_lab as kl
    kl.setup(quiet=True)
    sys.path.insert(0, sys.argv[1])
    import planted_kernels as pk
    from kernel_lab.checks import detective
    for kernel, launch, constants in ((pk.tiled_gemm, detective.GEMM_LAUNCH, {"TILE": 16}),
                                      (pk.bias_relu, detective.BIAS_LAUNCH, {"ROWS": 8})):
        r = detective.run_script_on_cpu(kernel, launch.format(kernel=kernel.py_func.__name__), constants)
        print(kernel.__name__, r.returncode, r.stderr[-800:])
''')


def test_the_sanitizer_scripts_run(tmp_path):
    (tmp_path / "planted_kernels.py").write_text(KERNELS)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "KERNEL_LAB_QUIET": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tiled_gemm 0" in r.stdout and "bias_relu 0" in r.stdout, r.stdout[-3000:]
