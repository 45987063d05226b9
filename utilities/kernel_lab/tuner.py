"""An autotuner: time every candidate configuration once, keep the fastest, remember it on disk.

    tuner = Tuner("block_gemm", kernel_version=gemm.KERNEL_VERSION)
    result = tuner.tune(candidates, time_ms, shape=(m, n, k), dtypes=("float16", "float32"))
    result.best, result.from_cache, result.table()

``time_ms(candidate)`` builds, compiles and times one candidate and returns its median time in
milliseconds (or raises: a candidate that fails to compile or launch is recorded as failed, and
the tuner moves on). The result is stored in ``tuner.json`` in ``$KERNEL_LAB_CACHE_DIR`` (default
``~/.cache/kernel_lab``), keyed by everything that can change the answer: the GPU (name and
UUID), the kernel family and its version, the problem shape and the dtypes. A second run with the
same key returns the stored best without timing anything; a new GPU, shape, dtype or kernel
version tunes again. Pure Python: the timing function is the only part that touches a GPU, so
the tuner is unit-tested with a fake one.

Its two decisions are plain functions a learner can write (06.4) and pass in:
``Tuner(..., search=fn)`` with ``fn(candidates, time_ms) -> (best_trial, trials)`` (see
:func:`search`) and ``Tuner(..., lookup=fn)`` with ``fn(entries, key, candidates) -> config or
None`` (see :func:`find_cached`); :mod:`kernel_lab.checks.tensor_cores` checks both.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .validate import KernelLabArgumentError, require_callable

CACHE_FORMAT = 1


def cache_file(cache_dir=None) -> Path:
    root = cache_dir or os.environ.get("KERNEL_LAB_CACHE_DIR") or Path.home() / ".cache" / "kernel_lab"
    return Path(root) / "tuner.json"


def gpu_identity(gpu=None) -> str:
    """Name and UUID of the GPU whose timings these are (two cards of one model can differ)."""
    if gpu is None:
        from .environment import gpu_info

        gpu = gpu_info()
    name = getattr(gpu, "name", None) or "no GPU"
    uuid = getattr(gpu, "uuid", None) or "?"
    return f"{name} | {uuid}"


def config_to_dict(cfg) -> dict:
    if dataclasses.is_dataclass(cfg):
        return {"type": type(cfg).__name__, **dataclasses.asdict(cfg)}
    if isinstance(cfg, dict):
        return dict(cfg)
    raise KernelLabArgumentError(f"candidates must be dataclasses or dicts, got {type(cfg).__name__}")


def _label(cfg) -> str:
    return cfg.label() if hasattr(cfg, "label") else json.dumps(config_to_dict(cfg), sort_keys=True)


@dataclass
class Trial:
    config: object
    ms: float | None  # None: failed
    error: str | None = None


@dataclass
class TuneResult:
    best: object
    best_ms: float | None
    key: str
    from_cache: bool
    trials: list = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> str:
        """The candidates, fastest first, each with its time and its slowdown against the best."""
        if self.from_cache:
            return f"from the tuner cache: {_label(self.best)} ({self.best_ms:.3f} ms when tuned)"
        ok = sorted((t for t in self.trials if t.ms is not None), key=lambda t: t.ms)
        rows = [f"{'configuration':<52} {'ms':>9} {'vs best':>8}"]
        for t in ok:
            rows.append(f"{_label(t.config):<52} {t.ms:9.3f} {t.ms / ok[0].ms:7.2f}x")
        for t in self.trials:
            if t.ms is None:
                rows.append(f"{_label(t.config):<52} {'failed':>9}  {t.error}")
        return "\n".join(rows)


def _error_text(exc) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def search(candidates, time_ms, log=None):
    """Time every candidate once; return ``(best_trial, trials)``.

    A candidate whose timing raises, or returns something that is not a positive finite time, is
    recorded as failed (``Trial(config, None, error)``) and the search goes on; the best is the
    fastest of the others. Raises ``RuntimeError`` when every candidate failed."""
    trials = []
    for cand in candidates:
        try:
            ms = float(time_ms(cand))
            if not math.isfinite(ms) or ms <= 0:
                raise ValueError(f"the timing function returned {ms!r}, not a positive time")
            trials.append(Trial(cand, ms))
        except Exception as exc:  # noqa: BLE001 - a failing candidate must not stop the search
            trials.append(Trial(cand, None, _error_text(exc)))
        if log:
            log(trials[-1])
    ok = [t for t in trials if t.ms is not None]
    if not ok:
        errors = "; ".join(f"{_label(t.config)}: {t.error}" for t in trials[:3])
        raise RuntimeError(f"every candidate failed ({len(trials)}); first errors: {errors}")
    return min(ok, key=lambda t: t.ms), trials


def find_cached(entries: dict, key: str, candidates):
    """The cached winner for exactly ``key``, as one of ``candidates``; None when there is no entry
    for this key or its winner is no longer a candidate (then the caller tunes again)."""
    entry = entries.get(key)
    if entry is None:
        return None
    for cand in candidates:
        try:
            if config_to_dict(cand) == entry["best"]:
                return cand
        except KernelLabArgumentError:
            continue
    return None


class Tuner:
    def __init__(self, family: str, *, kernel_version: str, cache_dir=None, gpu: str | None = None,
                 search=None, lookup=None):
        if not family or not isinstance(family, str):
            raise KernelLabArgumentError("family must be a non-empty string naming the kernel family")
        self.family = family
        self.kernel_version = str(kernel_version)
        self.path = cache_file(cache_dir)
        self.gpu = gpu
        self.search = search  # the learner's search(candidates, time_ms), or None for search()
        self.find = lookup  # the learner's lookup(entries, key, candidates), or None for find_cached()

    def key(self, shape, dtypes, extra=None) -> str:
        """The cache key: GPU, kernel family and version, shape, dtypes (and anything in ``extra``)."""
        shape = tuple(int(s) for s in shape)
        dtypes = tuple(str(d) for d in dtypes)
        gpu = self.gpu if self.gpu is not None else gpu_identity()
        parts = [f"gpu={gpu}", f"kernel={self.family}@{self.kernel_version}", f"shape={shape}",
                 f"dtypes={dtypes}"]
        if extra:
            parts.append(f"extra={json.dumps(extra, sort_keys=True)}")
        return " ; ".join(parts)

    # ---- the file ----------------------------------------------------------------------------

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            return {}
        return data.get("entries", {})

    def _save(self, entries: dict) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"format": CACHE_FORMAT, "entries": entries}, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass  # read-only home: the result is still returned, only not remembered

    def lookup(self, key: str):
        return self._load().get(key)

    def forget(self, key: str | None = None) -> None:
        """Drop one entry (or every entry of this family) from the cache file."""
        entries = self._load()
        if key is None:
            entries = {k: v for k, v in entries.items() if f"kernel={self.family}@" not in k}
        else:
            entries.pop(key, None)
        self._save(entries)

    # ---- tuning ------------------------------------------------------------------------------

    def tune(self, candidates, time_ms, *, shape, dtypes, extra=None, refresh: bool = False,
             make_config=None, log=None) -> TuneResult:
        """Time each candidate with ``time_ms(candidate)`` and return the fastest (cached on disk).

        ``make_config(dict) -> config`` rebuilds a cached winner (default: the candidate whose
        fields match). ``refresh=True`` times again even if the key is cached.
        """
        require_callable(time_ms, "time_ms")
        candidates = list(candidates)
        if not candidates:
            raise KernelLabArgumentError("tune() needs at least one candidate configuration")
        key = self.key(shape, dtypes, extra)
        if not refresh:
            entries = self._load()
            if self.find is not None:
                best = self.find(entries, key, candidates)
            elif key in entries:
                best = self._rebuild(entries[key]["best"], candidates, make_config)
            else:
                best = None
            if best is not None:
                return TuneResult(best, entries.get(key, {}).get("best_ms"), key, True)
        start = time.perf_counter()
        if self.search is not None:
            best, trials = self.search(candidates, time_ms)
        else:
            best, trials = search(candidates, time_ms, log)
        entries = self._load()
        entries[key] = {"best": config_to_dict(best.config), "best_ms": best.ms,
                        "trials": [{"config": config_to_dict(t.config), "ms": t.ms, "error": t.error} for t in trials],
                        "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        self._save(entries)
        return TuneResult(best.config, best.ms, key, False, trials, time.perf_counter() - start)

    @staticmethod
    def _rebuild(stored: dict, candidates, make_config):
        if make_config is not None:
            return make_config(stored)
        for cand in candidates:
            try:
                if config_to_dict(cand) == stored:
                    return cand
            except KernelLabArgumentError:
                continue
        return None  # the stored winner is no longer a candidate: tune again


def knob_effects(trials, knobs) -> dict:
    """For each knob, the best time reached with each of its values: how much the knob matters.

    Returns ``{knob: {value: best_ms}}`` from successful trials; a knob whose values give nearly
    equal best times matters little for this shape.
    """
    out = {}
    for knob in knobs:
        best = {}
        for t in trials:
            if t.ms is None:
                continue
            value = config_to_dict(t.config).get(knob)
            best[value] = min(best.get(value, math.inf), t.ms)
        out[knob] = dict(sorted(best.items(), key=lambda kv: str(kv[0])))
    return out
