"""What every Hopper-only inline-PTX intrinsic needs: the target's compute capability (the addresses
the instructions take are :mod:`kernel_lab.device.ptx_args`'s, shared with 06.1's intrinsics).

Numba compiles a kernel for one compute capability (the GPU's, or ``cc=`` of ``cuda.compile``); it
sits on Numba's configuration stack while the kernel is lowered, which is where
:func:`require_hopper` reads it. Below 9.0 an mbarrier's ``try_wait`` or a bulk copy would be
refused by the PTX assembler with a line about an unsupported instruction; this says which
intrinsic, which target, and what to do instead. GPU only: the simulator never imports this.
"""

from __future__ import annotations

from ..validate import KernelLabArgumentError

HOPPER = (9, 0)


def target_compute_capability():
    """The compute capability Numba is compiling for now, as ``(major, minor)``; None outside a compile."""
    from numba.cuda.core import targetconfig

    try:
        cc = targetconfig.ConfigStack().top().compute_capability
    except (IndexError, AttributeError):
        return None
    return None if cc is None else (int(cc[0]), int(cc[1]))


def require_hopper(name: str) -> None:
    cc = target_compute_capability()
    if cc is not None and cc < HOPPER:
        raise KernelLabArgumentError(
            f"{name} needs compute capability 9.0 or newer (Hopper: H100, H200; Blackwell), but this kernel is "
            f"compiled for {cc[0]}.{cc[1]}. On older GPUs use cp.async (kernel_lab.mma_ptx.cp_async16_at) with "
            "cuda.syncthreads() instead of bulk copies and mbarriers.")
