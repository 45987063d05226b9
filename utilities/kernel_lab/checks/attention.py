"""Checks for module 04: softmax, online softmax, fused attention forward and backward.

Each check draws fresh inputs chosen to expose the classic mistakes, runs the learner's launcher
on poisoned outputs, compares with the float64 NumPy reference (``kernel_lab.attention.reference``)
and prints one line per check on success. On failure it raises :class:`kernel_lab.CheckFailed`
with the usual report (how many elements, where, expected vs got) and, when the output matches
what a known mistake computes, the mistake's name (``MESSAGES``): the check replays each mistake
with ``kernel_lab.attention.online`` and compares.

The inputs ("cases") of the forward check:

* ``random, ragged``: normal inputs, two sequences with different numbers of valid keys;
* ``rising scores``: every key scores higher than the one before, so each key block raises the
  running max: a normaliser or an accumulator that is not rescaled shows at once;
* ``padding, empty and length-1 rows``: sequences with ``kv_len`` = seq - 3, 0 and 1; the padding
  keys past ``kv_len`` hold huge values, so a mask applied after the max leaves the max at a
  padding score and every valid ``exp`` underflows.

For the register-tiled kernel (``attention.tiled``, 04.3's second exercise) pass ``row_group`` (the
lanes that share a query row): the check then also replays the mistakes of its lanes
(``online.tiled_forward``: a row max or a normaliser not combined over the row group) and names a
shared-memory race between the lanes of a warp, found by the simulator, as P shared without
``syncwarp``.

Tolerances (derived from the input format's unit roundoff u; see ``kernel_lab.check.tolerance``,
``tol(k) = u (4 + 5 sqrt(k))``): a score ``s = scale q.k`` carries an absolute error of about
``tol(head_dim) * |s|_terms`` (``|s|_terms = scale |q|.|k|``), which ``exp`` turns into the same
*relative* error of ``p``; ``O = sum_j p_j v_j / l`` adds ``tol(seq)`` relative to ``P |V|``. So each
output element may be off by ``(tol(seq) + tol(head_dim) (1 + max |s|_terms)) * (P |V|)_id``, and the
log-sum-exp by the same rate times ``1 + |lse|``. The backward pass uses ``tol(seq + head_dim)``
(its sums run over queries and over head_dim) against the magnitudes of
``reference.gradient_magnitudes``. For fp16/bf16 inputs, pass ``fmt``: the unit roundoff of the
format also covers P rounded to it before the second product.
"""

from __future__ import annotations

import secrets
import warnings

import numpy as np

from .. import progress
from ..attention import online, reference
from ..check import CheckFailed, _mismatch, is_poison, poisoned_host, tolerance
from ..environment import on_simulator
from ..validate import require_callable

