"""``kl.load_acquire(array, i)``: the load that polls a flag another block sets (and
``kl.load_relaxed``, its lighter sibling for a flag that carries its own value).

A decoupled look-back waits for a predecessor's flag: ``while f == FLAG_NONE: f = <load>``. The load
must be one the compilers may neither keep in a register nor drop, and the reads after it must see
what was written before the flag. Numba has no such load:

* ``flags[j]`` is a weak load: the loop may read it once;
* ``cuda.ldcv(flags, j)`` is a weak load too (``.cv`` is only a cache hint). On an H100, ptxas
  removed the polling loop of module 02's look-back altogether (the SASS reads the flag once and
  treats "nothing published" as "aggregate published"), so a tile read a total that was never
  written: the NaN the single-pass scan produced.

This module gives one: PTX ``ld.acquire.gpu.global`` (sm_70 and newer), emitted as inline PTX that
has side effects and clobbers memory, so that NVVM keeps it where it is and ptxas must execute it
every time. *Acquire* means that no read after it is performed before it: once the flag says
"published", the value behind it is read from memory as the publisher left it, with no fence
between. The publisher still writes the value, ``cuda.threadfence()``, then the flag.

``kl.load_relaxed(array, i)`` is ``ld.relaxed.gpu.global``: executed every time, read from the
GPU-wide coherent level (L2), but it orders nothing after it. It suffices when the flag and the
value it announces are *one* word (a 64-bit status word: flag in the high half, value in the low),
because one aligned load sees either the old word or the new one, never half of each. Then the
publisher needs no fence either (one ``cuda.atomic.exch`` of the word), and the reader's L1 is not
invalidated after every poll (an acquire load is followed by ``CCTL.IVALL`` in the SASS): this is
how CUB's single-pass scan publishes 4-byte totals.

``kl.acquire.load_acquire_system(array, i)`` is ``ld.acquire.sys.global``: the same acquire at system
scope, for a flag that another GPU (or the host) sets, as module 09's one-shot all-reduce polls its
peer's flag over NVLink; a ``.gpu`` acquire orders nothing with respect to another GPU's stores.

In the simulator all three are a plain read and a scheduling point of the interleaved block schedules (as
``cuda.ldcv`` is there).
"""

from __future__ import annotations

from .environment import on_simulator

__all__ = ["load_acquire", "load_relaxed", "load_acquire_system"]

_SUFFIX = {"gpu": "", "sys": "_system"}  # PTX scope -> the Python name's suffix


def acquire_asm(fn_type, bits: int, semantics: str = "acquire", scope: str = "gpu"):
    """``ld.<semantics>.<scope>.global.b<bits>`` as inline PTX with side effects and a memory clobber."""
    from llvmlite import ir
    from numba.cuda.cache_hints import CONSTRAINT_MAP

    return ir.InlineAsm(fn_type, f"ld.{semantics}.{scope}.global.b{bits} $0, [$1];",
                        f"={CONSTRAINT_MAP[bits]},l,~{{memory}}", side_effect=True)


def _gpu_load(semantics: str, scope: str = "gpu"):
    from llvmlite import ir
    from numba.cuda import cache_hints as ch
    from numba.cuda.extending import intrinsic

    name = f"load_{semantics}" + _SUFFIX[scope]

    def load(typingctx, array, index):
        ch._validate_arguments(name, array, index)
        ch._validate_bitwidth(name, array)

        def codegen(context, builder, sig, args):
            array_type, index_type = sig.args
            loaded = context.get_value_type(array_type.dtype)
            bits = array_type.dtype.bitwidth
            ptr = ch._get_element_pointer(context, builder, index_type, args[1], array_type, args[0])
            asm = acquire_asm(ir.FunctionType(loaded, [loaded.as_pointer()]), bits, semantics, scope)
            return builder.call(asm, [ptr])

        return array.dtype(array, index), codegen

    load.__name__ = load.__qualname__ = name  # the name Numba's error messages show
    return intrinsic(load)


def _simulated_load(semantics: str, scope: str = "gpu"):
    """The simulator's: memory there is sequentially consistent; the read is a scheduling point."""
    from .simulator.grid import scheduling_point
    from .simulator.scheduler import report_poll

    def load(array, i):
        scheduling_point(f"kl.load_{semantics} ({'an' if semantics[0] in 'aeiou' else 'a'} {semantics} read)",
                         defer=True)
        value = array[i]
        index = tuple(int(j) for j in i) if isinstance(i, tuple) else int(i)
        report_poll((id(array), index), value, f"element {index} of an array with {load.__name__}")
        return value

    load.__name__ = f"load_{semantics}" + _SUFFIX[scope]
    return load


_make = _simulated_load if on_simulator() else _gpu_load
load_acquire = _make("acquire")
load_relaxed = _make("relaxed")
load_acquire_system = _make("acquire", "sys")
