"""Tensor-core GEMM kernels in Numba with cuBLASDx (nvmath-python's device API).

Two kernel families, both compiled once per machine and configuration:

``BlockGemm`` (any precision, any size, pluggable epilogue)
    One thread block computes a ``tile_m x tile_n`` tile of ``out = epilogue(A @ B)``. Its threads
    copy ``tile_m x tile_k`` of A and ``tile_k x tile_n`` of B from global to shared memory
    themselves (bounds-checked, zero-filled past the edges, so every M, N, K works), and call
    cuBLASDx's block-level ``MM.execute(smem_a, smem_b, c)``, which runs the tensor-core
    instructions and accumulates into ``c``, a register fragment (``get_layout_rmem_c``). Which
    (row, column) each register holds comes from ``fragments.partition_functions`` (nvmath 1.0's
    ``map_fragment_index`` describes the *suggested* layouts' partition, not the plain layouts'
    that the kernel uses: see ``fragments``). Shared-memory tiles use cuBLASDx's plain
    layouts (``get_layout_smem_a/b``: row-major A, row-major B or K-major B for integers). With ``prefetch`` the next K slice is loaded into registers while
    the tensor cores work. Sizes are runtime arguments and the grid covers the problem, so one
    compiled kernel serves every shape of the same dtypes; batches are the grid's z dimension.
    Variants for convolution: ``operand_a="im2col"`` gathers A from an NCHW image on the fly
    (implicit GEMM), and ``precision="int4"`` unpacks two 4-bit values per byte into int8 in
    shared memory.

``PipelineGemm`` (int8 -> int32 or float16 -> float32, the fast path on Hopper)
    cuBLASDx's pipeline API: a ``DevicePipeline`` built on the host for the two operand arrays
    moves tiles with the Tensor Memory Accelerator through ``depth`` shared-memory stages and runs
    warpgroup MMAs; the kernel only asks for its tile and runs the epilogue. The global shapes are
    part of the pipeline's description, so this family compiles once per problem *shape* (the
    launcher pads operands to whole tiles). It is the base of module 07's FP64 emulation.

Measured on an H100 (2026-11-22, 4096^3): ``BlockGemm`` fp16 30.6 TFLOP/s (0.04x cuBLAS's 757), int8
11.6 TOP/s; ``PipelineGemm`` fp16 262 TFLOP/s untuned, 342 tuned (0.45x cuBLAS), int8 377 TOP/s
(its peer is cuBLASLt's int8 GEMM, ``peers.CublasLtInt8``; not yet measured beside it). The block
GEMM's gap is not its loads: register prefetch gained 6%, and a variant whose tiles cuBLASDx copied asynchronously into its swizzled layouts, two stages deep, was
slower (12.9 TFLOP/s), so it was dropped. Both call ``execute`` once per K slice; that is the
suspect (Numba reports 184-448 bytes of local memory per thread for these kernels).

Every factory returns an object that validates its arguments (``validate.py``), launches, and can
report its compile time. ``nvmath`` is imported only when a kernel is built, so this module
imports on machines without it.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
from numba import cuda  # kernel_lab, the parent package, has chosen GPU or simulator

from . import configs as _configs
from . import epilogues as _epilogues
from . import fragments as _fragments
from . import validate as _validate
from .configs import GemmConfig, PipelineConfig
from .precisions import host_dtype, matmul_precision
from .toolchain import (
    as_device,
    device_api,
    launch_types,
    set_max_dynamic_shared_memory,
)

KERNEL_VERSION = "06.4"  # part of every tuner cache key: bump it when a kernel changes (06.3: whole-tile vector
# stores; 06.4: the persistent schedule, element-wise epilogues in chunks of loads)


def _bits_dtype(prec: str):
    """How the loaders move operands: as raw bits (no float arithmetic on bf16/fp16 in Numba)."""
    return {"float16": np.uint16, "bfloat16": np.uint16, "tf32": np.uint32, "int8": np.int8,
            "int4": np.uint8}[prec]


def _bits_view(arr, prec):
    """View a device array's elements as the loader's bit type (same size, no copy)."""
    want = np.dtype(_bits_dtype(prec))
    if arr.dtype == want:
        return arr
    return arr.view(want)


class CompiledKernel:
    """Shared plumbing: compile timing and the Numba dispatcher."""

    dispatcher = None
    compile_seconds: float | None = None

    def _compile_now(self, args):
        """Compile for these launch arguments and record how long it took (idempotent)."""
        if self.compile_seconds is not None:
            return
        t0 = time.perf_counter()
        self.dispatcher.compile(launch_types(self.dispatcher, args))
        self.compile_seconds = time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# Block GEMM: our own loads, cuBLASDx's block-level execute, pluggable epilogue.


@functools.lru_cache(maxsize=None)
def _build_block_kernel(cfg: GemmConfig, epilogue: _epilogues.Epilogue, operand_a: str,
                        fragment: str = "registers", load_a=None, load_b=None):
    from numba import cuda

    nd, ndc = device_api()
    prec = cfg.precision
    acc_np = np.int32 if prec in ("int8", "int4") else np.float32
    mm_prec = matmul_precision(prec)
    b_major = "col_major" if cfg.b_k_major else "row_major"
    MM = nd.Matmul(size=(cfg.tile_m, cfg.tile_n, cfg.tile_k), precision=mm_prec, data_type="real",
                   arrangement=("row_major", b_major, "row_major"), execution="Block",
                   block_size=cfg.threads, static_block_dim=True, alignment=(16, 16, 16))
    if MM.block_size != cfg.threads:
        raise RuntimeError(f"cuBLASDx chose a block of {MM.block_dim} for {cfg.label()}; expected {cfg.threads} threads")
    # First (compile time): generates the fragment's coordinate map, finalizing the three tensor
    # descriptions the kernel uses in one NVRTC run; see fragments.generate.
    frag_coords, thread_active = _fragments.partition_functions(MM)
    layout_a = MM.get_layout_smem_a()
    layout_b = MM.get_layout_smem_b()
    if layout_a.cosize != cfg.a_elems or layout_b.cosize != cfg.b_elems:
        raise RuntimeError(f"cuBLASDx's shared-memory layouts have {layout_a.cosize} and {layout_b.cosize} elements, "
                           f"the loaders assume {cfg.a_elems} and {cfg.b_elems} ({cfg.label()})")

    TM, TN, TK, NT = cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.threads
    LDA, LDB = cfg.lda, cfg.ldb
    A_ELEMS, B_ELEMS = cfg.a_elems, cfg.b_elems
    S_ELEMS = A_ELEMS + B_ELEMS
    A_PER_THREAD = -(-TM * TK // NT)
    B_PER_THREAD = -(-TK * TN // NT)
    B_KMAJOR = cfg.b_k_major
    PREFETCH = cfg.prefetch
    TF32 = prec == "tf32"
    INT4 = prec == "int4"
    IM2COL = operand_a == "im2col"
    BITS = _bits_dtype(prec)
    SMEM_BITS = np.int8 if INT4 else BITS
    A_BITS = np.int8 if INT4 else BITS
    VALUE = {"float16": np.float16, "tf32": np.float32, "int8": np.int8, "int4": np.int8}.get(prec)
    if prec == "bfloat16":
        from numba.cuda import types as cuda_types

        VALUE = cuda_types.bfloat16
    prepare, store, finish = epilogue.device_functions()
    TWO_TM = 2 * TM
    NEG_INF = -math.inf

    @cuda.jit(device=True, inline="always")
    def fetch_a_matrix(a, bz, gr, gc, m, k, geo):
        """One element of A (as bits), or 0 past the edges."""
        if gr < m and gc < k:
            return a[bz if a.shape[0] > 1 else 0, gr, gc]  # a batch of one is shared (batch stride 0)
        return A_BITS(0)

    @cuda.jit(device=True, inline="always")
    def fetch_a_im2col(x, bz, gr, gc, m, k, geo):
        """A = im2col(x), never stored: row gr = output pixel (n, oh, ow), column gc = (c, r, s)."""
        C, H, W, R, S, P, OH, OW = geo
        v = A_BITS(0)
        if gr < m and gc < k:
            ow = gr % OW
            t = gr // OW
            oh = t % OH
            nimg = t // OH
            s = gc % S
            t2 = gc // S
            r = t2 % R
            c = t2 // R
            ih = oh + r - P
            iw = ow + s - P
            if ih >= 0 and ih < H and iw >= 0 and iw < W:
                v = x[nimg, c, ih, iw]
        return v

    fetch_a = fetch_a_im2col if IM2COL else fetch_a_matrix

    # The learner's loaders (06.3's exercises), when given, replace the package's.
    if load_a is not None and IM2COL:
        @cuda.jit(device=True, inline="always")
        def fetch_a_im2col_user(x, bz, gr, gc, m, k, geo):
            v = A_BITS(0)
            if gr < m and gc < k:
                v = A_BITS(load_a(x, gr, gc, geo))
            return v

        fetch_a = fetch_a_im2col_user
    elif load_a is not None:
        @cuda.jit(device=True, inline="always")
        def fetch_a_user(a, bz, gr, gc, m, k, geo):
            return A_BITS(load_a(a, bz, gr, gc, m, k))

        fetch_a = fetch_a_user

    @cuda.jit(device=True, inline="always")
    def round_tf32(bits):
        """float32 bits rounded to tf32 (10 mantissa bits): nearest, ties away from zero."""
        return (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)

    @cuda.jit(device=True, inline="always")
    def same_bits(bits):
        return bits

    to_smem = round_tf32 if TF32 else same_bits

    @cuda.jit(device=True, inline="always")
    def fetch_b_plain(b, bz, gr, gc, k, n):
        if gr < k and gc < n:
            return b[bz if b.shape[0] > 1 else 0, gr, gc]
        return BITS(0)

    @cuda.jit(device=True, inline="always")
    def fetch_b_int4(b, bz, gr, gc, k, n):
        """B is int4 packed along N: byte (k, n // 2) holds column n even in its low nibble."""
        v = np.int8(0)
        if gr < k and gc < n:
            byte = np.int32(b[bz if b.shape[0] > 1 else 0, gr, gc >> 1])
            nib = (byte >> 4) if (gc & 1) else (byte & 15)
            if nib >= 8:
                nib -= 16
            v = np.int8(nib)
        return v

    fetch_b = fetch_b_int4 if INT4 else fetch_b_plain
    if load_b is not None and INT4:
        @cuda.jit(device=True, inline="always")
        def fetch_b_int4_user(b, bz, gr, gc, k, n):
            v = np.int8(0)
            if gr < k and gc < n:
                v = np.int8(load_b(b[bz if b.shape[0] > 1 else 0], gr, gc))
            return v

        fetch_b = fetch_b_int4_user
    elif load_b is not None:
        @cuda.jit(device=True, inline="always")
        def fetch_b_user(b, bz, gr, gc, k, n):
            return BITS(load_b(b, bz, gr, gc, k, n))

        fetch_b = fetch_b_user

    @cuda.jit(device=True, inline="always")
    def load_regs(ra, rb, a, b, bz, row0, col0, k0, m, n, k, tid, geo):
        for j in range(A_PER_THREAD):
            idx = tid + j * NT
            r = idx // TK
            c = idx - r * TK
            ra[j] = fetch_a(a, bz, row0 + r, k0 + c, m, k, geo)
        for j in range(B_PER_THREAD):
            idx = tid + j * NT
            r = idx // TN  # k within the slice
            c = idx - r * TN  # n within the tile: consecutive threads read consecutive columns
            rb[j] = fetch_b(b, bz, k0 + r, col0 + c, k, n)

    @cuda.jit(device=True, inline="always")
    def store_b_kmajor(sb, r, c, v):
        sb[c * LDB + r] = v

    @cuda.jit(device=True, inline="always")
    def store_b_nmajor(sb, r, c, v):
        sb[r * LDB + c] = to_smem(v)

    store_b = store_b_kmajor if B_KMAJOR else store_b_nmajor

    @cuda.jit(device=True, inline="always")
    def store_regs(ra, rb, sa, sb, tid):
        for j in range(A_PER_THREAD):
            idx = tid + j * NT
            if idx < TM * TK:
                r = idx // TK
                c = idx - r * TK
                sa[r * LDA + c] = to_smem(ra[j])
        for j in range(B_PER_THREAD):
            idx = tid + j * NT
            if idx < TK * TN:
                r = idx // TN
                c = idx - r * TN
                store_b(sb, r, c, rb[j])

    # The results: a plain register fragment C (``get_layout_rmem_c``) that ``execute`` accumulates
    # into (C += A B), zeroed by our own loop; its partition matches the plain shared-memory layouts
    # of A and B. ``fragments`` maps its register i to (row, col) of the tile (nvmath's
    # ``map_fragment_index`` answers for the *suggested* partition: wrong for these layouts).
    # fragment="accumulator" uses nvmath's accumulator object instead (more generated device
    # functions, so a slower first compile); kept as a cross-check.
    layout_c = MM.get_layout_rmem_c()
    FRAG = layout_c.size
    if layout_c.cosize != FRAG:
        raise RuntimeError(f"cuBLASDx's register fragment has {layout_c.cosize} slots for {FRAG} values ({cfg.label()})")
    ACCUMULATOR = fragment == "accumulator"
    ACC_T = acc_np

    @cuda.jit(device=True, inline="always")
    def epilogue_passes(cbuf, out, bz, row0, col0, m, n, tid, stats, args):
        # pass 1: row statistics (row-wise epilogues only)
        active = thread_active()
        if active:
            for i in range(FRAG):
                lr, lc = frag_coords(i)
                if row0 + lr < m and col0 + lc < n:
                    prepare(lr, cbuf[i], stats, args)
        cuda.syncthreads()
        # pass 2: the stores
        if active:
            for i in range(FRAG):
                lr, lc = frag_coords(i)
                if row0 + lr < m and col0 + lc < n:
                    store(out, bz, row0 + lr, col0 + lc, lr, cbuf[i], stats, args)
        cuda.syncthreads()
        finish(stats, bz, row0, cuda.blockIdx.y, tid, m, args)

    @cuda.jit(device=True, inline="always")
    def main_loop(sa, sb, sa_bits, sb_bits, acc, a, b, bz, row0, col0, m, n, k, tid, geo):
        """acc += A[row0:, :] @ B[:, col0:], tile_k columns at a time through shared memory."""
        ra = cuda.local.array(A_PER_THREAD, dtype=A_BITS)
        rb = cuda.local.array(B_PER_THREAD, dtype=SMEM_BITS)
        load_regs(ra, rb, a, b, bz, row0, col0, 0, m, n, k, tid, geo)
        store_regs(ra, rb, sa_bits, sb_bits, tid)
        cuda.syncthreads()
        for k0 in range(0, k, TK):
            more = k0 + TK < k
            if PREFETCH and more:
                load_regs(ra, rb, a, b, bz, row0, col0, k0 + TK, m, n, k, tid, geo)
            MM.execute(sa, sb, acc)
            cuda.syncthreads()
            if more:
                if not PREFETCH:
                    load_regs(ra, rb, a, b, bz, row0, col0, k0 + TK, m, n, k, tid, geo)
                store_regs(ra, rb, sa_bits, sb_bits, tid)
                cuda.syncthreads()

    def kernel_registers(a, b, out, m, n, k, geo, args):
        smem_bits = cuda.shared.array(shape=(S_ELEMS,), dtype=SMEM_BITS, alignment=16)
        stats = cuda.shared.array(shape=(TWO_TM,), dtype=np.float32)
        smem = smem_bits.view(VALUE)
        sa = ndc.make_tensor(smem[:A_ELEMS], MM.get_layout_smem_a())
        sb = ndc.make_tensor(smem[A_ELEMS:], MM.get_layout_smem_b())
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.x * TM
        col0 = cuda.blockIdx.y * TN
        bz = cuda.blockIdx.z
        for i in range(tid, TWO_TM, NT):
            stats[i] = NEG_INF if i < TM else np.float32(0)
        cbuf = cuda.local.array(FRAG, dtype=ACC_T, alignment=16)
        for i in range(FRAG):
            cbuf[i] = ACC_T(0)
        acc = ndc.make_tensor(cbuf, MM.get_layout_rmem_c())
        main_loop(sa, sb, smem_bits[:A_ELEMS], smem_bits[A_ELEMS:], acc, a, b, bz, row0, col0, m, n, k, tid, geo)
        epilogue_passes(cbuf, out, bz, row0, col0, m, n, tid, stats, args)

    def kernel_accumulator(a, b, out, m, n, k, geo, args):
        smem_bits = cuda.shared.array(shape=(S_ELEMS,), dtype=SMEM_BITS, alignment=16)
        stats = cuda.shared.array(shape=(TWO_TM,), dtype=np.float32)
        smem = smem_bits.view(VALUE)
        sa = ndc.make_tensor(smem[:A_ELEMS], MM.get_layout_smem_a())
        sb = ndc.make_tensor(smem[A_ELEMS:], MM.get_layout_smem_b())
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.x * TM
        col0 = cuda.blockIdx.y * TN
        bz = cuda.blockIdx.z
        for i in range(tid, TWO_TM, NT):
            stats[i] = NEG_INF if i < TM else np.float32(0)
        acc = MM.get_accumulator()
        main_loop(sa, sb, smem_bits[:A_ELEMS], smem_bits[A_ELEMS:], acc, a, b, bz, row0, col0, m, n, k, tid, geo)
        frag = acc.get_results()  # a register fragment in the plain layout (get_layout_rmem_c)
        fbuf = cuda.local.array(FRAG, dtype=ACC_T)
        for i in range(FRAG):
            fbuf[i] = frag[i]
        epilogue_passes(fbuf, out, bz, row0, col0, m, n, tid, stats, args)

    kernel = kernel_accumulator if ACCUMULATOR else kernel_registers
    return MM, cuda.jit(kernel, launch_bounds=(NT, 1)), acc_np


class BlockGemm(CompiledKernel):
    """``out[b] = epilogue(A[b] @ B[b])`` on tensor cores, one compiled kernel for every size.

    Operands are 2-D ``(M, K)`` / ``(K, N)`` or 3-D batched ``(batch, M, K)`` / ``(batch, K, N)``
    C-contiguous GPU arrays (a batch stride of 0, e.g. ``cupy.broadcast_to``, shares an operand
    across the batch). ``precision`` is the input format: float16, bfloat16, tf32 (float32
    arrays), int8, or int4 (B packed two per byte along N, ``references.pack_int4``).

    ``fragment`` says how the kernel holds its results: ``"registers"`` (default: a plain register
    tensor that ``execute`` accumulates into) or ``"accumulator"`` (nvmath's accumulator object;
    same results, more generated code, kept as a cross-check).

    ``load_a``/``load_b`` plug in the learner's element loaders (06.3), Numba device functions
    checked first by :mod:`kernel_lab.checks.tensor_cores`: for plain operands
    ``load(x, bz, row, col, rows, cols)`` (the element, or 0 outside ``rows x cols``; an operand
    with a batch of one is shared), for ``operand_a="im2col"`` ``load_a(x, gr, gc, geo)`` and for
    int4 ``load_b(packed, k, n)`` (one (K, N/2) batch of packed bytes). The kernel adds the bounds
    tests for the last two.
    """

    def __init__(self, config: GemmConfig | None = None, epilogue: _epilogues.Epilogue | None = None, *,
                 operand_a: str = "matrix", fragment: str = "registers", load_a=None, load_b=None):
        self.config = config or GemmConfig()
        problems = self.config.problems()
        if problems:
            raise _validate.GemmArgumentError(f"invalid configuration {self.config.label()}: " + "; ".join(problems))
        if operand_a not in ("matrix", "im2col"):
            raise _validate.GemmArgumentError(f"operand_a must be 'matrix' or 'im2col', got {operand_a!r}")
        if fragment not in ("registers", "accumulator"):
            raise _validate.GemmArgumentError(f"fragment must be 'registers' or 'accumulator', got {fragment!r}")
        self.epilogue = epilogue or _epilogues.identity()
        self.operand_a = operand_a
        self.fragment = fragment
        self.MM, self.dispatcher, self.acc_dtype = _build_block_kernel(self.config, self.epilogue, operand_a,
                                                                       fragment, load_a, load_b)
        self.compile_seconds = None

    @property
    def out_dtype(self):
        d = self.epilogue.out_dtype
        return np.dtype(self.acc_dtype if d == "accumulator" else d)

    def grid(self, m, n, batch=1):
        return _configs.grid_for(m, n, self.config.tile_m, self.config.tile_n, batch)

    def prepare(self, a, b, out, *epilogue_args, geometry=None):
        """Validate and convert the arguments; return (grid, kernel arguments)."""
        prec = self.config.precision
        # The caller's arrays first, as given: a transposed or sliced view must be refused before
        # any conversion (a reshape can hide its strides and the kernel would read garbage).
        if self.operand_a == "matrix":
            _validate.check_operand(a, "a", precision=prec, operand="a")
        _validate.check_operand(b, "b", precision=prec, operand="b")
        if self.operand_a == "im2col":
            x = as_device(a)
            m, k = geometry.gemm_m, geometry.gemm_k
            _validate.check_image(x, geometry, host_dtype(prec))
            a3 = _bits_view(x, prec)
            geo = geometry.as_tuple()
        else:
            a3 = _validate.as_batched(as_device(a), "a")
            m, k = a3.shape[1], a3.shape[2]
            geo = (0, 0, 0, 0, 0, 0, 0, 0)
        b3 = _validate.as_batched(as_device(b), "b")
        out3 = _validate.as_batched(as_device(out), "out")
        batch = max(out3.shape[0], 1)
        n = out3.shape[2]
        _validate.check_gemm(a3 if self.operand_a == "matrix" else None, b3, out3, m=m, n=n, k=k,
                             precision=prec, out_dtype=self.out_dtype)
        _validate.check_epilogue_args(self.epilogue, epilogue_args, m=m, n=n, batch=batch,
                                      tiles_n=self.grid(m, n)[1])
        if self.operand_a == "matrix" and prec != "int4":  # int4: A is int8, only B is packed
            a3 = _bits_view(a3, prec)
        b3 = _bits_view(b3, prec)
        dev_args = tuple(as_device(x) if hasattr(x, "__cuda_array_interface__") else x for x in epilogue_args)
        return self.grid(m, n, batch), (a3, b3, out3, np.int32(m), np.int32(n), np.int32(k),
                                        tuple(np.int32(g) for g in geo), dev_args)

    def __call__(self, a, b, out, *epilogue_args, geometry=None, stream=0):
        grid, args = self.prepare(a, b, out, *epilogue_args, geometry=geometry)
        self._compile_now(args)
        self.dispatcher[grid, self.config.threads, stream](*args)
        return out

    def launcher(self, a, b, out, *epilogue_args, geometry=None):
        """A no-argument function that launches this GEMM on these arrays (for kl.benchmark):
        validation and conversion happen once, here, not in the timed calls."""
        grid, args = self.prepare(a, b, out, *epilogue_args, geometry=geometry)
        self._compile_now(args)
        kernel = self.dispatcher[grid, self.config.threads]
        return lambda: kernel(*args)


# ---------------------------------------------------------------------------------------------
# Row softmax, second pass


def softmax_second_pass():
    """The package's second pass, as the device function a learner writes in 06.2:
    ``second_pass(out, row_max, row_sum, bz, r, n, tile_n, tid, nthreads)`` rescales row ``r`` of
    batch ``bz`` of ``out`` in place, each thread the columns ``tid, tid + nthreads, ...``."""

    @cuda.jit(device=True, inline="always")
    def second_pass(out, row_max, row_sum, bz, r, n, tile_n, tid, nthreads):
        tiles = row_max.shape[2]
        g = row_max[bz, r, 0]
        for t in range(1, tiles):
            g = max(g, row_max[bz, r, t])
        s = np.float32(0)
        for t in range(tiles):
            s += row_sum[bz, r, t] * math.exp(row_max[bz, r, t] - g)
        inv = 1.0 / s
        for c in range(tid, n, nthreads):
            out[bz, r, c] = out[bz, r, c] * (math.exp(row_max[bz, r, c // tile_n] - g) * inv)

    return second_pass


@functools.lru_cache(maxsize=None)
def _softmax_finish_kernel(tile_n: int, second_pass=None):
    """One block per (row, batch); ``second_pass`` is a device function (the package's if None).
    Plain Numba, no cuBLASDx: it also runs in the simulator, where ``cuda`` must be this module's
    global (the simulator swaps its fake module into globals, not into local names)."""

    body = second_pass if second_pass is not None else softmax_second_pass()

    @cuda.jit
    def finish(out, row_max, row_sum, m, n):
        r = cuda.blockIdx.x
        bz = cuda.blockIdx.y
        if r < m:
            body(out, row_max, row_sum, bz, r, n, tile_n, cuda.threadIdx.x, cuda.blockDim.x)

    return finish


def softmax_finish(out, row_max, row_sum, tile_n: int, threads: int = 256, second_pass=None):
    """Second pass of the fused row softmax: rescale each block's columns (see epilogues).
    ``second_pass``: the learner's device function (06.2), else the package's."""
    out3 = _validate.as_batched(as_device(out), "out")
    rm = _validate.as_batched(as_device(row_max), "row_max")
    rs = _validate.as_batched(as_device(row_sum), "row_sum")
    batch, m, n = out3.shape
    _softmax_finish_kernel(tile_n, second_pass)[(m, batch), threads](out3, rm, rs, np.int32(m), np.int32(n))
    return out


# ---------------------------------------------------------------------------------------------
# Pipeline GEMM (cuBLASDx pipeline API)


@functools.lru_cache(maxsize=None)
def band_walk(group: int):
    """The persistent pipeline's tile order, a device function ``tile_of(t, tiles_m, tiles_n) ->
    (bm, bn)``: the t-th tile of a walk in bands of ``group`` tile rows, down each band's column,
    then one column right (the last band may have fewer rows), so the tiles in flight at once share
    A and B panels in L2. Every t < tiles_m * tiles_n names a different tile
    (tests/test_tensor_cores_validate_quiz_cache.py runs it in the simulator)."""
    from numba import cuda

    @cuda.jit(device=True, inline="always")
    def tile_of(t, tiles_m, tiles_n):
        per_band = group * tiles_n
        band = t // per_band
        first = band * group
        rows = min(tiles_m - first, group)
        local = t - band * per_band
        return np.int32(first + local % rows), np.int32(local // rows)

    return tile_of


def _pipeline_matmul(cfg: PipelineConfig):
    """cuBLASDx's description of a pipeline GEMM's tile (A row-major, B column-major)."""
    nd, _ = device_api()
    from nvmath.device.cublasdx import MAX_ALIGNMENT

    return nd.Matmul(size=(cfg.tile_m, cfg.tile_n, cfg.tile_k), precision=matmul_precision(cfg.precision),
                     data_type="real", arrangement=("row_major", "col_major", "row_major"),
                     alignment=MAX_ALIGNMENT, execution="Block", block_size=cfg.threads,
                     with_pipeline=True, enable_input_streaming=True, static_block_dim=True)


@functools.lru_cache(maxsize=None)
def _build_learner_pipeline_kernel(cfg: PipelineConfig, make_kernel):
    """06.1's exercise: the learner's ``make_kernel(MM, make_tensor)`` (or ``make_kernel(MM,
    make_tensor, tile_of)`` for a persistent configuration) returns the Python function of a kernel
    ``kernel(out, m, n, device_pipeline, *extra)`` that stores ``A @ B`` (06.2: with its epilogue,
    whose arrays come as ``extra``) in the 2-D ``out``; compiled here as the package's own pipeline
    kernel is."""
    from numba import cuda
    from nvmath.device import make_tensor
    from nvmath.device.cublasdx_numba import pipeline_extensions

    MM = _pipeline_matmul(cfg)
    if cfg.persistent_group_m:
        body = make_kernel(MM, make_tensor, band_walk(cfg.persistent_group_m))
    else:
        body = make_kernel(MM, make_tensor)
    if not callable(body) or hasattr(body, "py_func"):
        raise _validate.GemmArgumentError(
            "make_kernel(MM, make_tensor) must return the kernel's plain Python function (no @cuda.jit: "
            f"the package compiles it with the pipeline's extensions); it returned {type(body).__name__}")
    return MM, cuda.jit(body, extensions=pipeline_extensions, launch_bounds=(cfg.threads, 1))


@functools.lru_cache(maxsize=None)
def _build_pipeline_kernel(cfg: PipelineConfig, epilogue: _epilogues.Epilogue):
    from numba import cuda
    from nvmath.device import make_tensor
    from nvmath.device.cublasdx_numba import pipeline_extensions

    MM = _pipeline_matmul(cfg)
    TM, TN = cfg.tile_m, cfg.tile_n
    TWO_TM = 2 * TM
    NT = cfg.threads
    NEG_INF = -math.inf
    prepare, store, finish = epilogue.device_functions()
    # Whole tiles of an element-wise epilogue that keeps the accumulator's dtype take the fast
    # path: the fragment is transformed in registers, then cuBLASDx stores the tile (16-byte
    # stores, rows ``n`` apart: n must be a multiple of VEC). The element-by-element path stores
    # 4 bytes at a time at coordinates computed per element, and cost the int8 GEMM more than
    # half its time at 8192^3 on an H100 (scripts/probes/pipeline_epilogue.py). Edge tiles, and
    # epilogues without an element-wise form (row statistics, another output dtype), keep it.
    acc_np = np.int32 if cfg.precision == "int8" else np.float32
    same_dtype = epilogue.out_dtype == "accumulator" or np.dtype(epilogue.out_dtype) == np.dtype(acc_np)
    elementwise = epilogue.elementwise_functions() if same_dtype and not epilogue.row_stats else None
    COPY_ONLY = epilogue.name == "identity"
    VEC = 16 // np.dtype(acc_np).itemsize
    # The element-wise transform goes in chunks: every load of a chunk first, then its arithmetic
    # and its writes into the fragment (see Epilogue.elementwise: one element at a time waits a
    # memory round trip per element). 16 loads in flight per thread; fragments hold a multiple.
    CHUNK = math.gcd(16, TM * TN // NT)

    @cuda.jit(device=True, inline="always")
    def store_elements(acc, frag, out, stats, args, m, n, row0, col0, tile_col, tid):
        active = acc.is_thread_active()
        if active:
            for i in range(frag.layout.size):
                lr, lc = acc.map_fragment_index(i)
                if row0 + lr < m and col0 + lc < n:
                    prepare(lr, frag[i], stats, args)
        cuda.syncthreads()
        if active:
            for i in range(frag.layout.size):
                lr, lc = acc.map_fragment_index(i)
                if row0 + lr < m and col0 + lc < n:
                    store(out, 0, row0 + lr, col0 + lc, lr, frag[i], stats, args)
        cuda.syncthreads()
        finish(stats, 0, row0, tile_col, tid, m, args)

    if elementwise is None:
        store_whole_tile = store_elements  # chosen here, so the kernel never types the fast path
    else:
        load, apply = elementwise

        @cuda.jit(device=True, inline="always")
        def store_whole_tile(acc, frag, out, stats, args, m, n, row0, col0, tile_col, tid):
            if not COPY_ONLY:
                loaded = cuda.local.array(CHUNK, np.float32)
                for base in range(0, frag.layout.size, CHUNK):
                    for j in range(CHUNK):
                        lr, lc = acc.map_fragment_index(base + j)
                        loaded[j] = load(row0 + lr, col0 + lc, args)
                    for j in range(CHUNK):
                        frag[base + j] = acc_np(apply(frag[base + j], loaded[j]))
            acc.partition_and_copy(frag, make_tensor(out[0, row0:row0 + TM, col0:col0 + TN], MM.get_layout_gmem_c(n)))

    def kernel(out, m, n, args, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=device_pipeline.buffer_alignment)
        stats = cuda.shared.array(shape=(TWO_TM,), dtype=np.float32)
        tid = cuda.threadIdx.x
        for i in range(tid, TWO_TM, NT):
            stats[i] = NEG_INF if i < TM else np.float32(0)
        row0 = cuda.blockIdx.x * TM
        col0 = cuda.blockIdx.y * TN
        tile = device_pipeline.get_tile(smem, cuda.blockIdx.x, cuda.blockIdx.y)
        # A *suggested* accumulator: nvmath's map_fragment_index and is_thread_active describe the
        # suggested partition, so here (unlike the block GEMM's plain layouts) they are the right ones.
        acc = MM.suggest_accumulator()
        tile.execute(acc)
        frag = acc.get_results()
        if row0 + TM <= m and col0 + TN <= n and n % VEC == 0:  # the same for the whole block
            store_whole_tile(acc, frag, out, stats, args, m, n, row0, col0, cuda.blockIdx.y, tid)
        else:
            store_elements(acc, frag, out, stats, args, m, n, row0, col0, cuda.blockIdx.y, tid)
        tile._del()

    GROUP = cfg.persistent_group_m
    tile_of = band_walk(GROUP) if GROUP else None

    def persistent_kernel(out, m, n, args, device_pipeline):
        # One block per SM walks the tiles t = blockIdx.x, + gridDim.x, ... The pipeline is moved
        # to the next tile (reset_tile) *before* this tile's epilogue, so its first stages load while
        # the accumulators are stored: the overlap a one-tile-per-block grid cannot have.
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=device_pipeline.buffer_alignment)
        stats = cuda.shared.array(shape=(TWO_TM,), dtype=np.float32)
        tid = cuda.threadIdx.x
        tiles_m = (m + TM - 1) // TM
        tiles_n = (n + TN - 1) // TN
        total = tiles_m * tiles_n
        t = cuda.blockIdx.x
        bm, bn = tile_of(t, tiles_m, tiles_n)
        tile = device_pipeline.get_tile(smem, bm, bn)
        acc = MM.suggest_accumulator()
        while t < total:
            for i in range(tid, TWO_TM, NT):
                stats[i] = NEG_INF if i < TM else np.float32(0)
            cuda.syncthreads()
            acc.clear()
            tile.execute(acc)
            nxt = t + cuda.gridDim.x
            nbm, nbn = tile_of(nxt, tiles_m, tiles_n)
            if nxt < total:
                device_pipeline.reset_tile(tile, nbm, nbn)
            frag = acc.get_results()
            row0 = bm * TM
            col0 = bn * TN
            if row0 + TM <= m and col0 + TN <= n and n % VEC == 0:
                store_whole_tile(acc, frag, out, stats, args, m, n, row0, col0, bn, tid)
            else:
                store_elements(acc, frag, out, stats, args, m, n, row0, col0, bn, tid)
            t = nxt
            bm = nbm
            bn = nbn
        tile._del()

    body = persistent_kernel if GROUP else kernel
    return MM, cuda.jit(body, extensions=pipeline_extensions, launch_bounds=(NT, 1))


class PipelineGemm(CompiledKernel):
    """``out = epilogue(A @ B)`` with cuBLASDx's pipeline API (int8 -> int32 or float16 -> float32).

    ``a`` is ``(M, K)`` row-major; ``b_t`` is B *transposed*, ``(N, K)`` row-major (K contiguous,
    as integer tensor cores need it; ``b_t.T`` is the ``(K, N)`` column-major view the pipeline
    reads). Operands are copied into zero-padded buffers when M, N or K is not a whole number of
    tiles (or K is shorter than ``depth`` tiles). One compilation per padded shape.
    """

    def __init__(self, config: PipelineConfig | None = None, epilogue: _epilogues.Epilogue | None = None, *,
                 kernel=None):
        self.config = config or PipelineConfig()
        problems = self.config.problems()
        if problems:
            raise _validate.GemmArgumentError(f"invalid configuration {self.config.label()}: " + "; ".join(problems))
        if self.config.precision not in ("int8", "float16"):
            raise _validate.GemmArgumentError("PipelineGemm supports int8 and float16 inputs")
        if kernel is not None and epilogue is not None:
            raise _validate.GemmArgumentError("a learner's kernel (kernel=) stores A @ B itself: give no epilogue")
        self.epilogue = epilogue or _epilogues.identity()
        self.learner_kernel = kernel is not None  # 06.1's exercise: args (out, m, n, pipeline), out 2-D
        if self.learner_kernel:
            self.MM, self.dispatcher = _build_learner_pipeline_kernel(self.config, kernel)
        else:
            self.MM, self.dispatcher = _build_pipeline_kernel(self.config, self.epilogue)
        self._pipelines = {}
        self.compile_seconds = None
        self._smem_set = set()

    @property
    def acc_dtype(self):
        return np.dtype(np.int32 if self.config.precision == "int8" else np.float32)

    @property
    def out_dtype(self):
        d = self.epilogue.out_dtype
        return np.dtype(self.acc_dtype if d == "accumulator" else d)

    def padded_shape(self, m, n, k):
        c = self.config
        kp = max(-(-k // c.tile_k), c.depth) * c.tile_k
        return -(-m // c.tile_m) * c.tile_m, -(-n // c.tile_n) * c.tile_n, kp

    def _operands(self, a, b_t):
        import cupy as cp

        a = cp.asarray(a)
        b_t = cp.asarray(b_t)
        m, k = a.shape
        n = b_t.shape[0]
        mp, np_, kp = self.padded_shape(m, n, k)
        if (mp, kp) != (m, k) or not a.flags.c_contiguous:
            ap = cp.zeros((mp, kp), dtype=a.dtype)
            ap[:m, :k] = a
            a = ap
        if (np_, kp) != (n, k) or not b_t.flags.c_contiguous:
            bp = cp.zeros((np_, kp), dtype=b_t.dtype)
            bp[:n, :k] = b_t
            b_t = bp
        return a, b_t

    def prepare(self, a, b_t, out, *epilogue_args):
        from numba import cuda

        _validate.check_pipeline(a, b_t, out, precision=self.config.precision, out_dtype=self.out_dtype)
        m, k = a.shape
        n = b_t.shape[0]
        out3 = _validate.as_batched(as_device(out), "out")
        if not self.learner_kernel:  # a learner's kernel takes its extra arguments as it declares them
            _validate.check_epilogue_args(self.epilogue, epilogue_args, m=m, n=n, batch=1,
                                          tiles_n=-(-n // self.config.tile_n))
        key = (int(a.__cuda_array_interface__["data"][0]), int(b_t.__cuda_array_interface__["data"][0]),
               tuple(a.shape), tuple(b_t.shape))
        if key not in self._pipelines:
            ap, bp = self._operands(a, b_t)
            a_dev, b_dev = cuda.as_cuda_array(ap), cuda.as_cuda_array(bp.T)
            pipeline = self.MM.suggest_device_pipeline(self.config.depth, a_dev, b_dev)
            self._pipelines = {key: (pipeline, ap, bp)}  # keep one: pipelines hold device memory
        pipeline, ap, bp = self._pipelines[key]
        import cupy as cp

        a_cp, b_cp = cp.asarray(a), cp.asarray(b_t)
        if ap.data.ptr != a_cp.data.ptr:  # padded copies: refresh them, the caller's data may have changed
            ap[:m, :k] = a_cp
        if bp.data.ptr != b_cp.data.ptr:
            bp[:n, :k] = b_cp
        grid = (ap.shape[0] // self.config.tile_m, bp.shape[0] // self.config.tile_n, 1)
        if self.config.persistent_group_m:  # one block per SM (the pipeline's shared memory allows no more)
            grid = (min(grid[0] * grid[1], cuda.get_current_device().MULTIPROCESSOR_COUNT), 1, 1)
        dev_args = tuple(as_device(x) if hasattr(x, "__cuda_array_interface__") else x for x in epilogue_args)
        if self.learner_kernel:  # kernel(out, m, n, device_pipeline, *extra): 06.2's bias follows the pipeline
            args = (out3[0], np.int32(m), np.int32(n), pipeline, *dev_args)
        else:
            args = (out3, np.int32(m), np.int32(n), dev_args, pipeline)
        return grid, args, pipeline

    def _launch_args(self, a, b_t, out, *epilogue_args):
        grid, args, pipeline = self.prepare(a, b_t, out, *epilogue_args)
        self._compile_now(args)
        smem = pipeline.buffer_size
        # The opt-in is per compiled kernel, and the pipeline's type (so the compiled kernel) is
        # different for every global shape: key on the full launch types, pipeline included. (Keying
        # on the other arguments alone skipped the opt-in for a second shape: the launch then failed
        # with CUDA_ERROR_INVALID_VALUE.)
        sig_key = (smem, launch_types(self.dispatcher, args))
        if smem > _configs.STATIC_SMEM_LIMIT and sig_key not in self._smem_set:
            set_max_dynamic_shared_memory(self.dispatcher, args, smem)
            self._smem_set.add(sig_key)
        return grid, args, smem, pipeline

    def __call__(self, a, b_t, out, *epilogue_args, stream=0):
        grid, args, smem, pipeline = self._launch_args(a, b_t, out, *epilogue_args)
        self.dispatcher[grid, pipeline.block_dim, stream, smem](*args)
        return out

    def launcher(self, a, b_t, out, *epilogue_args):
        grid, args, smem, pipeline = self._launch_args(a, b_t, out, *epilogue_args)
        kernel = self.dispatcher[grid, pipeline.block_dim, 0, smem]
        return lambda: kernel(*args)


# ---------------------------------------------------------------------------------------------
# Convenience


def im2col_geometry(n, c, h, w, r, s, padding):
    from .validate import ConvGeometry

    return ConvGeometry(n, c, h, w, r, s, padding)


@functools.lru_cache(maxsize=None)
def _im2col_kernel(prec: str):
    from numba import cuda

    BITS = _bits_dtype(prec)

    @cuda.jit
    def im2col(x, cols, C, H, W, R, S, P, OH, OW):
        """cols[(n, oh, ow), (c, r, s)] = x[n, c, oh + r - P, ow + s - P] (0 outside the image)."""
        row = cuda.blockIdx.x
        ow = row % OW
        t = row // OW
        oh = t % OH
        nimg = t // OH
        for col in range(cuda.threadIdx.x, cols.shape[1], cuda.blockDim.x):
            s = col % S
            t2 = col // S
            r = t2 % R
            c = t2 // R
            ih = oh + r - P
            iw = ow + s - P
            v = BITS(0)
            if 0 <= ih < H and 0 <= iw < W:
                v = x[nimg, c, ih, iw]
            cols[row, col] = v

    return im2col


def im2col(x, geometry, cols):
    """Explicit im2col on the GPU: ``cols`` is ``(N*OH*OW, C*R*S)`` in x's dtype."""
    g = geometry
    xd = as_device(x)
    prec = {np.dtype(np.float16): "float16", np.dtype(np.float32): "tf32", np.dtype(np.int8): "int8"}.get(xd.dtype)
    if prec is None:
        prec = "bfloat16"
    cd = as_device(cols)
    _im2col_kernel(prec)[g.gemm_m, 128](_bits_view(xd, prec), _bits_view(cd, prec), g.c, g.h, g.w, g.r, g.s,
                                        g.padding, g.out_h, g.out_w)
    return cols


# ---------------------------------------------------------------------------------------------
# Compiling ahead of time, in parallel


def _example_args(kernel: BlockGemm, batch_shared_b=False):
    """Tiny device arrays with the dtypes and layouts of a real launch: Numba compiles for types,
    not sizes, so compiling for these serves every size."""
    import cupy as cp

    from .precisions import to_device

    cfg, prec = kernel.config, kernel.config.precision
    adt = np.int8 if prec == "int4" else host_dtype(prec)
    bdt = np.uint8 if prec == "int4" else host_dtype(prec)

    def ones(shape, dt):  # Numba device arrays: CuPy has no bfloat16 (it would say void16)
        return to_device(np.ones(shape, dtype=dt))

    geometry = None
    if kernel.operand_a == "im2col":
        from .validate import ConvGeometry

        geometry = ConvGeometry(1, 1, 3, 3, 3, 3, 1)
        a = ones((1, 1, 3, 3), adt)
        m, k = geometry.gemm_m, geometry.gemm_k
    else:
        m, k = 2, 2
        a = ones((m, k), adt)
    n = 2
    b = ones((k, n // 2 if prec == "int4" else n), bdt)
    out = cp.empty((m, n), dtype=kernel.out_dtype)
    extra = []
    for name in kernel.epilogue.arg_names:
        extra.append({"alpha": 1.0, "beta": 0.0, "gamma": 1.0, "scale": 1.0, "zero_point": 0,
                      "c": cp.zeros((1, m, n), cp.float32), "bias": cp.zeros(m, cp.float32),
                      "row_max": cp.zeros((1, m, 1), cp.float32), "row_sum": cp.zeros((1, m, 1), cp.float32)}[name])
    return a, b, out, tuple(extra), geometry


def _precompile_worker(spec):
    import os

    os.environ.setdefault("KERNEL_LAB_QUIET", "1")
    import kernel_lab  # noqa: F401  (chooses the GPU backend before numba.cuda)

    cfg_dict, epilogue_name, operand_a, shape = spec
    t0 = time.perf_counter()
    try:
        if shape is None:
            cfg = GemmConfig(**cfg_dict)
            kernel = BlockGemm(cfg, _epilogues.by_name(epilogue_name, cfg.tile_m), operand_a=operand_a)
            a, b, out, extra, geometry = _example_args(kernel)
            _, args = kernel.prepare(a, b, out, *extra, geometry=geometry)
            kernel._compile_now(args)
        else:  # a pipeline GEMM compiles for one global shape: build it for that shape
            import cupy as cp

            cfg = PipelineConfig(**cfg_dict)
            kernel = PipelineGemm(cfg, _epilogues.by_name(epilogue_name, cfg.tile_m))
            m, n, k = shape
            dt = np.int8 if cfg.precision == "int8" else np.float16
            a, b_t = cp.zeros((m, k), dt), cp.zeros((n, k), dt)
            extra = {"bias": cp.zeros(m, cp.float32), "alpha": 1.0, "beta": 0.0, "gamma": 1.0, "scale": 1.0,
                     "zero_point": 0, "c": cp.zeros((1, m, n), cp.float32)}
            kernel.launcher(a, b_t, cp.empty((m, n), kernel.out_dtype),
                            *(extra[name] for name in kernel.epilogue.arg_names))
        return spec, time.perf_counter() - t0, None
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        return spec, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"


def precompile(configs, epilogue: str = "identity", operand_a: str = "matrix", processes: int | None = None,
               log=print, shape=None) -> list:
    """Compile GEMMs for several configurations in parallel worker processes.

    Code generation is CPU work (NVRTC inside libmathdx) and each configuration needs its own; run
    side by side on a many-core host, it fills the on-disk code-generation cache in the time of
    the slowest one, and the kernels then compile here in seconds. ``configs`` are block-GEMM
    configurations (``GemmConfig``), or pipeline configurations (``PipelineConfig``) together with
    the problem ``shape`` (M, N, K) they are for. Returns ``[(config, seconds, error or None)]``.
    """
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor

    configs = list(configs)
    pipelines = [isinstance(c, PipelineConfig) for c in configs]
    if any(pipelines) and (not all(pipelines) or shape is None):
        raise _validate.GemmArgumentError("pipeline configurations compile for one problem shape: pass them alone, "
                                          "with shape=(M, N, K)")
    specs = [(c.as_dict(), epilogue, operand_a, tuple(shape) if any(pipelines) else None) for c in configs]
    if not specs:
        return []
    # Each worker opens its own CUDA context (about half a GiB of GPU memory: 06.4's twelve made
    # that notebook's peak 9.6 GiB on an H200). On a shared GPU or a MIG slice, cap them with
    # KERNEL_LAB_COMPILE_PROCESSES (deploy/README.md); with a warm cache, one is as fast.
    text = os.environ.get("KERNEL_LAB_COMPILE_PROCESSES", "") or "12"
    if not text.isdigit() or int(text) < 1:
        raise _validate.GemmArgumentError(f"KERNEL_LAB_COMPILE_PROCESSES must be a whole number of processes >= 1, "
                                          f"got {text!r}")
    cap = int(text)
    processes = processes or max(1, min(len(specs), (os.cpu_count() or 2) - 1, cap))
    results = []
    with ProcessPoolExecutor(max_workers=processes, mp_context=mp.get_context("spawn")) as pool:
        for spec, seconds, error in pool.map(_precompile_worker, specs):
            cfg = (PipelineConfig if spec[3] is not None else GemmConfig)(**spec[0])
            results.append((cfg, seconds, error))
            if log:
                log(f"compiled {cfg.label()} in {seconds:.0f} s" + (f"  FAILED: {error}" if error else ""))
    return results
