"""Module 08's checks for 08.3: the learner's wgmma descriptors, one 64 x N x 16 step, and a block's
K loop, run with the simulator's model of wgmma (``kernel_lab.device.wgmma_sim``) or on a Hopper GPU.

fp16 inputs, float32 accumulation: the reference is the float64 product of the same fp16 values (so
the inputs carry no rounding of their own), and an element of C passes when it is within
``tolerance("float32", K) x (|A| |B|)[i, j]`` of it: the tensor cores add K products of exact fp16
values in float32, in an order of their own (``kernel_lab.check.tolerance``: u (4 + 5 sqrt(K)), u = 2^-24).

* ``check_descriptors(make_desc, tile_descriptors)``: ``make_desc`` on the host for each swizzle mode,
  field by field against ``wgmma_layout.encode_desc``; then ``tile_descriptors`` in a kernel, beside
  the package's ``wgmma_desc`` for the same tiles; then the descriptors drive a wgmma (the package's
  step kernel), at this backend's N and the GPU's. A wrong field is named: an offset not divided by
  16, LBO and SBO swapped, the swizzle's mode (1 = 128 B, 2 = 64 B, 3 = 32 B), the other tile's start.
* ``check_wgmma_step(kernel)``: Exercise 2's kernel at N = 32, 64 and the GPU's 128.
* ``check_wgmma_gemm(kernel)``: Exercise 3's kernel, small cases at this backend's N and the GPU's
  tile once (the simulator runs it too).
* ``check_wgmma_gemm_prefetch(kernel)``: Exercise 4's kernel (the next K-tile fetched into registers
  before the wgmmas, placed after the wait), through the same cases; its hint is about that order.

In the simulator a protocol mistake stops the kernel with the model's message (no fence before the
first wgmma, an accumulator read before the wait that covers it, groups never committed or waited
on, a shared tile written while a wgmma reads it); every launch is bounded
(``check.finishes_within``). A wrong C names its first wrong element and, where it can, what the
element holds instead (another element of D: the fragment's rows and columns swapped; the product
of too few K-steps).
"""

from __future__ import annotations

import numpy as np

from .. import progress
from ..check import CheckFailed, finishes_within, tolerance
from ..device.wgmma_layout import SWIZZLE_BYTES, encode_desc
from ..environment import on_simulator
from ..hopper_async import wgmma_gemm as wg

SMALL_S = 20  # a small case takes a second or two in the simulator; a hang stops after this
GPU_SIZES_S = 60  # the GPU's tile: a few seconds

DESC_HINT = ("a descriptor holds each of start, LBO and SBO divided by 16 (>> 4) in bits 0-13, 16-29 and 32-45, "
             "and the swizzle's mode in bits 62-63 (0 none, 1 = 128 B, 2 = 64 B, 3 = 32 B). Exercise 1's tiles "
             "have no swizzle: LBO = 128 bytes to the next core matrix along K, SBO = 256 bytes to the next 8 rows.")
STEP_HINT = ("wgmma_fence(), then wgmma_mma_async_f16(desc_a, desc_b, wgmma_acc_f32(N), 0), wgmma_commit_group(), "
             "wgmma_wait_group(0); only then read the accumulators. Thread t's registers 4j .. 4j + 3 hold "
             "D[16 w + g, 8 j + 2 q], D[16 w + g, 8 j + 2 q + 1], D[16 w + g + 8, 8 j + 2 q], D[16 w + g + 8, 8 j + 2 q + 1], "
             "with w = t // 32 (the warp), g = lane // 4, q = lane % 4.")
GEMM_HINT = ("K-tile kt is in stage kt % 2; its four wgmmas start 32 bytes apart along the 128-byte rows (SBO = "
             "1024, swizzle 128); commit, then wgmma_wait_group(1) and a barrier before the other stage is "
             "overwritten with K-tile kt + 1; wgmma_wait_group(0) after the loop, before the store.")

PREFETCH_HINT = ("before K-tile kt's wgmmas, fetch(a, b, row0, col0, (kt + 1) * KW, ra, rb) when kt + 1 < ktiles; "
                 "after the commit, wgmma_wait_group(1) and cuda.syncthreads(), and only then place(sa, sb, 1 - s, "
                 "ra, rb) and fence_proxy_async_shared(), then cuda.syncthreads() before the next K-tile's wgmmas.")

FIELDS = (("start address", 0), ("LBO", 16), ("SBO", 32))


# --- comparing a product -----------------------------------------------------------------------

