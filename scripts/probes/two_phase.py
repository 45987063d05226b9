"""The harness of the probes that compare kernel variants: compile every variant at once, then time
them one at a time.

For module 06's pipeline probes, :func:`compile_side_by_side` compiles in a pool of worker processes
(the caches on disk then serve the timing process).

Phase 1 starts one process per variant with ``--compile-only`` (compiling is CPU work, side by side
it costs the slowest job and fills the on-disk caches); phase 2 runs each variant again, alone, in a
fresh process that finds its kernel cached. (Timing processes side by side on one GPU measures their
contention, not the kernels.) A probe's child prints one line ``RESULT <json>``.
"""
import json
import subprocess
import sys
import time


def child_main(child, spec: str, n: int, compile_only: bool) -> None:
    """The child's side: run ``child(spec, n, compile_only) -> dict`` and print its result line."""
    print("RESULT " + json.dumps(child(spec, n, compile_only)), flush=True)


def compile_then_time(script: str, specs: list[str], n: int) -> None:
    """The parent's side: both phases for ``script`` (which takes ``--child SPEC --n N [--compile-only]``)."""

    def run(batch, label, *extra):
        procs = [subprocess.Popen([sys.executable, script, "--child", str(s), "--n", str(n), *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for s in batch]
        for s, pr in zip(batch, procs):
            text = pr.communicate()[0]
            lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
            print(label, lines[-1][7:] if lines else f"{s}: no result\n{text[-2000:]}", flush=True)

    t0 = time.perf_counter()
    run(specs, "compiled:", "--compile-only")
    print(f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    for s in specs:
        run([s], "timed:")
    print(f"[{time.perf_counter() - t0:.0f} s]", flush=True)


def compile_side_by_side(worker, specs, describe) -> None:
    """Run ``worker(spec) -> (spec, seconds, error or None)`` for every spec in spawned worker
    processes (a module-level function, so it can be pickled), printing ``describe(spec)`` per job."""
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    workers = max(1, min(len(specs), (os.cpu_count() or 2) - 1))
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        for spec, seconds, error in pool.map(worker, specs):
            print(f"compiled {describe(spec)} in {seconds:.0f} s" + (f"  FAILED: {error}" if error else ""), flush=True)
    print(f"all compiled in {time.perf_counter() - t0:.0f} s", flush=True)
