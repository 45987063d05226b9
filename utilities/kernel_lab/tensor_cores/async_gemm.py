"""06.1's numbered steps: a block GEMM whose tiles arrive by 16-byte ``cp.async`` copies.

``BlockGemm`` (06.1's first kernel) loads its tiles one 2-byte element a thread at a time through
registers; compiled for sm_90 its main loop is about 3,000 integer instructions (indices, bounds
tests) around 64 tensor-core instructions, and it reaches 0.04x cuBLAS at 4096^3. The steps here
change only how the tiles get into shared memory; ``MM.execute`` stays cuBLASDx's:

2. each thread copies whole 16-byte chunks (eight halves) with ``cp.async`` (``mma_ptx``), zeros
   past the matrix edges (a copy of 0 source bytes fills the chunk with zeros), into cuBLASDx's
   *plain* row-major layouts, two slices in flight;
3. the chunks go to the offsets of cuBLASDx's *suggested* layouts instead: the same rows with their
   16-byte chunks permuted by an XOR of row bits (a swizzle), so that the eight rows a tensor-core
   fragment load (``ldmatrix``) reads at once sit in eight different banks;
4. more slices in flight (``stages``).

The learner writes the chunk copies (``make_issue_slice``) and the swizzle (``a_pos``/``b_pos``) in
06.1; the stage loop around them is :func:`kernel`'s. The swizzles were read off cuBLASDx itself:
``scripts/probes/block_gemm_copy.py --only discover`` lets cuBLASDx's own ``copy`` fill a tile of
known bit patterns and dumps shared memory (H100, nvmath-python 1.0, libmathdx 0.3.2): for
128 x 128 x 32 fp16 tiles and 256 threads, chunk ``c`` of row ``r`` of A (4 chunks a row) sits at
chunk ``4 r + (c ^ ((r >> 1) & 3))``, and chunk ``c`` of row ``r`` of B (16 a row) at
``128 (r >> 3) + 64 (c >> 3) + 8 (r & 7) + ((c & 7) ^ (r & 7))``.

The loop around the copies keeps its own costs low: the stages go round as counters (no 64-bit
``i % stages``), a stage's tiles are ``mma_ptx.window`` views (no slice clamping), and the results
leave through shared memory (cuBLASDx's ``copy_fragment``, then 16-byte chunks a thread), not one
``frag_coords(i)`` computation a value. Measured on an H200 at 4096^3 fp16 (06.1's stored run),
ratios to cuBLAS (CuPy) in the same run: ``BlockGemm`` 0.04x; plain layouts, 2 stages 0.12x;
suggested, 2 stages 0.22x; 3 stages **0.28x**; 4 stages 0.26x. A probe run on the same H200 just
before it timed the earlier form of this loop (``i % stages``, slices, a per-value epilogue; 294
instructions a pass against 242 now, sm_90 SASS) beside this one: 0.23x against 0.28x with 3
stages, 0.22x against 0.26x with 4 (recorded in ``scripts/probes/block_gemm_copy.py``).

:class:`AsyncConv` runs the same loop as a convolution's implicit GEMM (06.3): the learner's copies
gather A's chunks from a channels-last image (eight channels of one input pixel, 16 bytes). On an
H100, for 32 x 64 x 56 x 56 images and 128 3 x 3 filters, it took 125.0 us, 0.31x cuDNN's
channels-last kernel (38.3 us) and 13x faster than explicit im2col + GEMM (06.3's stored run).

Whole 16-byte chunks need K and N to be multiples of 8 (rows that start on 16 bytes); other shapes
are refused with that reason (``BlockGemm`` serves them).
"""

from __future__ import annotations

import functools
import time

import numpy as np

from ..validate import KernelLabArgumentError