def _compare(where: str, got: np.ndarray, a: np.ndarray, b: np.ndarray, candidates=(), hint: str = "") -> None:
    """C against A B (float64), element by element with fp32's tolerance for K terms."""
    ref = a @ b
    mag = np.abs(a) @ np.abs(b)
    allowed = tolerance("float32", a.shape[1]) * mag
    with np.errstate(invalid="ignore"):
        wrong = ~(np.abs(got.astype(np.float64) - ref) <= allowed)
    if not wrong.any():
        return
    r, c = (int(x) for x in np.argwhere(wrong)[0])
    unwritten = int(np.isnan(got).sum())
    head = (f"{where}: {int(wrong.sum())} of {wrong.size} elements of C wrong"
            + (f", {unwritten} of them never written (still NaN)" if unwritten else "")
            + f"; the first at C[{r}, {c}]: ")
    value = float(got[r, c])
    if np.isnan(value):
        raise CheckFailed(head + "never written (still NaN). Does every thread store its N / 2 accumulators, "
                                 "rows 16 w + lane // 4 and 8 below, for every 8 columns j?")
    for text, alt in candidates:
        if np.all(np.abs(got - alt) <= allowed + tolerance("float32", a.shape[1]) * np.abs(alt)):
            raise CheckFailed(head + f"got {value:.6g}, expected {ref[r, c]:.6g}. C is {text}.")
    near = np.argwhere(np.abs(ref - value) <= allowed)
    if near.size:
        rr, cc = (int(x) for x in near[0])
        if (rr, cc) == (c, r) or any(tuple(p) == (c, r) for p in near.tolist()):
            raise CheckFailed(head + f"it holds D[{c}, {r}]: rows and columns swapped. A thread's registers hold "
                                     "rows 16 w + lane // 4 (and + 8) and columns 8 j + 2 (lane % 4) (and + 1): "
                                     "the row comes from the warp and the lane's group of 4, the column from j and "
                                     "the lane's place in its group.")
        raise CheckFailed(head + f"it holds D[{rr}, {cc}], another element of the product: the fragment is "
                                 "stored through the wrong coordinates. " + STEP_HINT)
    raise CheckFailed(head + f"got {value:.6g}, expected {ref[r, c]:.6g}." + (f" Hint: {hint}" if hint else ""))


def _launch(where: str, seconds: float, hint: str, launch) -> None:
    if on_simulator():
        from ..device.wgmma_sim import WgmmaProtocolError

        try:
            with finishes_within(where, seconds, hint):
                launch()
        except WgmmaProtocolError as exc:
            raise CheckFailed(f"{where}: {exc}") from None
    else:
        from numba import cuda

        launch()
        cuda.synchronize()


def _step(where, kernel, n, seconds, hint, seed):
    from numba import cuda

    a, b, tile_a, tile_b = wg.step_inputs(n, seed)
    d_c = cuda.to_device(np.full((wg.M_TILE, n), np.nan, np.float32))
    _launch(where, seconds, hint, lambda: wg.launch_step(kernel, d_c, cuda.to_device(tile_a), cuda.to_device(tile_b)))
    _compare(where, d_c.copy_to_host(), a, b, hint=hint)


# --- exercise 1: the descriptors -----------------------------------------------------------------

def _python(function):
    """The Python body of a device function (a dispatcher's, or the simulator's)."""
    return getattr(function, "py_func", None) or getattr(function, "fn", function)


def _field_text(got: int, want: int, start: int, lbo: int, sbo: int, swizzle: int) -> str:
    """What differs between two descriptors, in words."""
    got, want = int(got) & (2**64 - 1), int(want) & (2**64 - 1)
    values = {"start address": start, "LBO": lbo, "SBO": sbo}
    field = {name: ((got >> shift) & 0x3FFF, (want >> shift) & 0x3FFF) for name, shift in FIELDS}
    out = []
    if field["LBO"][0] == field["SBO"][1] and field["SBO"][0] == field["LBO"][1] and lbo != sbo:
        out.append(f"LBO and SBO are swapped (bits 16-29 hold {16 * field['LBO'][0]} bytes, bits 32-45 "
                   f"{16 * field['SBO'][0]}): LBO, the leading-dimension byte offset, goes in bits 16-29, SBO in 32-45")
    else:
        for name, (g, w) in field.items():
            if g == w:
                continue
            raw = values[name]
            if g == (raw & 0x3FFF) or (got >> dict(FIELDS)[name]) & 0x3FFFF == raw:
                out.append(f"the {name} field holds {g}, the byte offset {raw} itself: a descriptor stores it divided "
                           f"by 16 ({raw} >> 4 = {raw >> 4})")
            else:
                out.append(f"the {name} field holds {g} ({16 * g} bytes), expected {w} ({16 * w} bytes)")
    mode, want_mode = got >> 62, want >> 62
    if mode != want_mode:
        sw_text = f"{SWIZZLE_BYTES[mode]}-byte swizzle" if SWIZZLE_BYTES[mode] else "no swizzle"
        out.append(f"bits 62-63 hold mode {mode} ({sw_text}), expected {want_mode} "
                   f"for {swizzle or 'no'}{' bytes of' if swizzle else ''} swizzle: the modes are 1 = 128 B, "
                   "2 = 64 B, 3 = 32 B, 0 = none (not the bytes, nor 1, 2, 3 in the order 32, 64, 128)")
    stray = got & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (3 << 62))
    if stray:
        out.append(f"bits outside the four fields are set ({stray:#x}): a value not divided by 16, or not masked, "
                   "spills into the next field")
    return "; ".join(out) or f"{got:#018x} instead of {want:#018x}"


