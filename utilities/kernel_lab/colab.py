"""Google Colab: the "Open in Colab" badges, and the install that a course notebook's first cell runs there.

The course's public repository is named once, here (:data:`REPOSITORY`, :data:`BRANCH`): the badges of
the README and of every course notebook, and the install command, are built from it. Change it when
the repository moves and run ``python -m kernel_lab.exercises`` (the notebooks' badges follow; a test
names the README rows to update).

On Colab, a course notebook's first cell installs the course with the CUDA libraries that match the
runtime's driver (extra ``cu13`` for a CUDA 13 driver, ``cu12`` for a CUDA 12 one) and says in one
sentence what this GPU cannot run (a T4 is compute capability 7.5: modules 06 and 07 need 8.0 or
newer). Elsewhere the cell does nothing. The cell must not import ``kernel_lab`` before it is
installed with its dependencies (a module imported before ``pip install`` stays the old one until the
runtime restarts), so it installs the package alone first and runs this file *as a script*, in a
separate process; this file therefore uses the standard library only.

The decisions are pure functions of what Colab shows (its modules and environment variables, the
text ``nvidia-smi`` prints) so that tests/test_colab.py can feed them a Colab without Colab.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

REPOSITORY = "kernel-lab/kernel-lab"  # owner/name on GitHub: the one setting every badge and install is built from
BRANCH = "main"
PACKAGE = "kernel-lab"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE_ALT = "Open In Colab"

# Modules whose GPU notebooks need compute capability 8.0+ (cuBLASDx tensor-core kernels) and CUDA 13.
NEEDS_CC80 = ("06", "07")
NEEDS_CUDA13 = ("06", "07")


def notebook_url(course_path: str) -> str:
    """Colab's address for a notebook of the repository (``course/00-getting-started/00-getting-started.ipynb``)."""
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/{course_path}"


def badge(course_path: str) -> str:
    """The markdown of the badge that opens ``course_path`` in Colab."""
    return f"[![{BADGE_ALT}]({BADGE_IMAGE})]({notebook_url(course_path)})"


def pip_source(extra: str | None = None) -> str:
    """The pip requirement that installs the course from GitHub (with an extra: its CUDA libraries)."""
    name = f"{PACKAGE}[{extra}]" if extra else PACKAGE
    return f"{name} @ git+https://github.com/{REPOSITORY}@{BRANCH}"


INSTALL_CELL_TAG = "colab-install"


def install_cell(module: str) -> str:
    """The source of a course notebook's first cell: install on Colab, nothing elsewhere."""
    return f'''# On Google Colab this cell installs Kernel Lab for this runtime's GPU; anywhere else it does nothing.
import sys
if "google.colab" in sys.modules:
    import importlib, importlib.util, pathlib, subprocess
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "{pip_source()}"], check=True)
    importlib.invalidate_caches()  # see the package pip just installed
    colab_py = pathlib.Path(importlib.util.find_spec("kernel_lab").origin).parent / "colab.py"
    subprocess.run([sys.executable, str(colab_py), "--on-colab", "--module", "{module}"], check=True)'''


@dataclass
class GPU:
    name: str
    compute_capability: tuple[int, int] | None


@dataclass
class Plan:
    """What to install, and what to tell the learner."""

    extra: str | None  # "cu13", "cu12" or None (no GPU: the simulator needs no CUDA libraries)
    pip_args: list = field(default_factory=list)
    messages: list = field(default_factory=list)


def on_colab(modules=None, environ=None) -> bool:
    """Colab's kernel has imported ``google.colab``; its processes carry ``COLAB_RELEASE_TAG``."""
    modules = sys.modules if modules is None else modules
    environ = os.environ if environ is None else environ
    return "google.colab" in modules or "COLAB_RELEASE_TAG" in environ


def driver_cuda_major(nvidia_smi: str | None) -> int | None:
    """The CUDA major version the driver supports, from ``nvidia-smi``'s banner ("CUDA Version: 12.4")."""
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", nvidia_smi or "")
    return int(m.group(1)) if m else None


def gpus(query: str | None) -> list[GPU]:
    """``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`` as a list."""
    found = []
    for line in (query or "").splitlines():
        if not line.strip():
            continue
        name, _, cap = line.rpartition(",")
        m = re.match(r"\s*(\d+)\.(\d+)\s*$", cap)
        found.append(GPU(name.strip() or line.strip(), (int(m.group(1)), int(m.group(2))) if m else None))
    return found


def _modules(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def plan(nvidia_smi: str | None, query: str | None, module: str | None = None) -> Plan:
    """What the install cell does, from what ``nvidia-smi`` printed (None: no nvidia-smi, a CPU runtime)."""
    major = driver_cuda_major(nvidia_smi)
    found = gpus(query)
    if major is None or not found:
        return Plan(None, ["install", "-q", pip_source()], [
            "No GPU in this Colab runtime: the notebooks run in Numba's CUDA simulator on the CPU, at small sizes "
            "(Runtime > Change runtime type > a GPU, for real timings)."])
    if major < 12:
        return Plan(None, ["install", "-q", pip_source()], [
            f"This runtime's driver supports CUDA {major}, older than the course's CUDA 12 or 13: the notebooks "
            "will run in the simulator only."])
    extra = "cu13" if major >= 13 else "cu12"
    gpu = found[0]
    messages = [f"Installing Kernel Lab for {gpu.name} with the {extra} libraries (driver supports CUDA {major})."]
    cc = gpu.compute_capability
    if cc is not None and cc < (8, 0):
        messages.append(
            f"This GPU ({gpu.name}, compute capability {cc[0]}.{cc[1]}) runs every module except "
            f"{_modules(NEEDS_CC80)}, which need compute capability 8.0 or newer (their tensor-core notebooks stop at "
            "their first cell, saying so): choose an A100 or L4 runtime for them.")
    elif major < 13:
        messages.append(
            f"This runtime's driver supports CUDA {major}: modules {_modules(NEEDS_CUDA13)} need a CUDA 13 driver "
            "(their GPU notebooks stop at their first cell, saying so); the other modules run.")
    if module in NEEDS_CC80 and len(messages) > 1:
        messages.append(f"This notebook is in module {module}: the cells that need this will be skipped or stop.")
    return Plan(extra, ["install", "-q", pip_source(extra)], messages)


def _run(command: list[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Install Kernel Lab on Google Colab with the right CUDA extra.")
    parser.add_argument("--module", help="the notebook's module (NN), to say what it can run")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, install nothing")
    parser.add_argument("--on-colab", action="store_true",
                        help="the notebook's cell has seen google.colab (this process cannot see it)")
    args = parser.parse_args(argv)
    if not (args.on_colab or args.dry_run or on_colab()):
        print("not on Colab: nothing to install (pip install -e \".[cu13]\" in a clone of the repository)")
        return 0
    p = plan(_run(["nvidia-smi"]), _run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]),
             args.module)
    for message in p.messages:
        print(message)
    if args.dry_run:
        print("would run: pip " + " ".join(p.pip_args))
        return 0
    return subprocess.run([sys.executable, "-m", "pip", *p.pip_args]).returncode


if __name__ == "__main__":
    sys.exit(main())
