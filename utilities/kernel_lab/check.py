"""Is the kernel right? Compare its output with a float64 NumPy reference and explain what is wrong.

How a check works
-----------------
1. The output buffer is *poisoned* before the kernel runs: every element holds a special bit
   pattern (a signalling NaN for floats, 0x5A bytes for integers) that a kernel never computes.
   Elements still holding it afterwards were never written. The buffer also has a *guard* region
   just past its end, poisoned too: a kernel that writes there has threads that ran past the end of
   the array (a missing bounds check).
2. The kernel runs on fresh random inputs; the reference runs on the same inputs in float64.
3. Each element is compared with a tolerance chosen for the number format (see :func:`tolerance`).
4. On success one deterministic line is printed (notebook tests compare it). On failure
   :class:`CheckFailed` says how many elements are wrong, where the first ones are, expected vs got,
   how many were never written, and a hint when the pattern of errors is a classic mistake.
   Unwritten elements are read across all sizes of a :func:`check_kernel` run (:func:`coverage_hint`):
   a grid that is too small is only blamed when every size's unwritten tail is the one a rounded-down
   grid leaves; the same first W elements at every size, or only the last element, name the index
   or the bound instead.

Tolerances
----------
A float computation of ``k`` accumulated terms, each rounded with unit roundoff ``u``, has an
error that grows like ``sqrt(k) * u`` relative to the *size of the terms* when rounding errors are
independent (Higham and Mary, "A new approach to probabilistic rounding error analysis", SIAM J.
Sci. Comput. 41(5), 2019), and at worst like ``k * u``. The size of the terms is not the size of
the result: in SAXPY, ``a*x`` close to ``-y`` gives a tiny result whose rounding error is that of
``a*x`` and ``y`` (the standard bound of a sum or a dot product is ``u * sum |term|``). So each
element is judged against the magnitude of the terms that produced it::

    |got - ref| <= atol + rtol * magnitude,   rtol = u * (4 + 5 * sqrt(k))
    magnitude   =  max(|ref|, |reference(|inputs|)|)

``reference(|inputs|)`` is the reference evaluated once more on the absolute values of its float
inputs: for sums and products (SAXPY, a matrix product, a row sum, a scan) it is exactly the sum
of the terms' magnitudes, ``|a||x| + |y|`` or ``|A| @ |B|``. A reference that subtracts, divides or
applies a non-monotone function (a softmax, a LayerNorm) must say what its terms weigh instead:
pass ``magnitude=`` (a function of the same inputs) to :func:`check_kernel`, or a magnitude array to
:func:`check_array`. The constants of ``rtol`` leave room for the largest of millions of
independent errors. Integer formats are exact (``atol = rtol = 0``). Pass ``rtol``/``atol``
yourself when you know better (quantization that may round ties differently, for example, has
``atol = 1``).

:func:`check_array` without a ``magnitude`` only sees the result, not the terms; it judges each
element against ``|ref|`` plus the root-mean-square of the whole result, which is safe for large
outputs and too strict for a single element produced by cancellation: give it the magnitude.
"""

from __future__ import annotations

import contextlib
import math
import secrets

import numpy as np

from . import progress
from .validate import KernelLabArgumentError, require_callable

# Unit roundoff of each number format: half the distance from 1 to the next representable number.
UNIT_ROUNDOFF = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "tf32": 2.0**-11,  # tensor-core "float32" mode: 10 explicit mantissa bits
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "fp8_e4m3": 2.0**-4,
    "fp8_e5m2": 2.0**-3,
}
EXACT_FORMATS = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool"}


class CheckSettings:
    """Switches of the checks (one shared instance, ``kernel_lab.check.settings``).

    ``first_failure_only`` (default False): a check stops at the first size that fails and skips
    the extra runs that name the mistake. It fails exactly when it would have failed anyway, with a
    shorter report. The mutation test (tests/test_mutation_checks.py) uses it to run a hundred
    wrong kernels through the simulator in minutes; a learner wants the full report.
    """

    def __init__(self):
        self.first_failure_only = False


settings = CheckSettings()


@contextlib.contextmanager
def first_failure_only():
    """``with first_failure_only():`` checks stop at their first failure (see :class:`CheckSettings`)."""
    previous = settings.first_failure_only
    settings.first_failure_only = True
    try:
        yield
    finally:
        settings.first_failure_only = previous


RACE_HINT = ("the kernel has a race: threads read shared memory before the threads that write it are done "
             "(a missing `cuda.syncthreads()`), or several threads write the same element; or it reads memory "
             "that nothing wrote (shared-memory elements outside the part of a tile that was loaded).")


