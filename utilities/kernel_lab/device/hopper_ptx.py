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


# What an older GPU does instead, by family of intrinsic (the last sentence of the refusal).
INSTEAD_OF_BULK = ("On older GPUs use cp.async (kernel_lab.mma_ptx.cp_async16_at) with cuda.syncthreads() instead "
                   "of bulk copies and mbarriers.")
INSTEAD_OF_TMA = ("On older GPUs the threads copy the tile themselves (16-byte loads, or cp.async: "
                  "kernel_lab.mma_ptx.cp_async16_at) and cuda.syncthreads() orders it; a tensor map has no "
                  "equivalent there.")
INSTEAD_OF_WGMMA = ("wgmma and setmaxnreg exist on Hopper only (sm_90a); on older GPUs use the warp-level "
                    "mma.sync of kernel_lab.mma_ptx (mma_f16, mma_s8) with ldmatrix.")


def require_hopper(name: str, instead: str = INSTEAD_OF_BULK, gpus: str = "Hopper: H100, H200; Blackwell") -> None:
    """Refuse to compile ``name`` for a GPU older than compute capability 9.0, saying what to use there."""
    cc = target_compute_capability()
    if cc is not None and cc < HOPPER:
        raise KernelLabArgumentError(
            f"{name} needs compute capability 9.0 or newer ({gpus}), but this kernel is compiled for "
            f"{cc[0]}.{cc[1]}. {instead}")
