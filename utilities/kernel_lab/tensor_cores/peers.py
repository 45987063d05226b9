"""The library GEMMs a user would pick instead of our kernels, measured honestly.

``CublasLtInt8``
    int8 x int8 -> int32 through cuBLASLt's integer tensor-core (IMMA) kernels, called through
    nvmath-python's bindings of cuBLASLt (``nvmath.bindings.cublasLt``). nvmath-python 1.0's
    high-level ``matmul`` does not take int8 operands, so the bindings are the way to reach the
    same library through nvmath. ``torch._int_mm`` is not this peer: it reached a sixth of cuBLAS
    fp16 on an H100.

``emulated_dgemm``
    cuBLAS's own FP64 emulation on INT8 tensor cores (the ``COMPUTE_64F_EMULATED_FIXEDPOINT``
    compute type), through nvmath-python's ``matmul``, where the installed cuBLAS offers it.

Both take CuPy arrays. Layouts: cuBLASLt is column-major; a row-major (M, N) result is the
column-major (N, M) matrix ``C^T = B^T A^T``, so the operands are passed swapped: cuBLASLt's A is
our ``b_t`` (N, K row-major = K x N column-major, transposed by the operation), its B is our ``a``.
"""

from __future__ import annotations

import numpy as np


class CublasLtInt8:
    """``out (M, N) int32 = a (M, K) int8 @ b_t.T`` with ``b_t`` (N, K) int8, all row-major.

    Plans once per shape (heuristic algorithm choice, as cuBLAS itself would), then launches.
    """

    WORKSPACE_BYTES = 32 << 20

    def __init__(self, m: int, n: int, k: int):
        import cupy as cp
        from nvmath.bindings import cublas
        from nvmath.bindings import cublasLt as lt
        from nvmath.internal.typemaps import cudaDataType

        self.shape = (m, n, k)
        self._lt = lt
        self.handle = lt.create()
        self.desc = lt.matmul_desc_create(cublas.ComputeType.COMPUTE_32I, cudaDataType.CUDA_R_32I)
        trans = np.array([cublas.Operation.T], dtype=np.int32)
        lt.matmul_desc_set_attribute(self.desc, lt.MatmulDescAttribute.TRANSA, trans.ctypes.data, trans.nbytes)
        self.a_layout = lt.matrix_layout_create(cudaDataType.CUDA_R_8I, k, n, k)  # b_t: K x N col-major
        self.b_layout = lt.matrix_layout_create(cudaDataType.CUDA_R_8I, k, m, k)  # a:   K x M col-major
        self.c_layout = lt.matrix_layout_create(cudaDataType.CUDA_R_32I, n, m, n)  # out: N x M col-major
        self.pref = lt.matmul_preference_create()
        ws = np.array([self.WORKSPACE_BYTES], dtype=np.uint64)
        lt.matmul_preference_set_attribute(self.pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
                                           ws.ctypes.data, ws.nbytes)
        self.heuristics = np.zeros(1, dtype=lt.matmul_heuristic_result_dtype)
        found = np.zeros(1, dtype=np.int32)
        lt.matmul_algo_get_heuristic(self.handle, self.desc, self.a_layout, self.b_layout, self.c_layout,
                                     self.c_layout, self.pref, 1, self.heuristics.ctypes.data, found.ctypes.data)
        if found[0] < 1:
            raise RuntimeError(f"cuBLASLt has no int8 algorithm for {m}x{n}x{k} on this GPU")
        self.workspace = cp.empty(self.WORKSPACE_BYTES, dtype=cp.uint8)
        self._alpha = np.array([1], dtype=np.int32)
        self._beta = np.array([0], dtype=np.int32)

    def __call__(self, a, b_t, out, stream: int = 0):
        m, n, k = self.shape
        if a.shape != (m, k) or b_t.shape != (n, k) or out.shape != (m, n):
            raise ValueError(f"planned for a {m}x{k}, b_t {n}x{k}, out {m}x{n}; got {a.shape}, {b_t.shape}, {out.shape}")
        if a.dtype != np.int8 or b_t.dtype != np.int8 or out.dtype != np.int32:
            raise ValueError("cuBLASLt's int8 GEMM takes int8 operands and an int32 result")
        for x in (a, b_t, out):
            if not x.flags.c_contiguous:
                raise ValueError("operands must be C-contiguous (row-major)")
        self._lt.matmul(self.handle, self.desc, self._alpha.ctypes.data, b_t.data.ptr, self.a_layout,
                        a.data.ptr, self.b_layout, self._beta.ctypes.data, out.data.ptr, self.c_layout,
                        out.data.ptr, self.c_layout, self.heuristics.ctypes.data, self.workspace.data.ptr,
                        self.WORKSPACE_BYTES, stream)
        return out

    def close(self):
        lt = self._lt
        for destroy, obj in ((lt.matmul_preference_destroy, "pref"), (lt.matrix_layout_destroy, "a_layout"),
                             (lt.matrix_layout_destroy, "b_layout"), (lt.matrix_layout_destroy, "c_layout"),
                             (lt.matmul_desc_destroy, "desc"), (lt.destroy, "handle")):
            if getattr(self, obj, None) is not None:
                destroy(getattr(self, obj))
                setattr(self, obj, None)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def emulated_dgemm_available() -> str | None:
    """None if cuBLAS here offers FP64 emulation on integer tensor cores, else the reason it does not."""
    try:
        from nvmath.bindings import cublas

        getattr(cublas.ComputeType, "COMPUTE_64F_EMULATED_FIXEDPOINT")
    except (ImportError, AttributeError) as exc:
        return f"nvmath-python's cuBLAS bindings have no COMPUTE_64F_EMULATED_FIXEDPOINT ({exc})"
    return None


def emulated_dgemm(a, b):
    """``a @ b`` in float64 through cuBLAS's fixed-point FP64 emulation (nvmath-python ``matmul``)."""
    import nvmath
    from nvmath.bindings import cublas

    options = {"compute_type": cublas.ComputeType.COMPUTE_64F_EMULATED_FIXEDPOINT}
    return nvmath.linalg.advanced.matmul(a, b, options=options)
