"""Make ``cuda.ldcv``, ``cuda.ldcg`` and the other cache-hint loads safe to poll with.

numba-cuda emits each cache-hint load (``ld.global.cv``, ``.cg``, ``.ca``, ``.cs``, ``.lu``) as an
inline-PTX call with no side effect and no memory clobber. LLVM and NVVM treat such an asm
statement as a pure function of its operands (it "reads no memory"; the CUDA inline-PTX guide says
so, and LLVM's NVPTX back end models it that way since llvm/llvm-project#130675). The compiler may
then move the load above ``cuda.threadfence()``, out of a polling loop, or merge two loads of the same
address. A decoupled look-back that polls a flag with ``cuda.ldcv`` and then reads the value with
``cuda.ldcg`` can therefore read the value *before* the flag that announced it: on an H100 module
02's single-pass scan read a predecessor's total before it was written, one tile in ten thousand.

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
