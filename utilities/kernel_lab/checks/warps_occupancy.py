"""Checks for module 01's warp and occupancy exercises (notebooks 04 and 05).

Each check runs the learner's launcher on fresh random inputs, compares with a NumPy reference
computed in float64 (or exact integers), prints one deterministic line on success and raises
:class:`kernel_lab.CheckFailed` with an explanation on failure. When the pattern of a failure
betrays a classic mistake, a second, small *probe* run with hand-picked inputs names it:

* :func:`check_warp_sum` (a full-array sum built on a warp shuffle reduction) feeds one warp's
  lanes values 1, 8, 64, ... so that the result says exactly which lanes reached lane 0;
* :func:`check_row_sums` sums each row of a matrix, with more rows than a block has warps;
* :func:`check_warp_prefix_sum` compares a failed scan with the results of the usual mistakes
  (wrong shuffle direction, no lane guard, exclusive instead of inclusive, too few steps);
* :func:`check_compaction` compares the *multiset* of kept values (the order across warps
  depends on which warp wins the atomic, so it is free), the counter, and the order within each
  warp;
* :func:`check_occupancy_calculator` (pure Python) compares each resource's limit with the
  rules of NVIDIA's occupancy calculator (``cuda_occupancy.h``) and names the rule you missed.

The per-architecture limits an occupancy calculator needs are in :data:`SM_LIMITS`.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np

from .. import progress
from ..check import CheckFailed, check_kernel, is_poison, poisoned_host
from ..check import settings as check_settings
from ..sizes import adversarial_sizes
from ..validate import KernelLabArgumentError, require_callable

WARP = 32
FULL_MASK = 0xFFFFFFFF


def _labelled(sizes, block):
    if sizes is None:
        return adversarial_sizes(block, large=_default_large())
    out = []
    for s in sizes:
        out.append(s if isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str) else (str(s), s))
    return out


def _default_large():
    from ..environment import on_simulator

    # The simulator runs every thread as a Python thread: a few blocks are enough there.
    return 1100 if on_simulator() else 1 << 24


# ---------------------------------------------------------------------------------------------
# Full-array sum (warp shuffle reduction)

def _sum_inputs(n, rng):
    # Mean 0.5: the sum does not cancel, so the tolerance relative to it is meaningful.
    return (rng.uniform(-1.0, 2.0, n).astype(np.float32),)


def _sum_reference(x):
    return np.array([x.sum()])


def check_warp_sum(launch, *, name: str = "warp sum", block: int = 256, sizes=None,
                   deterministic: bool = False, seed=None) -> None:
    """Check a full-array sum: ``launch(out, x)`` must leave ``sum(x)`` in ``out[0]``.

    ``out`` is a one-element float32 device array holding poison (a NaN pattern): a launcher that
    accumulates with atomics must zero it first. ``x`` is float32 with values in [-1, 2). The
    tolerance follows the reduction length ``n`` (see ``kernel_lab.check``). Kernels that finish
    with float atomics add in a different order on every run, so the two runs of each size are
    only compared bit for bit when ``deterministic=True`` (a second pass instead of atomics).

    On failure a probe puts the values 1, 8, 64, ... into the 32 lanes of the first warp (zeros
    elsewhere): the result, written in base 8, says how often each lane was counted, which tells
    a missing or extra shuffle step from a wrong combination of warps.
    """
    require_callable(launch, "launch")
    try:
        check_kernel(name, launch, _sum_reference, _sum_inputs, sizes=_labelled(sizes, block),
                     out_dtype=np.float32, k=lambda n: max(int(n), 1), rerun=deterministic, seed=seed)
    except CheckFailed as failure:
        message = str(failure)
        if "not done yet" in message or check_settings.first_failure_only:
            raise
        diagnosis = _diagnose_own_value_doubled(_probe_lane_zero(launch))
        if diagnosis is None:
            counts = _probe_lane_counts(launch)
            diagnosis = _diagnose_lane_counts(counts) if counts is not None else None
        if diagnosis is not None and diagnosis[0] == "not done":
            raise CheckFailed(f"{name}: the exercise is not done yet: {diagnosis[1]}") from None
        # check_kernel's "every element is off by the same factor" hint is meant for arrays; a sum
        # has one element, so the ratio says nothing there.
        lines = [ln for ln in message.splitlines() if not ln.startswith("Hint: Every element is off by")]
        if diagnosis is not None:
            probe = diagnosis[2] if len(diagnosis) > 2 else ("a probe with the values 1, 8, 64, ... in the first "
                                                              "warp's 32 lanes and zeros elsewhere")
            lines.append(f"Diagnosis ({probe}): " + diagnosis[1])
        raise CheckFailed("\n".join(lines)) from None


def _probe_lane_counts(launch):
    """How many times (0-7) each of the first warp's lanes ends up in the sum (None if unreadable)."""
    from numba import cuda

    counts = []
    try:
        for group in range(4):  # 8 lanes at a time, values 8**k: every sum stays below 2**24, exact in float32
            x = np.zeros(WARP, np.float32)
            x[8 * group: 8 * group + 8] = 8.0 ** np.arange(8)
            out = cuda.to_device(poisoned_host(1, np.float32))
            launch(out, cuda.to_device(x))
            cuda.synchronize()
            value = float(out.copy_to_host()[0])
            if not math.isfinite(value) or value < 0 or value != round(value) or value >= 8.0**8:
                return None
            value = int(value)
            counts.extend((value // 8**j) % 8 for j in range(8))
    except Exception:  # the probe only adds a diagnosis; the failure itself is already reported
        return None
    return counts


def _run_probe(launch, x):
    """out[0] after one launch on the float32 values x (None if it fails or is not finite)."""
    from numba import cuda

    try:
        out = cuda.to_device(poisoned_host(1, np.float32))
        launch(out, cuda.to_device(np.asarray(x, np.float32)))
        cuda.synchronize()
        value = float(out.copy_to_host()[0])
    except Exception:  # the probe only adds a diagnosis; the failure itself is already reported
        return None
    return value if math.isfinite(value) else None


def _probe_lane_zero(launch):
    """(sum with 1 in lane 0 only, sum with 1 in lanes 1-31 only), or None if unreadable."""
    lane0 = np.zeros(WARP, np.float32)
    lane0[0] = 1
    others = np.ones(WARP, np.float32)
    others[0] = 0
    a, b = _run_probe(launch, lane0), _run_probe(launch, others)
    return None if a is None or b is None else (a, b)


def _diagnose_own_value_doubled(probe):
    """Recognise `shfl_up_sync` in place of `shfl_down_sync`: lane 0, with no lane below it, gets its
    own value back at every step and doubles it, and never sees the other lanes."""
    if probe is None:
        return None
    lane0, others = probe
    if others != 0 or lane0 < 2 or math.log2(lane0) != int(math.log2(lane0)):
        return None
    return ("hint", f"lane 0's result is its own value times {lane0:g} and holds nothing of lanes 1-31: "
                    "lane 0 added its own value to itself at every step. That is "
                    "what `cuda.shfl_up_sync` does: it reads from lane - offset, and lane 0, which has no lane "
                    "below it, gets its own value back. A sum that ends in lane 0 must read from the lanes "
                    "above: `cuda.shfl_down_sync(FULL_MASK, v, offset)` (an offset of 0 would do the same "
                    "harm: it too returns each lane's own value).",
            "a probe with the value 1 in lane 0 only, then 1 in lanes 1-31 only")


def _lanes(lanes):
    """'0-2, 5, 7-31' for a sorted list of lane numbers."""
    runs, start = [], None
    for j, lane in enumerate(lanes):
        if start is None:
            start = lane
        if j + 1 == len(lanes) or lanes[j + 1] != lane + 1:
            runs.append(str(start) if start == lane else f"{start}-{lane}")
            start = None
    return ", ".join(runs)


def _steps(which, exponents):
    offsets = [str(1 << k) for k in sorted(exponents, reverse=True)]
    if len(offsets) == 1:
        return f"the {which} shuffle step (offset {offsets[0]}) is missing."
    return f"the {which} {len(offsets)} shuffle steps (offsets {', '.join(offsets)}) are missing."


def _diagnose_lane_counts(m):
    """("not done" | "hint", sentence) for the multiplicities m[lane] of the first warp's lanes."""
    m = list(m)
    lanes = range(WARP)
    if all(c == 1 for c in m):
        return ("hint", "every lane of the warp is counted exactly once, so the warp sum works. The mistake "
                        "is in how warps or blocks are combined: only lane 0 of each warp should store its "
                        "warp's total, a barrier must come between storing the warps' totals and reading "
                        "them, and the output must be zeroed before blocks add to it.")
    if m == [1] + [0] * (WARP - 1):
        return ("not done", "lane 0's result holds only its own value, so the warp sum returns each lane's "
                            "value unchanged (the stub `return v`). Add the other lanes' values with "
                            "`cuda.shfl_down_sync(FULL_MASK, v, offset)` for offset = 16, 8, 4, 2, 1.")
    if not any(m):
        return ("hint", "lane 0's result holds none of the warp's values: the warp's total is not the value "
                        "that gets stored (is it lane 0 that stores it, after the shuffles?).")
    for s in range(1, 5):
        if m == [1 if j % (1 << s) == 0 else 0 for j in lanes]:
            nth = {1: "2nd", 2: "4th", 3: "8th", 4: "16th"}[s]
            return ("hint", f"only every {nth} lane (0, {1 << s}, {2 << s}, ...) reaches lane 0: "
                            f"{_steps('last', range(s))} The loop must run offset = 16, 8, 4, 2, 1 and stop "
                            "after 1 (`while offset > 0`).")
    for p in range(0, 5):
        if m == [1 if j < (1 << p) else 0 for j in lanes]:
            return ("hint", f"only lanes 0-{(1 << p) - 1} reach lane 0: {_steps('first', range(p, 5))} "
                            "Start at half the warp, offset = 16.")
    if len(set(m)) == 1:
        return ("hint", f"every lane is counted {m[0]} times: a step added the lane's own value again. A "
                        "shuffle whose source lies outside the warp (offset 32 or more, or offset 0) returns "
                        "the caller's own value; the offsets must be 16, 8, 4, 2, 1.")
    by_count = {}
    for j, c in enumerate(m):
        if c != 1:
            by_count.setdefault(c, []).append(j)
    listed = "; ".join(f"lane{'s' if len(js) > 1 else ''} {_lanes(js)}: {c} time{'s' if c != 1 else ''}"
                       for c, js in sorted(by_count.items()))
    return ("hint", f"lane 0's result counts these lanes a wrong number of times ({listed}; the probe reads "
                    "counts up to 7); a warp sum counts each of the 32 lanes exactly once.")


# ---------------------------------------------------------------------------------------------
# Row sums (a warp, or a block, per row)

def row_sum_cases(block: int = 256) -> list[tuple[str, int]]:
    """(label, number of rows): one row, a few, and more rows than one block has warps (so that a
    kernel that forgets the block index, with one warp per row, fails under the simulator too)."""
    from ..environment import on_simulator

    many = 2 * (block // WARP) + 3 if on_simulator() else 4099
    return [("1 row", 1), ("5 rows", 5), ("many rows", many)]


def check_row_sums(launch, *, name: str = "row sums", row: int = 256, block: int = 256, seed=None) -> None:
    """Check ``out[r] = x[r, 0] + ... + x[r, row - 1]``, the sum of each row of a float32 matrix.

    ``launch(out, x)`` launches the kernel; ``x`` has shape (rows, ``row``) with values in [-1, 2)
    and ``out`` one element per row. Any mapping of threads to rows passes (a block per row, a warp
    per row); the numbers of rows (:func:`row_sum_cases`) include more rows than a block of
    ``block`` threads has warps. The tolerance follows the row length (``k = row``).
    """
    require_callable(launch, "launch")
    if not isinstance(row, int) or row < 1:
        raise KernelLabArgumentError(f"row (elements per row) must be a positive whole number, got {row!r}")
    check_kernel(name, launch, lambda x: x.sum(axis=1),
                 lambda rows, rng: (rng.uniform(-1.0, 2.0, (rows, row)).astype(np.float32),),
                 sizes=row_sum_cases(block), k=row, seed=seed)


# ---------------------------------------------------------------------------------------------
# Warp (and block) inclusive prefix sums

def _segmented(x, segment, fn):
    out = np.empty_like(x)
    for start in range(0, len(x), segment):
        out[start:start + segment] = fn(x[start:start + segment])
    return out


def _segmented_cumsum(x, segment):
    """Inclusive prefix sums restarted every `segment` elements (vectorised)."""
    pad = (-len(x)) % segment
    rows = np.concatenate([x, np.zeros(pad, x.dtype)]).reshape(-1, segment)
    return np.cumsum(rows, axis=1).ravel()[: len(x)]


def _scan_without_guard(seg):
    # Hillis-Steele with shfl_up_sync but no `if lane >= offset`: lanes below the offset get their
    # own value back from the shuffle and add it again.
    v = np.zeros(WARP)
    v[: len(seg)] = seg
    offset = 1
    for _ in range(5):  # offsets 1, 2, 4, 8, 16
        up = np.array([v[j - offset] if j >= offset else v[j] for j in range(WARP)])
        v = v + up
        offset *= 2
    return v[: len(seg)]


def _scan_variants(x, segment):
    """The results of the usual mistakes, for the probe input x (float64)."""
    variants = [
        ("returns own", x.copy()),
        ("exclusive", _segmented(x, segment, lambda s: np.cumsum(s) - s)),
        ("suffix", _segmented(x, segment, lambda s: np.cumsum(s[::-1])[::-1])),
    ]
    if segment == WARP:
        variants.append(("no guard", _segmented(x, WARP, _scan_without_guard)))
        for short in (16, 8, 4, 2):  # Hillis-Steele that stops early: each lane sums a window of lanes
            window = lambda seg, w=short: np.array([seg[max(0, j - w + 1): j + 1].sum() for j in range(len(seg))])
            variants.append((f"window {short}", _segmented(x, WARP, window)))
    return variants


_SCAN_HINTS = {
    "returns own": ("not done", "every output equals its input: the scan returns each lane's value unchanged "
                                "(the stub `return v`)."),
    "exclusive": ("hint", "the output is the *exclusive* scan (each element misses its own value): an inclusive "
                          "scan adds every element up to and including this one."),
    "suffix": ("hint", "the output holds suffix sums (from this element to the end of its warp): the values "
                       "flow the wrong way. Use `cuda.shfl_up_sync` (read from lane - offset), not "
                       "`shfl_down_sync`."),
    "no guard": ("hint", "the first lanes of each warp are too large: `cuda.shfl_up_sync` returns the caller's "
                         "own value when lane - offset < 0, so those lanes added themselves again. Add only "
                         "`if lane >= offset`."),
}


def check_warp_prefix_sum(launch, *, name: str = "warp prefix sum", segment: int = WARP, block: int = 256,
                          sizes=None, seed=None) -> None:
    """Check an inclusive prefix sum restarted every ``segment`` elements (32: one per warp).

    ``launch(out, x)`` must write ``out[i] = x[s] + x[s+1] + ... + x[i]`` where ``s`` is ``i``
    rounded down to a multiple of ``segment``. ``x`` is float32. Use ``segment=block`` for a
    block-wide scan. On failure a probe with small whole numbers compares the result with the
    usual mistakes and names the one that matches.
    """
    require_callable(launch, "launch")
    if not isinstance(segment, int) or segment < 1:
        raise KernelLabArgumentError(f"segment must be a positive whole number, got {segment!r}")

    def inputs(n, rng):
        return (rng.standard_normal(n).astype(np.float32),)

    def reference(x):
        return _segmented_cumsum(x, segment)

    try:
        check_kernel(name, launch, reference, inputs, sizes=_labelled(sizes, block), out_dtype=np.float32,
                     k=segment, seed=seed)
    except CheckFailed as failure:
        if "not done yet" in str(failure):
            raise
        match = _probe_scan(launch, segment)
        if match in _SCAN_HINTS and _SCAN_HINTS[match][0] == "not done":
            raise CheckFailed(f"{name}: the exercise is not done yet: {_SCAN_HINTS[match][1]}") from None
        lines = [str(failure)]
        if match is not None:
            if match.startswith("window "):
                short = int(match.split()[1])
                text = (f"each element sums only the last {short} elements of its warp, not all of them from "
                        "the warp's start: the last shuffle step(s) are missing. The offsets must be 1, 2, 4, "
                        "8, 16 (double while offset < 32).")
            else:
                text = _SCAN_HINTS[match][1]
            lines.append("Diagnosis (a probe with small whole numbers, exact in float32): " + text)
        raise CheckFailed("\n".join(lines)) from None


def _probe_scan(launch, segment):
    from numba import cuda

    n = 2 * segment + 5
    x = (np.arange(n) % 7 + 1).astype(np.float32)  # exact sums, no two neighbours alike
    try:
        out = cuda.to_device(poisoned_host(n, np.float32))
        launch(out, cuda.to_device(x))
        cuda.synchronize()
        got = out.copy_to_host().astype(np.float64)
    except Exception:
        return None
    for label, expected in _scan_variants(x.astype(np.float64), segment):
        if np.array_equal(got, expected):
            return label
    return None


# ---------------------------------------------------------------------------------------------
# Stream compaction (ballot + warp-aggregated atomic)

_GUARD = 64


def _compaction_cases(sizes, block):
    """(label, n, fraction of positive values, fraction of zeros) for each case."""
    if sizes is not None:
        return [(label, n, 0.45, 0.1) for label, n in _labelled(sizes, block)]
    from ..environment import on_simulator

    # The host-side comparison is O(n) but not free: 4M elements (16K blocks) are plenty on a GPU.
    large = 1100 if on_simulator() else 1 << 22
    cases = [(label, n, 0.45, 0.1) for label, n in adversarial_sizes(block, large=large)]
    return cases + [("all kept", 2 * block + 5, 1.0, 0.0), ("none kept", 2 * block + 5, 0.0, 0.0)]


def _compaction_input(n, positive, zeros, rng):
    """float32 values, about `positive` of them > 0 and `zeros` of them +0.0 or -0.0 (the values a
    `>=` in place of `>` keeps). The magnitudes are distinct and name their element: the integer part
    of |x[i]| is a permutation of 1..n, and the fraction has bits float16 does not keep, so a value
    stored in a narrower format is no longer a value of x."""
    key = rng.permutation(n) + 1
    magnitude = (key + rng.uniform(0.05, 0.95, n)).astype(np.float32)
    # Past 2**21 float32 keeps fewer fraction bits than the fraction has, and key + 0.9 can round up
    # to key + 1, naming another element (a correct kernel then "fails"): there, use the float32
    # just above the key, whose integer part is still the key (n stays below 2**23).
    renamed = np.floor(magnitude) != key
    magnitude[renamed] = np.nextafter(key[renamed].astype(np.float32), np.float32(np.inf))
    u = rng.random(n)
    sign = np.where(u < positive, 1.0, -1.0).astype(np.float32)
    x = sign * magnitude
    zero = (u >= positive) & (u < positive + zeros)
    x[zero] = np.where(rng.random(int(zero.sum())) < 0.5, np.float32(0.0), np.float32(-0.0))
    return x


def check_compaction(launch, *, name: str = "compaction", keep_warp_order: bool = True, block: int = 256,
                     sizes=None, seed=None) -> None:
    """Check a stream compaction that keeps the positive values of ``x``.

    ``launch(out, count, x)``: ``x`` is float32 (about 45% positive, 10% zeros of either sign, which
    are not positive); ``out`` has ``x.size`` elements holding poison; ``count`` is a one-element
    int32 array holding 0. After the launch ``count[0]`` must be the number of positive values and
    ``out[:count[0]]`` must hold exactly those values, bit for bit (a copy is exact). Which warp
    gets which part of ``out`` depends on the order of the atomics, so the order across warps is
    free. With ``keep_warp_order`` (the ballot version) the values of one warp (input elements
    ``32w`` to ``32w + 31``) must sit side by side in input order.
    """
    from numba import cuda

    require_callable(launch, "launch")
    cases = _compaction_cases(sizes, block)
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    failures, ran = {}, []
    for label, n, positive, zeros in cases:
        if failures and check_settings.first_failure_only:
            break
        ran.append(label)
        x = _compaction_input(n, positive, zeros, rng)
        buffer = cuda.to_device(poisoned_host(n + _GUARD, np.float32))
        count = cuda.to_device(np.zeros(1, np.int32))
        try:
            launch(buffer[:n], count, cuda.to_device(x))
        except NotImplementedError as exc:
            raise CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})") \
                from None
        cuda.synchronize()
        host = buffer.copy_to_host()
        problem = _compaction_problem(x, host[:n], host[n:], int(count.copy_to_host()[0]), keep_warp_order)
        if problem is not None:
            failures[label] = (f"{name} (size {label} = {n}): " + problem[0], problem[1])
    if failures:
        if all(kind == "not done" for _, kind in failures.values()):
            raise CheckFailed(f"{name}: the exercise is not done yet: your kernel wrote nothing (the counter is "
                              "still 0 and no value was written).")
        primary = next(text for text, kind in failures.values() if kind != "not done")
        passed = [label for label in ran if label not in failures]
        raise CheckFailed(f"{primary}\nsizes that fail: {', '.join(failures)}; sizes that pass: "
                          f"{', '.join(passed) or 'none'}\n(inputs drawn with seed={seed}; pass seed={seed} to "
                          "reproduce)")
    labels = ", ".join(label for label, *_ in cases)
    print(f"{name}: correct for all {len(cases)} sizes ({labels})")
    progress.passed(name)


def _compaction_problem(x, got, guard, count, keep_warp_order):
    """None if right, else (explanation, kind) with kind 'not done' or 'wrong'."""
    n = x.size
    kept_index = np.flatnonzero(x > 0)
    expected = len(kept_index)
    unwritten = is_poison(got)
    if count == 0 and unwritten.all() and expected > 0:
        return ("the counter is 0 and nothing was written to out.", "not done")
    lines, hints = [], []
    guard_written = int(np.count_nonzero(~is_poison(guard)))
    if guard_written:
        lines.append(f"{guard_written} element(s) past the end of out were written.")
    warp_of = np.arange(n) // WARP
    per_warp = np.bincount(warp_of[kept_index], minlength=(n + WARP - 1) // WARP)
    warps_with_kept = int(np.count_nonzero(per_warp))
    if count != expected:
        lines.append(f"the counter says {count} but {expected} value(s) are positive.")
        if expected and count == int((per_warp.astype(np.int64) ** 2).sum()) and count != expected:
            hints.append("every kept lane added its warp's whole count to the counter: only one lane per warp "
                         "(for example lane 0) should call `cuda.atomic.add(count, 0, cuda.popc(ballot))`, then "
                         "broadcast the slot it got with `cuda.shfl_sync`.")
        elif expected and count == warps_with_kept:
            hints.append("the counter went up by 1 per warp: add the warp's number of kept values, "
                         "`cuda.popc(ballot)`.")
        elif count > n or count < 0:
            hints.append("the counter ends outside 0..n: is it zeroed, and incremented only by atomics?")
    limit = min(max(count, 0), n)
    slots, slot_unwritten = got[:limit], unwritten[:limit]
    written = slots[~slot_unwritten]
    # The integer part of |x[i]| is a permutation of 1..n (see _compaction_input): a value names its
    # element, so the lookups are O(n); a value counts only if it is that element's value bit for bit.
    key_of = np.zeros(n, np.int64)
    key_of[:] = np.floor(np.abs(x.astype(np.float64)))
    value_of_key = np.zeros(n + 1, np.float32)
    is_kept = np.zeros(n + 1, bool)
    named = key_of >= 1  # zeros name no element
    value_of_key[key_of[named]] = x[named]
    is_kept[key_of[kept_index]] = True
    with np.errstate(invalid="ignore", over="ignore"):
        key = np.floor(np.abs(written.astype(np.float64)))
    whole = np.isfinite(key) & (key >= 1) & (key <= n)
    key = np.where(whole, key, 0).astype(np.int64)
    known = whole & is_kept[key] & (written.view(np.uint32) == value_of_key[key].view(np.uint32))
    foreign = written[~known]
    hits = np.bincount(key[known], minlength=n + 1)
    doubled = int(np.count_nonzero(hits > 1))
    missing = int(expected - np.count_nonzero(hits[is_kept]))
    n_values = int(np.count_nonzero(hits)) + len(np.unique(foreign))
    n_unwritten = int(slot_unwritten.sum())
    if len(foreign):
        lines.append(f"{len(foreign)} value(s) in out[:count] are not positive elements of x (e.g. "
                     f"{float(foreign[0]):.9g}).")
        if np.any(foreign <= 0):
            hints.append("non-positive values were kept (negative values, or zeros, which are not positive): the "
                         "predicate passed to `cuda.ballot_sync` must be `i < n and x[i] > 0` (not `>=`), and only "
                         "lanes whose predicate is true may write.")
        near = whole[~known] & is_kept[key[~known]] & (foreign > 0)
        if near.any():
            hints.append("some values are close to, but not exactly, the positive elements of x: a compaction "
                         "copies values, so store `x[i]` itself, in its own format (float32), not a value "
                         "converted to a narrower type or computed from it.")
    if doubled:
        lines.append(f"{doubled} value(s) appear more than once.")
    if missing:
        lines.append(f"{missing} of the {expected} positive value(s) are missing from out[:count].")
    if n_unwritten:
        lines.append(f"{n_unwritten} of the first {limit} slot(s) of out were never written.")
        if n_values and n_values <= warps_with_kept < expected:
            hints.append("only about one value per warp arrived: the kept lanes of a warp all wrote to the same "
                         "slot. Each lane must add its rank among the warp's kept lanes to the warp's base: "
                         "`base + cuda.popc(ballot & cuda.lanemask_lt())` (the kept lanes below it).")
    beyond = int(np.count_nonzero(~unwritten[limit:]))
    if beyond:
        lines.append(f"{beyond} value(s) were written past out[count - 1].")
    if not lines and keep_warp_order and expected:
        position = np.zeros(n + 1, np.int64)  # integer part of the magnitude -> input index
        position[key_of[named]] = np.flatnonzero(named)
        source = position[np.floor(np.abs(got[:count].astype(np.float64))).astype(np.int64)]  # input index of each slot
        warp = source // WARP
        order = np.argsort(warp, kind="stable")  # output slots grouped by warp, in slot order
        same_warp = warp[order][1:] == warp[order][:-1]
        apart = same_warp & (np.diff(order) != 1)
        shuffled = same_warp & (np.diff(source[order]) <= 0)
        if apart.any():
            lines.append(f"the values of warp {warp[order][1:][apart][0]} are not side by side in out.")
            hints.append("each warp should reserve one range of slots with a single atomic (its base) and "
                         "place its values at base + rank.")
        elif shuffled.any():
            lines.append(f"the values of warp {warp[order][1:][shuffled][0]} are not in input order.")
            hints.append("a lane's rank must be the number of kept lanes *below* it: "
                         "`cuda.popc(ballot & cuda.lanemask_lt())`.")
    if not lines:
        return None
    return (" ".join(lines) + "".join(f"\nHint: {h}" for h in hints), "wrong")


# ---------------------------------------------------------------------------------------------
# Occupancy

@dataclass(frozen=True)
class SMLimits:
    """What one streaming multiprocessor (SM) of a GPU generation can hold at once.

    From the CUDA C++ Programming Guide ("Compute capabilities") and the rules of NVIDIA's
    occupancy calculator (``cuda_occupancy.h``): registers are handed to *warps* in units of
    ``reg_alloc_unit`` (256 registers = 8 per thread), and each of the SM's ``sub_partitions``
    (one per warp scheduler) has a quarter of the register file; shared memory is handed to
    *blocks* in units of ``smem_alloc_unit`` bytes, plus ``smem_reserved_per_block`` bytes the
    driver keeps per block (from compute capability 8.0 on).
    """

    name: str
    compute_capability: tuple
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes of shared memory one SM can give to its blocks (largest carveout)
    smem_per_block_optin: int  # the most one block may ask for (above 48 KiB needs an opt-in)
    smem_alloc_unit: int = 128
    smem_reserved_per_block: int = 1024
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256
    sub_partitions: int = 4
    max_threads_per_block: int = 1024
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


def _limits(name, cc, threads, blocks, smem_kib, **extra):
    smem = smem_kib * 1024
    reserved = extra.pop("smem_reserved_per_block", 1024 if cc >= (8, 0) else 0)
    return SMLimits(name, cc, threads, blocks, smem, smem - reserved,
                    smem_alloc_unit=128 if cc >= (8, 0) else 256, smem_reserved_per_block=reserved, **extra)


SM_LIMITS = {
    (7, 0): _limits("V100 (Volta)", (7, 0), 2048, 32, 96),
    (7, 5): _limits("T4, RTX 20xx (Turing)", (7, 5), 1024, 16, 64),
    (8, 0): _limits("A100 (Ampere)", (8, 0), 2048, 32, 164),
    (8, 6): _limits("A10, RTX 30xx (Ampere)", (8, 6), 1536, 16, 100),
    (8, 9): _limits("L4, L40, RTX 40xx (Ada)", (8, 9), 1536, 24, 100),
    (9, 0): _limits("H100, H200 (Hopper)", (9, 0), 2048, 32, 228),
    (10, 0): _limits("B200 (Blackwell)", (10, 0), 2048, 32, 228),
    (10, 3): _limits("B300 (Blackwell)", (10, 3), 2048, 32, 228),
    (12, 0): _limits("RTX 50xx (Blackwell)", (12, 0), 1536, 24, 100),
}
"""Per-SM limits by compute capability (CUDA Programming Guide; NVIDIA CCCL's arch_traits)."""


def sm_limits(compute_capability) -> SMLimits:
    """The :class:`SMLimits` of a compute capability such as ``(9, 0)``."""
    cc = tuple(compute_capability)
    if cc not in SM_LIMITS:
        known = ", ".join(f"{a}.{b}" for a, b in SM_LIMITS)
        raise KernelLabArgumentError(f"no SM limits for compute capability {cc[0]}.{cc[1]} in the table "
                                     f"(known: {known}); on a GPU, sm_limits_of_this_gpu() asks the driver")
    return SM_LIMITS[cc]


def sm_limits_of_this_gpu() -> SMLimits:
    """This GPU's limits: the table's row for its compute capability, or the driver's numbers.

    Under the simulator there is no GPU; the H100's row is returned as an example.
    """
    from ..environment import gpu_info, on_simulator

    if on_simulator():
        return SM_LIMITS[(9, 0)]
    cc = gpu_info().compute_capability
    if cc in SM_LIMITS:
        return SM_LIMITS[cc]
    from numba import cuda

    dev = cuda.get_current_device()
    reserved = int(getattr(dev, "RESERVED_SHARED_MEMORY_PER_BLOCK", 1024))
    smem = int(dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
    return SMLimits(gpu_info().name, cc, int(dev.MAX_THREADS_PER_MULTIPROCESSOR),
                    int(dev.MAX_BLOCKS_PER_MULTIPROCESSOR), smem, smem - reserved,
                    smem_alloc_unit=128 if cc >= (8, 0) else 256, smem_reserved_per_block=reserved,
                    regs_per_sm=int(dev.MAX_REGISTERS_PER_MULTIPROCESSOR),
                    regs_per_block=int(dev.MAX_REGISTERS_PER_BLOCK))


OCCUPANCY_KEYS = ("threads", "blocks", "registers", "shared_memory")


def _round_up(x, unit):
    return -(-x // unit) * unit


def _reference_limits(limits: SMLimits, threads, regs, smem, *, whole_warps=True, round_regs=True,
                      partitions=True, launch_check=True, per_warp=True, reserve=True, round_smem=True):
    """Blocks per SM allowed by each resource alone (the rules of cuda_occupancy.h; the keyword
    switches leave one rule out, to recognise a calculator that forgot it)."""
    big = 10**9  # "does not limit"
    warps = -(-threads // limits.warp_size)
    by_threads = limits.max_warps_per_sm // warps if whole_warps else limits.max_threads_per_sm // threads
    if regs == 0:
        by_regs = big
    elif not per_warp:
        by_regs = limits.regs_per_sm // (regs * threads)
    else:
        per_warp_regs = regs * limits.warp_size
        if round_regs:
            per_warp_regs = _round_up(per_warp_regs, limits.reg_alloc_unit)
        if launch_check and per_warp_regs * _round_up(warps, limits.sub_partitions) > limits.regs_per_block:
            by_regs = 0
        elif partitions:
            per_partition = limits.regs_per_sm // limits.sub_partitions
            by_regs = (per_partition // per_warp_regs) * limits.sub_partitions // warps
        else:
            by_regs = limits.regs_per_sm // per_warp_regs // warps
    per_block = smem + (limits.smem_reserved_per_block if reserve else 0)
    if round_smem:
        per_block = _round_up(per_block, limits.smem_alloc_unit)
    by_smem = limits.smem_per_sm // per_block if per_block else big
    return {"threads": by_threads, "blocks": limits.max_blocks_per_sm, "registers": by_regs,
            "shared_memory": by_smem}


# (label, compute capability, threads per block, registers per thread, shared memory bytes per block)
OCCUPANCY_CASES = [
    ("H100, 256 threads, 32 registers", (9, 0), 256, 32, 0),
    ("H100, 32-thread blocks", (9, 0), 32, 16, 0),
    ("H100, 80 threads (a partial warp)", (9, 0), 80, 32, 0),
    ("H100, 64 registers", (9, 0), 256, 64, 0),
    ("H100, 33 registers", (9, 0), 256, 33, 0),
    ("H100, 40 registers, 64 threads", (9, 0), 64, 40, 0),
    ("H100, 255 registers", (9, 0), 128, 255, 0),
    ("H100, 1024 threads x 64 registers", (9, 0), 1024, 64, 0),
    ("H100, 1024 threads x 72 registers", (9, 0), 1024, 72, 0),
    ("H100, 48 KiB shared memory", (9, 0), 128, 32, 48 * 1024),
    ("H100, 32276 B shared memory", (9, 0), 128, 32, 32276),
    ("H100, 77000 B shared memory", (9, 0), 64, 32, 77000),
    ("H100, 100 KiB shared memory", (9, 0), 256, 32, 100 * 1024),
    ("A100, 40 KiB shared memory", (8, 0), 128, 32, 40 * 1024),
    ("RTX 30xx, 256 threads", (8, 6), 256, 32, 0),
    ("V100, 24 KiB shared memory", (7, 0), 256, 32, 24 * 1024),
    ("V100, no shared memory", (7, 0), 128, 32, 0),
]

_RULES = {
    "threads": [
        (dict(whole_warps=False), "threads are given to blocks in whole warps: a block of 80 threads takes 3 "
                                  "warps (96 thread slots). Divide the SM's warps by the block's warps, "
                                  "rounded up."),
    ],
    "registers": [
        (dict(round_regs=False), "registers are handed out per warp in units of 256 (8 per thread): round "
                                 "registers per thread x 32 up to a multiple of limits.reg_alloc_unit."),
        (dict(partitions=False), "the register file is split between the SM's 4 schedulers "
                                 "(limits.sub_partitions) and a warp's registers come from one quarter: count "
                                 "the warps that fit in regs_per_sm / 4, then multiply by 4."),
        (dict(round_regs=False, partitions=False), "registers are handed out per warp in units of 256, from "
                                                   "one quarter of the register file: round up, divide a "
                                                   "quarter by it, multiply by 4."),
        (dict(per_warp=False), "registers are allocated to warps (rounded up to 256 per warp), not to single "
                               "threads."),
    ],
    "shared_memory": [
        (dict(reserve=False), "from compute capability 8.0 on the driver keeps limits.smem_reserved_per_block "
                              "(1 KiB) of shared memory per block: add it before rounding."),
        (dict(round_smem=False), "shared memory is handed out in units of limits.smem_alloc_unit bytes: round "
                                 "each block's share up."),
        (dict(reserve=False, round_smem=False), "add the 1 KiB the driver reserves per block, and round up "
                                                "to limits.smem_alloc_unit."),
    ],
}


def check_occupancy_calculator(fn, *, name: str = "occupancy calculator") -> None:
    """Check ``fn(limits, threads_per_block, regs_per_thread, smem_per_block)``.

    It must return a dict with the number of blocks one SM can hold as allowed by each resource
    alone: ``{"threads": ..., "blocks": ..., "registers": ..., "shared_memory": ...}`` (a value of
    ``limits.max_blocks_per_sm`` or more, including ``math.inf``, means "does not limit"). The
    occupancy is then ``min(values)`` blocks. Runs over :data:`OCCUPANCY_CASES`; pure Python, so
    the result is the same everywhere.
    """
    require_callable(fn, "fn")
    results, wrong = [], []
    for label, cc, threads, regs, smem in OCCUPANCY_CASES:
        limits = SM_LIMITS[cc]
        try:
            got = fn(limits, threads, regs, smem)
        except NotImplementedError as exc:
            raise CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})") \
                from None
        if got is None:
            raise CheckFailed(f"{name}: the exercise is not done yet (the function returned nothing)")
        if not isinstance(got, dict):
            raise CheckFailed(f"{name}: the function must return a dict with the keys {', '.join(OCCUPANCY_KEYS)}; "
                              f"it returned {type(got).__name__}")
        absent = [k for k in OCCUPANCY_KEYS if k not in got]
        if absent:
            raise CheckFailed(f"{name} ({label}): the result has no entry for {', '.join(absent)}: the dict needs "
                              f"one per resource ({', '.join(OCCUPANCY_KEYS)}), so the limit of "
                              f"{' and '.join(absent)} is missing from your calculator.")
        cap = limits.max_blocks_per_sm
        norm = {}
        for key in OCCUPANCY_KEYS:
            value = got[key]
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise CheckFailed(f"{name} ({label}): {key} must be a number of blocks, got {value!r}") from None
            if v < 0 or (math.isfinite(v) and v != int(v)):
                raise CheckFailed(f"{name} ({label}): {key} must be a whole number of blocks >= 0, got {value!r}"
                                  " (use // for the divisions)")
            norm[key] = cap if v >= cap else int(v)
        ref = {k: min(v, cap) for k, v in _reference_limits(limits, threads, regs, smem).items()}
        results.append((label, limits, threads, regs, smem, norm))
        for key in OCCUPANCY_KEYS:
            if norm[key] != ref[key]:
                wrong.append((label, limits, key, ref[key], norm[key]))
    if not wrong:
        print(f"{name}: correct for all {len(OCCUPANCY_CASES)} cases")
        progress.passed(name)
        return
    lines = [f"{name}: {len(wrong)} wrong value(s) in {len({w[0] for w in wrong})} of {len(OCCUPANCY_CASES)} "
             "cases (blocks per SM allowed by each resource; 'max' = does not limit):"]
    for label, limits, key, expected, got in wrong[:6]:
        show = lambda v, cap=limits.max_blocks_per_sm: "max" if v >= cap else str(v)  # noqa: E731
        lines.append(f"  {label}: {key}: expected {show(expected)}, got {show(got)}")
    if len(wrong) > 6:
        lines.append(f"  ... and {len(wrong) - 6} more")
    for key in OCCUPANCY_KEYS:
        bad = [w for w in wrong if w[2] == key]
        if not bad:
            continue
        cap_all = all(r[5][key] >= r[1].max_blocks_per_sm for r in results)
        if cap_all and key != "blocks":
            what = {"threads": "thread (warp slot)", "registers": "register", "shared_memory": "shared-memory"}[key]
            lines.append(f"Hint: your {key} value never limits anything: the calculator ignores the {what} limit.")
            continue
        if key == "blocks":
            lines.append("Hint: the block-slot limit is simply limits.max_blocks_per_sm.")
            continue
        for switches, hint in _RULES.get(key, []):
            if all(r[5][key] == min(_reference_limits(r[1], r[2], r[3], r[4], **switches)[key],
                                    r[1].max_blocks_per_sm) for r in results):
                lines.append(f"Hint ({key}): {hint}")
                break
    raise CheckFailed("\n".join(lines))