TM, TN, TK, THREADS = 128, 128, 32, 256  # the tiles of 06.1's kernels, fp16 in, float32 out
CH = 8  # halves in a 16-byte chunk
A_ROW_CHUNKS, B_ROW_CHUNKS = TK // CH, TN // CH  # chunks in a row of the A tile (TM x TK), of B (TK x TN)
A_CHUNKS, B_CHUNKS = TM * A_ROW_CHUNKS, TK * B_ROW_CHUNKS
A_BYTES = 2 * TM * TK  # a stage: the A tile, then the B tile
STAGE_BYTES = A_BYTES + 2 * TK * TN
LAYOUTS = ("plain", "suggested")


def plain_a_pos(r, c):
    return r * A_ROW_CHUNKS + c


def plain_b_pos(r, c):
    return r * B_ROW_CHUNKS + c


def suggested_a_pos(r, c):
    return r * A_ROW_CHUNKS + (c ^ ((r >> 1) & 3))


def suggested_b_pos(r, c):
    return 128 * (r >> 3) + 64 * (c >> 3) + 8 * (r & 7) + ((c & 7) ^ (r & 7))


POSITIONS = {"plain": (plain_a_pos, plain_b_pos), "suggested": (suggested_a_pos, suggested_b_pos)}


def reference_stage(a, b, k0, row0, col0, layout):
    """The stage (A tile, then B tile, as float16 element order in shared memory) that the copies of
    slice ``k0`` must leave: each chunk at its layout's position, zeros past the edges."""
    a_pos, b_pos = POSITIONS[layout]
    m, k = a.shape
    n = b.shape[1]
    sa = np.zeros(TM * TK, np.float16)
    sb = np.zeros(TK * TN, np.float16)
    for r in range(TM):
        for c in range(A_ROW_CHUNKS):
            gr, gc = row0 + r, k0 + CH * c
            if gr < m and gc < k:
                sa[CH * a_pos(r, c):CH * a_pos(r, c) + CH] = a[gr, gc:gc + CH]
    for r in range(TK):
        for c in range(B_ROW_CHUNKS):
            gr, gc = k0 + r, col0 + CH * c
            if gr < k and gc < n:
                sb[CH * b_pos(r, c):CH * b_pos(r, c) + CH] = b[gr, gc:gc + CH]
    return np.concatenate([sa, sb])


def _matmul():
    """cuBLASDx's block ``Matmul`` for these tiles.

    Numba interns types by name, and nvmath-python names a ``Matmul``'s type by its description, so
    a second ``Matmul`` with the same description (06.1's ``BlockGemm`` builds one) is typed as the
    first, whose tensor handles never saw the suggested layouts: typing ``execute`` then fails an
    assertion inside nvmath-python. Taking the object the type already holds keeps the layouts,
    the partition functions and ``execute`` on one ``Matmul``."""
    import nvmath.device as nd
    from nvmath.device.cublasdx_numba import BlasType

    MM = nd.Matmul(size=(TM, TN, TK), precision=(np.float16, np.float16, np.float32), data_type="real",
                   arrangement=("row_major", "row_major", "row_major"), execution="Block", block_size=THREADS,
                   static_block_dim=True, alignment=(16, 16, 16))
    return BlasType(MM).blas


C_ROW_CHUNKS = TN // 4  # 16-byte chunks (four float32) in a row of the C tile
C_CHUNKS = TM * C_ROW_CHUNKS


