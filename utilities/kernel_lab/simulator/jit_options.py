"""``cuda.jit`` for the simulator that accepts every keyword numba-cuda's ``cuda.jit`` accepts.

A notebook tuned for a GPU writes ``@cuda.jit(fastmath=True, launch_bounds=256, lineinfo=True)``.
The plain simulator's ``jit`` rejects most of these keywords, so the same cell would fail on a
laptop. Here they are all accepted. The ones that only steer the GPU compiler are ignored:
``inline``, ``forceinline``, ``opt``, ``lineinfo``, ``cache``, ``launch_bounds``, ``lto``,
``max_registers``, ``shared_memory_carveout``, ``link``. The ones with a meaning here are passed
on: ``device``, ``debug`` (division by zero raises), ``fastmath`` (recorded), ``extensions``
(argument preparation).

Mistakes are caught as on the GPU: an unknown keyword is a TypeError (a typo such as
``fast_math=True`` should not pass silently), ``boundscheck=True`` is rejected as numba-cuda
rejects it (the simulator always checks bounds anyway), and the removed ``argtypes``/``restype``/
``bind`` keywords raise. ``link`` is ignored, so a kernel that calls foreign code declared with
``cuda.declare_device`` still cannot run under the simulator.
"""

IGNORED = frozenset(
    {
        "inline", "forceinline", "opt", "lineinfo", "cache", "launch_bounds", "lto",
        "max_registers", "shared_memory_carveout", "link",
    }
)  # fmt: skip
PASSED_ON = frozenset({"device", "debug", "fastmath", "extensions"})
CHECKED = frozenset({"boundscheck", "argtypes", "restype", "bind"})
ACCEPTED = IGNORED | PASSED_ON | CHECKED


def make_jit(kernel_class, is_signature, config):
    """Build the simulator's ``cuda.jit`` around its kernel class `kernel_class`."""

    def jit(func_or_sig=None, **options):
        unknown = sorted(set(options) - ACCEPTED)
        if unknown:
            raise TypeError(
                f"cuda.jit() got unexpected keyword argument(s) {', '.join(unknown)}. "
                f"numba-cuda accepts: {', '.join(sorted(ACCEPTED - CHECKED))}."
            )
        if options.get("boundscheck"):
            raise NotImplementedError("bounds checking is not supported for CUDA")
        for removed in ("argtypes", "restype", "bind"):
            if options.get(removed) is not None:
                raise TypeError(
                    f"Deprecated keyword argument `{removed}`. Signatures should be passed as "
                    "the first positional argument."
                )
        device = bool(options.get("device", False))
        debug = options.get("debug")
        debug = config.CUDA_DEBUGINFO_DEFAULT if debug is None else debug
        fastmath = bool(options.get("fastmath", False))
        extensions = options.get("extensions") or ()

        def build(fn):
            return kernel_class(
                fn, device=device, fastmath=fastmath, extensions=extensions, debug=debug
            )

        if func_or_sig is None or is_signature(func_or_sig) or isinstance(func_or_sig, list):
            return build
        return build(func_or_sig)

    jit.__doc__ = (
        "JIT-compile a Python function for CUDA (simulator version; accepts numba-cuda's "
        "keywords and ignores those that only steer the GPU compiler).\n\n" + (__doc__ or "")
    )
    return jit