class CheckFailed(AssertionError):
    """A kernel's output does not match the reference. The message explains how, for a learner."""

    def _render_traceback_(self):  # IPython shows the explanation, not a stack trace into kernel_lab
        return ["CheckFailed: " + str(self)]


NEVER_ENDS = ("a loop that does not end, or a wait whose condition never comes true? Look at the lines above: "
              "a `while` whose condition stays true (a flag polled for a value nobody writes, a wait on the "
              "opposite of the condition meant), or a loop variable that never moves.")


@contextlib.contextmanager
def finishes_within(name: str, seconds: float, hint: str = NEVER_ENDS):
    """In the simulator, the launches inside must finish within ``seconds`` together; a kernel still
    running then stops, and the check fails saying so, with the lines its threads were at, instead of
    hanging the notebook (or waiting for the simulator's deadlock report, which blames barriers). The
    limit is wall-clock time: give many times what the right kernel takes. ``hint`` names the likely
    mistake (a check that knows its exercise's classic endless loop says it). On a GPU it does nothing."""
    from .environment import on_simulator

    if not on_simulator():
        yield
        return
    from .simulator import time_limit
    from .simulator.errors import KernelDidNotFinish, PollStall

    try:
        with time_limit(seconds):
            yield
    except KernelDidNotFinish as exc:
        lines = str(exc).splitlines()
        where = [ln for ln in lines[1:] if ln.startswith("  - ")]
        if isinstance(exc, PollStall):  # seen at once: the first line says what is read and why it stays
            from .simulator.scheduler import NEVER_FINISHES

            head = f"{name}: your kernel did not finish, and never can: {lines[0].removeprefix(NEVER_FINISHES)}"
        else:
            head = (f"{name}: your kernel did not finish: it was still running after {seconds:g} s in the "
                    "simulator, where the right kernel takes a few seconds")
        raise CheckFailed("\n".join([head, *where, "Hint: " + hint])) from None


def tolerance(fmt: str, k: int = 1) -> float:
    """Relative tolerance for a result computed in ``fmt`` from ``k`` accumulated terms.

    >>> tolerance("float32", k=1)   # 9 units of roundoff
    5.364418029785156e-07
    """
    fmt = _format_name(fmt)
    if fmt in EXACT_FORMATS:
        return 0.0
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise KernelLabArgumentError(f"the reduction length k must be a whole number >= 1, got {k!r}")
    return UNIT_ROUNDOFF[fmt] * (4 + 5 * math.sqrt(k))


def _format_name(fmt) -> str:
    if not isinstance(fmt, str):
        try:
            fmt = np.dtype(fmt).name
        except TypeError:
            raise KernelLabArgumentError(f"unknown number format {fmt!r}") from None
    fmt = fmt.lower()
    if fmt not in UNIT_ROUNDOFF and fmt not in EXACT_FORMATS:
        known = ", ".join(sorted(UNIT_ROUNDOFF) + sorted(EXACT_FORMATS))
        raise KernelLabArgumentError(f"unknown number format {fmt!r}; known: {known}")
    return fmt


# ---------------------------------------------------------------------------------------------
# Poison: a bit pattern no kernel computes, so that "never written" can be told from "wrong".

