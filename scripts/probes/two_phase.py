"""The harness of the module-07 probes that compare kernel variants: compile every variant at once,
then time them one at a time.

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
