#!/usr/bin/env python3
"""Probe: why 05.6's W4A8 decode GEMM reaches 23.5% of the copy roofline at M = 1, and what fixes it.

    PYTHONPATH=utilities python3 scripts/probes/w4a8_variants.py          # on a GPU (about a minute)
    PYTHONPATH=utilities python3 scripts/probes/w4a8_variants.py --sim    # simulator: checks only

The notebook's shapes: N = K = 4096, M = 1, 4, 16, 64, then a 14336 x 4096 layer at M = 1; ``bytes``
the weight bytes (K/2 per row plus the group scales), as in the notebook, so "% of copy" is against
the copy roofline on them.

Diagnosis from the package kernel's sm_90 SASS (``kernel_lab.quant.w4a8.w4a8_gemm``): one trip
of its loop (four weight words per lane, one 16-byte load) issues ~115 instructions at M = 1, ~29 per
weight word: the unpack (7 per word), 2 PRMT + 2 DP4A per word, the four dot8 sums added in int64
(Numba types int32 + int32 as int64: IADD3 with carries, SHF, then I2F.S64), the scale's address with
a signed 64-bit ``w // GROUP_WORDS`` (floor-division fix-ups), three branches around the rows m0+1..3
that do not exist at M = 1, and 64-bit pointer increments. And each of a lane's four trips waits for
its own load: at K = 4096 a warp makes four DRAM round trips one after the other, in a grid of a single
wave (4096 warps), so the kernel's time is about four memory latencies plus the tail.

Variants (each checked with ``check_w4a8_gemm`` first; a variant that fails is not timed):
  pkg          the package's kernel (the notebook's)
  pre1 x16     one 16-byte chunk per trip as the package, but lean: uint64 indices (no wrap-around
               tests, no floor division), one int32 DP4A chain per chunk (I2F.S32), and the "x16"
               unpack: ``p & 0xF0F0F0F0`` is each odd nibble times 16 as a signed byte, ``(p << 4) &
               0xF0F0F0F0`` each even one: 3 instructions per word instead of 7, no sign extension;
               the chunk's sum is 16x the true one (|16 d| < 2^24: exact in float32) and the scale is
               taken / 16 (exact), so ``float32(16 d) * (s / 16)`` has the bits of ``float32(d) * s``
  pre2 x16     two chunks (a block of 128 words apart) loaded per trip before any arithmetic
  pre4 x16     four: at K = 4096 the whole row of a lane in one trip, one memory round trip per warp
  pre4         pre4 with the package's unpack (sign extension, 7 per word): the unpack's share
  r4c1, r2c1, r8c1   the package's fast form (``launch_w4a8_gemm_rows``): R weight rows per warp
               sharing each chunk's activation loads, x16 unpack, one chunk per trip
Variants measured once and then removed (their numbers below): R rows per warp with 2 or 4 chunks
loaded first (r2c2, r4c2, r2c4); r4h (each chunk's nibbles unpacked once for all activation rows),
r4p (r4h with the activations' bytes pre-permuted on the host, no PRMT) and r2p (r4p, 2 rows);
r2w8 (r2w with 8 activation rows a pass).
  r2w, r1w, r3w, r4w   the package's words-outer form (``launch_w4a8_gemm_words``): each activation
               row's chunk loaded and split into even/odd bytes first, each weight word unpacked once
               for all of them; R weight rows a warp
Peers: cuBLASLt int8 (``kernel_lab.tensor_cores.peers.CublasLtInt8``, int8 weights: twice the bytes)
and cuBLAS SGEMM through CuPy, as in the notebook.

Measured on an H100 (2026-11-27), M = 1, as a fraction of the copy roofline on the weight bytes: at
N = K = 4096 (8.5 MiB) the package 31.1%, the best variant (pre4) 33.8%, a CuPy copy of the same bytes
49.6%; at 14336 x 4096 (29.8 MiB) the package 51.4%, pre1 x16 60.5%, r4c1 63.1% (noisy), the copy
92.1%. Several rows per warp did not help at 4096 (r4c1 0.88x, r8c1 0.51x): the activations'
trips from L2 are not the limit there; launch, ramp-up and the last wave are (the copy's 49.6%).

Then (H200, 2026-11-27), 14336 x 4096 at M = 1, 2, 4, 8, 16: r4c1 1.39x, 1.50x, 1.46x, 1.61x, 1.70x
the package's kernel, ahead of every other variant at every M (at M = 1 53.4% of the copy roofline,
the copy itself 71.9% on that card); it became the package's fast form,
``kernel_lab.quant.w4a8.launch_w4a8_gemm_rows``, which this probe now times as "r4c1".

Then (H100, 2026-11-27), 14336 x 4096, fraction of the copy roofline at M = 1, 4, 8, 16: r4c1 66.1,
44.4, 29.3, 17.3%; refuted: r4h (each chunk's nibbles unpacked once, not per activation row) 51.7,
34.9, 22.6, 13.2%, r4p (r4h with activations pre-permuted on the host: no PRMT) 53.2, 35.7, 23.1,
13.3%, r2p (r4p with 2 rows a warp) 59.6, 40.3, 25.7, 14.7%: holding the unpacked words costs more
(registers, occupancy) than unpacking them again. At M = 16 r4c1 runs DP4A at 31.6 TOP/s, a quarter
of the H100's 134: the passes over the activation rows, not the DP4A rate, limit it.

Then (H100, 2026-11-27), the loops turned (r{R}w: each word unpacked once for all MT activation
rows, which r4c1 unpacks again per row), 14336 x 4096, M = 1, 2, 4, 8: r2w 60.1, 58.1, 55.9, 35.4%
(16: 20.7%), r4c1 64.8, 57.6, 44.3, 28.8%; r3w 62.2, 60.3, 50.0, 32.3%; r4w (95 registers) 53.2% at
M = 1, 47.5% at 4; r1w 43.8, 41.2, 39.4, 22.7%; r2w8 (8 rows a pass, 88 registers) 43.8, 42.8,
38.7, 34.3%.
Refuted the same day: the next trip's weight chunks loaded before this trip's arithmetic (a second
set of registers for them): r2w 51.7, 46.5, 41.4, 26.7% with it, r4w and r1w no better; at N = K =
4096 it gained 2% at M = 1 and lost from M = 4 on. The registers it takes cost more warps than
the latency it hides.
After that, the words-outer form takes T = min(M, 4) activation rows a pass (a kernel per T), so
that M = 2 and 3 do no DP4A for rows that are not there (it ran four rows a pass, two of them
copies, at M = 2). Then (H100), 14336 x 4096 at M = 1, 2, 3, 4: r2w 64.6, 61.8, 58.4, 55.3%, r4c1
65.8, 56.3, 49.5, 44.3%, r3w 68.2, 46.1, 57.9, 49.5%; N = K = 4096, M = 1: r2w 8.03 us, r4c1 9.90 us.
``launch_w4a8_fast`` was r2w at every M.

Then the int8 tensor cores (H100, 2026-11-27; ``kernel_lab.quant.w4a8_mma``: ``mma.sync.m16n8k32``
with the weights as A, "swap AB", each lane 32 consecutive K of a 128-chunk so that weights take one
16-byte load and the x16 unpack, activations two loads and four PRMT pairs). "tc mM wrR wkK": M
tiles of 16 weight rows a warp, R x K warps a block (K-warps split the chunks). 14336 x 4096, % of
the copy roofline at M = 1, 2, 4, 8, 16, 32, 64 (three runs, which differ by up to 5%): tc m1 wr2 wk4
64-65, 64.5, 60-64.5, 61-64, 58.1-58.5, 29.3-29.6, 12.8%; tc m2 wr2 wk4 53-54, 52, 52-53, 52-53,
54-56, 25, 23.4% (44 us at M = 64); tc m2 wr1 wk8 64.3, -, 63.5, 63.3, 50, 23.4, 16.5%; tc m1 wr1
wk8 58-62, 61.5, 57-62, 56-61, 46-49, 27-28, 13%; r2w 65-67, 61, 55.6-55.9, 35, 20.5, 11, 5.7%.
N = K = 4096 (copy 50%): at M = 1, 4, 16, 64 tc m1 wr1 wk8 9.2, 9.3-9.5, 9.6-10.7, 25.6-27.7 us;
tc m2 wr1 wk8 10.7-10.9, 11.0, 10.8-11.0, 19.7-29.2 us; r2w 7.9, 9.8, 20.3, 65.9 us.
Refuted: MTILES = 4 (64 rows a warp), token tiles capped so that M = 32-64 runs over gridDim.y
(the weights read again from L2), a "staged" form (activations into shared memory by cp.async, a
warp's next weight chunk in registers: 20.6-22.6 us at M = 1-8, 50 us at 64), a "tiled" form (both
operands into shared memory by cp.async, three stages: 26-28 us at M = 1-8, 51-58 us at 64; Nsight
Compute: issue slots 49% busy, most of them the copies' address arithmetic). At M = 64 the best
(tc m2 wr2 wk4, 234 registers) runs one block of 8 warps an SM: Nsight Compute, 12.5% theoretical
occupancy, 1.8 warps a scheduler, 0.4 eligible, issue slots 22% busy, DRAM 19%: latency-bound.
``launch_w4a8_fast`` is now r2w at M = 1 and the tensor cores from M = 2 (``w4a8_mma.choose``).

Then (H100, 2026-11-27, a later session), "tc ti": ``w4a8_mma.kernel_tokens_inner``, the chunk's
loop turned (every token tile's activation loads issued together, the four mma steps outermost over
all MTILES x NT chains). 14336 x 4096, % of the copy roofline at M = 16, 32, 64: tc m2 wr2 wk4
55.6, 25.9, 23.3%; tc ti m2 wr2 wk4 53.4, 34.4, 24.5%; tc m2 wr4 wk2 45.9, 29.3, 29.7%; **tc ti m2
wr4 wk2** 45.1, 40.1, 30.6% (33.7 us at 64); tc m2 wr8 wk1 (56 blocks) 29.6, 14.4, 16.7%; tc ti m1
wr8 wk1 36.2, 32.9, 24.9%; at M = 64 in the earlier run of the same day tc m1 wr2 wk4 (16 rows a
warp) 81.0 us against tc m2 wr2 wk4 44.5 us. Reading: from M = 32 the time follows how often the
activations are read from L2 (once per block along N: 16 rows a warp doubles the blocks and nearly
doubles the time; 128-row blocks halve it again), and a block along N needs the SMs' count of
blocks to keep every SM busy (wr8 wk1: 56 blocks, slower). N = K = 4096, M = 64: tc m2 wr1 wk8 19.7
us stays the best. ``choose`` now takes tc ti m2 wr4 wk2 for N >= 8192 and M > 16. Not reached:
60% at M = 32-64, which needs the activations read fewer times than once per 128 weight rows
(a split of K over blocks with a fixed-order sum of their partials, or clusters sharing them).
Refuted the same day, then removed: "tc pf", the direct form with each warp's next chunk of weights
and scales loaded before this chunk's work (a second set of registers: 60 instead of 44 at m1, NT =
1). 14336 x 4096, M = 1, 4, 16, 32: tc pf m1 wr2 wk4 61.9, 60.2, 42.5, 28.4% against tc m1 wr2 wk4
60.9, 60.4, 57.5, 29.2%; tc pf m2 wr2 wk4 59.0, 57.9, 53.3, 31.5%. Only at N = K = 4096 did it gain
(tc pf m1 wr1 wk8 8.67 us at M = 1 and 9.82 us at 16, against 9.31 and 10.75 us): the weights'
latency is not what holds the larger layer back. In the same run tc m2 wr1 wk8 reached 63.8% and
62.0% at M = 1 and 4 (the choice, m1 wr2 wk4: 60.9, 60.4%), and 49.6% at 16.

Next (H200, 2026-11-27; copy roofline 4,280 GB/s, a CuPy copy of the bytes 71-75% of it):
- "tc tipf", refuted and removed: the tokens-inner form with the next chunk's weights loaded once
  this chunk's are unpacked. 14336 x 4096: m2 wr4 wk2 28.6, 25.3, 20.0% at M = 16, 32, 64 against
  32.9, 29.6, 21.8% without (slower at every M); m2 wr2 wk4 38.7% at 16 (the choice there, tc m1
  wr2 wk4, 44.0%). As before, the registers cost more than the latency they hide.
- "tc tis{S}" (``kernel_tokens_inner(..., SPLIT=S)``: K split over S blocks along gridDim.z, the
  last block of each output tile adding the splits' partial sums in a fixed order) and "tc res"
  (``kernel_resident``: each block copies its slice of the activations into shared memory once,
  already split into even and odd bytes, K split over blocks the same way) were timed slower than
  tc ti at every M (e.g. N = K = 8192, M = 64: tis2 m2 wr4 wk2 62.2 us, tc ti 52.3 us; 14336 x 4096,
  M = 64: res m1 wr8 wk1 c8 59 us, tc ti 33.5 us), but those versions had a defect that voids the
  numbers: the loop adding the splits ran ``gridDim`` times and indexed the accumulators with its
  counter, so the compiler kept the accumulators in local memory (the stack) for the whole kernel;
  ``scripts/module05_offline_compile.py`` now reports local memory in the PTX. Fixed (the sum
  read every split from memory, the split count a compile-time constant; no local memory in the
  PTX of any configuration the probe ran). At N = K = 8192, M = 64 the choice (tc ti m2 wr4 wk2)
  has 64 blocks for 132 SMs. Registers a thread at M = 64 (NT = 8), sm_90, from the cubin
  (cuobjdump --dump-resource-usage; none spill): tc ti m2 wr4 wk2 238 (one block of 8 warps an
  SM), with SPLIT = 2 254; res m2 wr4 wk2 and m2 wr8 wk1 234 (254 once the split's sum became
  _frame's finish_split, still one block an SM); res m1 wr8 wk1 128 (with MINB = 2, as the probe
  ran it), so two blocks of 8 warps an SM where shared memory allows (c8: 74 KiB a block), twice
  the warps of the choice; at M = 32 (NT = 4) tc ti m2 wr4 wk2 156, res m2 wr4 wk2 160.
- "tc st{ST}" (``kernel_staged``: the tokens-inner loop with each lane's weights and scales brought
  into shared memory by cp.async, ST stages deep, read back by the lane that copied them): written
  after that run from the SASS of tc ti m2 wr4 wk2 (443 instructions and 64 IMMA a chunk: issuing
  all of them takes about 6 us of the 33 us measured at M = 64, so the warps wait, one DRAM round
  trip a chunk). st3 m2 wr4 wk2: 203 registers, 582 instructions a chunk.
cuBLASLt int8 in the same runs (int8 weights: twice the bytes), 14336 x 4096: 23.9, 19.8, 22.3 us
at M = 16, 32, 64, the tensor-core W4A8 16.6, 24.6, 33.5 us; N = K = 8192: 23.8, 24.5, 32.9 us at
M = 1, 16, 64, the W4A8 20.7, 20.8, 52.3 us.

Then (H200, 2026-11-27, a later run: the fixed tis and res, and st; one run, us, % of the copy
roofline on the weight bytes in parentheses), then removed:
- 14336 x 4096, M = 16, 32, 64: tc ti m2 wr4 wk2 (the choice above 16 rows) 22.30 (32.8%), 25.33
  (28.9%), 33.01 (22.2%); best split tis2 m2 wr4 wk2 22.46, 36.61, 52.50 (tis2 m2 wr4 wk1 32.93 at
  32, 48.72 at 64; tis3, tis4 slower); best resident res m1 wr8 wk1 c16 24.78, 31.10, 53.33, res
  m1 wr8 wk1 c8 27.98, 33.30, 49.81; best staged st3 m2 wr2 wk4 22.70 at 16, st4 m2 wr4 wk2 27.84
  at 32, st3 m1 wr2 wk4 61.34 at 64 (st2 m2 wr4 wk2 64.51 at 64). cuBLASLt int8 (int8 weights)
  24.13, 20.51, 21.79; a CuPy copy of the bytes 10.3 us (71% of the roofline, 4,264 GB/s).
- N = K = 8192, M = 1, 16, 64: tc ti m2 wr4 wk2 46.16, 38.30, 52.78; tis2 29.97, 28.61, 50.32;
  tis4 20.78, 23.38, 60.29; res m1 wr8 wk1 c16 21.97, 26.06, 57.89; st2 m2 wr4 wk2 38.29, 42.06,
  115.07; cuBLASLt int8 22.69, 23.92, 32.80. The package's choice at M <= 16 on this layer is the
  direct form m1 wr2 wk4, which 06.3 stored at 13.0 us at M = 1 and 20.5 us at M = 16 on an H200:
  no split beats it.
- Nsight Compute (H200, same day, --clock-control none), 14336 x 4096, M = 64: tc ti m2 wr4 wk2
  32.0 us, 238 registers, one block of 8 warps an SM (12.5% theoretical occupancy), 112 blocks for
  132 SMs, 1.8 warps a scheduler with 0.40 eligible, 5.3 cycles between a warp's instructions
  (2.16 of them waiting on global loads, "long scoreboard"; 1.27 on fixed-latency dependencies,
  "wait"), issue slots 25% busy, DRAM 21%, L2 74 MB moved (the weights' 31.5 MB and the
  activations read once per block), L1 hit rate 78%. Resident m1 wr8 wk1 c8 (MINB 2): 49.3 us,
  128 registers, 3.2 warps a scheduler, but 14.7 M instructions against 7.7 M (the copies into
  shared memory and back), L2 118 MB (each block of the K split reads its slice of activations
  and the partial sums), issue slots 30%. Staged st2 m2 wr4 wk2: 63.8 us, 204 registers, 9.5
  cycles between instructions, 5.85 of them on loads: the activations' loads from L1/L2 still wait
  every chunk, and 1.8 M shared-memory bank conflicts. Split tis2 at N = K = 8192 (128 blocks
  instead of 64): 50.3 us against 52.5 us for tc ti (96 K elapsed cycles; every SM busy, but each
  SM took 65 K active cycles for half the work that tc ti's SMs do in about 86 K): 254 registers,
  5.9 cycles between instructions.
Reading: at 14336 x 4096 none of the three forms is faster than tc ti at M = 16-64 (at N = K = 8192,
M = 64 tis2 was 5% ahead, 50.3 against 52.8 us, in one run). What limits tc ti at M = 64 is its
warps' latency at 1.8 warps a scheduler (238 registers: the 64 accumulators, 64 int32 chain sums
and the token tiles' bytes), not DRAM (21%) or the issue rate (25%); the forms that add warps
(resident) pay for it in instructions, those that add blocks (split) do not make each SM faster.
Removed after this run: ``kernel_resident``, ``kernel_staged``, the tokens-inner form's SPLIT (and
its scratch), and their configurations here (SPLIT_CONFIGS, RESIDENT_CONFIGS, STAGED_CONFIGS).

Then (H200, 2026-11-27, later the same day) every tile shape of TC_CONFIGS on N = K = 8192 (06.3's
decode layer), M = 4 / 16 / 32 / 64, in us (the copy of the bytes: 11.0 us, 75% of the roofline):
the choice of then (m1 wr2 wk4 up to 16, tc ti m2 wr4 wk2 above) 20.8 / 20.5 / 39.3 / 53.8; tc m1
wr1 wk8 16.1 / 18.0 / 41.3 / 75.2; tc m2 wr1 wk8 18.4 / 17.1 / 38.4 / 49.2; tc ti m2 wr2 wk4 28.4 /
24.2 / 26.3 / 35.5; tc m2 wr2 wk4 28.1 / 22.9 / 36.8 / 36.7; cuBLASLt int8 24.4 / 24.1 / 26.3 /
32.5. The 14336 x 4096 rule gave this layer 64 blocks of 128 rows above 16 rows (half the SMs idle)
and 256 blocks of 32 rows up to 16; ``choose`` now sizes blocks by the SM count: 128 blocks of 64
rows (tc ti m2 wr2 wk4) and 512 of 16 rows (m1 wr1 wk8) here, unchanged on the other two layers.
Refuted the same day, then removed: "tc tw{T}", the tokens-inner form with T groups of warps along
the activation rows in a block (each group half or a quarter of M; fewer sums a warp, the block's
weight chunks shared through L1). M = 32 / 64 in us: on 8192 x 8192 the best, tw2 m2 wr1 wk4 27.7 /
49.7 and tw2 m1 wr2 wk2 35.5 / 42.0, against tc ti m2 wr2 wk4 27.1 / 35.0; on 14336 x 4096 tw2 m2 wr2
wk2 24.9 / 45.7 and tw4 m2 wr2 wk1 35.9 / 38.2, against tc ti m2 wr4 wk2 25.3 / 33.4. Level at
M = 32, slower at 64 on both layers: reading the weights again from L1 for each group costs more
than the warps it adds.

One line per (variant, M); with $OUT set, also $OUT/w4a8_variants.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402
from numba import cuda, float32, int32, uint32, uint64  # noqa: E402  (after kernel_lab)

from kernel_lab.quant import integer as qref  # noqa: E402
from kernel_lab.quant import w4a8  # noqa: E402
from kernel_lab.quant import warp as qwarp  # noqa: E402
from kernel_lab.quant import w4a8_mma as wm  # noqa: E402
from kernel_lab.device.dp4a import EVEN_BYTES, ODD_BYTES, byte_perm, dp4a  # noqa: E402
from kernel_lab.vector_loads import load4  # noqa: E402

MT = 4  # activation rows per pass over the weights (accumulators in registers)
WPB = 4  # warps (weight rows) per block: 128 threads, as the package's launch
halves_x16 = w4a8.int4_halves_x16  # (even, odd) nibbles as signed bytes times 16: the package's


@cuda.jit(device=True, inline="always")
def halves_sext(p):
    """(even, odd) nibbles of ``p`` sign-extended to bytes, as the package's ``dot8`` unpacks them."""
    p = uint32(p)
    even = p & uint32(0x0F0F0F0F)
    odd = (p >> uint32(4)) & uint32(0x0F0F0F0F)
    even |= (even & uint32(0x08080808)) * uint32(30)  # 8 * 30 = 0xF0: sign bits fill each byte's top
    odd |= (odd & uint32(0x08080808)) * uint32(30)
    return int32(even), int32(odd)


