"""The learner's 16-byte ``cp.async`` copies of 06.1 and 06.3, and 06.3's conv-layer store, as the
solved notebooks write them.

They stand in for learner code, which the package must not hold, in three places: the simulator
tests (``tests/test_async_gemm.py``, with switches that turn them into the classic mistakes the
checker must name), the offline compile (``scripts/module06_offline_compile.py``) and the GPU
measurement of issue 10's ratios (``scripts/module06_ratios.py``). The switches are closure
constants, so the solutions themselves compile to the notebooks' code.
"""

from kernel_lab.mma_ptx import cp_async16_at, global_address  # kernel_lab first: it picks GPU or simulator
from kernel_lab.tensor_cores import async_gemm as ag

from numba import cuda  # noqa: E402
from numpy import float16, float32  # noqa: E402


def make_b_copies(b_pos, *, zero_fill=True, b_offset=ag.A_BYTES):
    """B's half of a stage (06.1's and 06.3's copies share it): 16-byte chunks of a ``TK x TN`` tile,
    a chunk past the matrix copying 0 bytes (zeros). Mutants: ``zero_fill=False`` skips those chunks
    (stale bytes stay), ``b_offset=0`` writes B over A."""
    @cuda.jit(device=True, inline="always")
    def copy_b(b, stage, k0, col0, n, k, tid):
        for j in range(ag.B_CHUNKS // ag.THREADS):
            idx = tid + j * ag.THREADS
            r, c = idx // ag.B_ROW_CHUNKS, idx % ag.B_ROW_CHUNKS
            gr, gc = k0 + r, col0 + 8 * c
            inside = gr < k and gc < n
            if inside or zero_fill:
                cp_async16_at(stage + b_offset + 16 * b_pos(r, c), global_address(b, (gr, gc) if inside else (0, 0)),
                              16 if inside else 0)
    return copy_b


def make_issue_slice(a_pos, b_pos, *, zero_fill=True, b_offset=ag.A_BYTES):
    """06.1's exercise: one slice of A and B into a stage at the positions ``a_pos``/``b_pos`` give."""
    copy_b = make_b_copies(b_pos, zero_fill=zero_fill, b_offset=b_offset)

    @cuda.jit(device=True, inline="always")
    def issue(a, b, stage, k0, row0, col0, m, n, k, tid):
        for j in range(ag.A_CHUNKS // ag.THREADS):
            idx = tid + j * ag.THREADS
            r, c = idx // ag.A_ROW_CHUNKS, idx % ag.A_ROW_CHUNKS
            gr, gc = row0 + r, k0 + 8 * c
            inside = gr < m and gc < k
            if inside or zero_fill:
                cp_async16_at(stage + 16 * a_pos(r, c), global_address(a, (gr, gc) if inside else (0, 0)),
                              16 if inside else 0)
        copy_b(b, stage, k0, col0, n, k, tid)
    return issue


def make_conv_issue(geo, a_pos, b_pos, *, minus_p=True, pad_test=True, order="rsc"):
    """06.3's exercise: A's chunks gathered from a channels-last image (eight channels of one pixel
    of one filter tap each), B's as in 06.1. Mutants: no ``- P``, no padding test (the pixel is then
    clamped into the image, so the mistake reads a wrong pixel, never outside), columns in the NCHW
    ``(c, r, s)`` order."""
    C, H, W, S, R, P, OH, OW = geo.c, geo.h, geo.w, geo.s, geo.r, geo.padding, geo.out_h, geo.out_w
    SHIFT = P if minus_p else 0
    copy_b = make_b_copies(b_pos)

    @cuda.jit(device=True, inline="always")
    def issue(x, b, stage, k0, row0, col0, m, n, k, tid):
        for j in range(ag.A_CHUNKS // ag.THREADS):
            idx = tid + j * ag.THREADS
            r, c = idx // ag.A_ROW_CHUNKS, idx % ag.A_ROW_CHUNKS
            gr, gc = row0 + r, k0 + 8 * c
            ow, oh, img = gr % OW, (gr // OW) % OH, gr // (OW * OH)
            if order == "rsc":
                tap, ch = gc // C, gc % C
            else:  # (c, r, s): a chunk is not eight channels of one pixel
                tap, ch = gc % (R * S), gc // (R * S)
            ih, iw = oh + tap // S - SHIFT, ow + tap % S - SHIFT
            inside = gr < m and gc < k and (not pad_test or (0 <= ih < H and 0 <= iw < W))
            if not pad_test:
                ih, iw = min(max(ih, 0), H - 1), min(max(iw, 0), W - 1)
            cp_async16_at(stage + 16 * a_pos(r, c), global_address(x, (img, ih, iw, ch) if inside else (0, 0, 0, 0)),
                          16 if inside else 0)
        copy_b(b, stage, k0, col0, n, k, tid)
    return issue


def positions():
    """The package's reference positions of both layouts, as device functions: ``{"plain": (a_pos,
    b_pos), "suggested": (a_pos, b_pos)}`` (what 06.1's second exercise writes)."""
    return {layout: (cuda.jit(device=True, inline="always")(pa), cuda.jit(device=True, inline="always")(pb))
            for layout, (pa, pb) in ag.POSITIONS.items()}


def make_conv_store(*, bias_by="column", relu=True, relu_first=False, rows_test=True, transposed=False):
    """06.3's conv layer: the block's C tile, from shared memory, plus the filter's bias, through a
    ReLU, stored as float16, four values a thread a pass. Mutants: the bias by row, no ReLU, the ReLU
    before the bias, no row test on the edge tiles, the tile read column-major."""

    @cuda.jit(device=True, inline="always")
    def store_tile(ctile, out, bias, row0, col0, m, n, tid):
        for j in range(ag.C_CHUNKS // ag.THREADS):
            idx = tid + j * ag.THREADS
            r, c = idx // ag.C_ROW_CHUNKS, 4 * (idx % ag.C_ROW_CHUNKS)
            if (row0 + r < m or not rows_test) and col0 + c < n:
                for e in range(4):
                    v = ctile[(c + e) * ag.TM + r] if transposed else ctile[r * ag.TN + c + e]
                    b = bias[col0 + c + e] if bias_by == "column" else bias[(row0 + r) % n]
                    if relu_first:
                        v = max(v, float32(0))
                    v = v + b
                    if relu and not relu_first:
                        v = max(v, float32(0))
                    out[row0 + r, col0 + c + e] = float16(v)
    return store_tile