HOST_CASES = [(0x2400, 128, 256, 0), (0x8020, 16, 256, 32), (0x1A40, 16, 512, 64), (0x3000, 16, 1024, 128)]


def check_descriptors(make_desc, tile_descriptors, name: str = "descriptors") -> None:
    """Exercise 1: ``make_desc(start, lbo, sbo, swizzle)`` and ``tile_descriptors(sa, sb)``."""
    from numba import cuda

    pack = _python(make_desc)
    for start, lbo, sbo, swizzle in HOST_CASES:
        want = encode_desc(start, lbo, sbo, swizzle)
        got = pack(start, lbo, sbo, swizzle)
        if (int(got) & (2**64 - 1)) != want:
            raise CheckFailed(f"{name}: make_desc({start:#x}, lbo={lbo}, sbo={sbo}, swizzle={swizzle}) gives "
                              f"{int(got) & (2**64 - 1):#018x}, expected {want:#018x}: "
                              + _field_text(got, want, start, lbo, sbo, swizzle) + ".")
    out = cuda.to_device(np.zeros(4, np.uint64))
    where = f"{name} (the tiles' descriptors)"
    _launch(where, SMALL_S, DESC_HINT, lambda: wg.describe_kernel(tile_descriptors)[1, wg.THREADS](out))
    got = out.copy_to_host()
    starts = {"A": int(got[2]) & 0x3FFF, "B": int(got[3]) & 0x3FFF}
    for i, tile, other in ((0, "A", "B"), (1, "B", "A")):
        g, w = int(got[i]), int(got[i + 2])
        if g == w:
            continue
        if (g & 0x3FFF) == starts[other] and (g >> 16) == (w >> 16):
            raise CheckFailed(f"{where}: {tile}'s descriptor starts at {other}'s tile (shared byte "
                              f"{16 * starts[other]}): each descriptor takes its own tile's address.")
        text = _field_text(g, w, 16 * (w & 0x3FFF), 128, 256, 0)
        raise CheckFailed(f"{where}: {tile}'s descriptor is {g:#018x}, expected {w:#018x}: {text}. For these "
                          "tiles (K-major fp16, 16 wide, no swizzle) the core matrices (8 rows x 16 bytes, 128 "
                          "contiguous bytes) of one 8-row group sit side by side along K: LBO = 128 bytes; the next "
                          "8 rows start SBO = 2 x 128 = 256 bytes on.")
    for n, seconds, label in ((wg.N, SMALL_S, "a wgmma on them"), (wg.GPU["N"], GPU_SIZES_S, "at the GPU's N")):
        _step(f"{name} ({label}, N = {n})", wg.step_kernel(tile_descriptors, n), n, seconds, DESC_HINT, seed=n)
    progress.passed(name)
    print(f"{name}: correct (make_desc in the four swizzle modes; the tiles' descriptors; a wgmma on them, at this "
          f"backend's N and at the GPU's N = {wg.GPU['N']})")


# --- exercise 2: one step ------------------------------------------------------------------------

# N = 64 first: a square C, so that a fragment stored with rows and columns swapped stays inside it
# and the check can say so (at N = 32 the transposed store runs past C's 32 columns first)
STEP_CASES = [("N = 64", 64, SMALL_S), ("N = 32", 32, SMALL_S), ("the GPU's N = 128", 128, GPU_SIZES_S)]


def check_wgmma_step(kernel, name: str = "wgmma step") -> None:
    """Exercise 2: ``kernel(a, b, c)``, one warpgroup's ``C = A B`` (64 x N x 16) and its store."""
    for seed, (label, n, seconds) in enumerate(STEP_CASES):
        _step(f"{name} ({label})", wg.with_constants(kernel, N=n), n, seconds, STEP_HINT, seed)
    progress.passed(name)
    print(f"{name}: correct for all {len(STEP_CASES)} cases ({', '.join(c[0] for c in STEP_CASES)})")