# The named messages: one per classic mistake (tests hold each one to a wrong kernel).
MESSAGES = {
    "fully_masked_nan": "rows with no valid key (kv_len = 0) came out as NaN: with m = -inf, exp(m - m_new) "
                        "is exp(-inf + inf) = NaN, and l = 0 gives 0 / 0. Skip the update while m_new is -inf, "
                        "and write O = 0, lse = -inf when l == 0",
    "normaliser_wrong_max": "the normaliser l was rescaled with the wrong max: when a block raises the running "
                            "max from m to m_new, l must be multiplied by exp(m - m_new) with the OLD m (keep it "
                            "before you overwrite it), like the accumulator",
    "acc_not_rescaled": "the output accumulator was not rescaled: when the running max grows from m to m_new, "
                        "acc must be multiplied by alpha = exp(m - m_new) before this block's p * v are added",
    "mask_after_max": "the mask was applied after the max: masked scores (padding keys, future keys) raised the "
                      "running max, so exp(s - m) of every valid key underflowed. Set masked scores to -inf "
                      "BEFORE taking the max",
    "causal_off_by_one": "the causal mask is off by one: query i must see keys j <= i (its own key included), "
                         "not j < i or j <= i + 1",
    "diagonal_block_skipped": "the causal block skip dropped the diagonal block: a key block must be visited "
                              "when any of its keys is <= the LAST query of the query block (loop to "
                              "min(kv_len, q0 + block_m)), with the mask inside it",
    "causal_ignored": "the causal mask was not applied: query i must not see keys j > i",
    "kv_lens_ignored": "the key padding was not applied: keys j >= kv_lens[b] must be masked (ragged lengths)",
    "lse_wrong": "the log-sum-exp is wrong: lse = m + log(l), natural log, with the running max m",
    "not_normalised": "the output was never divided by l (normalise once, at the end: O = acc / l)",
    "max_not_subtracted": "exp(x) was taken without subtracting the running max: it overflows for x > 88 in "
                          "float32 (inf / inf = NaN)",
    "delta_missing": "dS must be P * (dP - D) with D_i = sum_d dO_id O_id: the D term is missing",
    "p_without_lse": "P must be recomputed as exp(scale * q.k - lse) from the saved lse: it was not",
    "scale_missing": "dQ and dK must be multiplied by the softmax scale (the scores were scale * Q K^T)",
    "backward_mask_missing": "the backward pass must apply the same mask as the forward (causal, key padding) "
                             "when it recomputes P",
    "backward_causal_off_by_one": "the backward pass's causal mask is off by one: when it recomputes P, query i "
                                  "sees keys j <= i, its own key included",
    "ds_times_v": "dQ was computed from V: dQ = scale * dS K (the keys), as the scores were scale * Q K^T",
    # the register-tiled kernel (04.3's second exercise): a row's keys and O columns are spread over
    # the CG lanes of its row group
    "row_max_not_shared": "each lane used the max of its own keys: the row max must be combined over the CG lanes "
                          "of the row group (shfl_xor_sync with 1, 2, ..., CG/2) before m_new, alpha and p, "
                          "because every lane's P values meet in one row of P V and every lane's share of l in one "
                          "sum: all must be scaled by the same max",
    "normaliser_not_summed": "the lanes' partial normalisers were not summed: each lane's l holds only its own keys' "
                             "p (keys cg, cg + CG, ...), so l of the row is the sum over the CG lanes of the row "
                             "group (shfl_xor_sync, as for the max) before O = acc / l and lse",
    "nothing_accumulated": "O came out 0 in every row that has a valid key: nothing was added to the accumulator, "
                           "as when part of the kernel is still the exercise's stub (in the tiled kernel: softmax, "
                           "which writes P, and pv_step, which adds P V)",
    # ... and the lane's tile at the GPU's configuration: TM query rows and NCH 16-byte chunks of O a lane
    "lane_rows_alike": "only the rows past the first of each lane's TM rows are wrong, its first rows right: an index "
                       "that leaves out the lane's row i (Q's row lr0 + i in s_step, P's row pw + i * PP in "
                       "softmax or pv_step)",
    "lane_chunks_misplaced": "only the columns past each lane's first 16-byte chunk of O are wrong: a lane's chunk ch "
                             "of V (and of O) starts 4 * CG * ch + 4 * cg columns into the row, because the CG "
                             "lanes of a row group take turns, 4 columns each",
    "p_not_synced": "P went through shared memory without cuda.syncwarp(): the lanes of a row group read P values "
                    "that the other lanes wrote; end the softmax step (after the stores of P, before the P V step) "
                    "with cuda.syncwarp()",
}

_FORWARD_VARIANTS = {  # online.MISTAKES -> message
    "normaliser_stale_max": "normaliser_wrong_max", "normaliser_block_max": "normaliser_wrong_max",
    "acc_not_rescaled": "acc_not_rescaled", "mask_after_max": "mask_after_max",
    "causal_strict": "causal_off_by_one", "causal_plus_one": "causal_off_by_one",
    "diagonal_block_skipped": "diagonal_block_skipped", "not_normalised": "not_normalised",
    "lse_without_max": "lse_wrong", "lse_log2": "lse_wrong",
}
_TILED_VARIANTS = {"row_max_per_lane": "row_max_not_shared",  # online.TILED_MISTAKES -> message
                   "normaliser_partial": "normaliser_not_summed"}