def store_float32(ctile, out, bias, row0, col0, m, n, tid):
    """The default store: the block's C tile (row-major float32 in shared memory, ``(r, c)`` at
    ``r * TN + c``) to ``out`` as it is, four values a thread a pass, so that a warp writes whole rows'
    16-byte chunks, coalesced. ``bias`` is unused (06.3's conv layer passes its own store)."""
    for j in range(C_CHUNKS // THREADS):
        idx = tid + j * THREADS
        r, c = idx // C_ROW_CHUNKS, 4 * (idx % C_ROW_CHUNKS)
        if row0 + r < m and col0 + c < n:  # n is a multiple of 8: a chunk is all in or all out
            for e in range(4):
                out[row0 + r, col0 + c + e] = ctile[r * TN + c + e]


@functools.lru_cache(maxsize=None)
def kernel(issue_slice, layout: str, stages: int, store_tile=None):
    """The kernel around the learner's ``issue_slice(a, b, stage, k0, row0, col0, m, n, k, tid)``
    (a device function that starts this thread's copies of slice ``k0`` into the stage at shared
    address ``stage``): ``stages`` slices in flight, cuBLASDx's ``execute`` on each in turn, then the
    block's results, gathered row-major in shared memory, leave through ``store_tile(ctile, out,
    bias, row0, col0, m, n, tid)`` (:func:`store_float32` unless given: 06.3's conv layer writes its
    own, with a bias and a ReLU). The kernel is ``(a, b, out, bias, m, n, k)``. Returns
    ``(dispatcher, dynamic shared bytes)``."""
    from numba import cuda
    from nvmath.device.common import copy_fragment, make_tensor

    from ..mma_ptx import cp_async_commit, cp_async_wait_group, shared_address, window

    store = store_tile if store_tile is not None else cuda.jit(device=True, inline="always")(store_float32)
    if layout not in LAYOUTS:
        raise KernelLabArgumentError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not 2 <= stages <= 6:
        raise KernelLabArgumentError(f"stages must be 2 to 6 (slices in flight), got {stages}")
    MM = _matmul()
    if layout == "plain":
        la, lb, lc = MM.get_layout_smem_a(), MM.get_layout_smem_b(), MM.get_layout_rmem_c()
    else:
        la, lb, lc = MM.suggest_layout_smem_a(), MM.suggest_layout_smem_b(), MM.suggest_layout_rmem_c()
    lsc = MM.get_layout_smem_c()  # row-major: (r, c) at r * TN + c
    A_SZ, B_SZ, C_SZ = TM * TK, TK * TN, lc.cosize
    STAGE = A_SZ + B_SZ
    LAST = stages - 1
    PENDING = stages - 2  # copy groups still in flight once a slice's own have landed

    @cuda.jit(launch_bounds=(THREADS, 1))
    def async_gemm(a, b, out, bias, m, n, k):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=16)
        base = shared_address(smem, 0)
        tid = cuda.threadIdx.x
        row0, col0 = cuda.blockIdx.x * TM, cuda.blockIdx.y * TN
        cbuf = cuda.local.array(shape=(C_SZ,), dtype=np.float32)
        for i in range(C_SZ):
            cbuf[i] = np.float32(0)
        acc = make_tensor(cbuf, lc)
        steps = (k + TK - 1) // TK
        for s in range(LAST):  # the first stages - 1 slices in flight
            if s < steps:
                issue_slice(a, b, base + s * STAGE_BYTES, s * TK, row0, col0, m, n, k, tid)
            cp_async_commit()
        # The stage execute reads and the stage the copies refill go round the ring as counters, not
        # as i % stages (a 64-bit division in the loop), and the stage's tiles are windows of the
        # dynamic shared array, not slices (whose clamping against its runtime length costs a dozen
        # instructions each): together 48 of the loop's 294 instructions on sm_90.
        read, write = 0, LAST
        for i in range(steps):
            cp_async_wait_group(PENDING)  # slice i has landed (this thread's copies) ...
            cuda.syncthreads()  # ... and everyone's; and slice i - 1's stage is free to refill
            s = i + LAST
            if s < steps:
                issue_slice(a, b, base + write * STAGE_BYTES, s * TK, row0, col0, m, n, k, tid)
            cp_async_commit()  # an empty group past the end keeps the count
            off = read * STAGE
            MM.execute(make_tensor(window(smem, off, A_SZ), la), make_tensor(window(smem, off + A_SZ, B_SZ), lb), acc)
            read = read + 1 if read < LAST else 0
            write = write + 1 if write < LAST else 0
        # The epilogue goes through shared memory: cuBLASDx's copy_fragment puts each thread's values
        # at their places in a row-major C tile (code generated for these layouts, unrolled), then
        # the store reads that tile in whole rows' chunks, coalesced. Storing each value from
        # frag_coords(i) costs ~100 instructions a value in a loop the compiler does not unroll.
        cp_async_wait_group(0)
        cuda.syncthreads()  # every warp is done with the stages: the C tile overwrites them
        ctile = cuda.shared.array(shape=(0,), dtype=np.float32, alignment=16)  # the same bytes as smem
        copy_fragment(acc, make_tensor(window(ctile, 0, TM * TN), lsc))
        cuda.syncthreads()
        store(ctile, out, bias, row0, col0, m, n, tid)

    return async_gemm, max(stages * STAGE_BYTES, 4 * TM * TN)


