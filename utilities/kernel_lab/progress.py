"""A learner's progress: every check that passes writes one line of record, on this machine only.

Each passing check (``check_array``, ``check_kernel``, the ready-made checks of ``kernel_lab.checks``
and the quizzes) calls :func:`passed`, which adds the check to a small JSON file in the user's data
directory (``platformdirs.user_data_dir("kernel-lab")``: ``~/.local/share/kernel-lab`` on Linux).
Nothing is sent anywhere, and nothing is written inside the repository. ``kernel-lab progress``
prints what the file holds; an instructor who collects several learners' files (from their home
directories on a JupyterHub, say) passes the folders to ``kernel-lab progress DIR...`` for one table.

Two environment variables (the test suite sets the first, so tests never write to a real home):

* ``KERNEL_LAB_PROGRESS_DIR=/some/folder`` keeps the file there instead;
* ``KERNEL_LAB_PROGRESS=off`` (or ``0``, ``no``, ``false``) records nothing.

Recording never gets in a learner's way: a file that cannot be read or written is left alone
silently (the check's own result is what matters).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import sys
from pathlib import Path

FILE_NAME = "progress.json"
DIR_ENV = "KERNEL_LAB_PROGRESS_DIR"
SWITCH_ENV = "KERNEL_LAB_PROGRESS"
_OFF = {"0", "off", "no", "false"}
UNKNOWN_MODULE = "?"
# "01-gpu-in-practice/02-memory-hierarchy.ipynb" or "02.3-sgemm-progression.ipynb": the module is NN.
_MODULE = re.compile(r"^(\d\d)(?:[.-]|$)")


_PAUSED = []  # nonempty inside paused(): a check run as a probe is not the learner's pass


def enabled(environ=os.environ) -> bool:
    return not _PAUSED and environ.get(SWITCH_ENV, "").strip().lower() not in _OFF


@contextlib.contextmanager
def paused():
    """``with paused():`` checks that pass record nothing (a check that probes a variant of the kernel)."""
    _PAUSED.append(True)
    try:
        yield
    finally:
        _PAUSED.pop()


def progress_dir(environ=os.environ) -> Path:
    """Where this learner's file lives (``KERNEL_LAB_PROGRESS_DIR``, else the user data directory)."""
    if environ.get(DIR_ENV):
        return Path(environ[DIR_ENV]).expanduser()
    try:
        from platformdirs import user_data_dir
    except ImportError:  # platformdirs comes with Jupyter; the XDG rule is its answer on Linux anyway
        base = environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        return Path(base) / "kernel-lab"
    return Path(user_data_dir("kernel-lab", appauthor=False))


def progress_file(environ=os.environ) -> Path:
    return progress_dir(environ) / FILE_NAME


def current_notebook(environ=os.environ) -> str | None:
    """The notebook this kernel runs, when Jupyter says so (JupyterLab, VS Code); else None."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        ns = shell.user_ns if shell is not None else {}
    except ImportError:
        ns = {}
    for candidate in (ns.get("__session__"), ns.get("__vsc_ipynb_file__"), environ.get("JPY_SESSION_NAME")):
        if isinstance(candidate, str) and candidate.endswith(".ipynb"):
            return candidate
    return None


def module_of(notebook: str | None) -> str:
    """``"01"`` for ``.../01-gpu-in-practice/02-memory-hierarchy.ipynb``; the folder names the module."""
    if not notebook:
        return UNKNOWN_MODULE
    parts = Path(notebook).parts
    for part in reversed(parts[:-1]):
        if (m := _MODULE.match(part)) is not None:
            return m.group(1)
    m = _MODULE.match(parts[-1]) if parts else None
    return m.group(1) if m else UNKNOWN_MODULE


def module_of_folder(folder: Path) -> str:
    """The module of the folder a kernel runs in: where nothing names the notebook (nbclient, nbval, a
    workshop's CI run it outside JupyterLab), its kernel still starts in the notebook's folder."""
    return module_of(str(Path(folder) / "notebook.ipynb"))


def load(path: Path) -> dict:
    """The records of one progress file (an empty record for a missing or unreadable file)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"version": 1, "passed": []}
    if not isinstance(data, dict) or not isinstance(data.get("passed"), list):
        return {"version": 1, "passed": []}
    return data


