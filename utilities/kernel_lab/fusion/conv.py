"""Notebook 03.2: 3x3 convolution + bias + ReLU, NCHW, padding 1, stride 1, float32.

``x`` is B x C_in x H x W, ``w`` C_out x C_in x 3 x 3, ``bias`` C_out; the output ``y`` is
B x C_out x H x W with ``y[b, o, h, w] = relu(bias[o] + sum_{c, i, j} x[b, c, h+i-1, w+j-1] w[o, c, i, j])``
(``x`` is zero outside the image: the padding). Every direct kernel here maps one block to one
(batch, output channel) pair (``blockIdx.z``, or a group of output channels for the register-blocked
one) and a 2D tile of output pixels (``blockIdx.x``/``y``), so that neighbouring threads read
neighbouring pixels (coalesced).

The variants, one idea each, are the notebook's exercises (the learner writes them; these are the
same code, held to the notebook by tests/test_package_copies.py, for the probes and benchmarks):

* :data:`conv3x3_bias` and :data:`relu_inplace`: the direct kernel, loops ``i -> j -> c``
  (window position outermost, input channel innermost), then the ReLU as a second kernel;
* :data:`conv_fused_hwc`: the same with bias and ReLU in the one kernel (the package's only
  variant: it measures fusion alone, at the direct kernel's loop order);
* :data:`conv3x3_fused`: fused, and ``c`` outermost, so the 9 weights of a channel are read together;
* :func:`make_const_bias`: the bias in constant memory (compiled into the kernel, so one
  compilation per bias array: the price of constant memory in Numba);
* :data:`conv3x3_smem_weights`: the block's C_in x 9 weights staged in shared memory once
  (:data:`stage_weights`);
* :func:`make_tiled`: per input channel, the block's input tile with its one-pixel halo staged
  in shared memory ((T+2) x (T+2) values for T x T outputs, :data:`stage_tile`), plus the weights;
* :func:`make_register_blocked`: each thread computes COB output channels x PX adjacent pixels,
  reusing each loaded input COB times and each weight PX times;
* :func:`igemm_launcher`: the convolution as an implicit GEMM on CUDA cores, ``y[b] = W' @ im2col(x[b])``
  with im2col never stored: module 02's warp-tiled, double-buffered SGEMM
  (``reductions_gemm.sgemm.warptile_parts``) with a B loader that gathers x on the fly
  (:func:`make_gather_fast`: 03.2's last gather, an unsigned index and the row tests hoisted) and a
  bias + ReLU epilogue; the weights reordered once by :func:`prepare_weights`;
  :func:`igemm_auto_launcher` chooses the tiles by C_out.
"""

from __future__ import annotations

import functools
import hashlib
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from ..sizes import sizes as _sizes
from ..environment import on_simulator
from ..validate import KernelLabArgumentError

from numba import cuda, float32  # noqa: E402  (kernel_lab chose GPU or simulator already)

_GPU = dict(tile=16, max_cin=128, cob=8, px=4, rb_tx=16, rb_ty=8, threads=256)
_S = _sizes(gpu=_GPU, sim=dict(tile=4, max_cin=32, cob=2, px=2, rb_tx=4, rb_ty=2, threads=64))
GPU = SimpleNamespace(**_GPU)  # the GPU's sizes, for a check that runs the GPU's configuration in the simulator
TILE = _S.tile  # output tile of the 2D kernels: TILE x TILE threads, one pixel each
MAX_CIN = _S.max_cin  # shared-memory weights: at most MAX_CIN input channels (static array size)
# Shared-array shapes as named constants: the GPU compiler takes only constants (a global name, not
# an expression such as MAX_CIN * 9) as a shape; the simulator would take either.
W_S_SIZE = MAX_CIN * 9
EW_THREADS = _S.threads


class RegisterBlock(NamedTuple):
    """The register-blocked kernel's shape: each thread computes ``cob`` output channels x ``px``
    adjacent pixels of a row; a block is ``tx`` x ``ty`` threads; the block's weights in shared
    memory hold at most ``max_cin`` input channels."""
    cob: int
    px: int
    tx: int
    ty: int
    max_cin: int


RB = RegisterBlock(_S.cob, _S.px, _S.rb_tx, _S.rb_ty, _S.max_cin)  # this backend's
RB_GPU = RegisterBlock(GPU.cob, GPU.px, GPU.rb_tx, GPU.rb_ty, GPU.max_cin)  # the GPU's, also in the simulator
COB, PX = RB.cob, RB.px

# The shape sweep: (B, C_in, C_out, H = W)
SHAPES = _sizes(gpu=dict(s=[(4, 32, 64, 64), (4, 32, 32, 64), (8, 32, 64, 128), (8, 64, 64, 512),
                            (8, 128, 128, 512)]),
                sim=dict(s=[(1, 3, 5, 7), (2, 4, 3, 9)])).s


# --- references --------------------------------------------------------------------------------


