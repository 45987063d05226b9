"""``kernel-lab``: the course's command line, one subcommand per job.

    kernel-lab progress [DIR...]        checks passed per module (yours, or several learners' folders)
    kernel-lab benchmarks [--check]     write BENCHMARKS.md from the stored outputs of solutions/
    kernel-lab mistakes [--check]       write docs/mistakes.md from the checks' tests
    kernel-lab exercises [...]          write course/ from solutions/ (same as kernel-lab-exercises)
    kernel-lab colab-install [...]      what the first cell of a course notebook runs on Colab
    kernel-lab warm --arch sm_90[,...]  fill the cuBLASDx compile caches on a CPU (docs/compile-time.md)
    kernel-lab study-time [--write]     each notebook's size and estimated hours; --write: README, docs/syllabi.md

Each subcommand is a module of its own; this file only dispatches, importing the module it needs
(so ``kernel-lab progress`` does not import Numba).
"""

from __future__ import annotations

import argparse
import sys


def _progress(argv) -> int:
    from . import progress

    parser = argparse.ArgumentParser(prog="kernel-lab progress",
                                     description="Checks passed per module. Nothing is sent anywhere.")
    parser.add_argument("folders", nargs="*", help="learners' folders (or progress.json files) to aggregate; "
                                                   "default: your own progress file")
    args = parser.parse_args(argv)
    print(progress.report(args.folders))
    return 0


def _delegate(module: str, command: str):
    def run(argv) -> int:
        import importlib

        # argparse names the program after sys.argv[0]: let each subcommand's help and errors say
        # "kernel-lab COMMAND", the way the learner typed it (modules that name themselves keep it).
        saved, sys.argv[0] = sys.argv[0], f"kernel-lab {command}"
        try:
            return importlib.import_module(f"kernel_lab.{module}").main(argv)
        finally:
            sys.argv[0] = saved
    return run


COMMANDS = {
    "progress": _progress,
    "benchmarks": _delegate("benchmarks_page", "benchmarks"),
    "mistakes": _delegate("mistakes_page", "mistakes"),
    "exercises": _delegate("exercises", "exercises"),
    "colab-install": _delegate("colab", "colab-install"),
    "warm": _delegate("tensor_cores.warm", "warm"),
    "study-time": _delegate("study_time", "study-time"),
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: kernel-lab COMMAND [...]\n\n" + __doc__.split("\n\n")[1]
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        print(f"kernel-lab: unknown command {argv[0]!r} (the commands are {', '.join(COMMANDS)})\n\n{usage}",
              file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