_SOFTMAX_VARIANTS = {"max_not_subtracted": "max_not_subtracted", "normaliser_stale_max": "normaliser_wrong_max",
                     "lse_without_max": "lse_wrong", "lse_log2": "lse_wrong"}
_BACKWARD_VARIANTS = {"delta_missing": "delta_missing", "p_without_lse": "p_without_lse",
                      "scale_missing": "scale_missing", "mask_missing": "backward_mask_missing",
                      "causal_off_by_one": "backward_causal_off_by_one", "ds_times_v": "ds_times_v"}


def _device(*arrays):
    from numba import cuda

    return tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in arrays)


def _poisoned(shape, dtype=np.float32):
    from numba import cuda

    return cuda.to_device(poisoned_host(int(np.prod(shape)), dtype).reshape(shape))


def _host(arr):
    from numba import cuda

    cuda.synchronize()
    return arr.copy_to_host()


def _run(name, launch, *args, row_group=None):
    try:
        with warnings.catch_warnings():  # the simulator computes in NumPy, which warns about inf - inf
            warnings.simplefilter("ignore", RuntimeWarning)
            launch(*args)
    except NotImplementedError as exc:
        raise CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})") from None
    except Exception as exc:
        # the simulator's race detector, in a tiled kernel whose lanes share P (row_group): a write and
        # a read by two lanes of one warp (two writes are an index mistake, not a missing barrier) is
        # the syncwarp missing between the stores of P and the P V step
        text = str(exc)
        if (row_group and type(exc).__name__ == "SharedMemoryRace" and "same warp" in text and " writes it " in text
                and " reads it " in text):
            raise CheckFailed(f"{name}: {text}\n{_named('p_not_synced')}") from None
        raise


def _close(got, want, allowed):
    """Elementwise: got equals want within allowed (NaN matches NaN, inf matches inf of its sign)."""
    got = got.astype(np.float64)
    want = np.asarray(want, np.float64)
    with np.errstate(invalid="ignore"):
        return (np.abs(got - want) <= allowed) | (got == want) | (np.isnan(got) & np.isnan(want))


def _same_as(got, variant, ref, allowed) -> bool:
    """Does got match this wrong result, where the wrong result differs from the right one?"""
    differs = ~_close(variant, ref, allowed)
    return bool(differs.any()) and bool(_close(got, variant, allowed).all())


def _finite_part(lse):
    return np.where(np.isfinite(lse), lse, 0.0)


# Results below the smallest normal float32 (exp(-88)) lose their digits or flush to 0: an absolute
# allowance of that size, on top of the relative tolerance.
TINY = float(np.finfo(np.float32).tiny)


def _compare(name, got, ref, allowed_rate, magnitude, fmt, k, context, seed):
    """The standard report for one output (or None when it is right)."""
    return _mismatch(name, got, ref, fmt=fmt, k=k, rtol=allowed_rate, atol=TINY, magnitude=magnitude,
                     context=context, seed=seed)


def _named(message_key) -> str:
    return f"Hint ({message_key.replace('_', ' ')}): {MESSAGES[message_key]}."


# ================================================================================================
# Softmax with the running max and normaliser (notebook 04.2)


def softmax_cases(rng):
    """(label, x) float32 matrices that break softmax kernels: see :func:`check_online_softmax`."""
    x1 = np.array([[2.5], [-np.inf], [1.0e4]], np.float32)
    rnd = (3 * rng.standard_normal((5, 37))).astype(np.float32)
    rnd[2, ::3] = -np.inf  # masked entries inside a row
    huge = np.empty((4, 29), np.float32)
    huge[0] = 1.0e4 * rng.standard_normal(29)  # exp overflows without the max subtracted
    huge[1] = rng.uniform(-3.0e38, 3.0e38, 29)  # differences overflow float32: x - m = -inf, exp = 0
    huge[2] = 10.0 * np.arange(29) + rng.uniform(0, 1, 29)  # every element a new max
    huge[3] = -1.0e4 + rng.standard_normal(29)  # all large and negative: exp(x) underflows to 0
    masked = (3 * rng.standard_normal((3, 17))).astype(np.float32)
    masked[0] = masked[2] = -np.inf
    return [("length 1", x1), ("random, some -inf", rnd), ("huge magnitudes", huge), ("all -inf rows", masked)]


