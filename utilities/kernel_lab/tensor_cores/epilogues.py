"""Epilogues: what a GEMM kernel does with its accumulators before they leave the chip.

The protocol
------------
After the main loop, each thread of a block holds some accumulators of the block's
``tile_m x tile_n`` output tile, in registers, in an order only cuBLASDx knows;
``frag_coords(i)`` (from :mod:`kernel_lab.tensor_cores.fragments`) says which (row, column) of the
tile its i-th value is.
An epilogue is three Numba device functions the kernel calls in three passes over those values,
with a ``cuda.syncthreads()`` between passes, so that a pass may use what the previous pass
gathered in shared memory:

1. ``prepare(lrow, value, stats, args)``: optional; sees every in-bounds value first (a row-wise
   epilogue gathers its row statistics here, e.g. the row maximum);
2. ``store(out, bz, row, col, lrow, value, stats, args)``: required; writes the result of one value
   to the output (``row``/``col`` are global, ``lrow`` is the row within the tile);
3. ``finish(stats, bz, row0, tile_col, tid, m, args)``: optional; once per block, after all stores.

``stats`` is a shared float32 array of ``2 * tile_m`` entries, set to (-inf, ..., 0, ...) before
pass 1. ``args`` is a tuple the launcher passes through unchanged (scalars and arrays).
Element-wise epilogues only need ``store``; the row softmax needs all three.

Each factory returns an :class:`Epilogue`; its device functions are built on first use. ``cuda`` is
a module global (imported after ``kernel_lab`` chose GPU or simulator), not a local name: the
simulator swaps its fake ``cuda`` module into a device function's globals only, so the epilogues
also run there (module 06's checks use them as references).

The learner's own device functions plug in: ``bias_activation_from(fn)`` (``fn(value, bias)``),
``quantize(fn)`` (``fn(acc, scale, zero_point)``) and ``row_softmax_partial(tile_m, build)``
(``build(tile_m) -> (prepare, store, finish)``). The package's versions below are the reference
implementations the probe scripts use; :mod:`kernel_lab.checks.tensor_cores` checks the learner's
versions in a small SIMT harness (simulator or GPU) before they meet cuBLASDx.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import cuda  # kernel_lab, the parent package, has chosen GPU or simulator

ACTIVATIONS = ("identity", "relu", "sigmoid", "tanh", "gelu")


@dataclass(frozen=True)
class Epilogue:
    """One epilogue: a name (part of the kernel's identity), how to build its device functions,
    the output dtype, and the names of the arguments its launcher expects."""

    name: str
    build: object = field(compare=False, repr=False)  # () -> (prepare, store, finish)
    out_dtype: str = "float32"
    arg_names: tuple = ()
    row_stats: bool = False  # uses the prepare/finish passes
    # () -> (load, apply), for an element-wise epilogue whose output has the accumulator's dtype:
    # ``load(row, col, args)`` reads what one element needs from memory (a float32: the bias of its
    # row, 0 if nothing) and ``apply(value, loaded)`` is the stored value. With it, the pipeline GEMM
    # transforms its fragment in registers and lets cuBLASDx store the whole tile with vector stores
    # (on an H100 at 8192^3 that took the int8 GEMM from 0.42x to 0.79x cuBLASLt: scripts/probes/
    # pipeline_epilogue.py). The split lets the kernel issue a chunk's loads before it writes any
    # result: one load, then one write into the fragment, element after element, waits a memory
    # round trip per element (the compiler cannot prove the two do not alias), which cost the fused
    # bias+ReLU 115 us of a 273 us GEMM at 4096^3 on an H200. Without it, ``store`` writes each
    # element (any epilogue, any tile).
    elementwise: object = field(default=None, compare=False, repr=False)

    def device_functions(self):
        key = self.name
        if key not in _BUILT:
            _BUILT[key] = self.build()
        return _BUILT[key]

    def elementwise_functions(self):
        """The element-wise form's device functions ``(load, apply)``, or None."""
        if self.elementwise is None:
            return None
        key = ("elementwise", self.name)
        if key not in _BUILT:
            _BUILT[key] = self.elementwise()
        return _BUILT[key]


_BUILT: dict = {}


def _noop_prepare():
    @cuda.jit(device=True, inline="always")
    def prepare(lrow, value, stats, args):
        pass

    return prepare


def _noop_finish():
    @cuda.jit(device=True, inline="always")
    def finish(stats, bz, row0, tile_col, tid, m, args):
        pass

    return finish


def _no_load():
    @cuda.jit(device=True, inline="always")
    def load(row, col, args):
        return np.float32(0)

    return load


def _keep():
    @cuda.jit(device=True, inline="always")
    def apply(v, loaded):
        return v

    return apply


def _row_bias_load():
    """``load`` of the bias epilogues: the bias of the element's row (``args[0]``)."""

    @cuda.jit(device=True, inline="always")
    def load(row, col, args):
        return np.float32(args[0][row])

    return load


def identity() -> Epilogue:
    """``out = acc`` (float32 or int32, as the accumulator)."""

    def build():
        @cuda.jit(device=True, inline="always")
        def store(out, bz, row, col, lrow, value, stats, args):
            out[bz, row, col] = value

        return _noop_prepare(), store, _noop_finish()

    def elementwise():
        return _no_load(), _keep()

    return Epilogue("identity", build, "accumulator", elementwise=elementwise)


def linear() -> Epilogue:
    """``out = alpha * acc + beta * C + gamma * bias[row]``: args ``(alpha, beta, gamma, c, bias)``."""

    def build():
        @cuda.jit(device=True, inline="always")
        def store(out, bz, row, col, lrow, value, stats, args):
            alpha, beta, gamma, c, bias = args
            out[bz, row, col] = alpha * value + beta * c[bz, row, col] + gamma * bias[row]

        return _noop_prepare(), store, _noop_finish()

    return Epilogue("linear", build, "float32", ("alpha", "beta", "gamma", "c", "bias"))


def _activation(activation: str):
    """The activation as a device function ``act(x)``, in float32 for a float32 ``x``.

    The constants are float32 on purpose: a Python float is a float64 to Numba, and one of them
    turns the whole expression (and ``tanh``) into float64 arithmetic, a large cost per element
    on GPUs whose FP64 units are few."""
    zero, half, one = np.float32(0.0), np.float32(0.5), np.float32(1.0)
    k0, k1 = np.float32(math.sqrt(2.0 / math.pi)), np.float32(0.044715)

    @cuda.jit(device=True, inline="always")
    def act(x):
        if activation == "relu":
            return max(x, zero)
        if activation == "sigmoid":
            return one / (one + math.exp(-x))
        if activation == "tanh":
            return math.tanh(x)
        if activation == "gelu":
            return half * x * (one + math.tanh(k0 * (x + k1 * x * x * x)))
        return x

    return act


def bias_activation(activation: str) -> Epilogue:
    """``out = f(acc + bias[row])`` with f one of relu, sigmoid, tanh, gelu (tanh form, as cuBLASLt)
    or identity: args ``(bias,)``. The bias has one value per output row, as cuBLASLt's."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")

    def build():
        act = _activation(activation)

        @cuda.jit(device=True, inline="always")
        def store(out, bz, row, col, lrow, value, stats, args):
            bias = args[0]
            x = value + bias[row]
            out[bz, row, col] = act(x)

        return _noop_prepare(), store, _noop_finish()

    def elementwise():
        act = _activation(activation)

        @cuda.jit(device=True, inline="always")
        def apply(v, b):
            return act(v + b)

        return _row_bias_load(), apply

    return Epilogue(f"bias_{activation}", build, "float32", ("bias",), elementwise=elementwise)


def bias_activation_from(fn, name: str = "user_bias_activation") -> Epilogue:
    """``out = fn(acc, bias[row])`` with the learner's device function ``fn(value, bias)``
    (06.2's exercise): args ``(bias,)``."""

    def build():
        @cuda.jit(device=True, inline="always")
        def store(out, bz, row, col, lrow, value, stats, args):
            out[bz, row, col] = fn(value, args[0][row])

        return _noop_prepare(), store, _noop_finish()

    def elementwise():
        @cuda.jit(device=True, inline="always")
        def apply(v, b):
            return fn(v, b)

        return _row_bias_load(), apply

    return Epilogue(_user_name(name, fn), build, "float32", ("bias",), elementwise=elementwise)


def _user_name(name, fn) -> str:
    """A kernel identity for a learner's function: redefining it in the notebook builds anew."""
    return f"user_{name}_{id(fn):x}" if not name.startswith("user_") else f"{name}_{id(fn):x}"


_MUL_RN = None


def mul_rn():
    """A float64 multiplication the compiler may not fuse with a following addition (``dmul_rn``).

    On a GPU it is libdevice's ``__dmul_rn``; in the simulator (no libdevice, and Python never
    fuses) a plain product. Call the returned device function as ``mul_rn(a, b)``."""
    global _MUL_RN
    if _MUL_RN is None:
        from ..environment import on_simulator

        if on_simulator():
            @cuda.jit(device=True, inline="always")
            def _mul(a, b):
                return a * b
        else:
            from numba.cuda import libdevice

            @cuda.jit(device=True, inline="always")
            def _mul(a, b):
                return libdevice.dmul_rn(a, b)
        _MUL_RN = _mul
    return _MUL_RN


def quantize(fn=None) -> Epilogue:
    """int32 accumulator to int8: ``q = clamp(floor(acc * scale + 0.5) + zero_point, -128, 127)``,
    in float64, with the product rounded before the addition, as NumPy does: args ``(scale, zero_point)``.

    Why ``dmul_rn``: left to itself the compiler fuses ``acc * scale + 0.5`` into one fused
    multiply-add, which rounds once instead of twice; where ``acc * scale`` lands within a rounding
    error of a half-integer, the two disagree by one code (the first GPU run found 151 of 99,900).
    ``dmul_rn`` is a multiplication the compiler may not fuse."""

    def build():
        if fn is not None:  # the learner's fn(acc, scale, zero_point) -> code in [-128, 127]
            @cuda.jit(device=True, inline="always")
            def store(out, bz, row, col, lrow, value, stats, args):
                out[bz, row, col] = fn(value, args[0], args[1])

            return _noop_prepare(), store, _noop_finish()

        mul = mul_rn()

        @cuda.jit(device=True, inline="always")
        def store(out, bz, row, col, lrow, value, stats, args):
            scale, zero_point = args
            q = math.floor(mul(float(value), float(scale)) + 0.5) + zero_point
            q = min(max(q, -128.0), 127.0)
            out[bz, row, col] = int(q)

        return _noop_prepare(), store, _noop_finish()

    name = "quantize_int8" if fn is None else _user_name("quantize_int8", fn)
    return Epilogue(name, build, "int8", ("scale", "zero_point"))


def row_softmax_partial(tile_m: int, build_fn=None) -> Epilogue:
    """First half of a row softmax fused into the GEMM: args ``(alpha, row_max, row_sum)``.

    Each block sees only ``tile_n`` columns of a row, so it cannot normalise; it writes
    ``exp(alpha * acc - m_b)`` with ``m_b`` the maximum over *its* columns, and stores ``m_b`` and
    ``s_b = sum exp(alpha * acc - m_b)`` in ``row_max[bz, row, tile_col]``/``row_sum[...]``.
    :func:`kernel_lab.tensor_cores.gemm.softmax_finish` then rescales each block's columns by
    ``exp(m_b - M) / S`` with ``M = max_b m_b`` and ``S = sum_b s_b exp(m_b - M)``: one more read and
    write of the output instead of the three passes of a separate softmax.

    The sums use shared-memory atomics, whose order varies from run to run: results may differ in
    the last bit between runs (check with ``rerun=False``).

    ``build_fn(tile_m) -> (prepare, store, finish)`` replaces the three device functions with the
    learner's (06.2's exercise).
    """
    if build_fn is not None:
        return Epilogue(_user_name(f"row_softmax_partial_{tile_m}", build_fn), lambda: build_fn(tile_m), "float32",
                        ("alpha", "row_max", "row_sum"), row_stats=True)

    def build():
        @cuda.jit(device=True, inline="always")
        def prepare(lrow, value, stats, args):
            cuda.atomic.max(stats, lrow, args[0] * value)

        @cuda.jit(device=True, inline="always")
        def store(out, bz, row, col, lrow, value, stats, args):
            e = math.exp(args[0] * value - stats[lrow])
            out[bz, row, col] = e
            cuda.atomic.add(stats, tile_m + lrow, e)

        @cuda.jit(device=True, inline="always")
        def finish(stats, bz, row0, tile_col, tid, m, args):
            row_max, row_sum = args[1], args[2]
            if tid < tile_m and row0 + tid < m:
                row_max[bz, row0 + tid, tile_col] = stats[tid]
                row_sum[bz, row0 + tid, tile_col] = stats[tile_m + tid]

        return prepare, store, finish

    return Epilogue(f"row_softmax_partial_{tile_m}", build, "float32", ("alpha", "row_max", "row_sum"),
                    row_stats=True)


def by_name(name: str, tile_m: int = 128) -> Epilogue:
    """Rebuild an epilogue from its name (for worker processes that compile ahead of time)."""
    if name == "identity":
        return identity()
    if name == "linear":
        return linear()
    if name == "quantize_int8":
        return quantize()
    if name.startswith("bias_"):
        return bias_activation(name[len("bias_"):])
    if name.startswith("row_softmax_partial"):
        return row_softmax_partial(tile_m)
    raise ValueError(f"unknown epilogue {name!r}")
