"""Draw the diagrams of module 05's floating-point notebooks (05.3 FP8, 05.4 NVFP4 and MX).

Run: python images/make_images_module05_float.py. Each function writes one SVG next to this file.
"""

import matplotlib.pyplot as plt
from drawing import BLUE, GREEN, GREY, HERE, ORANGE, PURPLE, RED, box, save
SIGN, EXP, MAN = RED, BLUE, GREEN


def fp8_bit_layouts(path=HERE / "fp8-bit-layouts.svg"):
    """Sign, exponent and mantissa fields of E4M3, E5M2, E2M1 and E8M0, with each format's rules."""
    rows = [
        ("E4M3", 1, 4, 3, "bias 7, max 448 = 1.75 x 2^8, min subnormal 2^-9",
         "no infinity; S.1111.111 is NaN (S.1111.000-110 are 256..448)"),
        ("E5M2", 1, 5, 2, "bias 15, max 57344 = 1.75 x 2^15, min subnormal 2^-16",
         "IEEE-like: S.11111.00 is infinity, S.11111.01-11 are NaN"),
        ("E2M1", 1, 2, 1, "bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6",
         "no infinity, no NaN: NVFP4 and MXFP4 elements, two per byte"),
        ("E8M0", 0, 8, 0, "2^(code - 127): 2^-127 .. 2^127",
         "no sign, no mantissa; 0xFF is NaN: the MX block scale"),
        ("float32", 1, 8, 23, "bias 127: where the kernels read and write the bits", ""),
    ]
    fig, ax = plt.subplots(figsize=(12, 5.6))
    y = 10.5
    for name, s, e, m, facts, specials in rows:
        ax.text(0, y + 0.35, name, fontsize=11, weight="bold", va="center")
        x = 2.2
        width = 0.55 if name != "float32" else 0.22
        for label, count, color in [("S", s, SIGN), ("E", e, EXP), ("M", m, MAN)]:
            for k in range(count):
                box(ax, x, y, width, 0.7, label if name != "float32" else "", color, fontsize=8)
                x += width
        ax.text(x + 0.4, y + 0.5, facts, fontsize=8.5, va="center")
        if specials:
            ax.text(x + 0.4, y + 0.05, specials, fontsize=8.5, va="center", color="#444444")
        y -= 2.0
    ax.text(2.2, 0.6, "value of a normal code: (-1)^S x 1.M x 2^(E - bias);  exponent field 0: "
                      "(-1)^S x 0.M x 2^(1 - bias) (subnormals)", fontsize=9)
    for i, (label, color) in enumerate([("sign", SIGN), ("exponent", EXP), ("mantissa", MAN)]):
        box(ax, 14.5 + 2.3 * i, 11.6, 0.5, 0.5, "", color)
        ax.text(15.1 + 2.3 * i, 11.85, label, fontsize=8.5, va="center")
    save(fig, ax, path, (-0.2, 22.5), (0, 12.4))


def block_scaling(path=HERE / "block-scaling.svg"):
    """NVFP4 (16 E2M1 + E4M3 scale, FP32 tensor scale) and MX (32 elements + E8M0 scale)."""
    fig, ax = plt.subplots(figsize=(12, 5.2))
    # NVFP4
    ax.text(0, 9.6, "NVFP4: 16 elements share one E4M3 scale; one FP32 scale for the whole tensor",
            fontsize=10, weight="bold")
    for j in range(16):
        box(ax, j * 0.75, 8.0, 0.7, 0.8, "E2M1", GREEN, fontsize=6)
    box(ax, 12.3, 8.0, 1.4, 0.8, "E4M3", BLUE, fontsize=8)
    box(ax, 15.5, 8.0, 1.6, 0.8, "FP32 ts", ORANGE, fontsize=8)
    ax.text(0, 7.3, "x_hat = E2M1 value x E4M3 block scale x tensor scale      "
                    "8 bytes + 1 byte per 16 values: 4.5 bits per value", fontsize=8.5)
    ax.text(0, 6.7, "ts = amax_tensor / (6 x 448);   block scale = E4M3(amax_block / 6 / ts), to nearest;   "
                    "element = E2M1(x / (block scale x ts))", fontsize=8.5, color="#444444")
    # bytes: two elements per byte
    for j in range(8):
        box(ax, j * 1.5, 5.4, 1.5, 0.6, f"x{2 * j + 1} | x{2 * j}", GREY, fontsize=7)
    ax.text(12.3, 5.7, "8 bytes, each high nibble | low nibble:\nelement 2i in the low 4 bits", fontsize=8, va="center")
    # MX
    ax.text(0, 4.1, "MXFP4 / MXFP8: 32 elements share one E8M0 scale (a power of two)", fontsize=10,
            weight="bold")
    for j in range(32):
        box(ax, j * 0.375, 2.6, 0.35, 0.8, "", GREEN if j % 2 == 0 else "#b5d99c")
    box(ax, 12.3, 2.6, 1.4, 0.8, "E8M0", PURPLE, fontsize=8)
    ax.text(0, 1.9, "MXFP4: E2M1 elements, 16 bytes + 1 per 32 values: 4.25 bits per value;   "
                    "MXFP8: E4M3 elements, 8.25 bits per value", fontsize=8.5)
    ax.text(0, 1.3, "scale = 2^(floor(log2 amax_block) - emax_element), rounded DOWN (OCP MX v1.0, 6.3): "
                    "the largest elements may saturate", fontsize=8.5, color="#444444")
    save(fig, ax, path, (-0.2, 19.5), (0.8, 10.2))


if __name__ == "__main__":
    fp8_bit_layouts()
    block_scaling()