def check_online_softmax(launch, *, name: str = "online softmax", fmt="float32", seed=None) -> None:
    """``launch(out, lse, x)``: row softmax of float32 ``x`` ``[rows, n]`` into ``out``, natural
    log-sum-exp of each row into ``lse``; a row of -inf gives zeros and -inf.

    Cases: rows of length 1, random rows with -inf (masked) entries, huge magnitudes (1e4, 3e38,
    rising rows, large negative rows) and rows that are entirely -inf. The tolerance of each p is
    ``tol(n) * p * (1 + |x - max|)`` (the rounding of ``x - max`` grows with it), of lse ``tol(n) * (1 + |lse|)``.
    """
    require_callable(launch, "launch")
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    cases = softmax_cases(rng)
    for label, x in cases:
        out, lse = _poisoned(x.shape), _poisoned(x.shape[:1])
        _run(name, launch, out, lse, *_device(x))
        got_p, got_l = _host(out), _host(lse)
        ref_p, ref_l = reference.softmax_rows(x.astype(np.float64))
        rate = tolerance(fmt, x.shape[1])
        m = np.max(x.astype(np.float64), axis=1, keepdims=True)
        with np.errstate(invalid="ignore"):
            spread = np.where(np.isfinite(x), np.abs(x - np.where(np.isfinite(m), m, 0.0)), 0.0)
        mag_p = ref_p * (1.0 + spread)
        mag_l = 1.0 + np.abs(_finite_part(ref_l))
        context = f" (case '{label}', {x.shape[0]} rows of {x.shape[1]}) [seed={seed}]"
        problems = []
        empty = ~np.isfinite(ref_l)
        for what, got, ref, mag in (("p", got_p, ref_p, mag_p), ("lse", got_l, _finite_part(ref_l), mag_l)):
            g = got if what == "p" else np.where(empty & np.isneginf(got), 0.0, got)
            mm = _compare(f"{name}: {what}", g, ref, rate, mag, fmt, x.shape[1], context, None)
            if mm is not None:
                problems.append(mm)
        if not problems:
            continue
        text = problems[0].message()
        allowed_p, allowed_l = TINY + rate * np.maximum(mag_p, ref_p), TINY + rate * mag_l
        hint = None
        for mistake, key in _SOFTMAX_VARIANTS.items():
            var_p, var_l = online.online_softmax(x, mistake=mistake)
            if (_same_as(got_p, var_p, ref_p, allowed_p) or
                    _same_as(np.where(empty, 0, got_l), np.where(empty, 0, var_l), _finite_part(ref_l), allowed_l)):
                hint = key
                break
        if hint is None and empty.any() and (np.isnan(got_p[empty]).any() or np.isnan(got_l[empty]).any()):
            hint = "fully_masked_nan"
        raise CheckFailed(text + ("\n" + _named(hint) if hint else ""))
    progress.passed(name)
    print(f"{name}: correct for all {len(cases)} cases ({', '.join(lb for lb, _ in cases)})")


# ================================================================================================
# Fused attention forward (notebooks 04.3, 04.4)


def _default_seq(block_m: int) -> int:
    # not a multiple of the block: two full query blocks and a partial one
    return 2 * block_m + 3


