"""What the Hopper scripts share for their offline check: assemble PTX for sm_90a with ptxas, show that a
compile for sm_80 is refused with kernel_lab's message, and the ``--offline`` / ``--gpu`` command line.

Imported by ``hopper_async_copy.py``, ``hopper_tma.py``, ``hopper_wgmma.py`` and ``hopper_ws_gemm.py`` (this folder is on
their ``sys.path`` when run as scripts, and the tests put it there). Not a script to run itself.
Every line these helpers print starts with the kernel's name, so that the tests can look for
``<name>: ptxas -arch=sm_90a: ok`` and ``<name>: sm_80 refused (KernelLabArgumentError): ...``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pretend_hopper() -> None:
    """Device functions that ask the current GPU for its compute capability (an mbarrier wait, a tile
    start) get 9.0, so that a machine without a GPU can compile them."""
    from numba.cuda import dispatcher

    class Hopper:
        compute_capability, id = (9, 0), 0

    dispatcher.get_current_device = Hopper


def assemble(name: str, ptx: str, prefix: str = "") -> bool:
    """Assemble ``ptx`` for sm_90a and print ``<prefix><name>: ptxas -arch=sm_90a: ok: <size, registers,
    warnings>`` (or FAILED with ptxas's messages); without ptxas on PATH, say so and pass."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        print(f"{prefix}{name}: SKIPPED assembling: no ptxas on PATH")
        return True
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / f"{name}.ptx", Path(tmp) / f"{name}.cubin"
        src.write_text(ptx)
        run = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(cubin)], check=False,
                             capture_output=True, text=True)
        if run.returncode:
            print(f"{prefix}{name}: ptxas -arch=sm_90a: FAILED:\n{run.stderr}")
            return False
        lines = run.stderr.splitlines()
        usage = [ln.split("info    : ")[-1].strip() for ln in lines if "Used" in ln or "spill" in ln]
        # a serialised wgmma (C7520) or an ignored setmaxnreg (C7508) is worth seeing
        warn = [ln.split("info    : ")[-1].split(" in the function")[0] for ln in lines
                if "warning" in ln.lower() or "Performance Loss" in ln]
        print(f"{prefix}{name}: ptxas -arch=sm_90a: ok: {cubin.stat().st_size} bytes of SASS; "
              + "; ".join(usage + warn))
        return True


def assemble_checked(name: str, ptx: str, needed, prefix: str = "") -> bool:
    """The PTX must hold each instruction of ``needed`` (a kernel whose intrinsic went missing still
    assembles), then :func:`assemble` it."""
    missing = [n for n in needed if n not in ptx]
    if missing:
        print(f"{prefix}{name}: FAILED: the PTX lacks {missing}")
        return False
    return assemble(name, ptx, prefix)


def run_checks(prefix: str, checks) -> int:
    """Run a notebook's package kernels through the notebook's own checks on this machine (each check
    prints its line); ``checks`` is (name, call) pairs. Returns how many failed, each printed WRONG."""
    from kernel_lab.check import CheckFailed

    failed = 0
    for name, run in checks:
        try:
            run()
        except CheckFailed as exc:
            failed += 1
            print(f"{prefix}{name}: WRONG: {exc}")
    return failed


def refused_below_hopper(name: str, compile_for_sm80) -> bool:
    """Call ``compile_for_sm80()``; it must fail with kernel_lab's "needs compute capability 9.0" message."""
    from kernel_lab.validate import KernelLabArgumentError

    try:
        compile_for_sm80()
    except Exception as exc:  # noqa: BLE001 - Numba wraps the package's error in its own
        text = str(exc)
        line = next((ln for ln in text.splitlines() if "compute capability 9.0" in ln), None)
        if line is None:
            print(f"{name}: FAILED: sm_80 refused it with an unexpected message:\n{text}")
            return False
        kind = ("KernelLabArgumentError" if isinstance(exc, KernelLabArgumentError)
                or KernelLabArgumentError.__name__ in text else type(exc).__name__)
        print(f"{name}: sm_80 refused ({kind}): {line.strip()}")
        return True
    print(f"{name}: FAILED: it compiled for sm_80")
    return False


def main(doc: str, offline, gpu, gpu_help: str) -> int:
    """The scripts' command line: ``--offline`` (no GPU: compile for sm_90a and assemble) or ``--gpu``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--offline", action="store_true", help="compile for sm_90a and assemble, no GPU needed")
    p.add_argument("--gpu", action="store_true", help=gpu_help)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "utilities"))
    if args.offline:
        if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
            print("run with NUMBA_ENABLE_CUDASIM=0: the offline compile needs Numba's real CUDA target")
            return 2
        return offline()
    return gpu()
