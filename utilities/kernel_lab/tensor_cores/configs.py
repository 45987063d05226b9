"""Which tensor-core GEMM configurations are valid on a GPU, and how much shared memory they need.

Pure Python (no GPU, no nvmath): the autotuner enumerates candidates here before compiling any.

A *block GEMM* configuration (``GemmConfig``) is the work of one thread block: a ``tile_m x tile_n``
tile of the output, computed ``tile_k`` columns of A (rows of B) at a time, by ``threads``
threads. Its operand tiles are staged in shared memory in cuBLASDx's plain layouts (row-major A;
row-major B, or K-major B for integer inputs; no padding: nvmath-python 1.0's tensor API does not
take leading dimensions). ``prefetch`` loads the next ``tile_k`` slice into registers while the
tensor cores work on the current one.

A *pipeline* configuration (``PipelineConfig``) uses cuBLASDx's pipeline API instead: cuBLASDx
copies the operand tiles itself (TMA on Hopper) through ``depth`` shared-memory stages.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

from ..validate import KernelLabArgumentError


@dataclass(frozen=True)
class Precision:
    """A tensor-core input format and its accumulator."""

    name: str  # "float16", "bfloat16", "tf32", "int8", "int4"
    in_bytes: float  # bytes per input element in global memory (int4: 0.5)
    smem_bytes: int  # bytes per element in shared memory (int4 is unpacked to int8 there)
    acc: str  # "float32" or "int32"
    mma_k: int  # the K of one tensor-core instruction (m16n8kK)
    check_format: str  # the format name kernel_lab.check uses for tolerances


PRECISIONS = {
    "float16": Precision("float16", 2, 2, "float32", 16, "float16"),
    "bfloat16": Precision("bfloat16", 2, 2, "float32", 16, "bfloat16"),
    "tf32": Precision("tf32", 4, 4, "float32", 8, "tf32"),
    "int8": Precision("int8", 1, 1, "int32", 32, "int32"),
    "int4": Precision("int4", 0.5, 1, "int32", 32, "int32"),
}

# Shared memory a block may use without opting in (static arrays, or dynamic below this), and
# the most it may opt into, per compute capability (CUDA C Programming Guide, table of technical
# specifications per compute capability).
STATIC_SMEM_LIMIT = 48 * 1024
OPTIN_SMEM_LIMIT = {(8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 7): 163 * 1024, (8, 9): 99 * 1024,
                    (9, 0): 227 * 1024, (10, 0): 227 * 1024, (12, 0): 99 * 1024}
MAX_ACC_PER_THREAD = 128  # accumulator registers per thread beyond which the kernel spills
PIPELINE_STAGE_SCRATCH = 16  # bytes of bookkeeping per pipeline stage


def precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise KernelLabArgumentError(f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


@dataclass(frozen=True)
class GemmConfig:
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 32
    threads: int = 256
    precision: str = "float16"
    prefetch: bool = True

    @property
    def b_k_major(self) -> bool:
        """Integer tensor-core instructions need B stored with K contiguous (column-major)."""
        return self.precision in ("int8", "int4")

    @property
    def lda(self) -> int:  # A tile: row-major, tile_m rows of tile_k
        return self.tile_k

    @property
    def ldb(self) -> int:  # B tile: row-major tile_k x tile_n, or K-major tile_n x tile_k
        return self.tile_k if self.b_k_major else self.tile_n

    @property
    def a_elems(self) -> int:
        return self.tile_m * self.lda

    @property
    def b_elems(self) -> int:
        return (self.tile_n if self.b_k_major else self.tile_k) * self.ldb

    def smem_bytes(self) -> int:
        """Shared memory of one block: the A and B tiles, and 2 x tile_m floats for row statistics."""
        return (self.a_elems + self.b_elems) * precision(self.precision).smem_bytes + 8 * self.tile_m

    def acc_per_thread(self) -> int:
        return math.ceil(self.tile_m * self.tile_n / self.threads)

    def label(self) -> str:
        extra = "" if self.prefetch else ", no prefetch"
        return f"{self.precision} {self.tile_m}x{self.tile_n}x{self.tile_k}, {self.threads} thr{extra}"

    def as_dict(self) -> dict:
        return asdict(self)

    def problems(self, cc=(9, 0)) -> list[str]:
        """Why this configuration is invalid (empty list: valid). Each reason is one sentence."""
        p = precision(self.precision)
        out = []
        for name in ("tile_m", "tile_n", "tile_k", "threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                out.append(f"{name} must be a positive whole number, got {v!r}")
        if out:
            return out
        if self.tile_m % 16 or self.tile_n % 16:
            out.append(f"tile_m and tile_n must be multiples of 16 (a tensor-core instruction covers 16 rows), "
                       f"got {self.tile_m}x{self.tile_n}")
        if self.tile_k % p.mma_k:
            out.append(f"tile_k must be a multiple of {p.mma_k} for {p.name} (the K of one tensor-core "
                       f"instruction), got {self.tile_k}")
        if self.threads % 32 or not 32 <= self.threads <= 1024:
            out.append(f"threads must be a multiple of 32 between 32 and 1024, got {self.threads}")
        if self.threads > self.tile_m * self.tile_n // 32:
            out.append(f"{self.threads} threads is too many for a {self.tile_m}x{self.tile_n} tile "
                       "(every thread must own at least 32 outputs)")
        if self.acc_per_thread() > MAX_ACC_PER_THREAD:
            out.append(f"{self.acc_per_thread()} accumulators per thread exceed {MAX_ACC_PER_THREAD}: the "
                       "registers would spill to local memory; use more threads or a smaller tile")
        if (self.lda * p.smem_bytes) % 16 or (self.ldb * p.smem_bytes) % 16:
            out.append("rows of the shared-memory tiles must be multiples of 16 bytes")
        if self.smem_bytes() > STATIC_SMEM_LIMIT:
            out.append(f"needs {self.smem_bytes()} bytes of shared memory, more than the "
                       f"{STATIC_SMEM_LIMIT} a block gets without opting in")
        if p.name in ("bfloat16", "tf32") and tuple(cc) < (8, 0):
            out.append(f"{p.name} tensor cores need compute capability 8.0 or newer")
        if p.name in ("int8", "int4") and tuple(cc) < (7, 5):
            out.append("int8 tensor cores need compute capability 7.5 or newer")
        return out


@dataclass(frozen=True)
class PipelineConfig:
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    threads: int = 128
    precision: str = "int8"
    depth: int = 3
    # The schedule. 0: one block per output tile, blocks in grid order. G > 0: persistent blocks,
    # one per SM, each walking the tiles in bands of G tile rows (neighbours in time share A and B
    # panels through L2) and loading its next tile's first stages while it stores the current one.
    persistent_group_m: int = 0

    def stage_bytes(self) -> int:
        p = precision(self.precision)
        return (self.tile_m + self.tile_n) * self.tile_k * p.smem_bytes + PIPELINE_STAGE_SCRATCH

    def smem_bytes(self) -> int:
        return self.depth * self.stage_bytes()

    def label(self) -> str:
        schedule = f", persistent (bands of {self.persistent_group_m})" if self.persistent_group_m else ""
        return (f"{self.precision} pipeline {self.tile_m}x{self.tile_n}x{self.tile_k}, {self.threads} thr, "
                f"depth {self.depth}{schedule}")

    def as_dict(self) -> dict:
        d = asdict(self)
        if not self.persistent_group_m:  # the default schedule: keys (and cache labels) as before it existed
            del d["persistent_group_m"]
        return d

    def problems(self, cc=(9, 0)) -> list[str]:
        p = precision(self.precision)
        out = []
        if p.name == "int4":
            out.append("the pipeline API reads operands as they are in memory: int4 must be unpacked first")
        if self.tile_m % 64 or self.tile_n % 16:
            out.append(f"pipeline tiles need tile_m a multiple of 64 and tile_n of 16, got {self.tile_m}x{self.tile_n}")
        if (self.tile_k * p.smem_bytes) % 64:
            out.append(f"a pipeline stage row (tile_k x {p.smem_bytes} bytes) must be a multiple of 64 bytes, "
                       f"got {self.tile_k * p.smem_bytes}")
        if self.threads % 128 or not 128 <= self.threads <= 512:
            out.append(f"pipeline kernels use whole warpgroups: threads must be 128, 256, 384 or 512, got {self.threads}")
        if not 1 <= self.depth <= 16:
            out.append(f"depth must be between 1 and 16, got {self.depth}")
        if not 0 <= self.persistent_group_m <= 64:
            out.append(f"persistent_group_m must be between 0 (not persistent) and 64, got {self.persistent_group_m}")
        limit = OPTIN_SMEM_LIMIT.get(tuple(cc)[:2], 99 * 1024)
        if self.smem_bytes() > limit:
            out.append(f"needs {self.smem_bytes()} bytes of shared memory, more than the {limit} this GPU allows")
        if math.ceil(self.tile_m * self.tile_n / self.threads) > MAX_ACC_PER_THREAD:
            out.append("too many accumulators per thread: use more threads or a smaller tile")
        if tuple(cc) < (8, 0):
            out.append("the pipeline API needs compute capability 8.0 or newer")
        return out

    def min_k(self) -> int:
        """The pipeline fills all its stages before the first multiply: K must cover depth slices."""
        return self.depth * self.tile_k


@dataclass
class Space:
    """The knobs the autotuner may turn, each with its candidate values."""

    tile_m: tuple = (64, 128, 256)
    tile_n: tuple = (64, 128, 256)
    tile_k: tuple | None = None  # None: 2 and 4 tensor-core instruction K's (tf32: 16 and 32)
    threads: tuple = (128, 256)
    prefetch: tuple = (True, False)
    depth: tuple = (2, 3, 4)
    persistent_group_m: tuple = (0,)  # pipeline GEMMs: 0 one block per tile; G persistent blocks, bands of G
    extra: dict = field(default_factory=dict)


def _default_tile_k(prec: str) -> tuple:
    p = precision(prec)
    return (p.mma_k * 2, p.mma_k * 4) if p.name != "tf32" else (16, 32)


def enumerate_configs(prec: str, cc=(9, 0), space: Space | None = None) -> list[GemmConfig]:
    """Every valid block-GEMM configuration in ``space`` for ``prec`` on a GPU of compute capability
    ``cc``, in a deterministic order (largest tiles first)."""
    space = space or Space()
    precision(prec)
    tks = space.tile_k or _default_tile_k(prec)
    out = []
    for tm, tn, tk, th, pf in itertools.product(space.tile_m, space.tile_n, tks, space.threads, space.prefetch):
        cfg = GemmConfig(tm, tn, tk, th, prec, pf)
        if not cfg.problems(cc):
            out.append(cfg)
    out.sort(key=lambda c: (-c.tile_m * c.tile_n, -c.tile_k, c.threads, not c.prefetch))
    return out


def enumerate_pipeline_configs(prec: str, cc=(9, 0), space: Space | None = None,
                               tile_k: tuple | None = None) -> list[PipelineConfig]:
    """Every valid pipeline configuration in ``space`` for ``prec`` on compute capability ``cc``."""
    space = space or Space(threads=(128, 256))
    p = precision(prec)
    tks = tile_k or (64 // p.smem_bytes * 1, 128 // p.smem_bytes)
    out = []
    for tm, tn, tk, th, d, g in itertools.product(space.tile_m, space.tile_n, tks, space.threads, space.depth,
                                                  space.persistent_group_m):
        cfg = PipelineConfig(tm, tn, tk, th, prec, d, g)
        if not cfg.problems(cc):
            out.append(cfg)
    out.sort(key=lambda c: (-c.tile_m * c.tile_n, -c.tile_k, c.threads, c.depth, c.persistent_group_m))
    return out


def grid_for(m: int, n: int, tile_m: int, tile_n: int, batch: int = 1) -> tuple[int, int, int]:
    """Blocks that cover an m x n output (times batch) with tile_m x tile_n tiles: rounds up."""
    for name, v in (("m", m), ("n", n), ("batch", batch), ("tile_m", tile_m), ("tile_n", tile_n)):
        if not isinstance(v, int) or v < 1:
            raise KernelLabArgumentError(f"{name} must be a whole number >= 1, got {v!r}")
    return (-(-m // tile_m), -(-n // tile_n), batch)


def waves(m: int, n: int, cfg, sms: int, blocks_per_sm: int = 1) -> float:
    """How many 'waves' of blocks the grid needs on ``sms`` multiprocessors; a last partial wave
    leaves SMs idle (the 'tail effect' that makes some tile sizes slow on some shapes)."""
    gx, gy, gz = grid_for(m, n, cfg.tile_m, cfg.tile_n)
    return gx * gy * gz / (sms * blocks_per_sm)