def passed(check: str, *, notebook: str | None = None, environ=os.environ, now=None) -> None:
    """Record that ``check`` passed (called by the checks themselves; never raises)."""
    if not enabled(environ):
        return
    try:
        notebook = notebook if notebook is not None else current_notebook(environ)
        path = progress_file(environ)
        data = load(path)
        stamp = (now or _dt.datetime.now(_dt.timezone.utc)).isoformat(timespec="seconds")
        name = Path(notebook).name if notebook else None
        for entry in data["passed"]:
            if entry.get("check") == check and entry.get("notebook") == name:
                entry["last"], entry["times"] = stamp, int(entry.get("times", 1)) + 1
                break
        else:
            module = module_of(notebook) if notebook else module_of_folder(Path.cwd())
            data["passed"].append({"module": module, "notebook": name, "check": check,
                                   "first": stamp, "last": stamp, "times": 1})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)  # a crash mid-write never leaves half a file
    except Exception:  # noqa: BLE001  (a progress file must never break a learner's check)
        pass


def per_module(data: dict) -> dict[str, set]:
    """{module: {check, ...}} for one learner's records."""
    modules: dict[str, set] = {}
    for entry in data.get("passed", []):
        modules.setdefault(str(entry.get("module", UNKNOWN_MODULE)), set()).add(entry.get("check"))
    return modules


def find_files(folder: Path) -> list[Path]:
    """Progress files in a folder: its own, or any below it (a learner's home directory)."""
    folder = Path(folder)
    if folder.is_file():
        return [folder]
    direct = folder / FILE_NAME
    return [direct] if direct.is_file() else sorted(folder.rglob(FILE_NAME))


def table(learners: dict[str, dict]) -> str:
    """Checks passed per module: one row per learner (one learner: one row per module with its checks)."""
    if len(learners) == 1:
        (who, data), = learners.items()
        modules = per_module(data)
        if not modules:
            return f"{who}: no check has passed yet"
        rows = [f"{'module':<8}  {'checks passed':>13}  checks"]
        for module in sorted(modules):
            names = sorted(c for c in modules[module] if c)
            rows.append(f"{module:<8}  {len(names):>13}  {', '.join(names)}")
        return "\n".join(rows)
    modules = sorted({m for data in learners.values() for m in per_module(data)})
    width = max([len("learner")] + [len(w) for w in learners])
    rows = [f"{'learner':<{width}}  " + "  ".join(f"{m:>4}" for m in modules) + "  total"]
    for who, data in sorted(learners.items()):
        counts = per_module(data)
        cells = "  ".join(f"{len(counts.get(m, ())):>4}" for m in modules)
        rows.append(f"{who:<{width}}  {cells}  {sum(len(v) for v in counts.values()):>5}")
    return "\n".join(rows)


def report(folders=(), environ=os.environ) -> str:
    """What ``kernel-lab progress [DIR...]`` prints."""
    if not folders:
        path = progress_file(environ)
        if not path.is_file():
            return f"no progress recorded yet ({path} does not exist): it fills as your checks pass"
        return f"{path}\n" + table({"you": load(path)})
    learners = {}
    for folder in folders:
        files = find_files(Path(folder))
        if not files:
            print(f"{folder}: no {FILE_NAME} found", file=sys.stderr)
        for f in files:
            label = Path(folder).name if len(files) == 1 else f.parent.relative_to(folder).as_posix()
            learners[label or f.parent.name] = load(f)
    if not learners:
        return "no progress files found"
    return table(learners) if len(learners) > 1 else table({next(iter(learners)): next(iter(learners.values()))})