def reference(x, w, bias, relu=True):
    """float64 3x3 convolution (cross-correlation, as in every DL framework), padding 1, + bias,
    then ReLU (``relu=False``: without it)."""
    x, w, bias = (np.asarray(a, np.float64) for a in (x, w, bias))
    _, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((x.shape[0], w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            y += np.einsum("bchw,oc->bohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j], optimize=True)
    y += bias[None, :, None, None]
    return np.maximum(y, 0.0) if relu else y


def magnitude(x, w, bias, relu=True):
    """The size of the terms behind each output element: the same sums over |x|, |w|, |bias|."""
    return reference(np.abs(x), np.abs(w), np.abs(bias), relu=False)


def bytes_moved(b, cin, cout, h, w) -> int:
    """The fewest bytes any fused kernel moves: x and the weights read once, y written once."""
    return 4 * (b * cin * h * w + cout * cin * 9 + cout + b * cout * h * w)


def flops(b, cin, cout, h, w) -> int:
    return 2 * b * cout * h * w * cin * 9


def check_shapes(y, x, w, bias):
    """Clear errors for inputs the kernels cannot take."""
    if x.ndim != 4 or w.ndim != 4 or bias.ndim != 1 or y.ndim != 4:
        raise KernelLabArgumentError("expected x: B x C_in x H x W, w: C_out x C_in x 3 x 3, bias: C_out, "
                                     "y: B x C_out x H x W")
    b, cin, h, wd = x.shape
    if w.shape[1:] != (cin, 3, 3):
        raise KernelLabArgumentError(f"w has shape {w.shape}, expected ({w.shape[0]}, {cin}, 3, 3)")
    if bias.shape != (w.shape[0],) or y.shape != (b, w.shape[0], h, wd):
        raise KernelLabArgumentError(f"bias {bias.shape} or y {y.shape} do not match C_out = {w.shape[0]}")
    for a, what in [(x, "x"), (w, "w"), (bias, "bias"), (y, "y")]:
        if np.dtype(a.dtype) != np.float32:
            raise KernelLabArgumentError(f"{what} is {a.dtype}: these kernels take float32")


def grid_2d(y, tile=TILE):
    """(blocks, threads) for the one-pixel-per-thread kernels."""
    b, cout, h, wd = y.shape
    return (-(-wd // tile), -(-h // tile), b * cout), (tile, tile)


# --- 1. direct, window outer, channels inner; ReLU as a second kernel -----------------------------


@cuda.jit
def conv3x3_bias(x, w, bias, y):
    cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
    ox = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    oy = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]
    if ox < wd and oy < h:
        acc = float32(0)
        for i in range(3):
            iy = oy + i - 1
            for j in range(3):
                ix = ox + j - 1
                if 0 <= iy < h and 0 <= ix < wd:
                    for c in range(cin):  # innermost: a different plane, H*W floats away, each step
                        acc += x[b, c, iy, ix] * w[o, c, i, j]
        y[b, o, oy, ox] = acc + bias[o]


@cuda.jit
def relu_inplace(y):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = max(y[i], float32(0))


def launch_unfused(y, x, w, bias):
    """conv + bias, then ReLU: two kernels, y written, read and written again."""
    blocks, threads = grid_2d(y)
    conv3x3_bias[blocks, threads](x, w, bias, y)
    flat = y.reshape(y.size)
    relu_inplace[-(-y.size // EW_THREADS), EW_THREADS](flat)


# --- 2. fused (the package's only variant: fusion alone); 3. fused, C_in outermost ----------------


@cuda.jit
def conv_fused_hwc(x, w, bias, y):
    ox = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    oy = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]
    cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
    if ox < wd and oy < h:
        acc = float32(0)
        for i in range(3):
            iy = oy + i - 1
            for j in range(3):
                ix = ox + j - 1
                if 0 <= iy < h and 0 <= ix < wd:
                    for c in range(cin):
                        acc += x[b, c, iy, ix] * w[o, c, i, j]
        y[b, o, oy, ox] = max(acc + bias[o], float32(0))


@cuda.jit
def conv3x3_fused(x, w, bias, y):
    cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
    ox = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    oy = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]
    if ox < wd and oy < h:
        acc = float32(0)
        for c in range(cin):  # one plane at a time: the 3 x 3 window's rows are cached lines
            for i in range(3):
                iy = oy + i - 1
                if 0 <= iy < h:
                    for j in range(3):
                        ix = ox + j - 1
                        if 0 <= ix < wd:
                            acc += x[b, c, iy, ix] * w[o, c, i, j]
        y[b, o, oy, ox] = max(acc + bias[o], float32(0))


def launcher(kernel, tile=TILE):
    """``launch(y, x, w, bias)`` for a one-pixel-per-thread kernel ``kernel(x, w, bias, y)``."""
    def launch(y, x, w, bias):
        blocks, threads = grid_2d(y, tile)
        kernel[blocks, threads](x, w, bias, y)
    launch.kernel = kernel
    return launch


# --- 4. bias in constant memory ----------------------------------------------------------------

_CONST_KERNELS: dict = {}


def make_const_bias(bias_host: np.ndarray):
    """The C_in-outer kernel with ``bias_host`` compiled into constant memory. Constant memory is
    fixed when the kernel is compiled, so each bias array costs one compilation (cached by its bytes)."""
    BIAS = np.ascontiguousarray(bias_host, dtype=np.float32)
    key = hashlib.sha1(BIAS.tobytes()).hexdigest()
    if key in _CONST_KERNELS:
        return _CONST_KERNELS[key]

    @cuda.jit
    def conv3x3_const_bias(x, w, y):
        cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
        cbias = cuda.const.array_like(BIAS)  # every thread of a block reads the same element: a broadcast
        ox = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        oy = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]
        if ox < wd and oy < h:
            acc = float32(0)
            for c in range(cin):
                for i in range(3):
                    iy = oy + i - 1
                    if 0 <= iy < h:
                        for j in range(3):
                            ix = ox + j - 1
                            if 0 <= ix < wd:
                                acc += x[b, c, iy, ix] * w[o, c, i, j]
            y[b, o, oy, ox] = max(acc + cbias[o], float32(0))

    _CONST_KERNELS[key] = conv3x3_const_bias
    return conv3x3_const_bias


def const_bias_launcher(make=make_const_bias, tile=TILE):
    """``launch(y, x, w, bias)`` for a constant-memory kernel ``make(bias_host)(x, w, y)``: the bias
    comes back to the host once per call (a layer would make its kernel once, when its bias is set)."""
    def launch(y, x, w, bias):
        bias_host = bias.copy_to_host() if hasattr(bias, "copy_to_host") else np.asarray(bias)
        blocks, threads = grid_2d(y, tile)
        make(bias_host)[blocks, threads](x, w, y)
    return launch


launch_const_bias = const_bias_launcher()


# --- 5. weights in shared memory ---------------------------------------------------------------


def require_cin(x, max_cin=MAX_CIN):
    if x.shape[1] > max_cin:
        raise KernelLabArgumentError(f"C_in = {x.shape[1]}: the shared-memory kernels hold at most {max_cin} "
                                     "input channels' weights (MAX_CIN)")


@cuda.jit(device=True, forceinline=True)
def stage_weights(w, w_s, o, cin, t, nthreads):
    """The C_in x 9 weights of output channel ``o`` into shared memory, all threads of the block."""
    for e in range(t, cin * 9, nthreads):
        w_s[e] = w[o, e // 9, (e % 9) // 3, e % 3]


@cuda.jit
def conv3x3_smem_weights(x, w, bias, y):
    cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
    w_s = cuda.shared.array(W_S_SIZE, float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    ox = cuda.blockIdx.x * cuda.blockDim.x + tx
    oy = cuda.blockIdx.y * cuda.blockDim.y + ty
    b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]
    stage_weights(w, w_s, o, cin, ty * cuda.blockDim.x + tx, cuda.blockDim.x * cuda.blockDim.y)
    cuda.syncthreads()  # every thread, inside the image or not, stages its share and reaches the barrier
    if ox < wd and oy < h:
        acc = float32(0)
        for c in range(cin):
            for i in range(3):
                iy = oy + i - 1
                if 0 <= iy < h:
                    for j in range(3):
                        ix = ox + j - 1
                        if 0 <= ix < wd:
                            acc += x[b, c, iy, ix] * w_s[c * 9 + i * 3 + j]
        y[b, o, oy, ox] = max(acc + bias[o], float32(0))


def smem_launcher(kernel, tile=TILE):
    """:func:`launcher` for a kernel that stages C_in x 9 weights in shared memory (C_in <= MAX_CIN)."""
    def launch(y, x, w, bias):
        require_cin(x)
        blocks, threads = grid_2d(y, tile)
        kernel[blocks, threads](x, w, bias, y)
    launch.kernel = kernel
    return launch


launch_smem_weights = smem_launcher(conv3x3_smem_weights)


# --- 6. input tile with halo in shared memory --------------------------------------------------


@functools.cache
def make_tiled(TILE):
    """The halo-tile kernel for TILE x TILE outputs a block (one compilation per tile size)."""
    HALO = TILE + 2  # a shared array's shape must be a constant: a name, not an expression

    @cuda.jit(device=True, forceinline=True)
    def stage_tile(x, tile, b, c, oy0, ox0, h, wd, t):
        """The (TILE+2) x (TILE+2) input pixels of channel ``c`` that the block's TILE x TILE outputs
        read: rows oy0-1 .. oy0+TILE, columns ox0-1 .. ox0+TILE; 0 outside the image (the padding). The
        block's TILE x TILE threads share the copy (``t``: this thread's index in the block)."""
        for e in range(t, (TILE + 2) * (TILE + 2), TILE * TILE):
            r, q = e // (TILE + 2), e % (TILE + 2)
            iy, ix = oy0 + r - 1, ox0 + q - 1
            tile[r, q] = x[b, c, iy, ix] if 0 <= iy < h and 0 <= ix < wd else float32(0)

    @cuda.jit
    def conv3x3_tiled(x, w, bias, y):
        tile = cuda.shared.array((HALO, HALO), float32)
        w_s = cuda.shared.array(W_S_SIZE, float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        ox0, oy0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * TILE
        b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]
        cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
        t = ty * TILE + tx
        stage_weights(w, w_s, o, cin, t, TILE * TILE)
        acc = float32(0)
        for c in range(cin):
            stage_tile(x, tile, b, c, oy0, ox0, h, wd, t)
            cuda.syncthreads()  # the tile (and, the first time, the weights) complete
            for i in range(3):
                for j in range(3):
                    acc += tile[ty + i, tx + j] * w_s[c * 9 + i * 3 + j]
            cuda.syncthreads()  # everyone done with the tile before the next channel overwrites it
        if ox0 + tx < wd and oy0 + ty < h:
            y[b, o, oy0 + ty, ox0 + tx] = max(acc + bias[o], float32(0))

    return conv3x3_tiled


def tiled_launcher(make=make_tiled, tile=TILE):
    return smem_launcher(make(tile), tile)


launch_smem_tile = tiled_launcher()


# --- 7. register blocking over output channels and pixels --------------------------------------


@functools.cache
def make_register_blocked(rb: RegisterBlock):
    """The register-blocked kernel for the shape ``rb`` (one compilation per shape)."""
    COB, PX, TX, TY = rb.cob, rb.px, rb.tx, rb.ty
    PX_HALO = PX + 2  # shapes of shared and local arrays: constants, folded here
    W_S_GROUP = COB * rb.max_cin * 9

    @cuda.jit
    def conv3x3_register_blocked(x, w, bias, y):
        w_s = cuda.shared.array(W_S_GROUP, float32)  # the group's weights: w_s[(oc * C_in + c) * 9 + 3 i + j]
        acc = cuda.local.array((COB, PX), float32)  # COB channels x PX pixels: registers
        xin = cuda.local.array((3, PX_HALO), float32)  # the 3 x (PX + 2) inputs of one channel
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        cin, h, wd, cout = x.shape[1], x.shape[2], x.shape[3], y.shape[1]
        groups = (cout + COB - 1) // COB
        b, g = cuda.blockIdx.z // groups, cuda.blockIdx.z % groups  # output channels g * COB .. g * COB + COB - 1
        ox0 = (cuda.blockIdx.x * TX + tx) * PX  # this thread's PX adjacent pixels: ox0 .. ox0 + PX - 1 of row oy
        oy = cuda.blockIdx.y * TY + ty
        for e in range(ty * TX + tx, COB * cin * 9, TX * TY):  # the group's weights, 0 past C_out
            o = g * COB + e // (cin * 9)
            w_s[e] = w[o, (e // 9) % cin, (e % 9) // 3, e % 3] if o < cout else float32(0)
        cuda.syncthreads()
        for oc in range(COB):
            for p in range(PX):
                acc[oc, p] = float32(0)
        if oy < h and ox0 < wd:
            for c in range(cin):
                for i in range(3):  # 3 x (PX + 2) inputs, each used by up to 3 pixels x COB channels
                    iy = oy + i - 1
                    for q in range(PX + 2):
                        ix = ox0 + q - 1
                        xin[i, q] = x[b, c, iy, ix] if 0 <= iy < h and 0 <= ix < wd else float32(0)
                for oc in range(COB):
                    for i in range(3):
                        for j in range(3):
                            wv = w_s[(oc * cin + c) * 9 + i * 3 + j]  # one weight, PX multiply-adds
                            for p in range(PX):
                                acc[oc, p] += xin[i, p + j] * wv
            for oc in range(COB):
                o = g * COB + oc
                if o < cout:
                    for p in range(PX):
                        if ox0 + p < wd:
                            y[b, o, oy, ox0 + p] = max(acc[oc, p] + bias[o], float32(0))

    return conv3x3_register_blocked


def register_blocked_launcher(make=make_register_blocked, rb: RegisterBlock = RB):
    """``launch(y, x, w, bias)`` for ``make(rb)``: blocks of rb.tx x rb.ty threads, each thread rb.px
    pixels of a row and rb.cob output channels; blockIdx.z = b * groups + g."""
    kernel = make(rb)

    def launch(y, x, w, bias):
        require_cin(x, rb.max_cin)
        b, cout, h, wd = y.shape
        blocks = (-(-wd // (rb.tx * rb.px)), -(-h // rb.ty), b * -(-cout // rb.cob))
        kernel[blocks, (rb.tx, rb.ty)](x, w, bias, y)
    launch.kernel = kernel
    launch.block = rb
    return launch


launch_register_blocked = register_blocked_launcher()


# --- 8. implicit GEMM on CUDA cores: module 02's warp-tiled SGEMM, B gathered from x ------------
#
# Per image b, the convolution is one GEMM:  Y_b = W' @ X_b,  with
#   Y_b  (C_out x H*W)  = y[b] as it lies in memory (NCHW: row o is output channel o's plane),
#   W'   (C_out x K)    = the weights with K = 9 * C_pad ordered (i, j, c): W'[o, (3 i + j) C_pad + c]
#                         = w[o, c, i, j] (C_pad: C_in rounded up to the K step BK, zeros beyond C_in),
#   X_b  (K x H*W)      = im2col(x[b]), never stored: X_b[(3 i + j) C_pad + c, p] = x[b, c, h + i - 1,
#                         w + j - 1] for p = h W + w, 0 outside the image (the padding) or for c >= C_in.
# This is the brief's "M = pixels, N = C_out" GEMM transposed (Y^T = X^T W'^T): with NCHW the pixel
# index is the contiguous one of both x and y, so pixels are the GEMM's columns here, the gathered
# rows of X_b are contiguous runs of x (coalesced loads) and the results are stored as module 02
# stores C, 16 bytes at a time. Ordering K as (i, j, c) with C_pad a multiple of BK makes every BK-step
# of K one window position (i, j) and BK consecutive channels: the padding test and the address's
# window offset are worked out once per tile, and each element costs one load.
#
# The GEMM parts (A = W' loads, shared-memory stages, the warp-tiled multiply-adds, double
# buffering with two tiles per trip) are module 02's (reductions_gemm.sgemm.warptile_parts); only the
# B loader (03.2's gather: make_gather_fast, or the learner's, and stash_x) and the NCHW epilogue are new.

_IGEMM_GPU = dict(bm=64, bn=128, bk=16, wm=64, wn=32, tm=8, tn=4, threads=128, max_registers=168)
IGEMM_TILES = _sizes(gpu=dict(c=_IGEMM_GPU), sim=dict(c=dict(bm=32, bn=32, bk=8, wm=32, wn=16, tm=4, tn=4,
                                                               threads=64, max_registers=None))).c


def igemm_tiles(*, gpu=False, **kw):
    """A double-buffered :class:`kernel_lab.reductions_gemm.sgemm.GemmTiles` for the implicit GEMM:
    bm tiles C_out, bn tiles the pixels of one image, bk the (window position, channel) axis.
    ``gpu=True``: the GPU's tiles wherever this runs (a check of the GPU's configuration in the
    simulator)."""
    from ..reductions_gemm.sgemm import GemmTiles

    return GemmTiles(**{**(_IGEMM_GPU if gpu else IGEMM_TILES), **kw, "double_buffer": True})


def gather_layout(cfg):
    """(TPR, RP, NQ, NR): how the threads of a block share the gathered BK x BN tile of X_b. TPR
    threads sit side by side on a row of the tile, each on its own pixel column (neighbouring lanes
    on neighbouring pixels: coalesced loads); RP rows are loaded side by side; a thread loads NQ pixel
    columns, TPR apart, and NR rows of each, RP apart (rows r0, r0 + RP, ... with r0 = t // TPR)."""
    tpr = min(cfg.threads, cfg.bn)
    rp = cfg.threads // tpr
    if cfg.threads % tpr or cfg.bn % tpr or cfg.bk % rp:
        raise KernelLabArgumentError(f"{cfg.label()}: the gather needs threads a multiple of bn or bn of threads, "
                                     "and bk a multiple of threads / bn")
    return tpr, rp, cfg.bn // tpr, cfg.bk // rp


@functools.cache
def make_gather_fast(cfg):
    """03.2's last gather (exercise 8) for the tile configuration ``cfg``."""
    TPR, RP, NQ, NR = gather_layout(cfg)

    @cuda.jit(device=True, forceinline=True)
    def gather_x_fast(x, rb, xb, c0, di, dj, ph, pw, cin, h, wd, t):
        """Device memory -> registers: this thread's share of the next BK x BN tile of X_b = im2col(x[b]).
        The tile is one window offset (di, dj) = (i - 1, j - 1) and channels c0 .. c0 + BK - 1; x[b]
        starts at xb; the thread's pixels are (ph[u], pw[u]), its rows r0, r0 + RP, ...

        03.2's gather_x with two changes: the rows still inside C_in decided once per tile, with a
        branch that loads without any test when every row is a real channel, and an unsigned index
        (no wrap-around test for a negative one)."""
        r0 = t // TPR
        hw = h * wd
        for u in range(NQ):
            hh, ww = ph[u] + di, pw[u] + dj
            rows = cin - c0 - r0  # rows of this thread still inside C_in (C_pad may be larger)
            if not (0 <= hh and hh < h and 0 <= ww and ww < wd):
                rows = 0  # the padding: the whole column of this tile is 0, one test per tile
            # An unsigned index (Numba then skips the wrap-around test for negative indices): the
            # first element of this thread's column, or the image's start where nothing is loaded.
            idx = np.uint64(xb + (c0 + r0) * hw + hh * wd + ww if rows > 0 else xb)
            if rows >= NR * RP:  # the usual case, a pixel inside and every channel real: no tests
                for v in range(NR):
                    rb[u * NR + v] = x[idx]
                    idx += np.uint64(RP * hw)  # the next row of the tile: RP channels further
            else:
                for v in range(NR):
                    rb[u * NR + v] = x[idx] if v * RP < rows else float32(0)
                    idx += np.uint64(RP * hw)

    return gather_x_fast


def padded_cin(cin: int, bk: int) -> int:
    """C_in rounded up to a multiple of the K step, so that no K-tile straddles two window positions."""
    return -(-cin // bk) * bk


@cuda.jit
def reorder_weights(w, wt, cin, cpad):
    """wt[o, (3 i + j) * cpad + c] = w[o, c, i, j]; 0 for c >= cin. One thread per element of wt."""
    e = cuda.grid(1)
    cout = w.shape[0]
    if e < cout * 9 * cpad:
        o, k = e // (9 * cpad), e % (9 * cpad)
        ij, c = k // cpad, k % cpad
        wt[e] = w[o, c, ij // 3, ij % 3] if c < cin else float32(0)


def prepare_weights(w, bk: int):
    """W' (C_out x 9 C_pad, flat, on the device) from w (C_out x C_in x 3 x 3): one small kernel. A
    layer's weights change only when it is trained, so this runs once, outside the timed call."""
    w = cuda.to_device(np.ascontiguousarray(w)) if isinstance(w, np.ndarray) else w
    cout, cin = w.shape[0], w.shape[1]
    cpad = padded_cin(cin, bk)
    wt = cuda.device_array(cout * 9 * cpad, np.float32)
    reorder_weights[-(-wt.size // EW_THREADS), EW_THREADS](w, wt, np.int32(cin), np.int32(cpad))
    return wt


_IGEMM_KERNELS: dict = {}


def igemm_kernel(cfg, gather=None):
    """The implicit-GEMM kernel for tile configuration ``cfg`` (a double-buffered GemmTiles), built
    from module 02's parts. ``gather`` replaces the package's loader, ``make_gather_fast(cfg)`` (a
    device function with 03.2's ``gather_x`` signature, made for ``cfg``: its layout is
    :func:`gather_layout`'s)."""
    from ..reductions_gemm import sgemm

    key = (cfg, gather)
    if key in _IGEMM_KERNELS:
        return _IGEMM_KERNELS[key]
    if not cfg.double_buffer:
        raise KernelLabArgumentError("the implicit GEMM is built on the double-buffered loop: double_buffer=True")
    parts = sgemm.warptile_parts(cfg)
    BM, BN, BK, TM, TN = cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn
    WMI, WNI = cfg.wm_iter, cfg.wn_iter
    RM, RN, RA, RB = parts.rm, parts.rn, parts.ra, parts.rb
    TPR, RP, NQ, NR = gather_layout(cfg)  # the gathered B tile: see gather_layout
    if NQ * NR != RB:
        raise KernelLabArgumentError(f"{cfg.label()}: the gather's {NQ} x {NR} values a thread are not the "
                                     f"GEMM's {RB} B values a thread")
    fetch_a, stash_a, compute_stage, lane_map, st4 = (parts.fetch_a, parts.stash_a, parts.compute_stage,
                                                      parts.lane_map, parts.st4)
    FAR = -(1 << 20)  # a row that is never inside the image: columns past the last pixel read 0
    GATHER = gather or make_gather_fast(cfg)

    @cuda.jit(device=True, forceinline=True)
    def stash_x(b_t, s, rb, t):
        """Registers -> shared stage s, as gathered (lanes on neighbouring columns: no bank conflicts)."""
        r0, q0 = t // TPR, t % TPR
        for u in range(NQ):
            for v in range(NR):
                b_t[s, r0 + v * RP, q0 + u * TPR] = rb[u * NR + v]

    @cuda.jit(device=True, forceinline=True)
    def gather_next(x, rb, xb, kpos, ph, pw, cin, cpad, h, wd, t):
        """Gather the tile at kpos = (c0, i, j), then step kpos on by BK channels (wrapping to the
        next window position): no division in the loop."""
        GATHER(x, rb, xb, kpos[0], kpos[1] - 1, kpos[2] - 1, ph, pw, cin, h, wd, t)
        kpos[0] += BK
        if kpos[0] == cpad:
            kpos[0] = 0
            kpos[2] += 1
            if kpos[2] == 3:
                kpos[2] = 0
                kpos[1] += 1

    @cuda.jit(device=True, forceinline=True)
    def one_tile(wt, x, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, m, kk, t, wr, wc, tr, tc, fast, k0, s,
                 xb, kpos, ph, pw, cin, cpad, h, wd):
        """Module 02's double-buffering step: compute stage s while the next tile travels."""
        more = k0 + BK < kk
        if more:
            fetch_a(wt, ra, row0, k0 + BK, m, kk, t, fast)
            gather_next(x, rb, xb, kpos, ph, pw, cin, cpad, h, wd, t)
        compute_stage(a_t, b_t, s, acc, a_reg, b_reg, wr, wc, tr, tc)
        if more:
            stash_a(a_t, 1 - s, ra, t)
            stash_x(b_t, 1 - s, rb, t)
        cuda.syncthreads()

    @cuda.jit(device=True, forceinline=True)
    def main_loop(wt, x, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, m, kk, t, wr, wc, tr, tc, fast,
                  xb, ph, pw, cin, cpad, h, wd):
        kpos = cuda.local.array(3, np.int32)  # (c0, i, j) of the next tile to gather
        kpos[0], kpos[1], kpos[2] = 0, 0, 0
        fetch_a(wt, ra, row0, 0, m, kk, t, fast)
        gather_next(x, rb, xb, kpos, ph, pw, cin, cpad, h, wd, t)
        stash_a(a_t, 0, ra, t)
        stash_x(b_t, 0, rb, t)
        cuda.syncthreads()
        for k0 in range(0, kk, 2 * BK):  # two tiles per trip: each half's stage is a constant
            one_tile(wt, x, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, m, kk, t, wr, wc, tr, tc, fast, k0, 0,
                     xb, kpos, ph, pw, cin, cpad, h, wd)
            if k0 + BK < kk:
                one_tile(wt, x, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, m, kk, t, wr, wc, tr, tc, fast,
                         k0 + BK, 1, xb, kpos, ph, pw, cin, cpad, h, wd)

    jit_options = {"max_registers": cfg.max_registers} if cfg.max_registers else {}

    @cuda.jit(**jit_options)
    def conv_igemm(x, wt, bias, y, cin, cpad, cout, h, wd, vec_ok):
        # x: B*C_in*H*W flat; wt: W' (C_out x 9 cpad) flat; y: B*C_out*H*W flat
        a_t = cuda.shared.array((2, BK, BM), float32)
        b_t = cuda.shared.array((2, BK, BN), float32)
        t = cuda.threadIdx.x
        wr, wc, tr, tc = lane_map(t // 32, t % 32)
        row0, col0, img = cuda.blockIdx.x * BM, cuda.blockIdx.y * BN, cuda.blockIdx.z
        hw = h * wd
        kk = 9 * cpad
        ph = cuda.local.array(NQ, np.int32)
        pw = cuda.local.array(NQ, np.int32)
        for u in range(NQ):  # this thread's pixel columns of the B tile: (h, w) once per block
            p = col0 + t % TPR + u * TPR
            ph[u] = p // wd if p < hw else FAR
            pw[u] = p % wd
        acc = cuda.local.array((RM, RN), float32)
        a_reg = cuda.local.array(RM, float32)
        b_reg = cuda.local.array(RN, float32)
        ra = cuda.local.array(RA, float32)
        rb = cuda.local.array(RB, float32)
        for i in range(RM):
            for j in range(RN):
                acc[i, j] = 0
        xb = img * cin * hw
        if row0 + BM <= cout:  # W' rows all inside: 16-byte loads (9 cpad is a multiple of 4)
            main_loop(wt, x, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, cout, kk, t, wr, wc, tr, tc, True,
                      xb, ph, pw, cin, cpad, h, wd)
        else:
            main_loop(wt, x, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, cout, kk, t, wr, wc, tr, tc, False,
                      xb, ph, pw, cin, cpad, h, wd)
        yb = img * cout * hw  # y[b] is Y_b, C_out x H*W row-major: module 02's store, bias + ReLU first
        for wi in range(WMI):
            for wj in range(WNI):
                r0 = row0 + wr + wi * 8 * TM + tr * TM
                q0 = col0 + wc + wj * 4 * TN + tc * TN
                for i in range(TM):
                    o = r0 + i
                    if o < cout:
                        bo = bias[o]
                        if vec_ok and q0 + TN <= hw:
                            for j in range(0, TN, 4):
                                a0 = wi * TM + i
                                b0 = wj * TN + j
                                st4(y, yb + o * hw + q0 + j, max(acc[a0, b0] + bo, float32(0)),
                                    max(acc[a0, b0 + 1] + bo, float32(0)), max(acc[a0, b0 + 2] + bo, float32(0)),
                                    max(acc[a0, b0 + 3] + bo, float32(0)))
                        else:
                            for j in range(TN):
                                if q0 + j < hw:
                                    y[yb + o * hw + q0 + j] = max(acc[wi * TM + i, wj * TN + j] + bo, float32(0))

    _IGEMM_KERNELS[key] = conv_igemm
    return conv_igemm


def _is_stub(fn) -> bool:
    """Whether a (device) function's body does nothing: ``pass``, a docstring, comments."""
    py = getattr(fn, "py_func", fn)

    def empty():
        pass
    return py.__code__.co_code == empty.__code__.co_code and py.__code__.co_consts[-1:] == (None,)


def igemm_launcher(cfg=None, *, prepared=None, gather=None):
    """``launch(y, x, w, bias)`` for the implicit GEMM with tile configuration ``cfg`` (default
    :data:`IGEMM_TILES`). ``w`` is either the layer's C_out x C_in x 3 x 3 weights, reordered to W'
    in the call (one more small kernel, counted in its time), or ``launch.prepare(w)``, W' made once
    beforehand, as a layer whose weights do not change would keep it (:func:`sweep` times it so).
    ``prepared`` (True or False) insists on one of the two forms."""
    cfg = cfg or igemm_tiles()
    kernel = igemm_kernel(cfg, gather)
    stub = gather is not None and _is_stub(gather)

    def launch(y, x, w, bias):
        if stub:  # the course's exercise before it is done: say so, instead of a GEMM of garbage registers
            raise NotImplementedError(f"{getattr(gather, '__name__', 'gather_x')}'s body is still `pass`: it must "
                                      "fill rb with this thread's share of the tile")
        b, cin, h, wd = x.shape
        cout = y.shape[1]
        raw = w.ndim == 4
        if prepared is not None and raw == prepared:
            raise KernelLabArgumentError(
                f"this launcher takes {'prepare_weights(w, bk)' if prepared else 'w of shape C_out x C_in x 3 x 3'}, "
                f"got an array of shape {tuple(w.shape)}")
        wt = prepare_weights(w, cfg.bk) if raw else w
        cpad = padded_cin(cin, cfg.bk)
        if wt.size != cout * 9 * cpad:
            raise KernelLabArgumentError(f"prepared weights have {wt.size} values, expected C_out x 9 x C_pad = "
                                         f"{cout} x 9 x {cpad}: prepare_weights(w, bk={cfg.bk})")
        vec_ok = (h * wd) % 4 == 0 and (on_simulator() or y.__cuda_array_interface__["data"][0] % 16 == 0)
        grid = (-(-cout // cfg.bm), -(-(h * wd) // cfg.bn), b)
        kernel[grid, cfg.threads](x.reshape(x.size), wt, bias, y.reshape(y.size), np.int32(cin), np.int32(cpad),
                                  np.int32(cout), np.int32(h), np.int32(wd), vec_ok)
    launch.config = cfg
    launch.kernel = kernel
    launch.prepare = lambda w: prepare_weights(w, cfg.bk)
    return launch


# 32 output channels fill only half of a 64-row tile: a 32 x 128 tile (measured on an H100: 0.78x
# cuDNN fp32's time at (4, 32, 32, 64), where the 64 x 128 tile took 1.21x).
IGEMM_TILES_NARROW = dict(bm=32, bn=128, bk=16, wm=32, wn=32, tm=4, tn=4, threads=128)


def igemm_tiles_for(cout: int, *, gpu=False):
    """The tile configuration for ``cout`` output channels: a tile no taller than C_out needs (the
    GPU's tiles; the simulator's sizes have one configuration). ``gpu=True``: the GPU's choice
    wherever this runs."""
    if cout <= 32 and (gpu or IGEMM_TILES is _IGEMM_GPU):
        return igemm_tiles(gpu=True, **{**IGEMM_TILES_NARROW, "max_registers": None})
    return igemm_tiles(gpu=gpu)


def igemm_auto_launcher(make_gather=None, *, gpu=False):
    """``launch(y, x, w, bias)`` choosing the tiles by C_out (:func:`igemm_tiles_for`), one compiled
    kernel per configuration, each with the gather ``make_gather(cfg)`` (default: the package's
    :func:`make_gather_fast`; 03.2 passes the learner's factory); ``launch.prepare`` as
    :func:`igemm_launcher`'s (the K step is the same for every configuration of a backend).
    ``gpu=True``: the GPU's tiles wherever this runs."""
    make_gather = make_gather or make_gather_fast
    runs = {}

    def launch(y, x, w, bias):
        cfg = igemm_tiles_for(y.shape[1], gpu=gpu)
        if cfg not in runs:
            runs[cfg] = igemm_launcher(cfg, gather=make_gather(cfg))
        runs[cfg](y, x, w, bias)
    launch.prepare = lambda w: prepare_weights(w, igemm_tiles(gpu=gpu).bk)
    return launch


VARIANTS = {
    "direct (i,j,c) + separate ReLU": launch_unfused,
    "fused (i,j,c)": launcher(conv_fused_hwc),
    "fused, C_in outermost": launcher(conv3x3_fused),
    "bias in constant memory": launch_const_bias,
    "weights in shared memory": launch_smem_weights,
    "input tile + halo in shared memory": launch_smem_tile,
    f"register blocked ({COB} ch x {PX} px)": launch_register_blocked,
}


# --- cuDNN through PyTorch (optional) ----------------------------------------------------------


def torch_peers(torch, x, w, bias):
    """{label: fn()} running cuDNN's convolution + bias, then ReLU, on tensors that share the device
    arrays' memory: once in true float32 (``allow_tf32 = False``) and once with TF32 tensor cores
    (10-bit mantissas: faster, less accurate; not the same computation as ours)."""
    tx, tw, tb = (torch.as_tensor(a, device="cuda") for a in (x, w, bias))
    conv = torch.nn.functional.conv2d

    def run(tf32):
        def fn():
            torch.backends.cudnn.allow_tf32 = tf32
            return torch.relu_(conv(tx, tw, tb, padding=1))
        return fn
    torch.backends.cudnn.benchmark = True  # let cuDNN pick its fastest algorithm (tried during warm-up)
    return {"cuDNN fp32 (allow_tf32=False)": run(False), "cuDNN TF32 (allow_tf32=True)": run(True)}


def sweep(launchers: dict, shapes=None, *, torch=None, repeat=5, quiet=True):
    """Time each launcher on each shape: {shape: {label: Measurement}}; cuDNN beside them when
    ``torch`` (the module) is given. Under the simulator nothing is timed."""
    from ..bench import benchmark

    rng = np.random.default_rng(0)
    table = {}
    for shape in shapes or SHAPES:
        b, cin, cout, hw = shape
        x = cuda.to_device(rng.standard_normal((b, cin, hw, hw), dtype=np.float32))
        w = cuda.to_device((rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32))
        bias = cuda.to_device(rng.standard_normal(cout, dtype=np.float32))
        y = cuda.device_array((b, cout, hw, hw), np.float32)
        row = {}
        nbytes, nflops = bytes_moved(b, cin, cout, hw, hw), flops(b, cin, cout, hw, hw)
        for label, launch in launchers.items():
            # a launcher that can take its weights prepared gets them so, outside the timed call
            wl = launch.prepare(w) if hasattr(launch, "prepare") else w
            row[label] = benchmark(f"{label} {shape}", lambda launch=launch, wl=wl: launch(y, x, wl, bias),
                                   bytes=nbytes, flops=nflops, peak="sgemm", inputs=(x,), repeat=repeat, quiet=quiet)
        if torch is not None:
            for label, fn in torch_peers(torch, x, w, bias).items():
                row[label] = benchmark(f"{label} {shape}", fn, bytes=nbytes, flops=nflops, peak="sgemm",
                                       repeat=repeat, quiet=quiet)
        table[shape] = row
    return table


def sweep_table(table, baseline: str) -> str:
    """The sweep as text: one row per shape, each variant's time and its speedup over ``baseline``."""
    labels = list(next(iter(table.values())))
    lines = ["(B, C_in, C_out, H=W)  " + " | ".join(labels)]
    for shape, row in table.items():
        base = row[baseline].ms
        cells = []
        for label in labels:
            ms = row[label].ms
            cells.append("skipped" if ms is None else f"{ms:.3f} ms ({base / ms:.2f}x)")
        lines.append(f"{str(shape):<22} " + " | ".join(cells))
    return "\n".join(lines)
