"""Draw the diagrams of module 05's integer notebooks (05.1, 05.2, 05.5, 05.6).

Run: python images/make_images_module05_integer.py. Each function writes one SVG next to this file.
"""

import matplotlib.pyplot as plt
from drawing import BLUE, GREEN, GREY, HERE, ORANGE, PURPLE, RED, arrow, box, save


def affine(path=HERE / "quant-affine-int8.svg"):
    """Two number lines each: floats above, integer codes below, with the map between them."""
    fig, ax = plt.subplots(figsize=(9, 4.2))
    # symmetric
    y_f, y_q = 6.2, 4.6
    ax.text(0, 7.3, "symmetric INT8:  s = absmax / 127,   q = clamp(round(x / s), -127, 127)", fontsize=9,
            weight="bold")
    ax.plot([1, 17], [y_f, y_f], color="black", lw=0.8)
    ax.plot([1, 17], [y_q, y_q], color="black", lw=0.8)
    for xf, lab in [(1, "-absmax"), (9, "0.0"), (17, "+absmax")]:
        ax.plot([xf, xf], [y_f - 0.12, y_f + 0.12], color="black", lw=0.8)
        ax.text(xf, y_f + 0.3, lab, ha="center", fontsize=8)
    for xq, lab in [(1, "-127"), (9, "0"), (17, "127")]:
        ax.plot([xq, xq], [y_q - 0.12, y_q + 0.12], color="black", lw=0.8)
        ax.text(xq, y_q - 0.55, lab, ha="center", fontsize=8)
        arrow(ax, xq, y_f - 0.15, xq, y_q + 0.15, color="#1d3557")
    ax.text(17.5, y_f - 0.1, "floats x", fontsize=8, va="center")
    ax.text(17.5, y_q - 0.1, "codes q (int8; -128 unused)", fontsize=8, va="center")
    for k in range(1, 16):
        ax.plot([1 + k * 16 / 16] * 2, [y_q - 0.06, y_q + 0.06], color="grey", lw=0.5)
    ax.text(5, y_q + 0.55, "step s: ties (k + 1/2) s round to the even k", fontsize=7, ha="center", color="#555")
    # asymmetric
    y_f, y_q = 2.2, 0.6
    ax.text(0, 3.3, "asymmetric UINT8:  s = (hi - lo) / 255,   z = clamp(round(-lo / s), 0, 255),   "
            "q = clamp(round(x / s) + z, 0, 255)", fontsize=9, weight="bold")
    ax.plot([1, 17], [y_f, y_f], color="black", lw=0.8)
    ax.plot([1, 17], [y_q, y_q], color="black", lw=0.8)
    for xf, lab in [(1, "lo"), (4.5, "0.0"), (17, "hi")]:
        ax.plot([xf, xf], [y_f - 0.12, y_f + 0.12], color="black", lw=0.8)
        ax.text(xf, y_f + 0.3, lab, ha="center", fontsize=8)
    for xq, lab in [(1, "0"), (4.5, "z"), (17, "255")]:
        ax.plot([xq, xq], [y_q - 0.12, y_q + 0.12], color="black", lw=0.8)
        ax.text(xq, y_q - 0.55, lab, ha="center", fontsize=8)
        arrow(ax, xq, y_f - 0.15, xq, y_q + 0.15, color=RED if lab == "z" else "#1d3557")
    ax.text(17.5, y_f - 0.1, "floats x (a calibrated range)", fontsize=8, va="center")
    ax.text(17.5, y_q - 0.1, "codes q (uint8)", fontsize=8, va="center")
    ax.text(1, -0.9, "values beyond the range saturate at 0 or 255; a range without 0 puts z outside 0..255: clamp it",
            fontsize=7, color="#555")
    save(fig, ax, path, (-0.2, 26), (-1.2, 7.8))


