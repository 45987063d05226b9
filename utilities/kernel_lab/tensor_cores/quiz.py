"""Quiz questions of module 06, and the checker the notebooks call: ``quiz.check("06.1-a", "b")``.

Each question has choices labelled a, b, c, ...; ``check`` prints one line saying whether the
answer is right and why (the explanation is the point), and raises :class:`QuizWrong` for a wrong
answer so that "Run all" stops there. ``ask(qid)`` prints the question and its choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import progress
from ..validate import KernelLabArgumentError


class QuizWrong(AssertionError):
    def _render_traceback_(self):
        return [f"Not quite: {self}"]


@dataclass(frozen=True)
class Question:
    text: str
    choices: dict
    answer: str
    why: str


QUESTIONS = {
    # 06.1 tensor-core GEMM
    "06.1-a": Question(
        "A 128x128 output tile computed 32 columns of K at a time, fp16 inputs: how many bytes of A and B "
        "does one block read from global memory per K step, and how many multiply-adds does it do?",
        {"a": "16 KiB and 524,288", "b": "8 KiB and 16,384", "c": "32 KiB and 4,194,304"},
        "a",
        "A's slice is 128x32 and B's 32x128 halves: 2 x 4096 x 2 bytes = 16 KiB; the tile does 128 x 128 x 32 "
        "= 524,288 multiply-adds on them, 32 per byte: that reuse is why tiles must be large."),
    "06.1-b": Question(
        "Why does the int8 kernel store B in shared memory with K contiguous (column-major), unlike fp16?",
        {"a": "int8 values are too small to be stored row-major",
         "b": "integer tensor-core instructions take both operands K-major; fp16 ones can transpose while loading",
         "c": "to halve the shared memory"},
        "b",
        "The int8 MMA (and ldmatrix's transposing load only exists for 16-bit types) reads 4 consecutive K values "
        "of a row of A and of a column of B as one 32-bit register: B must be K-major."),
    "06.1-c": Question(
        "The same compiled block-GEMM kernel runs every M, N, K. What makes that possible?",
        {"a": "Numba recompiles for each shape in the background",
         "b": "sizes are kernel arguments, the grid is rounded up, and the loaders zero-fill past the edges",
         "c": "cuBLASDx pads the matrices"},
        "b",
        "cuBLASDx only sees full tiles in shared memory; our loaders write zeros outside the matrix (zeros add "
        "nothing to a dot product) and the epilogue skips rows and columns past M and N."),
    # 06.2 epilogues
    "06.2-a": Question(
        "A GEMM writes C (M x N float32) and a second kernel applies bias + GELU. How many bytes does fusing "
        "the epilogue save for M = N = 4096?",
        {"a": "64 MiB: C is written once and read once less", "b": "128 MiB: C is written, read and written again, "
         "and fusion removes a read and a write", "c": "nothing: the L2 cache holds C"},
        "b",
        "Unfused: the GEMM writes C (64 MiB), the epilogue kernel reads it (64 MiB) and writes the result "
        "(64 MiB). Fused: one write. The saved 128 MiB take ~40 us at 3.3 TB/s, comparable to the GEMM itself "
        "for small K."),
    "06.2-b": Question(
        "Why can the row softmax not be an element-wise epilogue when N is larger than tile_n?",
        {"a": "exp is too slow on tensor cores", "b": "each output needs the maximum and the sum over its whole "
         "row, which spans several blocks", "c": "softmax needs float64"},
        "b",
        "A block sees tile_n columns of a row. It can reduce its own columns (max m_b, sum s_b) and write "
        "exp(x - m_b); a light second pass rescales by exp(m_b - M) / S once all blocks are done."),
    "06.2-c": Question(
        "The quantizing epilogue computes floor(acc * scale + 0.5) + zero_point in float64. Why not float32?",
        {"a": "float32 cannot hold int32 accumulators above 2^24 exactly, so rounding could differ by one",
         "b": "float64 is faster", "c": "int8 needs 64 bits"},
        "a",
        "An int32 accumulator of K = 4096 int8 products reaches 6.6e7 > 2^24: as float32 it is rounded before "
        "scaling. float64 holds it exactly, so kernel and reference agree bit for bit."),
    # 06.3 beyond one GEMM
    "06.3-a": Question(
        "Convolution of an N x C x H x W image with K filters of C x R x S, stride 1, 'same' padding, as a GEMM: "
        "what are M, N and K of the GEMM?",
        {"a": "M = N*H*W, N = K, K = C*R*S", "b": "M = K, N = C, K = H*W", "c": "M = N*C, N = H*W, K = R*S"},
        "a",
        "Each output pixel is a row (N*H*W of them), each filter a column (K), and each dot product runs over "
        "the filter taps of all channels (C*R*S)."),
    "06.3-b": Question(
        "What does implicit GEMM save compared with explicit im2col followed by a GEMM?",
        {"a": "FLOPs", "b": "the im2col buffer: R*S times the image's size written once and read once",
         "c": "nothing on a GPU"},
        "b",
        "Same FLOPs. Explicit im2col writes an (N*OH*OW) x (C*R*S) matrix, R*S times larger than the image, "
        "and the GEMM reads it back; implicit GEMM gathers the same values straight into shared memory."),
    "06.3-c": Question(
        "int4 weights are unpacked to int8 in shared memory before the tensor cores see them. What is gained?",
        {"a": "faster tensor-core math", "b": "half the global-memory traffic (and storage) for B",
         "c": "more accuracy"},
        "b",
        "The math runs on int8 tensor cores either way; B is read from global memory at 4 bits per value, "
        "which matters when the GEMM is memory-bound (small M, as in LLM decoding)."),
    # 06.4 tuning
    "06.4-a": Question(
        "Why is the tuner's cache keyed by the GPU's UUID and the kernel version, not only by the shape?",
        {"a": "to make the file bigger", "b": "the best configuration depends on the GPU (SM count, shared memory) "
         "and on the kernel's code; a stale answer would be silently slow", "c": "JSON needs unique keys"},
        "b",
        "A 132-SM H100 and a 108-SM A100 fill different numbers of waves with the same tiles, and a changed "
        "kernel may prefer other tiles: any of them invalidates the measurement."),
    "06.4-b": Question(
        "A 4096 x 4096 output with 256 x 128 tiles gives 512 blocks. On 132 SMs at one block per SM, how full "
        "is the last wave?",
        {"a": "100%", "b": "about 88%: 512 = 3 x 132 + 116", "c": "about 12%"},
        "b",
        "512 / 132 = 3.88 waves: the fourth wave has 116 blocks for 132 SMs. With 128 x 128 tiles there are "
        "1024 blocks, 7.76 waves: the tail costs less in relative terms."),
    # 06.5 debugging and profiling
    "06.5-a": Question(
        "compute-sanitizer's racecheck reports a hazard between the shared-memory stores of the next K slice "
        "and the tensor-core reads of the current one. What is missing?",
        {"a": "a cuda.syncthreads() between execute and the stores", "b": "a bigger tile", "c": "lineinfo=True"},
        "a",
        "Warps run at different speeds: a fast warp would overwrite the tile a slow warp is still reading. "
        "The barrier after execute makes every warp finish reading first."),
    "06.5-b": Question(
        "Why compile with lineinfo=True before profiling with Nsight Compute?",
        {"a": "it makes the kernel faster", "b": "the profiler can attribute stalls and instructions to Python "
         "source lines", "c": "it is required to launch"},
        "b",
        "lineinfo adds a line table (not debug code), so the Source page shows which line of the kernel "
        "the hot instructions come from; performance is unchanged."),
}


def ask(qid: str) -> None:
    q = _get(qid)
    print(f"{qid}: {q.text}")
    for label, text in q.choices.items():
        print(f"  ({label}) {text}")


def _get(qid):
    if qid not in QUESTIONS:
        raise KernelLabArgumentError(f"unknown question {qid!r}; known: {', '.join(QUESTIONS)}")
    return QUESTIONS[qid]


def check(qid: str, answer) -> None:
    """Print ``<qid>: correct. <why>`` or raise :class:`QuizWrong` saying why not."""
    q = _get(qid)
    if answer is ... or answer is None:
        raise QuizWrong(f"{qid}: no answer yet: set answer = 'a', 'b' or 'c'")
    a = str(answer).strip().lower().strip("()")
    if a not in q.choices:
        raise KernelLabArgumentError(f"{qid}: answer with one of {', '.join(q.choices)}, got {answer!r}")
    if a != q.answer:
        raise QuizWrong(f"{qid}: ({a}) is not it. Think again about: {q.text}")
    print(f"{qid}: correct. {q.why}")
    progress.passed(qid)
