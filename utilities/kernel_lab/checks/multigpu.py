"""Module 09's checks: the peer-read kernel of 09.1, and the one-shot all-reduce's flag protocol of
09.2, run for two simulated GPUs.

``check_peer_read(kernel)`` copies random float32 through the learner's kernel with both "GPUs" as two
buffers of one device (the simulator, or the one GPU this machine has: correctness does not depend on
where ``src`` lives), at sizes that catch the edges of a grid-stride loop with 16-byte loads: fewer
elements than one vector, whole vectors only, a tail of 3, and a grid smaller than the array.

``check_one_shot_protocol(block_fn)`` runs the learner's device function (``one_shot_block``'s
arguments) in ``multigpu.simulated.run_two_halves`` under several seeded schedules, two calls each,
with staging stores that other blocks see only after a system-scope fence. A failure is named by
rerunning what failed under changed conditions:

* blocks that wait forever, with a flag word that went down during the run: **flag reset too early**
  (the peer had not seen it yet); without one: a wait for a value nobody writes;
* a wrong sum that stays wrong when stores are visible at once: **the reader does not wait** for the
  peer's flag (it read data the peer had not written yet);
* a wrong sum that goes away when stores are visible at once, and also when ``cuda.threadfence()``
  publishes them: **a fence of the wrong scope** (another GPU needs ``cuda.threadfence_system()``);
* otherwise: **missing fence** between the data and the flag (or the fence after the flag).

On a machine with a GPU, Numba in this process compiles for the GPU, and a real GPU cannot show the
late stores that expose a missing fence (and would hang on the others). So there the check runs the
same diagnosis in a child Python with the simulator switched on (``NUMBA_ENABLE_CUDASIM=1``): it sends
the device function's source (``inspect.getsource``, which works for a notebook cell) and the values of
its closure, and reads back the verdict. The line it prints is the same on every machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from .. import progress
from ..check import CheckFailed, finishes_within
from ..environment import on_simulator

PEER_READ_SIZES = [("1 element", 1), ("3 elements: no whole vector", 3),
                   ("1,000 elements: whole vectors, 4 turns of the grid-stride loop", 1000),
                   ("1,027 elements: a tail of 3", 1027)]
PEER_READ_GRID = (2, 32)  # blocks, threads: 64 threads, so that 1,000 elements take 4 turns of the loop
PEER_READ_HINT = ("each thread starts at cuda.grid(1) and steps by the grid's size (gridDim.x * blockDim.x) "
                  "until it passes the number of groups of 4 (n // 4); group i is elements 4i..4i+3, loaded "
                  "with load4(src, 4 * i). The last n % 4 elements have no whole group: one thread each.")
PEER_READ_SCALAR_HINT = ("each thread starts at cuda.grid(1) and steps by the grid's size (gridDim.x * blockDim.x) "
                         "until it passes n: a grid of any size then covers any n.")


def check_peer_read(kernel, name: str = "peer read", *, vector: bool = True, seconds: float = 60) -> None:
    """Copy random float32 through ``kernel(src, dst)`` (a grid-stride loop over a grid of 2 x 32
    threads); print one line, or raise ``CheckFailed`` naming the size and the first wrong element.
    ``vector``: the kernel is meant to use 16-byte loads (the hint says how)."""
    import numpy as np

    from ..check import check_kernel
    from ..multigpu.peer import launch_peer_read

    blocks, threads = PEER_READ_GRID

    def launch(out, src):
        from ..vector_loads import MisalignedVectorAccess

        try:
            launch_peer_read(kernel, out, src, blocks=blocks, threads=threads)
        except Exception as exc:  # noqa: BLE001 - the simulator may wrap the vector access's error
            text = str(exc)
            if isinstance(exc, MisalignedVectorAccess) or ("16-byte access" in text or "past the end" in text):
                raise CheckFailed(f"{name} (n = {src.size:,}): {text.strip().splitlines()[-1]}\nHint: "
                                  f"{PEER_READ_HINT}") from None
            raise

    with finishes_within(name, seconds):
        check_kernel(name, launch, lambda src: src, lambda n, rng: (rng.standard_normal(n).astype(np.float32),),
                     sizes=PEER_READ_SIZES, fmt="float32", rtol=0, atol=0,
                     extra_hint=lambda got, expected: PEER_READ_HINT if vector else PEER_READ_SCALAR_HINT)


SEEDS = tuple(range(6))  # seed % 3 picks: both GPUs together, GPU 1 late, GPU 0 late

HANG_HINT = ("a reader polls a flag for a value nobody writes. Poll the peer's flag word for your block "
             "(`peer_flags[b]`) with `load_acquire_system` until it reaches `epoch`, and set your own with "
             "`cuda.atomic.exch(my_flags, b, epoch)`.")


def _where(outcome) -> str:
    late = ("both GPUs start together", "GPU 1 starts late", "GPU 0 starts late")[outcome.seed % 3]
    return f"schedule seed {outcome.seed} ({late}), call {outcome.epoch}"


def diagnose(block_fn, *, seeds=SEEDS, **sizes):
    """(name of the mistake or None, the message), from runs of ``block_fn`` in the simulator."""
    from ..multigpu.simulated import run_two_halves

    failures = [o for o in (run_two_halves(block_fn, seed=s, **sizes) for s in seeds) if o.kind != "ok"]
    if not failures:
        return None, ""
    first = failures[0]
    if first.kind == "hang":
        resets = [o for o in failures if o.kind == "hang" and o.resets]
        if resets:
            o = resets[0]
            g, word, old, new = o.resets[0]
            return "flag reset too early", (
                f"flag reset too early ({_where(o)}): the blocks waited for each other forever, and GPU {g}'s flag "
                f"word {word} went from {old} back to {new} during the call. The peer's block had not read the {old} yet, "
                f"so it waits for a flag that is gone (flags at the end: GPU 0 {o.flags[0]}, GPU 1 {o.flags[1]}). "
                "Hint: never reset a flag: write the call's epoch (1, 2, 3, ...) and wait until the peer's "
                "flag is >= epoch; last call's value is then simply too small.")
        return "reader waits forever", (
            f"the blocks waited for each other forever ({_where(first)}; flags at the end: GPU 0 {first.flags[0]}, "
            f"GPU 1 {first.flags[1]}, the call's epoch {first.epoch}). Hint: {HANG_HINT}")
    wrong = next(o for o in failures if o.kind == "wrong")
    if not wrong.staged and all(np.isnan(got) for _, _, got, _ in wrong.wrong):
        # nothing published and no sum written (staging and out still hold their NaN): the stub, not a
        # protocol mistake (a missing fence also leaves NaN sums, but its blocks did publish)
        return "not done yet", (
            f"not done yet: no block published its share and no sum was written ({_where(wrong)}; the staging "
            "buffers and out still hold the NaN they were filled with). If this is the exercise, write the "
            "protocol and the reduction; otherwise, does every block publish its share into `mine`?")
    g, i, got, expected = wrong.wrong[0]
    what = (f"{len(wrong.wrong)} sums wrong ({_where(wrong)}), first GPU {g} out[{i}] = {got:g}, "
            f"expected {expected:g}")
    visible_now = run_two_halves(block_fn, seed=wrong.seed, scope=None, **sizes)
    if visible_now.kind == "wrong":
        return "reader does not wait", (
            f"the reader does not wait: {what}, even when every store is visible at once. Your block read the "
            "peer's staging buffer before the peer had written this call's data. Hint: thread 0 polls "
            "`load_acquire_system(peer_flags, b)` until it reaches `epoch`, then `cuda.syncthreads()`, and only "
            "then does the block read `peer`.")
    gpu_scope = run_two_halves(block_fn, seed=wrong.seed, scope="gpu", **sizes)
    if gpu_scope.kind == "ok":
        return "fence of the wrong scope", (
            f"a fence of the wrong scope: {what}. With stores visible at once the sums are right, and also "
            "when cuda.threadfence() publishes them: your fence orders memory for this GPU only. The peer "
            "is another GPU. Hint: cuda.threadfence_system() between the data and the flag.")
    return "missing fence", (
        f"missing fence: {what}. With stores visible at once the sums are right: the peer saw your flag "
        "before your data. Hint: after `cuda.syncthreads()` (every thread has written its share), thread 0 "
        "calls cuda.threadfence_system() and only then sets the flag.")


# The child of a check on a GPU machine: the device function's source, run in the simulator.
_CHILD = """
import json, sys
job = json.load(sys.stdin)
import kernel_lab as kl
kl.setup(quiet=True)
import numpy as np
from numba import cuda
from kernel_lab.acquire import load_acquire_system
from kernel_lab.checks.multigpu import diagnose
space = dict(np=np, cuda=cuda, kl=kl, load_acquire_system=load_acquire_system, **job["closure"])
exec(compile(job["source"], "<" + job["name"] + ">", "exec"), space)
mistake, message = diagnose(space[job["name"]], seeds=tuple(job["seeds"]), **job["sizes"])
print(json.dumps({"mistake": mistake, "message": message}))
"""


def source_job(block_fn) -> dict:
    """What the child needs to rebuild ``block_fn``: its name, its source (decorator included) and the
    values of its closure (strings, numbers, booleans, None)."""
    import inspect
    import textwrap

    py = getattr(block_fn, "py_func", block_fn)
    try:
        source = textwrap.dedent(inspect.getsource(py))
    except (OSError, TypeError) as exc:
        raise CheckFailed(f"the check cannot read the source of {py.__name__} ({exc}): define it in a notebook cell "
                          "or a file, not with exec") from None
    closure = {}
    for var, cell in zip(py.__code__.co_freevars, py.__closure__ or ()):
        value = cell.cell_contents
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise CheckFailed(f"{py.__name__} uses `{var}` from an enclosing function ({type(value).__name__}); the "
                              "check can only pass numbers and strings to the simulator: make it a global")
        closure[var] = value
    return {"name": py.__name__, "source": source, "closure": closure}


def diagnose_in_simulator(block_fn, *, seeds=SEEDS, seconds: float = 60, **sizes):
    """``diagnose`` in a child Python with the simulator on: for a machine whose Numba targets a GPU."""
    job = dict(source_job(block_fn), seeds=list(seeds), sizes=sizes)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(job), capture_output=True, text=True,
                              timeout=seconds, env=env)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{job['name']} did not finish in the simulator within {seconds:g} s. Hint: {HANG_HINT}") \
            from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise CheckFailed(f"{job['name']} failed in the simulator:\n{done.stderr.strip()[-2000:]}")
    verdict = json.loads(lines[-1])
    return verdict["mistake"], verdict["message"]


def check_one_shot_protocol(block_fn, name: str = "one-shot all-reduce", *, seeds=SEEDS, seconds: float = 60,
                            in_child: bool | None = None, **sizes) -> None:
    """Run ``block_fn`` for two simulated GPUs; print one line, or raise ``CheckFailed`` naming the
    mistake. ``sizes``: ``n``, ``blocks``, ``threads``, ``calls`` of ``run_two_halves``. ``in_child``:
    run the simulator in a child Python (default: when this process's Numba targets a GPU)."""
    if in_child is None:
        in_child = not on_simulator()
    if in_child:
        mistake, message = diagnose_in_simulator(block_fn, seeds=seeds, seconds=seconds, **sizes)
    else:
        with finishes_within(name, seconds, HANG_HINT):
            mistake, message = diagnose(block_fn, seeds=seeds, **sizes)
    if mistake is not None:
        raise CheckFailed(f"{name}: {message}")
    progress.passed(name)
    print(f"{name}: correct on two simulated GPUs for {len(seeds)} schedules, stores seen late until a system fence")
