"""Where is this notebook running? GPU detection, the CUDA-simulator switch, and the notebook gate.

Numba decides once, when ``numba.cuda`` is first imported, whether kernels go to a real GPU or to
its CUDA simulator (the ``NUMBA_ENABLE_CUDASIM`` environment variable). So this module must run
before anything imports ``numba.cuda``: ``import kernel_lab`` does that, and the first cell of every
notebook imports kernel_lab before Numba.

To look for a GPU without importing Numba we ask the CUDA driver directly (``libcuda``) through
ctypes: no driver library or no device means no GPU, and the simulator is switched on.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import platform
import re
import sys
from dataclasses import dataclass, field

SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"


class NotebookGated(RuntimeError):
    """Raised by :func:`setup` when this machine lacks what a notebook needs.

    In Jupyter it prints one readable sentence instead of a stack trace (IPython calls
    ``_render_traceback_`` when an exception defines it), and "Run all" stops there.
    """

    def _render_traceback_(self):
        return [f"Kernel Lab: {self}"]


@dataclass(frozen=True)
class GPUInfo:
    """What the CUDA driver says about device 0 (``None`` fields: no GPU or no driver)."""

    count: int = 0
    name: str | None = None
    compute_capability: tuple[int, int] | None = None
    multiprocessors: int | None = None
    driver_cuda_version: tuple[int, int] | None = None  # highest CUDA version the driver supports
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    uuid: str | None = None


def _query_driver() -> GPUInfo:
    """Ask libcuda for device 0's properties; any failure means 'no usable GPU'."""
    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
    lib = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return GPUInfo()
    try:
        if lib.cuInit(0) != 0:
            return GPUInfo()
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
            return GPUInfo()
        dev = ctypes.c_int(0)
        lib.cuDeviceGet(ctypes.byref(dev), 0)
        buf = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(buf, 256, dev)

        def attr(code: int) -> int:
            value = ctypes.c_int(0)
            lib.cuDeviceGetAttribute(ctypes.byref(value), code, dev)
            return value.value

        # CUdevice_attribute codes from cuda.h (stable across CUDA versions).
        major, minor, sms, l2 = attr(75), attr(76), attr(16), attr(38)
        version = ctypes.c_int(0)
        lib.cuDriverGetVersion(ctypes.byref(version))
        mem = ctypes.c_size_t(0)
        get_mem = getattr(lib, "cuDeviceTotalMem_v2", None) or lib.cuDeviceTotalMem
        get_mem(ctypes.byref(mem), dev)
        uuid_buf = ctypes.create_string_buffer(16)
        uuid = None
        if lib.cuDeviceGetUuid(uuid_buf, dev) == 0:
            uuid = "GPU-" + uuid_buf.raw.hex()
        return GPUInfo(
            count=count.value,
            name=buf.value.decode(errors="replace"),
            compute_capability=(major, minor),
            multiprocessors=sms,
            driver_cuda_version=(version.value // 1000, (version.value % 1000) // 10),
            l2_bytes=l2,
            memory_bytes=mem.value,
            uuid=uuid,
        )
    except (AttributeError, OSError):
        return GPUInfo()


_GPU: GPUInfo | None = None


def gpu_info() -> GPUInfo:
    """Device 0 as the driver reports it (cached; an empty GPUInfo when there is no GPU)."""
    global _GPU
    if _GPU is None:
        _GPU = GPUInfo() if os.environ.get("KERNEL_LAB_PRETEND_NO_GPU") else _query_driver()
    return _GPU


def choose_backend() -> str:
    """Switch the CUDA simulator on when there is no GPU; return 'gpu' or 'simulator'.

    Runs at ``import kernel_lab``. An explicit ``NUMBA_ENABLE_CUDASIM`` set by the user wins.
    """
    if os.environ.get(SIMULATOR_ENV) not in (None, ""):
        return "simulator" if os.environ[SIMULATOR_ENV] == "1" else "gpu"
    if "numba.cuda" in sys.modules:  # too late to choose: report what Numba already chose
        return "simulator" if _numba_says_simulator() else "gpu"
    if gpu_info().count == 0:
        os.environ[SIMULATOR_ENV] = "1"
        return "simulator"
    return "gpu"


def _numba_says_simulator() -> bool:
    from numba import config

    return bool(getattr(config, "ENABLE_CUDASIM", False))


def on_simulator() -> bool:
    """True when numba.cuda kernels run in Numba's CUDA simulator (on the CPU)."""
    if "numba.cuda" in sys.modules:
        return _numba_says_simulator()
    return os.environ.get(SIMULATOR_ENV) == "1"


def package_version(dist: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# What a notebook may ask for in ``setup(requires=[...])``, and how to tell whether we have it.
# Packages map a short name to (import name, distribution names to report, install hint).
PACKAGES = {
    "cupy": ("cupy", ["cupy-cuda13x", "cupy-cuda12x", "cupy"], "pip install -e '.[cu13]'"),
    "nvmath": ("nvmath", ["nvmath-python"], "pip install -e '.[cu13]'"),
    "torch": ("torch", ["torch"], "pip install torch (only the cuDNN comparisons need it)"),
    "ml_dtypes": ("ml_dtypes", ["ml_dtypes"], "pip install ml_dtypes"),
    "matplotlib": ("matplotlib", ["matplotlib"], "pip install matplotlib"),
}
# Things the simulator can never provide (it runs on the CPU): a real GPU and the GPU libraries.
NEEDS_REAL_GPU = {"gpu", "cupy", "nvmath", "torch"}
_VERSIONED = re.compile(r"^(cc|cuda)\s*>=\s*(\d+)(?:\.(\d+))?$")


@dataclass
class Environment:
    """The result of :func:`setup`: what this notebook runs on."""

    backend: str  # "gpu" or "simulator"
    gpu: GPUInfo
    versions: dict = field(default_factory=dict)
    numpy_only: bool = False  # the notebook runs no kernel: NumPy on the CPU (setup(numpy_only=True))

    @property
    def simulator(self) -> bool:
        return self.backend == "simulator"


def _import_ok(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:  # a broken install (missing CUDA library, ...) counts as missing
        return False


def _parse_requirement(req: str) -> tuple[str, tuple[int, int] | None]:
    req = req.strip().lower()
    m = _VERSIONED.match(req)
    if m:
        return m.group(1), (int(m.group(2)), int(m.group(3) or 0))
    if req in PACKAGES or req in {"gpu", "warp", "hopper"}:
        return req, None
    known = sorted(set(PACKAGES) | {"gpu", "warp", "hopper", "cc>=X.Y", "cuda>=X.Y"})
    raise ValueError(f"setup(requires=...): unknown requirement {req!r}; known: {', '.join(known)}")


def unmet_requirements(requires, *, simulator: bool, gpu: GPUInfo) -> list[str]:
    """Sentences, one per requirement this machine does not meet (empty list: all met).

    Pure function of its arguments plus importability of packages, so the notebook test harness
    can ask the same question before it runs a notebook, and skip it with the same sentence.
    """
    problems, gpu_only, gpu_packages_missing = [], [], []
    for raw in requires:
        kind, version = _parse_requirement(raw)
        if simulator and kind in NEEDS_REAL_GPU | {"cc", "cuda"}:
            # Only a GPU provides these. Say so once; name a GPU library only if it is missing too
            # (installed, it is not what stops the notebook here).
            need = {"cc": f"compute capability {version[0]}.{version[1]}+" if version else "",
                    "cuda": f"CUDA {version[0]}+" if version else ""}.get(kind, "a real GPU")
            if need not in gpu_only:
                gpu_only.append(need)
            if kind in PACKAGES and not _import_ok(PACKAGES[kind][0]):
                gpu_packages_missing.append(kind)
            continue
        if kind == "hopper":  # Hopper's mbarriers and bulk copies: the simulator models them
            cc = gpu.compute_capability
            if not simulator and cc is not None and cc < (9, 0):
                problems.append(f"this notebook needs a GPU of compute capability 9.0 or newer (Hopper: H100, "
                                f"H200, GH200) for its mbarriers and bulk copies; {gpu.name} is {cc[0]}.{cc[1]}. "
                                "Without a GPU it runs in the simulator, which models them")
        elif kind == "warp" and simulator:
            if not _simulator_has_warp_operations():
                problems.append("this notebook uses warp shuffles and votes, which this version of the "
                                "CUDA simulator lacks")
        elif kind == "cc" and gpu.compute_capability is not None and gpu.compute_capability < version:
            problems.append(f"this notebook needs a GPU of compute capability {version[0]}.{version[1]} or "
                            f"newer; {gpu.name} is {gpu.compute_capability[0]}.{gpu.compute_capability[1]}")
        elif kind == "cuda" and gpu.driver_cuda_version is not None and gpu.driver_cuda_version < version:
            have = gpu.driver_cuda_version
            problems.append(f"this notebook needs CUDA {version[0]}.{version[1]} or newer; this GPU's driver "
                            f"supports CUDA {have[0]}.{have[1]}: update the GPU driver" +
                            (" (the notebooks that do not need it run on this driver with the cu12 extra: "
                             "pip install -e '.[cu12]')" if have[0] == 12 else ""))
        elif kind in PACKAGES and not _import_ok(PACKAGES[kind][0]):
            problems.append(_missing_package(kind))
    if gpu_only:
        gpu_only.sort(key=lambda need: need != "a real GPU")  # "a real GPU" first, then its versions
        listed = ", ".join(gpu_only[:-1]) + (" and " if len(gpu_only) > 1 else "") + gpu_only[-1]
        problems.insert(0, f"this notebook needs {listed}, which the CUDA simulator cannot provide "
                           "(no GPU was found, so kernels would run on the CPU)")
    if gpu_packages_missing:  # useless without a GPU, so not an install to do now: said as a note
        names = [PACKAGES[kind][1][0] for kind in gpu_packages_missing]
        hints = sorted({PACKAGES[kind][2] for kind in gpu_packages_missing})
        problems.insert(1, f"on a GPU machine it also needs {' and '.join(names)}, not installed here "
                           f"({'; '.join(hints)})")
    return problems


def _missing_package(kind: str) -> str:
    _module, dists, hint = PACKAGES[kind]
    return (f"this notebook needs the package {dists[0]}, which is not installed or does not import here; "
            f"install it with: {hint}")


def _simulator_has_warp_operations() -> bool:
    from . import simulator as sim

    sim.install()  # idempotent; warp operations come with Kernel Lab's simulator extensions
    return sim.is_installed()


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ["kernel-lab", "numba", "numba-cuda", "numpy", "cupy-cuda13x", "cupy-cuda12x",
                 "nvmath-python", "torch"]:
        v = package_version(dist)
        if v is not None:
            out[dist] = v
    return out


# The releases the course is tested with (pyproject.toml pins the same; docs/dependencies.md says
# why each bound is there and what a release outside it would break). (lowest, first untested).
TESTED = {
    "numba-cuda": ((0, 30), (0, 31)),  # kernel_lab.simulator patches the simulator's internals
    "nvmath-python": ((1, 0), (1, 1)),  # the cuBLASDx bindings kernel_lab.tensor_cores patches
    "numpy": ((2, 0), (2, 5)),  # numba-cuda 0.30 calls np.row_stack, gone in NumPy 2.5
}


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:2]:
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


# A pair of releases known to break, beyond "untested": (dist, first bad release of it), the release
# of the other package it breaks with (below which), and what the learner sees and does.
KNOWN_BREAKS = {
    ("numpy", (2, 5)): (("numba-cuda", (0, 31)),
                        "numba-cuda {other} looks up np.row_stack, which NumPy 2.5 removed, so every GPU kernel "
                        "fails to compile (the simulator is not affected): pip install 'numpy<2.5'"),
}


def untested_versions(versions: dict) -> list[str]:
    """One sentence per installed package outside the range the course is tested with; a pair known
    to break says what breaks and the command that fixes it."""
    notes = []
    for dist, (low, high) in TESTED.items():
        found = versions.get(dist)
        if found is None:
            continue
        release = _release(found)
        if release and not (low <= release < high):
            lo, hi = ".".join(map(str, low)), ".".join(map(str, high))
            span = f"{lo}.x" if high == (low[0], low[1] + 1) else f"{lo} or newer, before {hi}"
            advice = "if something breaks, see docs/dependencies.md"
            for (bad_dist, first_bad), ((other, below), why) in KNOWN_BREAKS.items():
                other_found = versions.get(other)
                if (bad_dist == dist and release >= first_bad and other_found
                        and _release(other_found) < below):
                    advice = why.format(other=other_found)
            notes.append(f"note: {dist} {found} is outside the releases this course is tested with ({span}); "
                         + advice)
    return notes


def describe(env: Environment) -> str:
    """The lines the setup cell prints."""
    v = env.versions
    pkgs = ", ".join(f"{k} {val}" for k, val in v.items())
    notes = "".join(f"\n{n}" for n in untested_versions(v))
    if env.numpy_only:
        g = env.gpu
        head = ("No GPU needed: this notebook runs NumPy on the CPU" +
                (f" (this machine also has a GPU, {g.name}, which it does not use)." if g.count else "."))
    elif env.simulator:
        head = ("CUDA simulator: no GPU found, so kernels run on the CPU, thousands of times slower. "
                "Problem sizes are small and timings are skipped.")
    else:
        g = env.gpu
        cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else "?"
        drv = f"{g.driver_cuda_version[0]}.{g.driver_cuda_version[1]}" if g.driver_cuda_version else "?"
        mem = f", {g.memory_bytes / 2**30:.0f} GiB" if g.memory_bytes else ""
        l2 = f", {g.l2_bytes / 2**20:.0f} MiB L2" if g.l2_bytes else ""
        head = (f"GPU: {g.name} (compute capability {cc}, {g.multiprocessors} SMs{mem}{l2}); "
                f"driver supports CUDA {drv}")
    return f"{head}\n{pkgs}{notes}"


_ENV: Environment | None = None


def setup_command(command: str, requires=()) -> Environment:
    """:func:`setup` for a command (a benchmark, a script) rather than a notebook: where this machine
    lacks what the command needs, print one line saying so and exit with status 2, no traceback."""
    try:
        return setup(requires=requires, quiet=True)
    except NotebookGated as gate:
        reason = str(gate).replace("this notebook needs", "it needs", 1)
        print(f"{command}: cannot run here: {reason}", file=sys.stderr)
        raise SystemExit(2) from None


def setup(requires=(), *, quiet: bool = False, numpy_only: bool = False) -> Environment:
    """First call of every notebook: report the machine, and stop if it lacks what we need.

    ``requires`` lists what the notebook needs: ``"gpu"`` (a real GPU, not the simulator),
    ``"warp"`` (warp shuffles/votes: real GPU, or Kernel Lab's simulator extensions),
    ``"cupy"``, ``"nvmath"``, ``"torch"``, ``"cc>=9.0"``, ``"cuda>=13"``, ``"hopper"`` (Hopper's
    asynchronous copies: a GPU of compute capability 9.0+, or the simulator, which models them).
    Raises :class:`NotebookGated` with one sentence per unmet requirement.

    ``numpy_only=True`` declares a notebook that runs no kernel at all (NumPy on the CPU, such as
    07.1): it needs no GPU and says so instead of announcing the simulator, Numba is not imported,
    and its stored outputs may come from any machine (``kernel_lab.store_outputs`` runs it without a
    GPU). It may still require packages (``requires=["matplotlib"]``), not a GPU.
    """
    global _ENV
    if isinstance(requires, str):
        requires = [requires]
    backend = choose_backend()
    if numpy_only:
        gpu_needs = [r for r in requires if _parse_requirement(r)[0] in NEEDS_REAL_GPU | {"cc", "cuda", "warp"}]
        if gpu_needs:
            raise ValueError(f"setup(numpy_only=True) declares a notebook that needs no GPU, but it requires "
                             f"{', '.join(gpu_needs)}")
        env = Environment(backend=backend, gpu=gpu_info(), versions=_versions(), numpy_only=True)
        _ENV = env
        if not quiet:
            print(describe(env))
        problems = unmet_requirements(requires, simulator=False, gpu=env.gpu)
        if problems:
            raise NotebookGated("; ".join(problems) + ".")
        return env
    simulator = backend == "simulator"
    if not simulator and gpu_info().count == 0:
        raise NotebookGated("NUMBA_ENABLE_CUDASIM=0 asks for a real GPU, but the CUDA driver finds none. "
                            "Unset NUMBA_ENABLE_CUDASIM to run in the simulator.")
    from numba import config as numba_config
    from numba import cuda  # noqa: F401  (imported after the backend is chosen)

    # Small check sizes launch grids of one block on purpose; Numba's under-utilisation warning
    # would be noise there (and would make stored notebook outputs differ between GPU and simulator).
    numba_config.CUDA_LOW_OCCUPANCY_WARNINGS = 0

    if simulator:
        from . import simulator as sim

        sim.install()
    env = Environment(backend=backend, gpu=gpu_info(), versions=_versions())
    _ENV = env
    if not quiet:
        print(describe(env))
    problems = unmet_requirements(requires, simulator=simulator, gpu=env.gpu)
    if problems:
        raise NotebookGated("; ".join(problems) + ".")
    return env


def current() -> Environment:
    """The environment of the last :func:`setup` (runs a quiet setup if there was none)."""
    return _ENV if _ENV is not None else setup(quiet=True)
