"""Checks for module 02: device-wide reductions and scans, and matrix multiplication.

Each check runs the learner's launcher on fresh random inputs at sizes chosen to catch the
classic mistakes, compares with a float64 NumPy reference, prints one deterministic line on
success and raises :class:`kernel_lab.CheckFailed` naming the mistake on failure:

* :func:`check_absmax` and :func:`check_argmax`: the extreme value is planted where mistakes
  lose it (a negative value, the last partial block, several equal maxima);
* :func:`check_sum` checks a device-wide sum against a tolerance for its accumulation
  (``"float32"``, ``"float64"``, ``"kahan"``); :func:`sum_errors` measures the error of each;
* :func:`check_scan` checks an inclusive prefix sum, under every block schedule the simulator
  offers (blocks in reverse order, several at once in shuffled orders) or, on a GPU, over repeated
  runs: a look-back that reads a partial before it is published fails there;
* :func:`check_status_word` checks the packing of a look-back's flag and float32 value into one
  64-bit word and back, and names a value converted instead of bit-cast, a sign bit that spills
  into the flag's half, and halves swapped;
* :func:`check_gemm` checks ``C = A @ B`` on shapes that are not multiples of any tile, and names
  a tile used before the barrier, a missing second barrier, off-by-one tile edges, a skipped last
  K tile and wrong register-block indexing; in float64 it first runs a probe whose products say
  which row of A and column of B each element of C was made from (:func:`lane_probe`), and names
  the two doubles of a 16-byte load swapped or duplicated, a lane's offset into a tile, registers
  never loaded, and (from the random shapes) values rounded to float32 on the way;
* :func:`check_tile_budget` checks 02.4's count of a tile configuration's registers and shared memory;
* :func:`check_fma_chains` checks 02.4's FMA-rate kernel and names fewer chains, a loop off by one,
  and (on a GPU) a float32 kernel computing in float64.
"""

from __future__ import annotations

import inspect
import secrets

import numpy as np

from .. import progress
from ..check import UNIT_ROUNDOFF, CheckFailed, check_kernel, finishes_within, is_poison, poisoned_host
from ..environment import on_simulator
from ..reductions_gemm.scans import check_status_word  # noqa: F401  (beside the word it checks; 02.2 calls it here)
from ..sizes import adversarial_sizes
from ..validate import KernelLabArgumentError, require_callable


def _large(gpu: int, sim: int) -> int:
    return sim if on_simulator() else gpu


def _sizes(block: int, sizes):
    if sizes is not None:
        return [s if isinstance(s, tuple) else (str(s), s) for s in sizes]
    return adversarial_sizes(block, large=_large(1 << 24, 700))


def _not_done(name, exc):
    return CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})")


def _run_scalar(launch, out_dtype, x):
    """Run ``launch(out, x)`` on a poisoned one-element output; return the host value."""
    from numba import cuda

    out = cuda.to_device(poisoned_host(1, out_dtype))
    launch(out, cuda.to_device(x))
    cuda.synchronize()
    return out.copy_to_host()[0]


# ================================================================================================
# absmax and argmax


def _planted(n, rng, where, sign=-1.0):
    x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
    x[where] = np.float32(sign * 3.0)
    return x