def int4_packing(path=HERE / "quant-int4-packing.svg"):
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.text(0, 5.6, "a row of values  x0 x1 x2 ...  (groups of 128, one float32 scale each)", fontsize=9, weight="bold")
    for g, (x0, w, col, lab) in enumerate([(0, 8, BLUE, "group 0: x0 .. x127,  s0 = absmax / 7"),
                                           (8, 8, GREEN, "group 1: x128 .. x255,  s1"),
                                           (16, 3, ORANGE, "last group:\nshorter")]):
        box(ax, x0, 4.3, w, 0.8, lab, col, fontsize=7)
    ax.text(0, 3.5, "bytes of the packed row (uint8): element 2j in the LOW nibble of byte j", fontsize=9,
            weight="bold")
    for j in range(6):
        x = j * 3.1
        box(ax, x + 1.5, 2.2, 1.5, 0.8, f"x{2 * j + 1}", PURPLE, fontsize=8)
        box(ax, x, 2.2, 1.5, 0.8, f"x{2 * j}", BLUE, fontsize=8)
        ax.text(x + 1.5, 1.85, f"byte {j}", ha="center", fontsize=7)
        ax.text(x + 0.75, 3.1, "bits 0-3", ha="center", fontsize=6, color="#555")
        ax.text(x + 2.25, 3.1, "bits 4-7", ha="center", fontsize=6, color="#555")
    ax.text(0, 1.1, "odd length: the last byte holds one value in its low nibble, high nibble 0;  each row starts "
            "on a new byte", fontsize=8)
    ax.text(0, 0.4, "4-bit two's complement:  0111 = 7 ... 0000 = 0,  1111 = -1 ... 1000 = -8   "
            "(sign extension: bit 3 weighs -8)", fontsize=8)
    save(fig, ax, path, (-0.3, 22), (0, 6.1))


def ternary_gemm(path=HERE / "quant-ternary-gemm.svg"):
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.text(0, 6.3, "weights: t = clamp(round(w / mean|w|), -1, 1), four 2-bit codes per byte (first in the lowest bits)",
            fontsize=9, weight="bold")
    codes = [("t0 = +1", "01", GREEN), ("t1 = 0", "00", GREY), ("t2 = -1", "11", RED), ("t3 = +1", "01", GREEN)]
    for i, (lab, bits, col) in enumerate(codes):
        x = (3 - i) * 2.2
        box(ax, x, 4.6, 2.2, 0.9, f"{bits}\n{lab}", col, fontsize=8)
        ax.text(x + 1.1, 5.65, f"bits {2 * i}-{2 * i + 1}", ha="center", fontsize=6, color="#555")
    ax.text(9.2, 5.0, "one byte = 4 weights (2 bits each; 1.58 bits of information)", fontsize=8, va="center")
    ax.text(0, 3.6, "GEMM, per output: acc (int32) over k:", fontsize=9, weight="bold")
    ops = [("code 01", "acc += a[m, k]", GREEN), ("code 00", "skip", GREY), ("code 11", "acc -= a[m, k]", RED)]
    for i, (c, op, col) in enumerate(ops):
        box(ax, i * 5.2, 2.2, 4.8, 0.9, f"{c}:  {op}", col, fontsize=8)
    ax.text(0, 1.2, "then  y[m, n] = float(acc) * s_a[m] * s_w:  two multiplications per output, none in the loop",
            fontsize=8)
    ax.text(0, 0.5, "activations a: per-token INT8, s_a[m] = absmax(row m) / 127", fontsize=8)
    save(fig, ax, path, (-0.3, 23), (0.1, 6.8))


def dp4a(path=HERE / "quant-dp4a.svg"):
    fig, ax = plt.subplots(figsize=(9, 4.6))
    ax.text(0, 8.4, "DP4A:  c + a0 b0 + a1 b1 + a2 b2 + a3 b3   (int8 x int8, int32 sum; one instruction, IDP.4A)",
            fontsize=9, weight="bold")
    for i in range(4):
        x = (3 - i) * 1.6
        box(ax, x, 7.0, 1.6, 0.7, f"a{i}", BLUE, fontsize=8)
        box(ax, x, 6.0, 1.6, 0.7, f"b{i}", GREEN, fontsize=8)
        arrow(ax, x + 0.8, 6.0, 8.6, 5.2, color="#555", lw=0.5)
    ax.text(6.6, 7.3, "word a (4 x int8)", fontsize=7, va="center")
    ax.text(6.6, 6.3, "word b (4 x int8)", fontsize=7, va="center")
    box(ax, 8.0, 4.5, 2.6, 0.7, "c (int32) +=", ORANGE, fontsize=8)
    ax.text(0, 3.6, "W4A8: one packed word p = 8 INT4 weights (element 2i: low nibble of byte i)", fontsize=9,
            weight="bold")
    for i in range(4):
        x = (3 - i) * 2.4
        box(ax, x, 2.5, 1.2, 0.7, f"w{2 * i + 1}", PURPLE, fontsize=7)  # drawn as a register: bit 0 on the right
        box(ax, x + 1.2, 2.5, 1.2, 0.7, f"w{2 * i}", BLUE, fontsize=7)
    ax.text(10, 3.0, "p & 0x0F0F0F0F  ->  w0 w2 w4 w6 (even)\n(p >> 4) & 0x0F0F0F0F  ->  w1 w3 w5 w7 (odd)\n"
            "|= (v & 0x08080808) * 30: sign-extend each byte", fontsize=7, va="center")
    ax.text(0, 1.4, "activations x0..x7 (two words): PRMT gathers bytes 0,2,4,6 and 1,3,5,7 to match", fontsize=8)
    ax.text(0, 0.6, "dp4a(x_even, w_even, 0) + dp4a(x_odd, w_odd): the exact sum of 8 products, then x group scale",
            fontsize=8)
    save(fig, ax, path, (-0.3, 20), (0.2, 8.9))