_POISON_BITS = {2: 0x7D5A, 4: 0x7FA5A5A5, 8: 0x7FF5A5A5A5A5A5A5}  # signalling NaNs (fp16/fp32/fp64)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def poison_value_bits(dtype) -> int:
    """The raw bits the poison fills an element of ``dtype`` with."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        if dtype.name == "bfloat16":
            return 0x7FA5
        return _POISON_BITS[dtype.itemsize]
    return int.from_bytes(b"\x5a" * dtype.itemsize, "little")


def poisoned_host(n: int, dtype) -> np.ndarray:
    """A host array of ``n`` elements of ``dtype``, all holding the poison pattern."""
    dtype = np.dtype(dtype)
    raw = np.full(n, poison_value_bits(dtype), dtype=_UINT[dtype.itemsize])
    return raw.view(dtype)


def is_poison(arr: np.ndarray) -> np.ndarray:
    """Boolean mask: which elements still hold the poison pattern (were never written)."""
    arr = np.ascontiguousarray(arr)
    return arr.view(_UINT[arr.dtype.itemsize]) == poison_value_bits(arr.dtype)


def poisoned(shape, dtype=np.float32):
    """A device array filled with poison, for launchers that allocate their own output.

    :func:`check_array` then reports its unwritten elements as such.
    """
    from numba import cuda

    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = int(np.prod(shape))
    return cuda.to_device(poisoned_host(n, dtype).reshape(shape))


GUARD_MAX = 1 << 20  # elements: 4 MiB of float32


def _guard_size(shape) -> int:
    # Threads of a too-large grid land within one block (<=1024 threads) past the end, or, in 2D,
    # within a block's rows past the last row: guard a few rows' worth. Capped: for a 1D output the
    # "row" is the whole array, and a 2^24-element check took a 4 GiB guard (8.4 GiB at its peak on
    # an H100, with check_kernel's second run), more than a 10 GB GPU slice a learner may have.
    return max(4096, min(64 * (shape[-1] if shape else 1), GUARD_MAX))


class _GuardedOutput:
    """A poisoned device buffer with a poisoned guard after the end; ``.array`` is what kernels see."""

    def __init__(self, shape, dtype):
        from numba import cuda

        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.n = int(np.prod(self.shape)) if self.shape else 1
        self.buffer = cuda.to_device(poisoned_host(self.n + _guard_size(self.shape), self.dtype))
        self.array = self.buffer[: self.n].reshape(self.shape) if self.shape else self.buffer[:1]

    def fetch(self):
        """(output, number of guard elements written) after the kernel ran."""
        from numba import cuda

        cuda.synchronize()
        host = self.buffer.copy_to_host()
        out = host[: self.n].reshape(self.shape)
        guard_written = int(np.count_nonzero(~is_poison(host[self.n:])))
        return out, guard_written


# ---------------------------------------------------------------------------------------------
# Comparing, and explaining failures.

def _to_host(arr, name: str) -> np.ndarray:
    if arr is None:
        raise CheckFailed(f"{name} is None: the exercise is not done yet (the function returned nothing)")
    if hasattr(arr, "copy_to_host"):  # Numba device array
        from numba import cuda

        cuda.synchronize()
        return arr.copy_to_host()
    if hasattr(arr, "get") and hasattr(arr, "__cuda_array_interface__"):  # CuPy
        return arr.get()
    if isinstance(arr, (np.ndarray, np.generic, int, float, list, tuple)):
        return np.asarray(arr)
    raise KernelLabArgumentError(f"{name} must be a NumPy, Numba device or CuPy array, got {type(arr).__name__}")


def _fmt_value(x) -> str:
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.7g}"
    return str(x)


def _index(flat: int, shape) -> str:
    idx = np.unravel_index(flat, shape) if len(shape) > 1 else (flat,)
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


# What the unwritten elements say. A grid that is too small (blocks rounded down) leaves a tail:
# the written part is a leading box of the output (1D: a prefix) that ends at a multiple of the
# block size, and everything in it is right. Other mistakes leave tails too (an index without the
# block offset, a bound one short, a tile written to the wrong place), so the grid is only blamed
# when the tails fit a rounded-down grid; check_kernel looks at every size at once, which tells
# them apart far better than one size can.

class _Coverage:
    """Which part of one result was written: enough to compare sizes (no arrays kept)."""

    def __init__(self, unwritten: np.ndarray, wrong: np.ndarray):
        self.shape = unwritten.shape
        self.n_unwritten = int(unwritten.sum())
        self.clean = not (wrong & ~unwritten).any()  # every written element is right
        self.box = _written_box(unwritten)

    @property
    def tails(self):
        return None if self.box is None else tuple(n - w for n, w in zip(self.shape, self.box))


def _written_box(unwritten: np.ndarray):
    """The extents (w0, w1, ...) if exactly the elements [0:w0, 0:w1, ...] were written, else None."""
    written = ~unwritten
    if written.ndim == 0:
        return None
    if not written.any():
        return (0,) * written.ndim
    extents = []
    for axis in range(written.ndim):
        others = tuple(a for a in range(written.ndim) if a != axis)
        extents.append(int(np.flatnonzero(written.any(axis=others) if others else written)[-1]) + 1)
    box = np.zeros_like(written)
    box[tuple(slice(0, w) for w in extents)] = True
    return tuple(extents) if np.array_equal(box, written) else None


def _block_candidate(extents: list[int]) -> int:
    """The largest block size a rounded-down grid with these written extents could have had (0:
    none): their greatest common divisor (one size alone allows a block as large as what it wrote)."""
    positive = [w for w in extents if w > 0]
    return math.gcd(*positive) if positive else 0


_AXIS_NAMES = {0: ("row", "y"), 1: ("column", "x")}


def _grid_text(cov: _Coverage) -> str:
    tails = cov.tails
    if len(tails) == 1:
        return (f"The last {tails[0]} element(s) were never written, and the written part ends at a multiple "
                "of the block size: the grid is too small (its number of blocks was rounded down). Launch "
                "enough blocks to cover every element, rounding up: `blocks = (n + threads - 1) // threads` "
                "(`kl.blocks_for(n, threads)`).")
    parts = [f"the last {t} {_AXIS_NAMES[a][0]}(s)" for a, t in enumerate(tails[:2]) if t]
    directions = " and ".join(f"the {_AXIS_NAMES[a][0]} direction ({_AXIS_NAMES[a][1]})"
                              for a, t in enumerate(tails[:2]) if t)
    return (f"{' and '.join(parts).capitalize()} were never written, ending at a multiple of the block size: "
            f"the grid is too small in {directions}. Round the number of blocks up. Or x and y are swapped: "
            "with `col, row = cuda.grid(2)` the launch grid lists the columns first, "
            "`(blocks_x for columns, blocks_y for rows)`. Or, where one block's tile covers the whole output, "
            "the block's threads reach only part of its tile: a step between their parts (a warp's or a "
            "thread's) taken from the wrong size.")


def coverage_hint(coverages: list[_Coverage], primary: _Coverage | None = None, *,
                  changed_between_runs: bool = False) -> str | None:
    """A sentence on the unwritten elements of the failing sizes taken together, or None.

    Names a grid that is too small only when every size fits one (a written leading box, all of it
    right, ending at a multiple of one block size); otherwise names the pattern: the last element
    only (a bound one short), the same first W elements at every size (an index without the block
    offset), or a tail that no grid explains. ``primary`` is the size the message shows (default:
    the first); ``changed_between_runs``: some size gave different results in two runs, which no
    grid explains either.
    """
    with_tail = [c for c in coverages if c.n_unwritten and c.box is not None]
    if not with_tail or len(with_tail) != len([c for c in coverages if c.n_unwritten]):
        return None  # some size has unwritten elements scattered through it: the per-size hint says so
    if primary is None or primary.box is None or not primary.n_unwritten:
        primary = with_tail[0]
    ndim = len(primary.shape)
    boxes_clean = all(c.clean for c in coverages) and not changed_between_runs
    grid_fits = boxes_clean and len({len(c.shape) for c in with_tail}) == 1
    if grid_fits:
        # A rounded-down grid writes floor(n / b) * b along each axis: every tail is shorter than the
        # block, and a size that got nothing had fewer elements than a block along some axis.
        # (An axis written to its end says nothing about the block along it: it is left out.)
        some = [c for c in with_tail if c.n_unwritten < int(np.prod(c.shape))]
        blocks = [_block_candidate([c.box[axis] for c in some if c.tails[axis]]) for axis in range(ndim)]
        if not some or not any(blocks):
            grid_fits = False
        elif any(c.tails[axis] >= blocks[axis] for c in some for axis in range(ndim) if c.tails[axis]):
            grid_fits = False
        elif any(all(n >= b for n, b in zip(c.shape, blocks) if b) for c in with_tail if c not in some):
            grid_fits = False
    one_short = ndim == 1 and all(c.tails == (1,) for c in with_tail)
    if one_short and boxes_clean and (len(with_tail) > 1 or not grid_fits):
        return ("Only the last element was never written" + (" at every failing size" if len(with_tail) > 1 else "")
                + ": a bounds check that stops one short, such as `if i < n - 1:` or a `range` that ends at "
                "n - 1. The last element has index n - 1, so the test is `if i < n:` (`i < out.size`).")
    if one_short and boxes_clean:  # one size, one element: either mistake fits
        return ("Only the last element was never written: a bounds check that stops one short (`if i < n - 1:`; "
                "the test is `if i < n:`), or, if n - 1 is a multiple of the block size, a grid rounded down "
                "(launch `(n + threads - 1) // threads` blocks).")
    if grid_fits:
        return _grid_text(primary)
    if ndim == 1 and boxes_clean:
        some = [c for c in with_tail if c.box[0] > 0]
        written = sorted({c.box[0] for c in some})
        sizes = [c.shape[0] for c in some]
        if len(written) == 1 and (len(some) > 1 or sizes[0] >= 2 * written[0]):
            w = written[0]
            where = f"at every failing size ({', '.join(str(n) for n in sizes)} elements)" if len(sizes) > 1 \
                else f"of {sizes[0]}"
            return (f"Only the first {w} elements were written {where}: what the threads cover does not grow "
                    "with n, as it would with a grid that is merely too small. When the launch covers n, every "
                    f"block writes the same {w} elements: the index is `cuda.threadIdx.x` (the thread's place in "
                    "its block) where `cuda.grid(1)` (its place in the whole grid, blockIdx.x * blockDim.x + "
                    "threadIdx.x) is needed.")
    tails = primary.tails
    what = (f"the last {tails[0]} element(s)" if ndim == 1 else
            " and ".join(f"the last {t} {_AXIS_NAMES[a][0]}(s)" for a, t in enumerate(tails[:2]) if t))
    if changed_between_runs:
        why = "and at another size two runs gave different results"
    elif not boxes_clean:
        why = "and some of the elements that were written are wrong"
    else:
        why = "but the written part does not end at a multiple of one block size at every size"
    where = "its index (in 2D: are rows and columns, y and x, the right way round?)" if ndim > 1 else "its index"
    return (f"{what[0].upper() + what[1:]} were never written, {why}: not what a grid that is too small "
            f"does (it stops at a multiple of the block, and what it writes is right). Look at where each thread "
            f"writes: {where}, and the bounds check.")


def _hints(got, ref, wrong, unwritten, guard_written, shape, coverage=None) -> list[str]:
    """Recognise classic mistakes from the pattern of errors.

    ``coverage`` is check_kernel's sentence on the unwritten elements of all its sizes taken
    together (:func:`coverage_hint`); without it, this size alone is judged.
    """
    hints = []
    n = wrong.size
    n_unwritten = int(unwritten.sum())
    if n_unwritten == n:
        return ["Your kernel wrote none of the output. If this is an exercise, it is not done yet "
                "(the stub does nothing). Otherwise: was the kernel launched with at least one block "
                "(`n // threads` is 0 for small n: round up), and does it write to the output argument?"]
    if guard_written:
        hints.append(f"{guard_written} element(s) past the end of the output were written: threads whose "
                     "index lies beyond the array did not skip their work. Add a bounds check such as "
                     "`if i < out.size:` (2D: `if row < out.shape[0] and col < out.shape[1]:`).")
    if n_unwritten:
        if coverage is None:
            coverage = coverage_hint([_Coverage(unwritten, wrong)])
        if coverage is not None:
            hints.append(coverage)
        else:
            hints.append(f"{n_unwritten} element(s) scattered through the output were never written: check "
                         "which thread is responsible for each element (index arithmetic, grid-stride loop "
                         "step, or a condition that skips too much).")
    written = ~unwritten
    if got.dtype.kind in "fc":
        produced_nan = written & ~np.isfinite(got) & np.isfinite(ref)
        if produced_nan.any():
            first = _index(int(np.flatnonzero(produced_nan)[0]), shape)
            hints.append(f"The kernel computed {int(produced_nan.sum())} NaN or infinite value(s) (first at "
                         f"{first}): a division by zero, an overflow, or a read of memory nothing wrote "
                         "(uninitialised shared memory, a missing barrier).")
    wrote_zeros = False
    if written.any() and got.dtype.kind in "fciub":
        with np.errstate(invalid="ignore"):
            zeros = got[written] == 0
        wrong_zeros = int((zeros & wrong[written]).sum())
        if zeros.all() and wrong_zeros:
            wrote_zeros = True
            hints.append(f"Every element the kernel wrote is 0 ({wrong_zeros} of them should not be): it stored "
                         "zeros, not the result. Is the result computed into a variable that is never stored, "
                         "stored from the wrong variable, or does an integer division or a cast round it to 0?")
    if len(shape) == 2 and not n_unwritten:
        with np.errstate(invalid="ignore"):
            g = got.astype(np.float64)
        if shape[0] == shape[1] and np.allclose(g, ref.T, rtol=1e-3, atol=1e-6 * (np.abs(ref).max() + 1)):
            hints.append("The output is the transpose of the reference: row and column indices are swapped.")
        elif np.allclose(g.reshape(shape[::-1]).T, ref, rtol=1e-3, atol=1e-6 * (np.abs(ref).max() + 1)):
            hints.append("The output holds the right values in column-major order: the flat index was "
                         "computed as `col * n_rows + row` instead of `row * n_cols + col`.")
    if not wrote_zeros and not n_unwritten and wrong.all() and got.size > 1 and got.dtype.kind in "fc":
        g, r = got.astype(np.float64).ravel(), ref.ravel()
        denom = float(r @ r)
        if denom > 0:
            c = float(g @ r) / denom
            if abs(c - 1) > 1e-3 and c != 0 and np.allclose(g, c * r, rtol=1e-3, atol=1e-6 * np.abs(r).max()):
                hints.append(f"Every element is off by the same factor ({c:.4g}): a missing or extra scale "
                             "(alpha, 1/n, a square root ...).")
    return hints


class _Mismatch:
    """A result that does not match its reference, with what it takes to explain it."""

    def __init__(self, header, lines, hint_args, seed):
        self.header, self.lines, self.hint_args, self.seed = header, lines, hint_args, seed
        unwritten, wrong = hint_args[3], hint_args[2]
        self.coverage = _Coverage(unwritten, wrong)

    def message(self, coverage: str | None = None) -> str:
        """The explanation; ``coverage`` replaces this size's own reading of its unwritten elements."""
        lines = [self.header] + self.lines
        for hint in _hints(*self.hint_args, coverage=coverage):
            lines.append("Hint: " + hint)
        if self.seed is not None:
            lines.append(f"(inputs drawn with seed={self.seed}; pass seed={self.seed} to reproduce)")
        return "\n".join(lines)