def forward_cases(rng, head_dim: int, seq: int, dtype=np.float32):
    """(label, q, k, v, kv_lens) for one head_dim: see the module docstring."""
    def normal(*shape):
        return rng.standard_normal(shape).astype(dtype)

    cases = []
    q, k, v = normal(2, 2, seq, head_dim), normal(2, 2, seq, head_dim), normal(2, 2, seq, head_dim)
    cases.append(("random, ragged", q, k, v, np.array([seq, seq // 2 + 1], np.int32)))
    u = np.ones(head_dim) / np.sqrt(head_dim)
    q = (rng.standard_normal((1, 2, seq, head_dim)) * 0.5 + 2.0 * u).astype(dtype)
    rise = 0.2 * np.sqrt(head_dim) * np.arange(seq)[:, None] * u  # each key scores ~0.4 above the last
    k = (rng.standard_normal((1, 2, seq, head_dim)) * 0.5 + rise).astype(dtype)
    cases.append(("rising scores", q, k, normal(1, 2, seq, head_dim), np.array([seq], np.int32)))
    lens = np.array([max(seq - 3, 1), 0, 1], np.int32)
    q = (rng.standard_normal((3, 1, seq, head_dim)) + 1.0).astype(dtype)
    k = normal(3, 1, seq, head_dim)
    for b, n in enumerate(lens):
        k[b, :, n:] = 50.0  # padding keys: huge scores (a mask after the max keeps them)
    k[0, :, lens[0] - 2] = 50.0  # a valid key with a huge score: with a causal mask, a future key for
    # the queries before it (kernels that zero-fill padding still see this one in the diagonal block)
    cases.append(("padding, empty and length-1 rows", q, k, normal(3, 1, seq, head_dim), lens))
    return cases


def _forward_tolerances(q, k, v, kv_lens, causal, scale, fmt):
    s_abs = reference.score_magnitude(q, k, scale)
    mask = reference.key_mask(q.shape[2], k.shape[2], kv_lens, causal, q.shape[0])
    s_max = float(np.max(np.where(mask, s_abs, 0.0), initial=0.0))
    rate = tolerance(fmt, k.shape[2]) + tolerance(fmt, q.shape[3]) * (1.0 + s_max)
    return rate, reference.output_magnitude(q, k, v, scale=scale, kv_lens=kv_lens, causal=causal)


def check_attention_forward(launch, *, name: str = "fused attention", head_dims=(64, 128), causal=(False, True),
                            block_m: int | None = None, block_n: int | None = None, seq: int | None = None,
                            dtype=np.float32, fmt=None, seed=None, row_group: int | str | None = None) -> None:
    """``launch(o, lse, q, k, v, kv_lens, causal, scale)``: attention forward into float32 ``o``
    ``[batch, heads, seq, head_dim]`` and ``lse`` ``[batch, heads, seq]`` (both poisoned).

    ``q, k, v`` arrive as device arrays of ``dtype`` (float32; float16 for a tensor-core kernel, with
    ``fmt="float16"``), ``kv_lens`` as int32 ``[batch]``, ``causal`` as a bool, ``scale`` a float.
    ``block_m``/``block_n`` are the kernel's query and key block sizes: the check replays the
    block-wise mistakes with them to name yours. ``seq`` defaults to ``2 * block_m + 3``.
    ``row_group``: for a register-tiled kernel (``attention.tiled``), the lanes that share a query
    row (``cfg.cg``): the check then also names the mistakes of its lanes (a row max or a normaliser
    not combined over the row group, P shared without ``syncwarp``, found by the simulator); ``"mma"``
    for the quads of ``mma.sync``'s fragments (``attention.flash``, four lanes a row, interleaved).
    """
    require_callable(launch, "launch")
    if isinstance(causal, bool):
        causal = (causal,)
    fmt = fmt or np.dtype(dtype).name
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    bm = block_m or (8 if on_simulator() else 64)
    bn = block_n or bm
    seq = seq or _default_seq(bm)
    labels = []
    for d in head_dims:
        for c in causal:
            for label, q, k, v, lens in forward_cases(rng, d, seq, dtype):
                scale = 1.0 / np.sqrt(d)
                o, lse = _poisoned(q.shape), _poisoned(q.shape[:3])
                _run(name, launch, o, lse, *_device(q, k, v, lens), bool(c), float(scale), row_group=row_group)
                got_o, got_l = _host(o), _host(lse)
                _judge_forward(name, got_o, got_l, q, k, v, lens, bool(c), scale, fmt, bm, bn,
                               f" (head_dim {d}, {'causal' if c else 'not causal'}, case '{label}', "
                               f"[batch, heads, seq] = {list(q.shape[:3])}, kv_lens = {lens.tolist()})", seed,
                               row_group)
                labels.append(label)
    progress.passed(name)
    print(f"{name}: correct for head_dim {', '.join(map(str, head_dims))}, "
          f"{' and '.join('causal' if c else 'not causal' for c in causal)}, seq {seq}, "
          f"{len(set(labels))} cases each ({', '.join(dict.fromkeys(labels))})")


def _judge_forward(name, got_o, got_l, q, k, v, lens, causal, scale, fmt, bm, bn, context, seed, row_group=None):
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    ref_o, ref_l = reference.forward(q64, k64, v64, scale=scale, kv_lens=lens, causal=causal)
    rate, mag = _forward_tolerances(q64, k64, v64, lens, causal, scale, fmt)
    mag_l = 1.0 + np.abs(_finite_part(ref_l))
    empty = ~np.isfinite(ref_l)
    problems = []
    mm = _compare(f"{name}: O", got_o, ref_o, rate, mag, fmt, k.shape[2], context, seed)
    if mm is not None:
        problems.append(mm)
    lse_ok_empty = ~empty | np.isneginf(got_l)
    g_l = np.where(empty & np.isneginf(got_l), 0.0, got_l)
    mm_l = _compare(f"{name}: lse", g_l, _finite_part(ref_l), rate, mag_l, fmt, k.shape[2], context, seed)
    if mm_l is not None:
        problems.append(mm_l)
    if not problems:
        return
    text = problems[0].message()
    if mm is None and not lse_ok_empty.all():
        text += "\nThe lse of a row with no valid key must be -inf (log of an empty sum)."
    raise CheckFailed(text + "\n" + (_forward_hint(got_o, got_l, q, k, v, lens, causal, scale, rate, mag, mag_l,
                                                   bm, bn, ref_o, ref_l, row_group) or
                                     "No known mistake matches: compare your kernel with the steps in the notebook."))


def _forward_hint(got_o, got_l, q, k, v, lens, causal, scale, rate, mag, mag_l, bm, bn, ref_o, ref_l, row_group=None):
    empty = ~np.isfinite(ref_l)
    allowed_o = TINY + rate * np.maximum(mag, np.abs(ref_o))
    allowed_l = TINY + rate * mag_l
    ref_lf = _finite_part(ref_l)

    live = ~empty[..., None] & np.ones(got_o.shape, bool)
    if live.any() and (got_o[live] == 0).all():
        return _named("nothing_accumulated")

    def matches(var_o, var_l, own_scale=False):
        # own_scale: the wrong result may be far larger than the right one (O divided by a lane's
        # share of l), so its rounding is allowed in proportion to itself as well
        a_o = allowed_o + rate * np.abs(var_o) if own_scale else allowed_o
        a_l = allowed_l + rate * np.abs(np.where(np.isfinite(var_l), var_l, 0)) if own_scale else allowed_l
        return (_same_as(got_o, var_o, ref_o, a_o) or
                _same_as(np.where(empty, 0, got_l), np.where(np.isfinite(var_l), var_l, 0), ref_lf, a_l))

    with np.errstate(all="ignore"):
        for other_causal, other_lens, key in ((not causal, lens, "causal_ignored"), (causal, None, "kv_lens_ignored")):
            if causal or key != "causal_ignored":
                var_o, var_l = reference.forward(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                                 scale=scale, kv_lens=other_lens, causal=other_causal)
                if matches(var_o, var_l):
                    return _named(key)
        for mistake, key in _FORWARD_VARIANTS.items():
            if mistake.startswith(("causal", "diagonal")) and not causal:
                continue
            for block in dict.fromkeys((bn, 1)):
                var_o, var_l = online.blocked_forward(q, k, v, scale=scale, kv_lens=lens, causal=causal,
                                                      block_n=block, block_m=bm, mistake=mistake)
                if matches(var_o, var_l):
                    return _named(key)
        if row_group:  # the lanes of the register-tiled kernel, or of mma.sync's quads
            mma = row_group == "mma"
            for mistake, key in _TILED_VARIANTS.items():
                var_o, var_l = online.tiled_forward(q, k, v, scale=scale, kv_lens=lens, causal=causal, block_n=bn,
                                                    row_group=4 if mma else row_group, mistake=mistake,
                                                    layout="mma" if mma else "strided")
                if matches(var_o, var_l, own_scale=True):
                    return _named(key)
        if row_group and row_group != "mma":  # the lane's tile: which rows and columns of O are wrong
            lane = _lane_tile_hint(~_close(got_o, ref_o, allowed_o) & live, row_group)
            if lane:
                return _named(lane)
        # a mask after the max in a kernel that divides by l = 0: NaN where the emulation gives 0
        var_o, _ = online.blocked_forward(q, k, v, scale=scale, kv_lens=lens, causal=causal, block_n=bn,
                                          mistake="mask_after_max")
        bad = ~_close(var_o, ref_o, allowed_o)
        if bad.any() and np.isnan(got_o[bad]).all():
            return _named("mask_after_max")
    # rows with valid keys that came out all 0 or NaN (not poison): every exp(s - m) underflowed,
    # which is what a max taken over masked scores does
    with np.errstate(invalid="ignore"):
        lost = ~empty & ~is_poison(got_o).any(-1) & (np.isnan(got_o).any(-1) | (got_o == 0).all(-1))
    if lost.any():
        return _named("mask_after_max")
    if empty.any() and (np.isnan(got_o[empty]).any() or np.isnan(got_l[empty]).any()):
        return _named("fully_masked_nan")
    return None


def _lane_tile_hint(bad, row_group: int):
    """A register-tiled kernel's lane owns TM consecutive query rows (a block's rows are a multiple of
    TM) and the 16-byte chunks ``4 * CG * ch + 4 * cg`` of O: wrong elements only in chunks past the
    first, or only in rows past the first of each group of TM (TM = 2, 4 or 8), point at an index
    that leaves out ch or i. ``bad``: [batch, heads, seq, head_dim] of wrong elements."""
    if not bad.any():
        return None
    chunk = np.arange(bad.shape[3]) // (4 * row_group)
    cols = bad.any(axis=(0, 1, 2))
    if chunk[-1] > 0 and not cols[chunk == 0].any():
        return "lane_chunks_misplaced"
    rows = bad.any(axis=(0, 1, 3))
    pos = np.arange(rows.size)
    for tm in (2, 4, 8):
        if rows[pos % tm != 0].any() and not rows[pos % tm == 0].any():
            return "lane_rows_alike"
    return None


# ================================================================================================
# Backward (notebook 04.5)


def backward_cases(rng, head_dim: int, seq: int, dtype=np.float32):
    """(label, q, k, v, dO, kv_lens): normal inputs, ragged; and padding keys (moderate values, so
    that a missing mask gives wrong finite gradients), an empty and a length-1 sequence."""
    def normal(*shape):
        return rng.standard_normal(shape).astype(dtype)

    return [("random, ragged", normal(2, 2, seq, head_dim), normal(2, 2, seq, head_dim), normal(2, 2, seq, head_dim),
             normal(2, 2, seq, head_dim), np.array([seq, seq // 2 + 1], np.int32)),
            ("padding, empty and length-1 rows", normal(3, 1, seq, head_dim), normal(3, 1, seq, head_dim),
             normal(3, 1, seq, head_dim), normal(3, 1, seq, head_dim),
             np.array([max(seq - 3, 1), 0, 1], np.int32))]


def check_attention_backward(launch, *, name: str = "attention backward", head_dims=(64, 128), causal=(False, True),
                             block_m: int | None = None, seq: int | None = None, dtype=np.float32, fmt=None,
                             seed=None) -> None:
    """``launch(dq, dk, dv, q, k, v, o, lse, d_o, kv_lens, causal, scale)``: the gradients of attention
    into float32 ``dq, dk, dv`` (poisoned), given the forward's ``o`` and ``lse`` (from the float64
    reference, rounded to float32, so the backward pass is judged alone) and ``d_o``.
    """
    require_callable(launch, "launch")
    if isinstance(causal, bool):
        causal = (causal,)
    fmt = fmt or np.dtype(dtype).name
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    bm = block_m or (8 if on_simulator() else 64)
    seq = seq or _default_seq(bm)
    labels = []
    for d in head_dims:
        for c in causal:
            for label, q, k, v, d_o, lens in backward_cases(rng, d, seq, dtype):
                c = bool(c)
                scale = 1.0 / np.sqrt(d)
                q64, k64, v64, do64 = (a.astype(np.float64) for a in (q, k, v, d_o))
                ref_o, ref_l = reference.forward(q64, k64, v64, scale=scale, kv_lens=lens, causal=c)
                grads = [_poisoned(q.shape) for _ in range(3)]
                _run(name, launch, *grads, *_device(q, k, v, ref_o.astype(np.float32), ref_l.astype(np.float32),
                                                    d_o, lens), c, float(scale))
                got = [_host(g) for g in grads]
                context = (f" (head_dim {d}, {'causal' if c else 'not causal'}, case '{label}', "
                           f"[batch, heads, seq] = {list(q.shape[:3])}, kv_lens = {lens.tolist()})")
                _judge_backward(name, got, q64, k64, v64, do64, lens, c, scale, fmt, context, seed,
                                float(np.max(np.abs(_finite_part(ref_l)), initial=0.0)))
                labels.append(label)
    progress.passed(name)
    print(f"{name}: dQ, dK, dV correct for head_dim {', '.join(map(str, head_dims))}, "
          f"{' and '.join('causal' if c else 'not causal' for c in causal)}, seq {seq}, "
          f"{len(set(labels))} cases each ({', '.join(dict.fromkeys(labels))})")


def _judge_backward(name, got, q, k, v, d_o, lens, causal, scale, fmt, context, seed, lse_max):
    refs = reference.backward(q, k, v, d_o, scale=scale, kv_lens=lens, causal=causal)
    mags = reference.gradient_magnitudes(q, k, v, d_o, scale=scale, kv_lens=lens, causal=causal)
    mask = reference.key_mask(q.shape[2], k.shape[2], lens, causal, q.shape[0])
    s_max = float(np.max(np.where(mask, reference.score_magnitude(q, k, scale), 0.0), initial=0.0))
    kk = q.shape[2] + q.shape[3]
    rate = tolerance(fmt, kk) + tolerance(fmt, q.shape[3]) * (1.0 + s_max + lse_max)
    problems = []
    for label, g, r, m in zip(("dQ", "dK", "dV"), got, refs, mags):
        mm = _compare(f"{name}: {label}", g, r, rate, m, fmt, kk, context, seed)
        if mm is not None:
            problems.append((label, mm))
    if not problems:
        return
    text = problems[0][1].message()
    if len(problems) > 1:
        text += f"\n(also wrong: {', '.join(lb for lb, _ in problems[1:])})"
    allowed = [TINY + rate * np.maximum(m, np.abs(r)) for m, r in zip(mags, refs)]
    hint = None
    with np.errstate(all="ignore"):
        for mistake, key in _BACKWARD_VARIANTS.items():
            var = online.backward_with_mistake(q, k, v, d_o, mistake=mistake, scale=scale, kv_lens=lens,
                                               causal=causal)
            if any(_same_as(g, vv, r, a) for g, vv, r, a in zip(got, var, refs, allowed)):
                hint = key
                break
    if hint is None and any(np.isnan(g).any() for g in got) and not any(is_poison(g).any() for g in got):
        live = np.isfinite(reference.forward(q, k, v, scale=scale, kv_lens=lens, causal=causal)[1])
        if (~live).any():
            hint = "fully_masked_nan"
    raise CheckFailed(text + "\n" + (_named(hint) if hint else
                                     "No known mistake matches: compare your kernel with the formulas in the notebook."))

