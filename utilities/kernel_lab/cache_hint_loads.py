"""Keep ``cuda.ldcv``, ``cuda.ldcg`` and the other cache-hint loads where the program puts them.

numba-cuda emits each cache-hint load (``ld.global.cv``, ``.cg``, ``.ca``, ``.cs``, ``.lu``) as an
inline-PTX call with no side effect and no memory clobber. LLVM and NVVM treat such an asm
statement as a pure function of its operands (it "reads no memory"; the CUDA inline-PTX guide says
so, and LLVM's NVPTX back end models it that way since llvm/llvm-project#130675). The compiler may
then move the load above ``cuda.threadfence()``, out of a polling loop, or merge two loads of the same
address: compiled for sm_90, ``while f == 0: f = cuda.ldcv(flags, j)`` became a branch to itself
that never reloads, and a value read with ``cuda.ldcg`` after a flag is free to move before it.

This fixes the compiler's view of these loads, not their meaning: they stay *weak* loads (``.cv``
and ``.cg`` are cache hints), and ptxas may still assume that no other thread changes what they read.
On an H100 it removed a ``cuda.ldcv`` polling loop outright. Poll a flag with ``kl.load_acquire``
(``kernel_lab.acquire``); ``cuda.ldcg`` is then fine for the values read after it.

``install()`` swaps numba-cuda's load intrinsics for ones whose asm is marked as having side effects
and clobbering memory (what ``asm volatile(... ::: "memory")`` means in CUDA C++), so each load
happens where the program puts it, as many times as it runs. It is called on ``import kernel_lab``
when kernels compile for a real GPU (the simulator reads memory in program order anyway). Loads
that are not polled lose a little freedom to be scheduled early; the course uses them only for
inter-block communication, where that order is the point.
"""

from __future__ import annotations

import warnings

_HINTS = ("ca", "cg", "cs", "lu", "cv")
_installed = False
installed: dict = {}  # name in numba.cuda.cache_hints -> the intrinsic put there


def load_asm(fn_type, operator: str, bits: int):
    """``ld.global.<operator>.b<bits>`` as inline PTX that has side effects and clobbers memory."""
    from llvmlite import ir
    from numba.cuda.cache_hints import CONSTRAINT_MAP

    return ir.InlineAsm(fn_type, f"ld.global.{operator}.b{bits} $0, [$1];",
                        f"={CONSTRAINT_MAP[bits]},l,~{{memory}}", side_effect=True)


def _ordered_load(operator):
    """An intrinsic like numba-cuda's ``ld_cache_operator(operator)``, with side effects."""
    from llvmlite import ir
    from numba.cuda import cache_hints as ch
    from numba.cuda.extending import intrinsic

    @intrinsic
    def impl(typingctx, array, index):
        ch._validate_arguments(f"ld{operator}", array, index)
        ch._validate_bitwidth(f"ld{operator}", array)
        signature = array.dtype(array, index)

        def codegen(context, builder, sig, args):
            array_type, index_type = sig.args
            loaded_type = context.get_value_type(array_type.dtype)
            fn_type = ir.FunctionType(loaded_type, [loaded_type.as_pointer()])
            ptr = ch._get_element_pointer(context, builder, index_type, args[1], array_type, args[0])
            return builder.call(load_asm(fn_type, operator, array_type.dtype.bitwidth), [ptr])

        return signature, codegen

    return impl


def install() -> bool:
    """Replace numba-cuda's cache-hint load intrinsics (once); False if this numba-cuda differs."""
    global _installed
    if _installed:
        return True
    try:
        from numba.cuda import cache_hints as ch

        replacements = {f"ld{op}_intrinsic": _ordered_load(op) for op in _HINTS}
        missing = [name for name in replacements if not hasattr(ch, name)]
        if missing:
            raise AttributeError(f"numba.cuda.cache_hints has no {', '.join(missing)}")
    except Exception as exc:  # a newer numba-cuda: keep its loads, and say what is not guaranteed
        warnings.warn(f"Kernel Lab could not mark cuda.ldcv/ldcg as ordered loads ({exc}); polling loops "
                      "that read a value after a flag may see it early.", RuntimeWarning, stacklevel=2)
        return False
    for name, impl in replacements.items():
        # The overloads (cuda.ldcg -> ldcg_intrinsic) look the name up in this module when they compile.
        setattr(ch, name, impl)
        installed[name] = impl
    _installed = True
    return True