def _mismatch(name: str, got: np.ndarray, ref: np.ndarray, *, fmt: str, k: int, rtol, atol,
              magnitude=None, guard_written: int = 0, context: str = "", seed=None) -> _Mismatch | None:
    """None if ``got`` matches ``ref``, else a :class:`_Mismatch` that explains how.

    ``magnitude`` (same shape as ``ref``, or None) is the size of the terms behind each element;
    without it an element is judged against ``|ref|`` plus the result's root-mean-square.
    """
    if got.shape != ref.shape:
        if got.size == ref.size:
            raise CheckFailed(f"{name}{context}: output has shape {got.shape} but the reference has "
                              f"{ref.shape} (same number of elements: a reshape or swapped dimensions?)")
        raise CheckFailed(f"{name}{context}: output has shape {got.shape} but the reference has {ref.shape}")
    fmt_name = _format_name(fmt)
    exact = fmt_name in EXACT_FORMATS
    if rtol is None:
        rtol = tolerance(fmt_name, k)
    if atol is None:
        atol = 0.0
    unwritten = is_poison(got)
    if got.dtype.kind in "iub":
        # An integer poison (0x5A bytes: 90 in int8) is a value a kernel may rightly compute: an
        # element holding it counts as never written only where the reference wants another value.
        unwritten &= got.astype(np.float64) != ref.astype(np.float64)
    if exact:
        g = got.astype(np.int64) if got.dtype.kind in "iub" else got.astype(np.float64)
        diff = np.abs(g - ref)
        wrong = (diff > atol + rtol * np.abs(ref)) | unwritten
        scale = 0.0
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            g = got.astype(np.float64)  # the poison is a signalling NaN: converting it warns
            if magnitude is None:
                scale = float(np.sqrt(np.mean(np.square(ref)))) if ref.size else 0.0
                weight = np.abs(ref) + scale
            else:
                scale = None
                weight = np.maximum(np.abs(ref), magnitude)
            diff = np.abs(g - ref)
            allowed = atol + rtol * weight
            wrong = ~(diff <= allowed) | unwritten  # NaN compares False, so NaN counts as wrong
    if not wrong.any() and not guard_written:
        return None
    n_wrong, n = int(wrong.sum()), wrong.size
    header = f"{name}{context}: {n_wrong} of {n} elements are wrong ({100 * n_wrong / max(n, 1):.3g}%)"
    n_unwritten = int(unwritten.sum())
    if n_unwritten:
        header += f", {n_unwritten} of them never written (still holding the poison value)"
    if not n_wrong:
        header = f"{name}{context}: every element is right, but the kernel wrote past the end of the output"
    lines = []
    flat = np.flatnonzero(wrong.ravel())[:5]
    if len(flat):
        if exact:
            lines.append("first wrong elements (index: expected, got):")
        else:
            lines.append("first wrong elements (index: expected, got, error allowed there):")
        for f in flat:
            got_s = "never written" if unwritten.ravel()[f] else _fmt_value(got.ravel()[f])
            extra = "" if exact else f", {float(allowed.ravel()[f]):.3g}"
            lines.append(f"  {_index(int(f), got.shape)}: {_fmt_value(ref.ravel()[f])}, {got_s}{extra}")
    if exact:
        lines.append(f"format {fmt_name}: results must match exactly" + (f" (within {atol})" if atol else ""))
    else:
        written = ~unwritten
        if written.any():
            with np.errstate(invalid="ignore", over="ignore"):
                num = float(np.linalg.norm((g - ref)[written]))
                den = float(np.linalg.norm(ref[written])) or 1.0
            weight_s = (f"(|expected| + {scale:.3g})" if scale is not None
                        else "(size of the terms behind the element)")
            lines.append(f"norm-wise relative error of the written elements: {num / den:.2e}; allowed per "
                         f"element: {rtol:.2e} x {weight_s}"
                         + (f" + {atol:g}" if atol else "") + f" [format {fmt_name}, reduction length {k}]")
    hint_args = (got, ref, wrong.reshape(got.shape), unwritten.reshape(got.shape), guard_written, got.shape)
    return _Mismatch(header, lines, hint_args, seed)