def w4a8_mma(path=HERE / "quant-w4a8-mma.svg"):
    """The tensor-core W4A8: weights as the mma's 16-row A, activations as its 8-column B, and the
    K order of one lane: 32 consecutive K of a group, four mma steps of eight."""
    fig, ax = plt.subplots(figsize=(9, 5.4))
    ax.text(0, 10.6, "swap AB:  out^T (N x M) = W (N x K) . act^T (K x M)   with  mma.sync.m16n8k32  (int8, int32 sums)",
            fontsize=9, weight="bold")
    box(ax, 0, 6.6, 4.8, 3.2, "A: 16 weight rows\nx 32 K\n(INT4 unpacked\nto int8 x 16)", PURPLE, fontsize=8)
    box(ax, 5.6, 6.6, 2.4, 3.2, "B: 32 K\nx 8 activation\nrows (int8)", GREEN, fontsize=7)
    box(ax, 8.8, 6.6, 2.4, 3.2, "C: 16 x 8\nint32\n(added to)", ORANGE, fontsize=8)
    ax.text(5.2, 8.2, "x", fontsize=10, ha="center", va="center")
    arrow(ax, 8.05, 8.2, 8.75, 8.2)
    ax.text(11.6, 9.4, "N (thousands of rows) fills the 16 rows;", fontsize=7.5)
    ax.text(11.6, 8.8, "M = 1..64 tokens fill the 8 columns", fontsize=7.5)
    ax.text(11.6, 8.2, "(at M = 1, seven columns idle:", fontsize=7.5)
    ax.text(11.6, 7.6, "free while the bytes are the limit)", fontsize=7.5)
    ax.text(0, 5.7, "one group of 128 K = one chunk; lane t of each quad takes K 32t .. 32t + 31 of its rows", fontsize=9,
            weight="bold")
    for t in range(4):
        box(ax, t * 4.6, 4.4, 4.6, 0.8, f"lane t = {t}: one 16-byte load\n(32 nibbles)", [BLUE, GREEN, ORANGE, PURPLE][t],
            fontsize=7)
    ax.text(0, 3.5, "lane t's 32 K, four mma steps j = 0..3 of eight K each (the sum does not care which K sits in "
            "which slot, if A and B agree):", fontsize=8)
    for j in range(4):
        x = j * 4.6
        box(ax, x, 2.2, 2.3, 0.8, f"even K of octet {j}", BLUE, fontsize=6.5)
        box(ax, x + 2.3, 2.2, 2.3, 0.8, f"odd K of octet {j}", PURPLE, fontsize=6.5)
    ax.text(0, 1.4, "weights:  (p << 4) & 0xF0F0F0F0 -> even nibbles x 16 (slots 0-3),  p & 0xF0F0F0F0 -> odd x 16 "
            "(slots 4-7): no sign extension", fontsize=7.5)
    ax.text(0, 0.7, "activations:  PRMT bytes 0,2 | 1,3 of two words, as in the DP4A kernel;  each step's int32 sums "
            "x (group scale / 16) -> float32", fontsize=7.5)
    save(fig, ax, path, (-0.3, 18.8), (0.3, 11.1))


if __name__ == "__main__":
    affine()
    int4_packing()
    ternary_gemm()
    dp4a()
    w4a8_mma()