def check_absmax(launch, *, name: str = "absmax", block: int = 256, sizes=None, seed=None) -> None:
    """``launch(out, x)`` must leave ``max(|x|)`` in ``out[0]`` (float32; ``out`` holds poison).

    Inputs lie in [-1, 1) with one planted value of magnitude 3, negative in half the cases, placed
    at the start, in the middle or in the last (partial) block. The result must be exact: a maximum
    rounds nothing.
    """
    require_callable(launch, "launch")
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    cases = list(_sizes(block, sizes))
    if sizes is None:
        # Not in the printed list: 3.5 strides of a persistent grid (module 02's persistent_blocks), where
        # a grid-stride loop that reads four elements a trip meets the end exactly at its fourth load:
        # a fast-path bound of `i + 3 * stride <= n` then reads x[n].
        from ..reductions_gemm.scans import persistent_blocks

        stride = persistent_blocks(1 << 40, block) * block
        cases.append(("3.5 strides of a persistent grid", 3 * stride + stride // 2))
    for label, n in cases:
        for where, sign in [(n - 1, -1.0), (n // 2, 1.0), (0, -1.0)]:
            x = _planted(n, rng, where, sign)
            try:
                got = _run_scalar(launch, np.float32, x)
            except NotImplementedError as exc:
                raise _not_done(name, exc) from None
            want = float(np.abs(x).max())
            if is_poison(np.array([got])).all():
                raise CheckFailed(f"{name} (size {label} = {n}): out[0] was never written. Hint: the launcher "
                                  "must set out[0] = 0 before blocks combine their results into it (an atomic "
                                  "max into poison keeps the poison), or the kernel does not write it.")
            if float(got) == want:
                continue
            lines = [f"{name} (size {label} = {n}): expected {want:.7g}, got {float(got):.7g} "
                     f"(the largest magnitude, {sign * 3:+.0f}, sits at index {where}) [seed={seed}]"]
            if float(got) == float(x.max()) or float(got) == -want:
                lines.append("Hint: the result is the largest *value*, not the largest *magnitude*: take |x| "
                             "first (for the bits: `bits & 0x7FFFFFFF` clears the sign).")
            elif (where >= (n // block) * block and n % block
                  and float(got) == float(np.abs(x[: n - n % block]).max(initial=0.0))):
                lines.append("Hint: the last, partial block was left out: launch ceil(n / threads) blocks, and let "
                             "threads past the end contribute 0 instead of returning before the block's reduction.")
            elif float(got) < want:
                lines.append("Hint: some elements never reached the result: does every block combine its result "
                             "into out[0] (one atomic per block), and does the block reduction see every thread?")
            raise CheckFailed("\n".join(lines))
    print(f"{name}: correct for all {len(_sizes(block, sizes))} sizes ({', '.join(lb for lb, _ in _sizes(block, sizes))})")
    progress.passed(name)


def check_argmax(launch, *, name: str = "argmax", block: int = 256, sizes=None, seed=None) -> None:
    """``launch(out, x)`` must leave in ``out[0]`` (int64) the index of the largest value of ``x``,
    the lowest such index when the maximum occurs more than once.

    Each size is tried with the maximum planted once and with three copies of it (one of them in
    the last block), so that both the value and the tie rule are checked.
    """
    require_callable(launch, "launch")
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    for label, n in _sizes(block, sizes):
        cases = [[int(rng.integers(n))]]
        if n >= 3:
            cases.append(sorted({n - 1, int(rng.integers(n)), int(rng.integers(n // 2 + 1))}))
        for where in cases:
            x = rng.uniform(-4.0, 2.0, n).astype(np.float32)
            x[where] = np.float32(2.5)
            if n > 1:
                x[(where[0] + 1) % n] = np.float32(-5.0)  # a larger magnitude, smaller value
                if (where[0] + 1) % n in where:
                    x[where] = np.float32(2.5)
            want = int(np.argmax(x))
            try:
                got = _run_scalar(launch, np.int64, x)
            except NotImplementedError as exc:
                raise _not_done(name, exc) from None
            if int(got) == want:
                continue
            lines = [f"{name} (size {label} = {n}): expected index {want}, got {int(got)} [seed={seed}]"]
            maxima = np.flatnonzero(x == x.max())
            if 0 <= int(got) < n and int(got) in maxima:
                lines.append(f"Hint: index {int(got)} holds the maximum too, but the maximum occurs at indices "
                             f"{', '.join(map(str, maxima))}: the tie rule says the lowest index wins. In a packed "
                             "key, put the *complement* of the index in the low bits, so that max() prefers it.")
            elif 0 <= int(got) < n and int(got) == int(np.argmax(np.abs(x))):
                lines.append("Hint: that is the index of the largest *magnitude*; argmax compares values (a negative "
                             "float's bits must be flipped to order correctly: see the key function).")
            elif 0 <= 0xFFFFFFFF - int(got) < n:
                lines.append("Hint: the key's low 32 bits hold the index itself, not its complement "
                             "(0xFFFFFFFF - i), so decoding gives 0xFFFFFFFF - index. With the index itself, max() "
                             "would also prefer the highest of several equal maxima, but the tie rule says the "
                             "lowest index wins: store 0xFFFFFFFF - i.")
            elif not 0 <= int(got) < n:
                lines.append("Hint: that is not an index of x at all: was out[0] written (launchers zero their "
                             "keys), and is the index decoded from the key's low 32 bits?")
            raise CheckFailed("\n".join(lines))
    print(f"{name}: correct for all {len(_sizes(block, sizes))} sizes")
    progress.passed(name)


# ================================================================================================
# sums


def _sum_tolerance(accumulation: str, n: int) -> float:
    u = UNIT_ROUNDOFF["float32"]
    if accumulation == "float32":
        return u * (4 + 5 * np.sqrt(n))  # long float32 sums: grows with the number of terms
    if accumulation in ("float64", "kahan"):
        # Kahan: |error| <= (2u + O(n u^2)) sum|x| (Higham, Accuracy and Stability of Numerical
        # Algorithms, 2nd ed., section 4.3), independent of n to first order; float64: far less.
        return 2 * u + n * u * u
    raise KernelLabArgumentError(f"accumulation must be 'float32', 'float64' or 'kahan', got {accumulation!r}")


def check_sum(launch, *, accumulation: str = "float32", name: str | None = None, block: int = 256, sizes=None,
              seed=None) -> None:
    """``launch(out, x)``: ``out[0]`` (float64, poisoned) must be ``sum(x)`` for float32 ``x``.

    Inputs are uniform in [0, 1): no cancellation, every rounding error counts. The tolerance
    follows ``accumulation``: ``"float32"`` grows with ``sqrt(n)``; ``"float64"`` and ``"kahan"``
    must be within 2 float32 units of roundoff of the sum whatever ``n`` (Kahan's bound), so a
    compensated sum that silently lost its compensation fails once each thread adds many terms.
    """
    require_callable(launch, "launch")
    name = name or f"sum ({accumulation})"
    _sum_tolerance(accumulation, 1)

    def inputs(n, rng):
        return (rng.uniform(0.0, 1.0, n).astype(np.float32),)

    sizes = _sizes(block, sizes)
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    for label, n in sizes:
        (x,) = inputs(n, rng)
        exact = float(np.sum(x.astype(np.float64)))
        weight = float(np.sum(np.abs(x.astype(np.float64))))
        try:
            got = float(_run_scalar(launch, np.float64, x))
        except NotImplementedError as exc:
            raise _not_done(name, exc) from None
        allowed = _sum_tolerance(accumulation, n) * weight
        if abs(got - exact) <= allowed:
            continue
        lines = [f"{name} (size {label} = {n}): expected {exact:.10g}, got {got:.10g}: error {abs(got - exact):.3g}, "
                 f"allowed {allowed:.3g} ({_sum_tolerance(accumulation, n) / UNIT_ROUNDOFF['float32']:.3g} float32 units "
                 f"of roundoff x sum|x|) [seed={seed}]"]
        if np.isnan(got):
            lines.append("Hint: out[0] holds NaN: it was never set to 0 before the blocks added into it.")
        elif accumulation != "float32" and abs(got - exact) <= _sum_tolerance("float32", n) * weight:
            lines.append("Hint: the error is that of a plain float32 sum: the accumulation is not doing its job "
                         "(Kahan: `y = x - c; t = s + y; c = (t - s) - y; s = t`, and keep c across the loop; "
                         "float64: convert each element before adding it).")
        elif abs(got - exact) > 0.5 * weight:
            lines.append("Hint: far off: are elements skipped or counted twice (grid-stride step, bounds)?")
        raise CheckFailed("\n".join(lines))
    if accumulation != "float32":
        _check_compensation(launch, accumulation, name, block)
    print(f"{name}: correct for all {len(sizes)} sizes ({', '.join(lb for lb, _ in sizes)})")
    progress.passed(name)


def _check_compensation(launch, accumulation: str, name: str, block: int) -> None:
    """Every element 1 + 3 * 2**-23: each float32 addition to a running sum of such values rounds the
    same way, so a thread that adds many of them in plain float32 drifts by far more than Kahan's
    bound, whatever the grid. (Where every thread adds only a few, as on a large GPU, this passes
    both ways; the check's large size is the test there.)"""
    n = 64 * block
    x = np.full(n, 1.0 + 3.0 * 2.0**-23, np.float32)
    exact = float(np.sum(x.astype(np.float64)))
    got = float(_run_scalar(launch, np.float64, x))
    allowed = _sum_tolerance(accumulation, n) * exact
    if abs(got - exact) > allowed:
        raise CheckFailed(
            f"{name} ({n} equal elements, 1 + 3 * 2**-23 each): expected {exact:.10g}, got {got:.10g}: error "
            f"{abs(got - exact):.3g}, allowed {allowed:.3g}\nHint: here every float32 addition of a running sum rounds "
            "the same way, so a plain float32 sum drifts; a compensated or float64 one does not. Check the "
            "accumulation (Kahan: `y = x - c; t = s + y; c = (t - s) - y; s = t`, and keep c across the loop; "
            "float64: convert each element before adding it).")


def sum_errors(launchers: dict, n: int, *, seed: int = 0, trials: int = 3) -> dict:
    """The relative error ``|got - exact| / sum|x|`` of each launcher, in float32 units of roundoff,
    the worst of ``trials`` fresh inputs (values in [0, 1): every rounding error adds up)."""
    rng = np.random.default_rng(seed)
    worst = {label: 0.0 for label in launchers}
    for _ in range(trials):
        x = rng.uniform(0.0, 1.0, n).astype(np.float32)
        exact = float(np.sum(x.astype(np.float64)))
        for label, launch in launchers.items():
            got = float(_run_scalar(launch, np.float64, x))
            worst[label] = max(worst[label], abs(got - exact) / exact / UNIT_ROUNDOFF["float32"])
    return worst


# ================================================================================================
# scans


def _scan_schedules():
    """(label, schedule keyword arguments) the scan checks run under."""
    if not on_simulator():
        return [("run 1", None), ("run 2", None), ("run 3", None)]
    return [("blocks in order", dict(order="in order")), ("blocks in reverse", dict(order="reverse")),
            ("interleaved, seed 1", dict(order="interleaved", seed=1)),
            ("interleaved, seed 2", dict(order="interleaved", seed=2)),
            ("interleaved, seed 3", dict(order="interleaved", seed=3)),
            ("2 resident, seed 4", dict(order="interleaved", seed=4, resident=2))]


def _kernel_source(kernel, depth: int = 3, seen=None) -> str:
    """The source of a kernel and of the device functions it calls (a few levels deep)."""
    fn = getattr(kernel, "py_func", kernel)
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return ""
    seen.add(id(fn))
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return ""
    if depth > 0:
        callees = [getattr(fn, "__globals__", {}).get(name)
                   for name in getattr(getattr(fn, "__code__", None), "co_names", ())]
        # device functions a kernel factory closed over (make_status_scan's look-back, pack, unpack)
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                callees.append(cell.cell_contents)
            except ValueError:  # a cell not filled yet
                pass
        for callee in callees:
            if callee is not None and hasattr(callee, "py_func"):
                source += "\n" + _kernel_source(callee, depth - 1, seen)
    return source


def _source_hints(kernel) -> list[str]:
    if kernel is None:
        return []
    source = _kernel_source(kernel)
    if not source:
        return []
    hints = []
    if "load_relaxed" in source:  # one status word (flag and value together): no fence needed
        return hints
    if "threadfence" not in source:
        hints.append("the kernel has no cuda.threadfence(): on a GPU a block's value and its flag can become "
                     "visible to other blocks in either order. Write the value, cuda.threadfence(), then set the "
                     "flag; read the flag, cuda.threadfence(), then the value. (The simulator's memory is "
                     "sequentially consistent, so only this reading of the source can tell.)")
    if "load_acquire" not in source and "atomic" in source:
        hints.append("the flags are not polled with an acquire load: a plain load, or cuda.ldcv, may be read once "
                     "(the compiler keeps it in a register, or removes the polling loop: on an H100 the "
                     "assembler did) and later reads may be served before it. Poll with "
                     "kl.load_acquire(flags, j), then read the published value.")
    return hints


# One schedule's run of the scan check takes a few seconds in the simulator; a look-back that waits on
# the wrong condition never ends. Wall-clock time, so twenty times the right kernel's, for busy machines.
SCAN_TIME_LIMIT_S = 60.0


def check_scan(launch, *, name: str = "scan", tile: int = 256, sizes=None, seed=None, kernel=None,
               schedules: bool = True) -> None:
    """``launch(out, x)`` must write the inclusive prefix sum of float32 ``x`` into ``out``.

    Sizes cover one element, partial and several tiles and a large array. In the simulator each
    size also runs under adversarial block schedules (reverse order, shuffled interleavings, only 2
    blocks resident); on a GPU, three runs. Pass ``kernel=`` (the single-pass kernel) to also get
    hints from its source (a missing fence, flags polled with plain loads). An interleaved schedule
    that fails is run again without slow blocks; if it passes then, the hint names a look-back that
    polls a flag once instead of waiting.
    """
    require_callable(launch, "launch")
    from ..simulator.grid import GridStall, block_schedule

    if sizes is None:
        # In the simulator "large" is small, but the three-kernel scan (no schedules) still gets more
        # tiles than a block has threads: its scan of the tile sums must carry a running total from
        # one chunk of tile sums to the next, and a GPU's large size always needs that.
        from ..reductions_gemm.scans import THREADS as SCAN_THREADS

        large_sim = 7 * tile + 1 if schedules else (2 * SCAN_THREADS + 3) * tile + 5  # three chunks
        sizes = [("1", 1), ("tile-1", tile - 1), ("tile+1", tile + 1), ("5 tiles+3", 5 * tile + 3),
                 ("large", _large(1 << 24, large_sim))]

    def inputs(n, rng):
        return (rng.standard_normal(n).astype(np.float32),)

    def reference(x):
        return np.cumsum(x)

    def magnitude(x):
        return np.cumsum(np.abs(x))

    runs = _scan_schedules() if schedules else [("once", None)]
    seed = secrets.randbits(32) if seed is None else seed

    def run(sched):
        if sched is None or not on_simulator():
            check_kernel(name, launch, reference, inputs, sizes=sizes, k=lambda n: max(int(n), 1),
                         magnitude=magnitude, seed=seed, rerun=False, quiet=True)
        else:
            with block_schedule(**sched):
                check_kernel(name, launch, reference, inputs, sizes=sizes, k=lambda n: max(int(n), 1),
                             magnitude=magnitude, seed=seed, rerun=False, quiet=True)

    def fails_only_with_slow_blocks(sched) -> bool:
        """Does the failing interleaved schedule pass once no block is slow (held back after it
        publishes, see simulator/grid.py)? Then the look-back went on while a predecessor had
        published nothing: it polled the flag once where it must wait."""
        if sched is None or sched.get("order") != "interleaved" or not on_simulator():
            return False
        try:
            run({**sched, "slow_blocks": False})
        except (CheckFailed, GridStall):
            return False
        return True

    for label, sched in runs:
        try:
            with finishes_within(f"{name} ({label})", SCAN_TIME_LIMIT_S):
                run(sched)
        except GridStall as stall:
            raise CheckFailed(f"{name} ({label}): the blocks waited for each other forever.\n{stall}") from None
        except CheckFailed as failure:
            if "not done yet" in str(failure) or "did not finish" in str(failure):
                raise
            lines = [f"{name} ({label}): {failure}"]
            if fails_only_with_slow_blocks(sched):
                lines.append("Hint: the scan fails only when a predecessor is slow to publish (this schedule passes "
                             "when every block publishes at its first turn): the look-back went past a flag that "
                             "still said FLAG_NONE and added a value nobody had published. It polled the flag once "
                             "(`if f == FLAG_NONE:`) where it must wait: `while f == FLAG_NONE: "
                             "f = kl.load_acquire(flags, j)`.")
            if label not in ("blocks in order", "run 1", "once"):
                lines.append("Hint: the scan is right when blocks run one after the other in index order, and wrong "
                             f"under this schedule ({label}): a look-back that reads a partial before it is published "
                             "(the value must be written before its flag, and read after it), or that treats a "
                             "predecessor's own total (aggregate) as its inclusive prefix (keep looking back until "
                             "an inclusive prefix is found), or a tile number taken from blockIdx.x instead of "
                             "the order blocks start in.")
            for hint in _source_hints(kernel):
                lines.append("Hint: " + hint)
            raise CheckFailed("\n".join(lines)) from None
    labels = ", ".join(lb for lb, _ in sizes)
    where = f"; {len(runs)} block schedules" if on_simulator() and schedules else ""
    print(f"{name}: correct for all {len(sizes)} sizes ({labels}){where}")
    progress.passed(name)




# ================================================================================================
# GEMM


def gemm_shapes(tile_m: int, tile_n: int, tile_k: int, large=None):
    """(label, (M, N, K)) shapes for a GEMM with block tiles tile_m x tile_n stepping tile_k."""
    if large is None:
        large = _large(1031, 0)
    shapes = [("1x1x1", (1, 1, 1)),
              ("tile-1 x tile+1 x bk+1", (max(tile_m - 1, 1), tile_n + 1, tile_k + 1)),
              ("non-multiples", (2 * tile_m + 3, tile_n + 5, 3 * tile_k + 2)),
              # an odd number of K tiles (3): a loop that takes two tiles per trip (kernel 8b) must
              # skip the second half of its last trip
              ("aligned", (2 * tile_m, 2 * tile_n, 3 * tile_k))]
    if large:
        shapes.append(("large", (large, large - 2, large // 2 + 5)))
    return shapes


def _race_headline(text: str) -> str:
    if "as in the next pass of a loop" in text:
        return ("a tile is overwritten while other threads still read it: the next iteration's loads start before "
                "everyone has finished with the current tiles. Add the second cuda.syncthreads() at the end of the "
                "loop body.")
    if "after the write" in text:
        return ("a tile is used before every thread has finished loading it: add cuda.syncthreads() between "
                "loading the tiles and the multiply-adds.")
    return "threads of a block touch the same shared-memory element with no barrier between them."


def _gemm_extra_hint(a, b, tiles, precision="float32"):
    tile_m, tile_n, tile_k = tiles

    def hint(got, expected):
        m, n = expected.shape
        kk = a.shape[1]
        written = ~is_poison(got)
        with np.errstate(invalid="ignore"):
            g = got.astype(np.float64)
            scale = np.abs(a) @ np.abs(b) + 1e-30
            wrong = ~(np.abs(g - expected) <= 1e-3 * scale) | ~written
        if precision == "float64" and written.all() and np.isfinite(g).all():
            # Errors far above float64's rounding but of float32's size: a value passed through float32
            # (a product or a sum converted, a float32 register), every element a little off.
            relative = np.abs(g - expected) / scale
            if 1e-11 < relative.max() < 1e-5 and np.median(relative) > 1e-12:
                return (f"the errors are of the size of float32 rounding (up to {relative.max():.0e} of |A| @ |B|, "
                        "where float64 gives about 1e-16): somewhere a value passes through float32. Keep every "
                        "value of the step a float64: no float32(...) around a product or a sum")
        if not wrong.any():
            return None
        kf = kk - kk % tile_k
        if kk % tile_k and written.all():
            partial = a[:, :kf] @ b[:kf, :]
            if np.allclose(g, partial, rtol=1e-4, atol=1e-4 * scale.max()):
                return (f"the result is A[:, :{kf}] @ B[:{kf}, :]: the last, partial tile along K "
                        f"(K = {kk} is not a multiple of {tile_k}) is skipped. Loop over ceil(K / BK) tiles "
                        "(`range(0, K, BK)`), loading 0 past the end of K.")
        tiles_k = -(-kk // tile_k)
        if tiles_k >= 3 and tiles_k % 2 and written.all():
            # Two tiles per trip with no guard on the last trip's second half: it computes stage 1
            # again, which still holds the tile before the last.
            lo, hi = (tiles_k - 2) * tile_k, (tiles_k - 1) * tile_k
            twice = expected + a[:, lo:hi] @ b[lo:hi, :]
            if np.allclose(g, twice, rtol=1e-4, atol=1e-4 * scale.max()):
                return (f"the result has the tile of K before the last (k = {lo}..{hi - 1}) added twice: with an odd "
                        f"number of tiles along K ({tiles_k} here), a loop that takes two tiles per trip has only one "
                        "in its last trip. Run the second half only if there is a tile left (`if k0 + BK < K`); "
                        "otherwise it computes the other stage again, which still holds the tile before the last.")
        edge_rows = np.arange(m) >= m - m % tile_m if m % tile_m else np.zeros(m, bool)
        edge_cols = np.arange(n) >= n - n % tile_n if n % tile_n else np.zeros(n, bool)
        on_edge = edge_rows[:, None] | edge_cols[None, :]
        if on_edge.any() and wrong[on_edge].any() and not wrong[~on_edge].any():
            return ("only elements in the last, partial tiles (bottom rows or right columns of C) are wrong: an "
                    "off-by-one on the tile edges. Compare indices with `<` (row < M, col < N, k < K) when loading "
                    "and storing, and load 0 where a tile reaches past the matrix.")
        # The right values in the wrong places: register-block indexing.
        w = np.flatnonzero(wrong.ravel() & written.ravel())
        if len(w) >= 4 and written.all():
            ref_vals = np.sort(expected.ravel())
            pos = np.searchsorted(ref_vals, g.ravel()[w])
            pos = np.clip(pos, 1, len(ref_vals) - 1)
            near = np.minimum(np.abs(ref_vals[pos] - g.ravel()[w]), np.abs(ref_vals[pos - 1] - g.ravel()[w]))
            if np.mean(near <= 1e-4 * scale.max()) > 0.9:
                return ("the wrong elements hold values that belong elsewhere in C: each thread computes the right "
                        "numbers but stores them in the wrong places. Check the register-block indexing: thread "
                        "(tx, ty) owns rows ty*TM + i and columns tx*TN + j of its block's tile, for i < TM, j < TN; "
                        "the same i and j must pick the accumulator, the shared-memory element and the element of C.")
        return None

    return hint


def check_gemm(launch, *, name: str = "gemm", tiles=(32, 32, 32), precision: str = "float32", shapes=None,
               seed=None) -> None:
    """``launch(c, a, b)`` must compute ``C = A @ B`` (row-major; ``c`` poisoned, of ``A``'s dtype).

    ``tiles`` = (tile_m, tile_n, tile_k) of the kernel, so that shapes straddle its tile edges.
    Tolerance: the float's unit roundoff times sqrt(K), against ``|A| @ |B|`` (see kernel_lab.check).
    In float64, :func:`lane_probe` runs first, on one block tile.
    """
    require_callable(launch, "launch")
    from ..simulator import SharedMemoryRace

    dtype = np.dtype(precision)
    if dtype not in (np.float32, np.float64):
        raise KernelLabArgumentError(f"precision must be 'float32' or 'float64', got {precision!r}")
    shapes = shapes if shapes is not None else gemm_shapes(*tiles)
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    if dtype == np.float64:
        try:
            lane_probe(launch, tiles, name=name)
        except SharedMemoryRace:
            pass  # the shapes below report it, with the barrier to add
    done, failed = [], []
    for label, (m, n, kk) in shapes:
        a = rng.uniform(-1, 1, (m, kk)).astype(dtype)
        b = rng.uniform(-1, 1, (kk, n)).astype(dtype)

        def inputs(size, rng_, a=a, b=b):
            return (a, b)

        def reference(a_, b_):
            return a_ @ b_

        def launch_cab(c, a_, b_):
            launch(c, a_, b_)

        try:
            check_kernel(name, launch_cab, reference, inputs, sizes=[(label, (m, n, kk))], out_dtype=dtype,
                         k=kk, seed=seed, extra_hint=_gemm_extra_hint(a.astype(np.float64), b.astype(np.float64),
                                                                      tiles, precision), quiet=True)
        except SharedMemoryRace as race:
            raise CheckFailed(f"{name} (shape {label} = {m} x {n} x {kk}): {_race_headline(str(race))}\n"
                              f"The simulator's report:\n{race}") from None
        except CheckFailed as failure:
            if "not done yet" in str(failure):
                raise
            failed.append((m * n, label, failure))
            continue
        done.append(label)
    if failed:
        # The largest failing shape shows the clearest pattern of errors.
        _, _, telling = max(failed, key=lambda f: f[0])
        lines = [line for line in str(telling).splitlines() if not line.startswith("sizes that")]
        lines.append(f"shapes that fail: {', '.join(f[1] for f in failed)}; shapes that pass: {', '.join(done) or 'none'}")
        raise CheckFailed("\n".join(lines))
    print(f"{name}: correct for all {len(done)} shapes ({', '.join(done)})")
    progress.passed(name)


# ================================================================================================
# 02.4: where each element of C came from, and the tile budget

PROBE_COLUMN = 4096  # C = (row of A + 1) + PROBE_COLUMN * (column of B + 1): exact in float32 and float64


def _probe_inputs(m: int, n: int, kk: int):
    """A and B whose product numbers its sources: A[r] = (r + 1, 1, 0, ...), B[:, q] = (1, 4096 (q + 1),
    0, ...), so that C[r, q] = (r + 1) + 4096 (q + 1) where C's row r came from A's row r and its
    column q from B's column q."""
    a = np.zeros((m, kk))
    a[:, 0] = np.arange(1, m + 1)
    a[:, 1] = 1.0
    b = np.zeros((kk, n))
    b[0, :] = 1.0
    b[1, :] = PROBE_COLUMN * np.arange(1, n + 1)
    return a, b


def _listed(idx, what: str) -> str:
    idx = [int(i) for i in idx]
    shown = ", ".join(str(i) for i in idx[:6]) + (", ..." if len(idx) > 6 else "")
    return f"{what} {shown}"


def _source_map_hint(src, axis: str):
    """Name the pattern of ``src`` (the row of A, or column of B, that each row or column of C came from)."""
    own = np.arange(src.size)
    if (src == own).all():
        return None
    matrix, regs, offset, i = (("A", "a_reg", "wr + wi * 8 * TM + tr * TM + i", "i") if axis == "row" else
                               ("B", "b_reg", "wc + wj * 4 * TN + tc * TN + j", "j"))
    if src.size % 2 == 0 and (src == own ^ 1).all():
        return (f"each pair of {axis}s of C is swapped ({axis} 0 holds {axis} 1's products and {axis} 1 {axis} "
                f"0's): the two doubles of a 16-byte load of {matrix} land in swapped registers. load2(arr, (s, k, j))"
                f" returns the elements at j and j + 1, in that order: {regs}[... + {i}], {regs}[... + {i} + 1]")
    if (src == (own & ~1)).all():
        return (f"the two {axis}s of each pair of C hold the same products (of the first {axis} of the pair): both "
                f"registers of a pair in {regs} get the first double of a 16-byte load of {matrix}; the second goes "
                f"to {regs}[... + {i} + 1]")
    bad = np.flatnonzero(src != own)
    examples = ", ".join(f"{axis} {int(r)} holds {axis} {int(src[r])}'s" for r in bad[:3])
    return (f"{len(bad)} of {src.size} {axis}s of C hold the products of another {axis} of {matrix} ({examples}): "
            f"the lane reads {matrix}'s tile at the wrong place. Its values of row k of stage s start at "
            f"{offset}, counted in doubles (not in 16-byte pairs)")


def lane_probe(launch, tiles, *, name: str = "gemm") -> None:
    """Run ``launch(c, a, b)`` (float64) on one block tile (``tiles[0] x tiles[1]``, K = ``tiles[2]``)
    with inputs that make each element of C say which row of A and which column of B it was made
    from (:func:`_probe_inputs`); raise :class:`CheckFailed` naming the pattern if any came from
    elsewhere: the two doubles of a 16-byte load swapped or both the first, a lane's offset into a
    tile, registers never loaded. Silent when every element is right (or when C was not written
    everywhere: the random shapes of :func:`check_gemm` explain that)."""
    from numba import cuda

    m, n, kk = int(tiles[0]), int(tiles[1]), max(int(tiles[2]), 2)
    if m >= PROBE_COLUMN:
        return
    a, b = _probe_inputs(m, n, kk)
    c = cuda.to_device(poisoned_host(m * n, np.float64).reshape(m, n))
    try:
        launch(c, cuda.to_device(a), cuda.to_device(b))
    except NotImplementedError as exc:
        raise _not_done(name, exc) from None
    got = c.copy_to_host()
    if is_poison(got).any():
        return
    what = f"{name} (probe {m} x {n} x {kk}: A's row r and B's column q carry their numbers)"
    if (got == 0).all():
        raise _not_done(name, "every element of C is 0: nothing was added to the accumulators")
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(got) & (got == np.round(got))
        g = np.where(whole, got, -1.0).astype(np.int64)
    row, col = g % PROBE_COLUMN - 1, g // PROBE_COLUMN - 1
    valid = whole & (row >= 0) & (row < m) & (col >= 0) & (col < n)
    # A row of C is consistent when all its elements came from one row of A (and a column likewise); a
    # register never loaded holds whatever was there, so its row (or column) of C is not.
    row_ok = valid.all(axis=1) & (row == row[:, :1]).all(axis=1)
    col_ok = valid.all(axis=0) & (col == col[:1, :]).all(axis=0)
    if not (row_ok.all() and col_ok.all()):
        def rest_ok(keep_r, keep_c):  # every element outside the suspect rows (or columns) decodes
            return bool(keep_r.any() and keep_c.any() and valid[np.ix_(keep_r, keep_c)].all())

        if not row_ok.all() and rest_ok(row_ok, np.ones(n, bool)):
            raise CheckFailed(
                f"{what}: {_listed(np.flatnonzero(~row_ok), 'rows')} of C hold values that no row of A gives.\n"
                "Hint: registers of a_reg that the step never loads. A 16-byte load carries 2 doubles (not 4 floats):"
                " a lane's TM values of A take TM / 2 load2s, at offsets i = 0, 2, 4, ...")
        if not col_ok.all() and rest_ok(np.ones(m, bool), col_ok):
            raise CheckFailed(
                f"{what}: {_listed(np.flatnonzero(~col_ok), 'columns')} of C hold values that no column of B "
                "gives.\nHint: registers of b_reg that the step never loads. A 16-byte load carries 2 doubles (not 4 "
                "floats): a lane's TN values of B take TN / 2 load2s, at offsets j = 0, 2, 4, ...")
        if not valid.all():
            first = np.argwhere(~valid)[0]
            raise CheckFailed(
                f"{what}: {int((~valid).sum())} of {m * n} elements of C are no product of a row of A and a column "
                f"of B (the first at {tuple(int(v) for v in first)}: {got[tuple(first)]!r}).\nHint: each step adds "
                "a_reg[i] * b_reg[j] to acc[i, j] for every i < RM and j < RN, with the values of row k of stage s")
        raise CheckFailed(
            f"{what}: the elements of one row of C came from several rows of A (or of one column from several "
            "columns of B).\nHint: acc[i, j] adds a_reg[i] * b_reg[j]: the same i for the whole row of a lane's "
            "results, the same j for the whole column")
    src_row, src_col = row[:, 0], col[0, :]
    row_hint, col_hint = _source_map_hint(src_row, "row"), _source_map_hint(src_col, "column")
    if row_hint or col_hint:
        wrong = " and ".join(w for w, h in (("rows of A", row_hint), ("columns of B", col_hint)) if h)
        raise CheckFailed(f"{what}: elements of C were made from the wrong {wrong}.\n"
                          + "\n".join(f"Hint: {h}" for h in (row_hint, col_hint) if h))


def tile_budget_reference(cfg) -> tuple[int, int]:
    """(32-bit registers for a thread's accumulators and one step's operands, bytes of shared memory)
    of a :class:`kernel_lab.reductions_gemm.sgemm.GemmTiles`: 02.4's exercise 3."""
    words = 2 if cfg.precision == "float64" else 1
    rm, rn = cfg.tm * cfg.wm_iter, cfg.tn * cfg.wn_iter
    return words * (rm * rn + rm + rn), (2 if cfg.double_buffer else 1) * cfg.bk * (cfg.bm + cfg.bn) * 4 * words


def _budget_cases():
    from ..reductions_gemm.sgemm import GemmTiles

    return [GemmTiles(128, 128, 8, 64, 32, 4, 4, 256, True, "float64"),  # 02.3's tiles in float64
            GemmTiles(64, 64, 8, 32, 32, 4, 4, 128, True, "float64"),
            GemmTiles(64, 128, 16, 32, 64, 4, 8, 128, False, "float64"),  # one stage; a thread 4 x 16
            GemmTiles(128, 64, 16, 64, 32, 8, 4, 128, True),  # float32
            GemmTiles(128, 128, 16, 64, 32, 4, 4, 256, False)]  # float32, one stage


def _budget_numbers(cfg):
    """What a configuration's counts are made of."""
    from types import SimpleNamespace

    return SimpleNamespace(words=2 if cfg.precision == "float64" else 1, rm=cfg.tm * cfg.wm_iter,
                           rn=cfg.tn * cfg.wn_iter, tm=cfg.tm, tn=cfg.tn, stages=2 if cfg.double_buffer else 1,
                           tiles=cfg.bk * (cfg.bm + cfg.bn), c_tile=cfg.bm * cfg.bn)


# (what a classic mistake computes from _budget_numbers, the hint that names it): registers, then shared bytes
_BUDGET_MISTAKES = (
    [(lambda v: v.rm * v.rn + v.rm + v.rn, "a float64 takes two 32-bit registers: count each double twice"),
     (lambda v: v.words * v.rm * v.rn,
      "the operands are missing: beside its RM x RN accumulators a step holds RM values of A and RN of B"),
     (lambda v: v.words * (v.tm * v.tn + v.tm + v.tn),
      "a thread's results are (tm x wm_iter) x (tn x wn_iter), not tm x tn: the lane covers its warp tile in "
      "wm_iter x wn_iter steps"),
     (lambda v: 2 * v.words * v.rm * v.rn, "the operands are RM values of A and RN of B (RM + RN), not RM x RN")],
    [(lambda v: v.tiles * 4 * v.words, "two stages: a double-buffered kernel holds both tiles twice"),
     (lambda v: v.stages * v.tiles * 4, "a double is 8 bytes"),
     (lambda v: 2 * v.tiles * 4 * v.words,
      "one stage holds one tile of A and one of B: two stages only when double_buffer is set"),
     (lambda v: v.stages * v.c_tile * 4 * v.words, "the tiles are A's bm x bk and B's bk x bn, not C's bm x bn")])


def check_tile_budget(budget, *, name: str = "tile budget") -> None:
    """``budget(cfg)`` returns (registers, shared bytes) as :func:`tile_budget_reference` does, for
    float32 and float64 configurations, one or two stages. Names (where one mistake explains every
    configuration): a double counted as one register, the operands left out, a thread's tile taken as
    tm x tn (one warp step), one stage where there are two, 4 bytes for a double, the tiles' shapes."""
    require_callable(budget, "tile_budget")
    cases, answers = _budget_cases(), []
    for cfg in cases:
        try:
            got = budget(cfg)
        except NotImplementedError as exc:
            raise _not_done(name, exc) from None
        if got is None or (isinstance(got, tuple) and not any(got)):
            raise _not_done(name, "it returns nothing yet")
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"{name}: return a pair (registers, shared-memory bytes), got {got!r}")
        answers.append(tuple(int(v) for v in got))
    for which, what, fallback in [(0, "registers", "registers = (2 for a double, 1 for a float) x (RM x RN "
                                                   "accumulators + RM + RN operands)"),
                                  (1, "bytes of shared memory", "bytes = stages x bk x (bm + bn) x bytes per element")]:
        wrong = [(cfg, got[which], tile_budget_reference(cfg)[which]) for cfg, got in zip(cases, answers)
                 if got[which] != tile_budget_reference(cfg)[which]]
        if not wrong:
            continue
        why = next((hint for formula, hint in _BUDGET_MISTAKES[which]
                    if all(formula(_budget_numbers(cfg)) == got[which] for cfg, got in zip(cases, answers))), fallback)
        cfg, got, want = wrong[0]
        raise CheckFailed(f"{name} ({cfg.label()}): {got} {what}, expected {want}.\nHint: {why}")
    print(f"{name}: correct for all {len(cases)} configurations (float32 and float64, one and two stages)")
    progress.passed(name)


# ================================================================================================
# 02.4: the FMA-rate kernel

FMA_START_STEP, FMA_M, FMA_C = 1e-3, 0.999, 1e-4  # the exercise's chains: a_j = x + j, a = a * m + c


def fma_chains_reference(threads: int, blocks: int, iterations: int, dtype, *, chains: int = 8,
                         start_from_grid: bool = False, frozen: int | None = None) -> np.ndarray:
    """What ``fma_chains`` writes: per thread, the sum of ``chains`` recurrences ``a = a * m + c``
    started at ``x + j`` with ``x = threadIdx.x * 1e-3``, each step rounded to ``dtype``."""
    dtype = np.dtype(dtype).type
    index = np.arange(blocks * threads)
    x = (index if start_from_grid else index % threads).astype(dtype) * dtype(FMA_START_STEP)
    m, c = dtype(FMA_M), dtype(FMA_C)
    total = np.zeros(blocks * threads, dtype)
    for j in range(chains):
        a = (x + dtype(j)).astype(dtype)
        for _ in range(0 if j == frozen else iterations):
            a = (a * m + c).astype(dtype)
        total = (total + a).astype(dtype)
    return total


def _computes_in_float64(kernel) -> bool:
    """Whether the compiled (GPU) kernel does float64 arithmetic: ``.f64`` operations in its PTX."""
    import re

    try:
        asm = kernel.inspect_asm()
    except Exception:  # noqa: BLE001 - an API this numba-cuda lacks: nothing to say
        return False
    ptx = "\n".join(asm.values()) if isinstance(asm, dict) else str(asm)
    return re.search(r"\b(?:fma|mul|add|sub)(?:\.rn)?\.f64\b", ptx) is not None


def check_fma_chains(make, *, name: str = "FMA chains", iterations: int = 5) -> None:
    """``make(T)`` returns the kernel ``fma_chains(out, iterations)`` for the element type ``T``
    (numba's ``float32`` or ``float64``). Every thread runs 8 chains ``a_j = a_j * m + c`` from
    ``x + j``, ``x = threadIdx.x * 1e-3``, ``m = 0.999``, ``c = 1e-4``, and writes their sum to
    ``out[cuda.grid(1)]``. Names: outputs not written, fewer chains, a loop off by one or never
    run, start values from ``cuda.grid(1)``; on a GPU, a float32 kernel whose arithmetic is float64
    (Python float constants), which would make its measured rate the float64 one. Silent on
    success: the notebook prints the rates."""
    require_callable(make, "make_fma_chains")
    from numba import cuda, float32, float64

    blocks, threads = 3, 64
    for T, dtype in ((float32, np.float32), (float64, np.float64)):
        kernel = make(T)
        out = cuda.to_device(poisoned_host(blocks * threads, dtype))
        what = f"{name} ({np.dtype(dtype).name})"
        try:
            kernel[blocks, threads](out, iterations)
            cuda.synchronize()
        except CheckFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - the learner's kernel did not compile or run
            if "NoneType" in str(exc) or isinstance(exc, NotImplementedError):
                raise _not_done(what, exc) from None
            raise CheckFailed(f"{what}: the kernel raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        got = out.copy_to_host()
        unwritten = int(is_poison(got).sum())
        if unwritten == got.size:
            raise _not_done(what, "nothing was written to out")
        if unwritten:
            raise CheckFailed(f"{what}: {unwritten} of {got.size} outputs never written: every thread writes "
                              f"the sum of its chains to out[cuda.grid(1)]")
        want = fma_chains_reference(threads, blocks, iterations, dtype)
        # GPU: a * m + c becomes one fused multiply-add (rounded once), the host rounds twice
        rtol = 1e-5 if dtype == np.float32 else 1e-12

        def close(alt):
            return bool(np.allclose(got, alt, rtol=rtol, atol=0))

        if close(want):
            if dtype == np.float32 and not on_simulator() and _computes_in_float64(kernel):
                raise CheckFailed(
                    f"{what}: the values are right, but the float32 kernel computes in float64: a Python float "
                    f"constant (0.999, 1e-4) is a float64 to Numba and makes every chain float64, so the "
                    f"'float32' rate would be the float64 rate. Write the constants as T(0.999), T(1e-4)")
            continue
        hypotheses = [(f"only {k} of the 8 chains reach the sum: update a0 to a7 in every iteration and "
                       f"add all eight", fma_chains_reference(threads, blocks, iterations, dtype, chains=k))
                      for k in range(1, 8)]
        hypotheses += [(f"chain a{j} is never updated: the loop updates all eight, a{j} = a{j} * m + c",
                        fma_chains_reference(threads, blocks, iterations, dtype, frozen=j)) for j in range(8)]
        hypotheses += [
            ("the chains are never updated: the loop must run `iterations` times, updating each chain",
             fma_chains_reference(threads, blocks, 0, dtype)),
            (f"the loop runs {iterations - 1} times, not iterations ({iterations})",
             fma_chains_reference(threads, blocks, iterations - 1, dtype)),
            (f"the loop runs {iterations + 1} times, not iterations ({iterations})",
             fma_chains_reference(threads, blocks, iterations + 1, dtype)),
            ("the chains start from cuda.grid(1); the exercise starts them from x = cuda.threadIdx.x * 1e-3 "
             "(the check computes the same chains on the host)",
             fma_chains_reference(threads, blocks, iterations, dtype, start_from_grid=True)),
        ]
        for message, alt in hypotheses:
            if close(alt):
                raise CheckFailed(f"{what}: {message}")
        bad = np.flatnonzero(~np.isclose(got, want, rtol=rtol, atol=0))
        i = int(bad[0])
        raise CheckFailed(f"{what}: {bad.size} of {got.size} threads wrote another value; first thread {i}: "
                          f"got {got[i]!r}, expected {want[i]!r} (chain j starts at x + j, x = threadIdx.x * 1e-3, "
                          f"and steps a = a * 0.999 + 1e-4)")
    progress.passed(name)