def _compare(name: str, got: np.ndarray, ref: np.ndarray, **kwargs) -> None:
    """Raise CheckFailed with a full explanation if ``got`` does not match ``ref`` (see _mismatch)."""
    mismatch = _mismatch(name, got, ref, **kwargs)
    if mismatch is not None:
        raise CheckFailed(mismatch.message())


def _reference_dtype(a: np.ndarray):
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return np.float64
    if a.dtype.kind == "c":
        return np.complex128
    if a.dtype.kind in "iu":
        return np.int64
    return a.dtype


def check_array(name: str, got, expected, *, fmt=None, k: int = 1, rtol=None, atol=None,
                magnitude=None) -> None:
    """Compare one result with its float64 reference; print one line or raise :class:`CheckFailed`.

    ``got`` may be a NumPy, Numba device or CuPy array; ``expected`` is computed in float64 (or exact
    integers). ``fmt`` is the format the kernel computes in (default: ``got``'s dtype) and ``k`` the
    length of the longest sum behind each element; together they set the tolerance. ``magnitude``
    (an array of ``expected``'s shape, or a scalar) is the size of the terms behind each element,
    e.g. ``abs(a) @ abs(b)`` for a matrix product: give it whenever you can (see the module's
    docstring); without it, elements are judged against the result's typical size.
    """
    if not isinstance(name, str):
        raise KernelLabArgumentError("check_array(name, got, expected): name must be a string")
    got = _to_host(got, "the result")
    ref = np.asarray(expected)
    if ref.dtype == object:
        raise KernelLabArgumentError("expected must be a numeric array")
    ref = ref.astype(_reference_dtype(ref))
    if ref.dtype.kind == "f" and not np.isfinite(ref).all():
        raise KernelLabArgumentError("the reference holds NaN or infinity; build it from finite inputs")
    if magnitude is not None:
        magnitude = _as_magnitude(magnitude, ref.shape, "magnitude")
    _compare(name, got, ref, fmt=fmt if fmt is not None else got.dtype, k=k, rtol=rtol, atol=atol,
             magnitude=magnitude)
    print(f"{name}: correct")
    progress.passed(name)