@functools.lru_cache(maxsize=None)
def _no_bias():
    """The bias argument of a kernel whose store takes none (one float32 on the device, kept)."""
    from numba import cuda

    return cuda.to_device(np.zeros(1, np.float32))


class AsyncGemm:
    """``out = A @ B`` (fp16 in, float32 out, row-major, K and N multiples of 8) with the learner's
    chunk copies ``issue_slice``, in ``layout`` ("plain" or "suggested"), ``stages`` slices in flight."""

    def __init__(self, issue_slice, layout: str = "suggested", stages: int = 3, store_tile=None):
        self.layout, self.stages, self.store_tile = layout, stages, store_tile
        self.dispatcher, self.smem_bytes = kernel(issue_slice, layout, stages, store_tile)
        self.compile_seconds = None
        self._opted_in = False

    def label(self) -> str:
        return f"cp.async, {self.layout} layouts, {self.stages} stages"

    def _args(self, a, b, out):
        from .toolchain import as_device

        a, b, out = as_device(a), as_device(b), as_device(out)
        for name, x, dt in (("a", a, np.float16), ("b", b, np.float16), ("out", out, np.float32)):
            if x.ndim != 2 or np.dtype(x.dtype) != dt:
                raise KernelLabArgumentError(f"{name} must be a 2-D {np.dtype(dt).name} array, got {x.ndim}-D "
                                             f"{np.dtype(x.dtype).name}")
            if not x.is_c_contiguous():
                raise KernelLabArgumentError(f"{name} must be C-contiguous (row-major), not a transposed or sliced view")
        (m, k), (k2, n) = a.shape, b.shape
        if k2 != k or out.shape != (m, n):
            raise KernelLabArgumentError(f"shapes do not fit: a {a.shape}, b {b.shape}, out {out.shape}")
        if k % CH or n % CH:
            raise KernelLabArgumentError(f"K = {k} and N = {n} must be multiples of 8: a 16-byte chunk of a row must "
                                         "start on 16 bytes (gemm.BlockGemm serves other shapes)")
        return (a, b, out, _no_bias(), np.int32(m), np.int32(n), np.int32(k)), (-(-m // TM), -(-n // TN))

    def launcher(self, a, b, out, *bias):
        """A no-argument function that launches this kernel on these arrays (for kl.benchmark)."""
        from .toolchain import launch_types, set_max_dynamic_shared_memory

        args, grid = self._args(a, b, out, *bias)
        if self.compile_seconds is None:
            t0 = time.perf_counter()
            self.dispatcher.compile(launch_types(self.dispatcher, args))
            self.compile_seconds = time.perf_counter() - t0
        if self.smem_bytes > 48 * 1024 and not self._opted_in:
            set_max_dynamic_shared_memory(self.dispatcher, args, self.smem_bytes)
            self._opted_in = True
        launch = self.dispatcher[grid, THREADS, 0, self.smem_bytes]
        return lambda: launch(*args)

    def __call__(self, a, b, out, *bias):
        self.launcher(a, b, out, *bias)()
        return out


class AsyncConv(AsyncGemm):
    """A stride-1 convolution as an implicit GEMM on the same stage loop: ``out (N*OH*OW, K) =
    im2col(x) @ wmat`` with ``x`` a channels-last (N, H, W, C) fp16 image, ``wmat`` the filters as an
    (R*S*C, K) fp16 matrix (``references.filters_rsc``) and float32 ``out`` (row (n, oh, ow) is an
    output pixel: channels-last as well). The learner's ``issue_slice`` gathers A's chunks from the
    image: with C a multiple of 8, columns 8j..8j+7 of a row are eight channels of one input pixel,
    one 16-byte copy (zeros in the padding). It closes over the geometry, so it is built for one.

    With the learner's ``store_tile`` (06.3's conv layer: see :func:`kernel`), ``out`` is float16 and
    the launch takes the layer's float32 ``bias`` (K,) after it: ``conv(x, wmat, out, bias)``."""

    def __init__(self, issue_slice, geometry, layout: str = "suggested", stages: int = 3, store_tile=None):
        super().__init__(issue_slice, layout, stages, store_tile)
        self.geometry = geometry

    def label(self) -> str:
        return f"implicit GEMM, cp.async, {self.layout} layouts, {self.stages} stages"

    def _args(self, x, wmat, out, bias=None):
        from .toolchain import as_device

        g = self.geometry
        layer = self.store_tile is not None
        if layer != (bias is not None):
            raise KernelLabArgumentError("a conv built with store_tile takes the layer's bias after out, "
                                         "conv(x, wmat, out, bias); one without takes none")
        x, wmat, out = as_device(x), as_device(wmat), as_device(out)
        out_dt = np.float16 if layer else np.float32
        for name, v, nd, dt in (("x", x, 4, np.float16), ("wmat", wmat, 2, np.float16), ("out", out, 2, out_dt)):
            if v.ndim != nd or np.dtype(v.dtype) != dt:
                raise KernelLabArgumentError(f"{name} must be a {nd}-D {np.dtype(dt).name} array, got {v.ndim}-D "
                                             f"{np.dtype(v.dtype).name}")
            if not v.is_c_contiguous():
                raise KernelLabArgumentError(f"{name} must be C-contiguous, not a transposed or sliced view")
        if x.shape != (g.n, g.h, g.w, g.c):
            raise KernelLabArgumentError(f"x must be channels-last (N, H, W, C) = {(g.n, g.h, g.w, g.c)} for this "
                                         f"geometry, got {x.shape} (an NCHW image: x.transpose(0, 2, 3, 1) and copy)")
        if g.c % CH:
            raise KernelLabArgumentError(f"C = {g.c} must be a multiple of 8: a 16-byte chunk of K must be eight "
                                         "channels of one pixel (BlockGemm's im2col loader serves other C)")
        kf = wmat.shape[1]
        if wmat.shape[0] != g.gemm_k or kf % CH:
            raise KernelLabArgumentError(f"wmat must be (R*S*C, K) = ({g.gemm_k}, K) with K a multiple of 8, got "
                                         f"{wmat.shape}")
        if out.shape != (g.gemm_m, kf):
            raise KernelLabArgumentError(f"out must be (N*OH*OW, K) = {(g.gemm_m, kf)}, got {out.shape}")
        if layer:
            bias = as_device(bias)
            if bias.ndim != 1 or np.dtype(bias.dtype) != np.float32 or bias.shape[0] != kf:
                raise KernelLabArgumentError(f"bias must be a 1-D float32 array of K = {kf} values (one a filter), "
                                             f"got {bias.ndim}-D {np.dtype(bias.dtype).name} of shape {bias.shape}")
        else:
            bias = _no_bias()
        args = (x, wmat, out, bias, np.int32(g.gemm_m), np.int32(kf), np.int32(g.gemm_k))
        return args, (-(-g.gemm_m // TM), -(-kf // TN))
