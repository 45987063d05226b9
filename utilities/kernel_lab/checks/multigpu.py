"""Module 09's checks: the one-shot all-reduce's flag protocol, run for two simulated GPUs.

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

On a GPU this check still runs the simulator's model only where it is active; it does nothing there
(the notebooks' GPU cells compare with NCCL instead).
"""

from __future__ import annotations

from .. import progress
from ..check import CheckFailed, finishes_within
from ..environment import on_simulator

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


def check_one_shot_protocol(block_fn, name: str = "one-shot all-reduce", *, seeds=SEEDS, seconds: float = 60,
                            **sizes) -> None:
    """Run ``block_fn`` for two simulated GPUs; print one line, or raise ``CheckFailed`` naming the
    mistake. ``sizes``: ``n``, ``blocks``, ``threads``, ``calls`` of ``run_two_halves``."""
    if not on_simulator():
        print(f"The simulator check of the protocol ({name}) runs on the CPU only; on GPUs compare with NCCL")
        return
    with finishes_within(name, seconds, HANG_HINT):
        mistake, message = diagnose(block_fn, seeds=seeds, **sizes)
    if mistake is not None:
        raise CheckFailed(f"{name}: {message}")
    progress.passed(name)
    print(f"{name}: correct on two simulated GPUs for {len(seeds)} schedules, stores seen late until a system fence")