def _as_magnitude(value, shape, what: str) -> np.ndarray:
    """``value`` as a float64 array of ``shape`` (broadcast), checked finite and non-negative."""
    try:
        mag = np.broadcast_to(np.abs(np.asarray(value, dtype=np.float64)), shape)
    except (TypeError, ValueError):
        raise KernelLabArgumentError(f"{what} must be a number or an array broadcastable to the result's "
                                     f"shape {shape}, got {getattr(value, 'shape', type(value).__name__)}") from None
    if not np.isfinite(mag).all():
        raise KernelLabArgumentError(f"{what} holds NaN or infinity")
    return mag


def _abs_inputs(args):
    """The inputs with every float array and float scalar replaced by its absolute value (integers,
    such as sizes, strides and indices, are left alone)."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray) and a.dtype.kind in "fc":
            out.append(np.abs(a))
        elif isinstance(a, (float, np.floating)):
            out.append(abs(a))
        else:
            out.append(a)
    return tuple(out)


def term_magnitude(reference, ref_args, expected, magnitude=None):
    """The size of the terms behind each element of ``expected`` (see the module's docstring).

    ``magnitude(*ref_args)`` when given; otherwise ``|reference(|inputs|)|``, which is the sum of
    the terms' magnitudes for any reference built of sums and products. ``None`` for exact results.
    """
    if expected.dtype.kind not in "fc":
        return None
    if magnitude is not None:
        return _as_magnitude(magnitude(*ref_args), expected.shape, "magnitude(...)")
    with np.errstate(all="ignore"):
        try:
            mag = np.asarray(reference(*_abs_inputs(ref_args)), dtype=np.float64)
        except Exception:  # noqa: BLE001 - a reference that cannot take |inputs|: judge by |ref|
            return np.abs(expected)
    if mag.shape != expected.shape or not np.isfinite(mag).all():
        return np.abs(expected)
    return np.abs(mag)


def _normalise_sizes(sizes) -> list[tuple[str, object]]:
    if sizes is None or isinstance(sizes, (int, np.integer)) or len(sizes) == 0:
        raise KernelLabArgumentError("sizes must be a non-empty list, e.g. kl.adversarial_sizes(block=256)")
    out = []
    for s in sizes:
        if isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str):
            out.append(s)
        else:
            out.append((str(s), s))
    return out


def check_kernel(name: str, launch, reference, inputs, *, sizes, out_dtype=np.float32, fmt=None,
                 k=1, rtol=None, atol=None, seed=None, rerun: bool = True, extra_hint=None,
                 magnitude=None, quiet: bool = False) -> None:
    """Run a kernel over several problem sizes and compare each result with a float64 reference.

    - ``inputs(size, rng)`` returns a tuple of NumPy arrays and scalars (drawn from ``rng``);
    - ``reference(*inputs)`` computes the expected output from float64 copies of them;
    - ``launch(out, *device_inputs)`` launches your kernel; ``out`` is a poisoned device array with the
      reference's shape and ``out_dtype``; arrays among the inputs arrive as device arrays.
    - ``sizes`` is a list of sizes or of ``(label, size)`` pairs, e.g. ``kl.adversarial_sizes(256)``.
    - ``k`` (int, or a function of the size) is the reduction length behind each output element.
    - ``magnitude(*inputs)`` (optional) gives the size of the terms behind each element. By default
      it is ``reference`` evaluated on the inputs' absolute values, which is right for sums and
      products; references that subtract or are not monotone must pass it (see the module's docstring).

    Each size runs twice on the same inputs (``rerun``): results that differ bit for bit between the
    runs betray a race, however close to the reference each one is. Kernels whose float atomics
    make the order of additions vary from run to run should pass ``rerun=False``.

    ``extra_hint(got, expected)`` may return a sentence (or None) that an exercise adds to the failure
    message: hints specific to one exercise live with its check, not here.

    Prints one line naming the sizes (by label) on success (nothing with ``quiet``); raises :class:`CheckFailed` naming every
    failing size and explaining the most telling one. Inputs are fresh random numbers on every call
    (``seed`` reproduces a failure).
    """
    from numba import cuda

    require_callable(launch, "launch")
    require_callable(reference, "reference")
    require_callable(inputs, "inputs")
    cases = _normalise_sizes(sizes)
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    # label -> (a CheckFailed, or a _Mismatch to explain once every size is known; is it telling?)
    failures = {}
    coverages = []  # what was written, for each size whose result was compared and found wrong
    changed_between_runs = False
    ran = []
    for label, size in cases:
        if failures and settings.first_failure_only:
            break
        ran.append(label)
        args = inputs(size, rng)
        if not isinstance(args, tuple):
            args = (args,)
        ref_args = tuple(np.asarray(a).astype(_reference_dtype(np.asarray(a))) if isinstance(a, np.ndarray)
                         else a for a in args)
        expected = np.asarray(reference(*ref_args))
        expected = expected.astype(_reference_dtype(expected))
        mag = term_magnitude(reference, ref_args, expected, magnitude)
        out = _GuardedOutput(expected.shape, out_dtype)
        dev_args = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args)
        try:
            launch(out.array, *dev_args)
        except NotImplementedError as exc:
            raise CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})") \
                from None
        except ValueError as exc:
            if "grid" not in str(exc).lower() or ">= 1" not in str(exc):
                raise
            failures[label] = (CheckFailed(
                f"{name} (size {label} = {size}): the launch asked for a grid of 0 blocks, which a GPU refuses "
                f"({exc}).\nHint: `n // threads` is 0 when n < threads; round up instead: "
                "`(n + threads - 1) // threads`."), False)
            continue
        got, guard_written = out.fetch()
        if rerun:
            again = _GuardedOutput(expected.shape, out_dtype)
            launch(again.array, *dev_args)
            got_again, _ = again.fetch()
            changed = got.view(_UINT[got.dtype.itemsize]) != got_again.view(_UINT[got.dtype.itemsize])
            if changed.any():
                first = _index(int(np.flatnonzero(changed.ravel())[0]), got.shape)
                failures[label] = (CheckFailed(
                    f"{name} (size {label} = {size}): two runs on the same inputs gave different results in "
                    f"{int(changed.sum())} element(s), the first at {first}.\nHint: {RACE_HINT}"), True)
                changed_between_runs = True
                continue
        kk = k(size) if callable(k) else k
        mismatch = _mismatch(name, got, expected, fmt=fmt if fmt is not None else out_dtype, k=kk, rtol=rtol,
                             atol=atol, magnitude=mag, guard_written=guard_written,
                             context=f" (size {label} = {size})", seed=seed)
        if mismatch is not None:
            extra = extra_hint(got, expected) if extra_hint is not None else None
            coverages.append(mismatch.coverage)
            # Most telling: partly written and more than one element (a pattern to recognise).
            failures[label] = ((mismatch, extra), got.size > 1 and not is_poison(got).all())
    if failures:
        primary = next((e for e, partly in failures.values() if partly), next(iter(failures.values()))[0])
        if isinstance(primary, tuple):  # a mismatch: explain it with what every size says
            mismatch, extra = primary
            text = mismatch.message(coverage=coverage_hint(coverages, mismatch.coverage,
                                                           changed_between_runs=changed_between_runs))
            primary = CheckFailed(f"{text}\nHint: {extra}" if extra else text)
        passed = [label for label in ran if label not in failures]
        summary = (f"sizes that fail: {', '.join(failures)}; sizes that pass: {', '.join(passed) or 'none'}")
        raise CheckFailed(f"{primary}\n{summary}") from None
    labels = ", ".join(label for label, _ in cases)
    if not quiet:  # checks that run check_kernel several times print their own summary
        print(f"{name}: correct for all {len(cases)} sizes ({labels})")
        progress.passed(name)