# --- exercise 3: the K loop ------------------------------------------------------------------------

def _gemm_candidates(a, b):
    """Wrong products a classic mistake gives, each with its sentence."""
    k = a.shape[1]
    tiles = range(0, k, wg.BK)
    still = sum(4 * a[:, t:t + 16] @ b[t:t + 16] for t in tiles)
    last = a[:, k - wg.BK:] @ b[k - wg.BK:]
    first_steps = sum(a[:, t:t + 16] @ b[t:t + 16] for t in tiles)
    last_step = a[:, k - 16:] @ b[k - 16:]
    behind = a[:, :wg.BK] @ b[:wg.BK] + sum(a[:, t:t + wg.BK] @ b[t:t + wg.BK] for t in tiles[:-1])
    found = [("each K-tile's first 16 columns, four times: the four wgmmas of a K-tile read the same K-step "
              "(each starts 32 bytes further along the row: start + 32 * ks)", still),
            ("the last K-tile's product alone: the accumulators started again in each K-tile (chain acc "
              "through every wgmma, scale_d = 1)", last),
            ("the first K-step of each K-tile alone: only one wgmma a K-tile counted", first_steps),
            ("the last K-step's product alone: every wgmma started the sum again (scale_d = 1 adds to the "
              "accumulators; 0 overwrites them)", last_step)]
    if k > wg.BK:  # with one K-tile, "one behind" is the right product
        found.append(("the K-tiles one behind: K-tile 0 counted twice and the last one never (the loop loads "
                      "K-tile kt into the other stage, where K-tile kt + 1 belongs)", behind))
    return found


def check_wgmma_gemm(kernel, name: str = "wgmma GEMM", hint: str = GEMM_HINT) -> None:
    """Exercise 3: ``kernel(a, b, c)``, a block's 64 x N tile of ``C = A B`` over all of K, launched
    by ``wgmma_gemm.launch_gemm`` (A and B transposed as uint32 words). The kernel is compiled at
    each case's width with ``wgmma_gemm.tile_constants`` (``N``, and ``B_LOADS`` where it reads it)."""
    from numba import cuda

    cases = []
    for sizes, seconds in ((wg.constants(), SMALL_S), (wg.GPU, GPU_SIZES_S)):
        n = sizes["N"]
        k = wg.with_constants(kernel, **wg.tile_constants(n))
        if seconds == GPU_SIZES_S:
            cases.append(("the GPU's tile, 2 K-tiles", k, n, (wg.M_TILE, n, 2 * wg.BK), seconds))
        else:
            cases.append(("one K-tile", k, n, (wg.M_TILE, n, wg.BK), seconds))
            cases.append(("3 K-tiles in 2 x 2 blocks", k, n, (2 * wg.M_TILE, 2 * n, 3 * wg.BK), seconds))
    for seed, (label, k, n, (m, nn, kk), seconds) in enumerate(cases):
        where = f"{name} ({label})"
        a16, b16, bt16 = wg.gemm_inputs(m, nn, kk, seed)
        d_c = cuda.to_device(np.full((m, nn), np.nan, np.float32))
        d_a, d_bt = cuda.to_device(a16), cuda.to_device(bt16)
        _launch(where, seconds, hint, lambda: wg.launch_gemm(k, d_c, d_a, d_bt, n_tile=n))  # noqa: B023
        a, b = a16.astype(np.float64), b16.astype(np.float64)
        _compare(where, d_c.copy_to_host(), a, b, _gemm_candidates(a, b), hint)
    progress.passed(name)
    print(f"{name}: correct for all {len(cases)} cases ({', '.join(c[0] for c in cases)})")


def check_wgmma_gemm_prefetch(kernel, name: str = "wgmma GEMM, prefetch") -> None:
    """Exercise 4: ``kernel(a, b, c)``, Exercise 3's product with the next K-tile fetched into
    registers (``wgmma_gemm.fetch``) before the wgmmas and placed (``wgmma_gemm.place``) after the
    wait: the cases of :func:`check_wgmma_gemm`. In the simulator, registers placed into a stage
    that a wgmma still reads are named (the model reads the tiles at issue and again at the wait)."""
    check_wgmma_gemm(kernel, name, PREFETCH_HINT)


__all__ = ["check_descriptors", "check_wgmma_gemm", "check_wgmma_gemm_prefetch", "check_wgmma_step"]
