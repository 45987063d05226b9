"""Argument checks for the GEMM launchers: one readable sentence per mistake.

A tensor-core kernel given the wrong thing rarely fails cleanly: a transposed view is read as if
it were dense (wrong numbers), a float32 array passed where float16 is expected is read as pairs
of halves (garbage), an int8 B that is not K-major... Each launcher calls these checks first.
They work on anything with ``__cuda_array_interface__`` or ``__array_interface__`` (CuPy, PyTorch,
Numba, NumPy) and on plain shape/dtype/stride descriptions, so they are unit-tested on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validate import KernelLabArgumentError

ALIGNMENT_BYTES = 16


class GemmArgumentError(KernelLabArgumentError):
    """A GEMM launcher was given arguments it cannot use; the message says which and how to fix it."""


@dataclass(frozen=True)
class ArrayInfo:
    shape: tuple
    dtype: np.dtype
    strides: tuple  # bytes
    ptr: int

    @property
    def c_contiguous(self) -> bool:
        step = self.dtype.itemsize
        for extent, stride in zip(reversed(self.shape), reversed(self.strides)):
            if extent > 1 and stride != step:
                return False
            step *= extent
        return True


def info(arr, name: str) -> ArrayInfo:
    """Shape, dtype, byte strides and data pointer of an array-like (host or device)."""
    if isinstance(arr, ArrayInfo):
        return arr
    iface = getattr(arr, "__cuda_array_interface__", None) or getattr(arr, "__array_interface__", None)
    if iface is None:
        raise GemmArgumentError(f"{name} must be an array (CuPy, PyTorch, Numba or NumPy), got {type(arr).__name__}")
    shape = tuple(int(s) for s in iface["shape"])
    dtype = _dtype_of(arr, iface)
    strides = iface.get("strides")
    if strides is None:
        strides, step = [], dtype.itemsize
        for extent in reversed(shape):
            strides.append(step)
            step *= extent
        strides = tuple(reversed(strides))
    ptr = int(iface["data"][0]) if iface.get("data") else 0
    return ArrayInfo(shape, dtype, tuple(int(s) for s in strides), ptr)


def _dtype_of(arr, iface):
    d = getattr(arr, "dtype", None)
    try:
        return np.dtype(d) if d is not None else np.dtype(iface["typestr"])
    except TypeError:
        return np.dtype(iface["typestr"])


def _dtype_name(dt) -> str:
    return np.dtype(dt).name


def expected_input_dtype(precision: str, operand: str = "a") -> np.dtype:
    from .precisions import host_dtype

    if precision == "int4":
        return np.dtype(np.int8) if operand == "a" else np.dtype(np.uint8)
    return host_dtype(precision)


def check_operand(arr, name: str, *, precision: str, operand: str, ndim=(2, 3)) -> ArrayInfo:
    a = info(arr, name)
    if len(a.shape) not in ndim:
        raise GemmArgumentError(f"{name} must be 2-D (rows, columns) or 3-D (batch, rows, columns), got shape {a.shape}")
    want = expected_input_dtype(precision, operand)
    if a.dtype != want:
        hint = {"tf32": " (tf32 operands are float32 arrays)",
                "int4": " (int4 operands are packed two per byte: kernel_lab.tensor_cores.references.pack_int4)"}
        raise GemmArgumentError(f"{name} has dtype {a.dtype.name}, but a {precision} GEMM reads {want.name}"
                                f"{hint.get(precision, '')}; convert it with .astype(...) first")
    inner = a.strides[-2:]
    dense_rows = a.shape[-1] <= 1 or inner[1] == a.dtype.itemsize
    if not dense_rows or (a.shape[-2] > 1 and inner[0] != a.shape[-1] * a.dtype.itemsize):
        raise GemmArgumentError(f"{name} is not a dense row-major matrix (strides {a.strides} bytes for shape "
                                f"{a.shape}): a transposed or sliced view? Pass cupy.ascontiguousarray({name})")
    if len(a.shape) == 3 and a.strides[0] not in (0, a.shape[1] * a.shape[2] * a.dtype.itemsize) and a.shape[0] > 1:
        raise GemmArgumentError(f"{name}'s batches must be back to back or shared (batch stride 0), got a batch "
                                f"stride of {a.strides[0]} bytes")
    return a


def check_gemm(a, b, out, *, m, n, k, precision, out_dtype):
    """Shapes, dtypes and layouts of ``out = A @ B`` (A may be None: gathered by the kernel)."""
    bi = check_operand(b, "b", precision=precision, operand="b")
    oi = info(out, "out")
    if a is not None:
        ai = check_operand(a, "a", precision=precision, operand="a")
        if ai.shape[-1] != bi.shape[-2]:
            raise GemmArgumentError(f"inner dimensions differ: a is {ai.shape[-2]} x {ai.shape[-1]} but b is "
                                    f"{bi.shape[-2]} x {bi.shape[-1]}: A @ B needs a's columns == b's rows")
    kb = bi.shape[-2]
    nb = bi.shape[-1] * (2 if precision == "int4" else 1)
    if kb != k:
        raise GemmArgumentError(f"b has {kb} rows but the reduction length K is {k}")
    if nb != n and not (precision == "int4" and nb == n + 1):
        raise GemmArgumentError(f"out has {n} columns but b provides {nb}")
    if oi.shape[-2] != m:
        raise GemmArgumentError(f"out has {oi.shape[-2]} rows but A has {m}")
    if oi.dtype != np.dtype(out_dtype):
        raise GemmArgumentError(f"out has dtype {oi.dtype.name}; this kernel's epilogue writes {np.dtype(out_dtype).name}")
    if not oi.c_contiguous:
        raise GemmArgumentError("out must be C-contiguous (a fresh cupy.empty((M, N), ...))")
    for name, x in (("a", a), ("b", b)):
        if x is None:
            continue
        xi = info(x, name)
        if len(xi.shape) == 3 and len(oi.shape) == 3 and xi.shape[0] not in (1, oi.shape[0]):
            raise GemmArgumentError(f"{name} has a batch of {xi.shape[0]} but out has {oi.shape[0]}")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if v < 1:
            raise GemmArgumentError(f"{name} must be at least 1, got {v}")
        if v >= 2**31:
            raise GemmArgumentError(f"{name} = {v} does not fit the kernel's 32-bit indices")


def check_alignment(arr, name: str, nbytes: int = ALIGNMENT_BYTES) -> None:
    a = info(arr, name)
    if a.ptr % nbytes:
        raise GemmArgumentError(f"{name} starts at an address that is not a multiple of {nbytes} bytes "
                                f"(0x{a.ptr:x}): a view that begins mid-row? Copy it (cupy.ascontiguousarray)")
    row = a.strides[-2] if len(a.shape) >= 2 else a.dtype.itemsize
    if row % nbytes:
        raise GemmArgumentError(f"{name}'s rows are {row} bytes apart, not a multiple of {nbytes}: vectorized "
                                "copies need whole 16-byte rows (pad K to a multiple of 16 bytes)")


def check_pipeline(a, b_t, out, *, precision, out_dtype):
    """The pipeline GEMM reads ``a`` (M, K) and ``b_t`` (N, K), both row-major, K contiguous."""
    ai = check_operand(a, "a", precision=precision, operand="a", ndim=(2,))
    bi = check_operand(b_t, "b_t", precision=precision, operand="b", ndim=(2,))
    if ai.shape[1] != bi.shape[1]:
        raise GemmArgumentError(f"a is {ai.shape[0]} x {ai.shape[1]} and b_t is {bi.shape[0]} x {bi.shape[1]}: "
                                "b_t is B transposed (N x K), so both must have K columns")
    oi = info(out, "out")
    want = (ai.shape[0], bi.shape[0])
    if oi.shape[-2:] != want:
        raise GemmArgumentError(f"out has shape {oi.shape}, expected {want} (M x N)")
    if oi.dtype != np.dtype(out_dtype):
        raise GemmArgumentError(f"out has dtype {oi.dtype.name}; this kernel's epilogue writes {np.dtype(out_dtype).name}")
    # The kernel stores whole tiles with 16-byte vector stores, rows N elements apart.
    rows = (oi.strides[-2], oi.strides[-1]) if len(oi.shape) >= 2 else None
    if rows != (want[1] * oi.dtype.itemsize, oi.dtype.itemsize) and want[0] > 1:
        raise GemmArgumentError(f"out must be C-contiguous (rows of N = {want[1]} elements, one after the other), got "
                                f"byte strides {oi.strides}: pass a fresh array, or out.copy()")
    if oi.ptr % 16:
        raise GemmArgumentError("out must start on a 16-byte boundary (a fresh CuPy or Numba array does): the "
                                "kernel stores whole tiles with 16-byte stores")


def check_epilogue_args(epilogue, args, *, m, n, batch, tiles_n):
    """The extra arguments an epilogue needs, by name, with their shapes."""
    names = epilogue.arg_names
    if len(args) != len(names):
        listed = ", ".join(names) if names else "nothing"
        raise GemmArgumentError(f"the {epilogue.name} epilogue takes {len(names)} extra argument(s) ({listed}), "
                                f"got {len(args)}")
    for name, value in zip(names, args):
        if name in ("alpha", "beta", "gamma", "scale"):
            if not isinstance(value, (int, float, np.floating, np.integer)) or isinstance(value, bool):
                raise GemmArgumentError(f"{name} must be a number, got {type(value).__name__}")
        elif name == "zero_point":
            if not isinstance(value, (int, np.integer)) or not -128 <= int(value) <= 127:
                raise GemmArgumentError(f"zero_point must be a whole number in [-128, 127], got {value!r}")
        elif name == "bias":
            bi = info(value, "bias")
            if bi.shape != (m,) or bi.dtype != np.float32:
                raise GemmArgumentError(f"bias must be a float32 vector with one value per output row, shape ({m},); "
                                        f"got {bi.shape} {bi.dtype.name}")
        elif name == "c":
            ci = info(value, "c")
            if ci.shape[-2:] != (m, n) or ci.dtype != np.float32:
                raise GemmArgumentError(f"c must be float32 with the output's shape ({m}, {n}); got {ci.shape} "
                                        f"{ci.dtype.name}")
            if len(ci.shape) != 3:
                raise GemmArgumentError("pass c as a 3-D (batch, M, N) array (c[None] for one matrix)")
        elif name in ("row_max", "row_sum"):
            ri = info(value, name)
            if ri.shape != (batch, m, tiles_n) or ri.dtype != np.float32:
                raise GemmArgumentError(f"{name} must be float32 of shape (batch, M, tiles along N) = "
                                        f"{(batch, m, tiles_n)}; got {ri.shape} {ri.dtype.name}")


def as_batched(x, name: str):
    """A 2-D (rows, cols) device array as a (1, rows, cols) view; 3-D arrays unchanged."""
    nd = len(x.shape)
    if nd == 2:
        return x.reshape(1, x.shape[0], x.shape[1])
    if nd == 3:
        return x
    raise GemmArgumentError(f"{name} must be 2-D or 3-D, got shape {tuple(x.shape)}")


@dataclass(frozen=True)
class ConvGeometry:
    """A stride-1 2-D convolution of an (n, c, h, w) image with (k, c, r, s) filters, zero padding."""

    n: int
    c: int
    h: int
    w: int
    r: int
    s: int
    padding: int = 0

    def __post_init__(self):
        for f in ("n", "c", "h", "w", "r", "s"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise GemmArgumentError(f"convolution {f} must be a whole number >= 1, got {v!r}")
        if self.padding < 0:
            raise GemmArgumentError(f"padding must be >= 0, got {self.padding}")
        if self.out_h < 1 or self.out_w < 1:
            raise GemmArgumentError(f"a {self.r}x{self.s} filter does not fit a {self.h}x{self.w} image with "
                                    f"padding {self.padding}")

    @property
    def out_h(self) -> int:
        return self.h + 2 * self.padding - self.r + 1

    @property
    def out_w(self) -> int:
        return self.w + 2 * self.padding - self.s + 1

    @property
    def gemm_m(self) -> int:  # one row per output pixel
        return self.n * self.out_h * self.out_w

    @property
    def gemm_k(self) -> int:  # one column per filter tap
        return self.c * self.r * self.s

    def as_tuple(self) -> tuple:
        return (self.c, self.h, self.w, self.r, self.s, self.padding, self.out_h, self.out_w)


def check_image(x, geometry: ConvGeometry, dtype) -> None:
    xi = info(x, "x")
    want = (geometry.n, geometry.c, geometry.h, geometry.w)
    if xi.shape != want:
        raise GemmArgumentError(f"the image x has shape {xi.shape}, expected (N, C, H, W) = {want}")
    if xi.dtype != np.dtype(dtype):
        raise GemmArgumentError(f"x has dtype {xi.dtype.name}, expected {np.dtype(dtype).name}")
    if not xi.c_contiguous:
        raise GemmArgumentError("x must be C-contiguous (NCHW)")