def make_w4a8(chunks: int, x16: bool):
    """A warp per weight row n, MT activation rows per pass; per trip a lane loads ``chunks`` 16-byte
    chunks of the row (4 words = 32 weights each, 128 words apart, so each load instruction of the
    warp reads 512 contiguous bytes) and their scales, all before the first DP4A. Rows whose length in
    words is not a multiple of 4 take the package's kernel (its one-word-per-lane path). uint64
    indices throughout (a signed index costs a wrap-around compare + select per access; mixing uint64
    with a signed int64 would make Numba compute in float64, so every constant is a uint64)."""
    CH = chunks
    halves = halves_x16 if x16 else halves_sext
    SCALE_DIV = float32(0.0625) if x16 else float32(1.0)  # x16: sums are 16x the true ones; exact

    @cuda.jit(device=True, inline="always")
    def chunk_dot(a32, m, wk, q0, q1, q2, q3):
        """The int32 sum of a chunk's 32 products with row m's activations (one DP4A chain)."""
        x0, x1, x2, x3 = load4(a32, (m, uint64(2) * wk))
        x4, x5, x6, x7 = load4(a32, (m, uint64(2) * wk + uint64(4)))
        e, o = halves(q0)
        d = dp4a(byte_perm(x0, x1, EVEN_BYTES), e, 0)
        d = dp4a(byte_perm(x0, x1, ODD_BYTES), o, d)
        e, o = halves(q1)
        d = dp4a(byte_perm(x2, x3, EVEN_BYTES), e, d)
        d = dp4a(byte_perm(x2, x3, ODD_BYTES), o, d)
        e, o = halves(q2)
        d = dp4a(byte_perm(x4, x5, EVEN_BYTES), e, d)
        d = dp4a(byte_perm(x4, x5, ODD_BYTES), o, d)
        e, o = halves(q3)
        d = dp4a(byte_perm(x6, x7, EVEN_BYTES), e, d)
        return dp4a(byte_perm(x6, x7, ODD_BYTES), o, d)

    @cuda.jit
    def gemm(a32, a_scale, w32, w_scales, out):
        lane = uint64(cuda.threadIdx.x & 31)
        n = uint64(cuda.blockIdx.x) * uint64(WPB) + uint64(cuda.threadIdx.x >> 5)
        rows = uint64(out.shape[0])
        if n >= uint64(out.shape[1]):
            return
        words = uint64(w32.shape[1])
        acc = cuda.local.array(MT, float32)  # constant indices after unrolling: registers
        p = cuda.local.array((CH, 4), int32)
        sc = cuda.local.array(CH, float32)
        m0 = uint64(0)
        while m0 < rows:
            for i in range(MT):
                acc[i] = float32(0.0)
            tw = uint64(4) * lane
            while tw < words:
                for k in range(CH):  # all of the trip's loads first
                    wk = tw + uint64(128 * k)
                    if wk < words:
                        p[k, 0], p[k, 1], p[k, 2], p[k, 3] = load4(w32, (n, wk))
                        sc[k] = w_scales[n, wk >> uint64(4)] * SCALE_DIV
                for i in range(MT):
                    m = m0 + uint64(i)
                    if m < rows:
                        for k in range(CH):
                            wk = tw + uint64(128 * k)
                            if wk < words:
                                d = chunk_dot(a32, m, wk, p[k, 0], p[k, 1], p[k, 2], p[k, 3])
                                acc[i] += float32(d) * sc[k]
                tw += uint64(128 * CH)
            for i in range(MT):
                m = m0 + uint64(i)
                if m < rows:  # the same for the whole warp: the shuffles stay full
                    v = qwarp.warp_sum_f32(acc[i])
                    if lane == uint64(0):
                        out[m, n] = v * a_scale[m]
            m0 += uint64(MT)

    def launch(out, a32, a_scale, w32, w_scales):
        if a32.shape[1] != 2 * w32.shape[1]:
            raise ValueError("a32 and w32 must cover the same K (pad both to a multiple of 8)")
        if w32.shape[1] % 4:  # rows that are not whole 16-byte chunks
            return w4a8.launch_w4a8_gemm_rows(out, a32, a_scale, w32, w_scales)
        gemm[-(-out.shape[1] // WPB), 32 * WPB](a32, a_scale, w32, w_scales, out)

    launch.kernel = gemm
    return launch


w4_pre1_x16 = make_w4a8(1, True)
w4_pre2_x16 = make_w4a8(2, True)
w4_pre4_x16 = make_w4a8(4, True)
w4_pre4 = make_w4a8(4, False)


def variants():
    """[(name, launch, kernel)]; the first is the package's (the notebook's) kernel."""
    return [("pkg: notebook's w4a8_gemm", w4a8.launch_w4a8_gemm, w4a8.w4a8_gemm),
            ("pre1 x16: lean, 1 chunk/trip", w4_pre1_x16, w4_pre1_x16.kernel),
            ("pre2 x16: 2 chunks loaded first", w4_pre2_x16, w4_pre2_x16.kernel),
            ("pre4 x16: 4 chunks loaded first", w4_pre4_x16, w4_pre4_x16.kernel),
            ("pre4: 4 chunks, sign-extend unpack", w4_pre4, w4_pre4.kernel),
            ("r4c1: 4 rows/warp, 1 chunk (package)", w4a8.launch_w4a8_gemm_rows, None),
            ("r2c1: 2 rows/warp (package kernel)", rows_launcher(2), None),
            ("r8c1: 8 rows/warp (package kernel)", rows_launcher(8), None),
            ("r2w: each word unpacked once, 2 rows/warp (package)", words_launcher(2), None),
            ("r1w: r2w with 1 row/warp", words_launcher(1), None),
            ("r3w: r2w with 3 rows/warp", words_launcher(3), None),
            ("r4w: r2w with 4 rows/warp", words_launcher(4), None),
            ("tc: mma.sync int8, package choice", wm.launch_w4a8_mma, None)] + [
            (f"tc{' ti' if form == 'tokens-inner' else ''} m{mt} wr{wr} wk{wk}{f' nt<={cap}' if cap < 8 else ''}: "
             f"{16 * mt} rows/warp, {wr}x{wk} warps", mma_launcher(mt, wr, wk, cap, form), None)
            for mt, wr, wk, cap, form in TC_CONFIGS]


# (MTILES, WR, WK, most token tiles a block: M above 8 x that takes more blocks over gridDim.y, form:
# "direct" is w4a8_mma.kernel, "tokens-inner" w4a8_mma.kernel_tokens_inner)
TC_CONFIGS = [(1, 1, 8, 8, "direct"), (1, 2, 4, 8, "direct"), (2, 2, 4, 8, "direct"), (2, 1, 8, 8, "direct"),
              (1, 2, 4, 8, "tokens-inner"), (1, 1, 8, 8, "tokens-inner"), (2, 2, 4, 8, "tokens-inner"),
              (1, 4, 2, 8, "tokens-inner"), (2, 4, 2, 8, "direct"), (2, 4, 2, 8, "tokens-inner"),
              (2, 8, 1, 8, "direct"), (2, 8, 1, 8, "tokens-inner"), (1, 8, 1, 8, "tokens-inner")]


def mma_launcher(mtiles, wr, wk, cap=8, form="direct"):
    """A launcher of ``form`` (a key of ``w4a8_mma.FORMS``) with these tiles."""
    def launch(out, a32, a_scale, w32, w_scales):
        nt = min(cap, -(-out.shape[0] // 8))
        return wm.launch_w4a8_mma(out, a32, a_scale, w32, w_scales, form=form, NT=nt, MTILES=mtiles, WR=wr, WK=wk)
    return launch


def words_launcher(rows_per_warp):
    return lambda out, a32, a_scale, w32, w_scales: w4a8.launch_w4a8_gemm_words(out, a32, a_scale, w32, w_scales,
                                                                               rows_per_warp)


def rows_launcher(rows_per_warp):
    return lambda out, a32, a_scale, w32, w_scales: w4a8.launch_w4a8_gemm_rows(out, a32, a_scale, w32, w_scales,
                                                                              rows_per_warp)


def registers(kernel):
    try:
        regs = kernel.get_regs_per_thread()
        return max(regs.values()) if isinstance(regs, dict) else regs
    except Exception:  # noqa: BLE001 - the simulator, or an older numba-cuda
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="in the simulator: the checks only, at small sizes")
    p.add_argument("--small-ms", default="1,4,16,64", help="activation rows for N = K = 4096 (comma-separated; "
                   "empty: none)")
    p.add_argument("--big-ms", default="1", help="activation rows for the big layer (comma-separated)")
    p.add_argument("--big-n", type=int, default=14336, help="the big layer's weight rows (06.3's decode shape: 8192)")
    p.add_argument("--k", type=int, default=4096, help="K of both layers (06.3's decode shape: 8192)")
    p.add_argument("--only", help="comma-separated prefixes of the variants to run (the package's always runs)")
    args = p.parse_args(argv)
    env = kl.setup(quiet=True)
    if args.sim != env.simulator:
        print("--sim runs only in the simulator (NUMBA_ENABLE_CUDASIM=1), and without --sim a GPU is needed"
              if args.sim else "no GPU found: run with --sim for the simulator path")
        return 2
    from kernel_lab.checks import quantization as checks

    results = {"gpu": None if env.simulator else kl.gpu_info().name, "variants": []}
    ok = {}
    chosen = [v for v in variants() if v[0].startswith("pkg") or not args.only
              or any(v[0].startswith(pre) for pre in args.only.split(","))]
    for name, launch, _ in chosen:
        try:
            checks.check_w4a8_gemm(launch, name=name)
            ok[name] = True
            print(f"{name:38s} check ok", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on with the others
            ok[name] = False
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"{name:38s} CHECK FAILED: {type(exc).__name__}: {first[:300]}", flush=True)
            results["variants"].append(dict(name=name, check="failed", error=str(exc)[:2000]))
    if env.simulator:
        failed = [n for n, good in ok.items() if not good]
        print(f"\nsimulator probe done: {len(failed)} variant(s) failed their check (no timing in the simulator)")
        return 0

    roof = kl.rooflines(quiet=True)
    results["rooflines"] = roof
    print(f"\nGPU: {results['gpu']}; copy roofline {roof.get('copy_gbps', float('nan')):,.0f} GB/s", flush=True)
    try:
        import cupy as cp
    except ImportError:
        cp = None
    try:
        from kernel_lab.tensor_cores.peers import CublasLtInt8
        import nvmath  # noqa: F401
    except ImportError:
        CublasLtInt8 = None
    k = args.k
    rng = np.random.default_rng(4)
    names = [(name, launch, kern) for name, launch, kern in chosen if ok[name]]
    # N = K = 4096 at the notebook's M; then a 14336 x 4096 layer at M = 1, where a copy of the bytes
    # is close to the roofline (at 8.5 MiB it reaches about half: launch and ramp-up costs)
    rows = [(4096, args.small_ms), (args.big_n, args.big_ms)]
    for n_out, ms in ((n, tuple(int(v) for v in text.split(",") if v)) for n, text in rows):
        wf = rng.standard_normal((n_out, k)).astype(np.float32)
        w_scales = qref.int4_group_scales_f32(wf)
        w32 = cuda.to_device(qref.int4_pack(qref.int4_quantize_f32(wf, w_scales)).view(np.int32))
        ws = cuda.to_device(w_scales)
        w8, _ = qref.int8_per_row_f32(wf)
        int4_bytes = n_out * k // 2 + 4 * w_scales.size
        for m in ms:
            xf = rng.standard_normal((m, k)).astype(np.float32)
            xq, xs = qref.int8_per_row_f32(xf)
            a32, xsd = cuda.to_device(qref.as_words(xq)), cuda.to_device(xs)
            y = cuda.device_array((m, n_out), np.float32)
            cases = [(name, (lambda launch=launch: launch(y, a32, xsd, w32, ws)), int4_bytes, kern)
                     for name, launch, kern in names]
            cases.insert(1, (cases[0][0] + " (again)",) + cases[0][1:])  # the noise between two runs
            if cp is not None:
                # the practical roofline at this size: a device-to-device copy of as many bytes
                src8, dst8 = cp.zeros(int4_bytes // 2, cp.uint8), cp.empty(int4_bytes // 2, cp.uint8)  # read + write
                cases.append(("copy of the same bytes (CuPy)", lambda s8=src8, d8=dst8: d8.__setitem__(slice(None), s8),
                              int4_bytes, None))
                cx, cw = cp.asarray(xf), cp.asarray(wf)
                cases.append(("cuBLAS SGEMM (CuPy, fp32)", lambda cx=cx, cw=cw: cx @ cw.T, 4 * n_out * k, None))
                if CublasLtInt8 is not None:
                    lt = CublasLtInt8(m, n_out, k)
                    cxq, cwq, cc = cp.asarray(xq), cp.asarray(w8), cp.empty((m, n_out), cp.int32)
                    cases.append(("cuBLASLt int8 (int8 weights)",
                                  lambda lt=lt, cxq=cxq, cwq=cwq, cc=cc: lt(cxq, cwq, cc), n_out * k, None))
            base_us = None
            for name, fn, nbytes, kern in cases:
                meas = kl.benchmark(f"{name}, M={m}", fn, bytes=nbytes, inputs=(a32,), quiet=True, repeat=50)
                us = meas.ms * 1000
                base_us = base_us or us
                frac = 100 * meas.fraction if meas.fraction is not None else float("nan")
                regs = registers(kern) if kern is not None else None
                print(f"N={n_out:<5d} M={m:<3d} {name:38s} {us:8.2f} us  {frac:5.1f}% of copy (its bytes)  "
                      f"{base_us / us:5.2f}x pkg  spread {100 * (meas.spread or 0):3.0f}%"
                      f"{'  regs ' + str(regs) if regs else ''}", flush=True)
                results["variants"].append(dict(name=name, n=n_out, m=m, check="ok", us=us, fraction=meas.fraction,
                                                spread=meas.spread, bytes=nbytes, regs=regs))
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "w4a8_variants.json").write_text(json.dumps(results, indent=1, default=str))
    failed = [n for n, good in ok.items() if not good]
    print(f"\nprobe done: {len(failed)} variant(s) failed their check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
