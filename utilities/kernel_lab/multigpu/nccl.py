"""NCCL as the peer: its all-reduce over the GPUs of one process (``cupy.cuda.nccl``), and bus
bandwidth by NCCL's own definitions (nccl-tests' PERFORMANCE.md).

One process drives every GPU: ``NcclCommunicator.initAll(devices)`` makes one communicator per GPU,
and the per-GPU calls go between ``groupStart()`` and ``groupEnd()`` so that NCCL launches them
together (called one by one, the first would wait for ranks that have not been called yet).

Bandwidth. For a collective of ``size`` bytes that takes ``seconds``:

* algorithm bandwidth ``algbw = size / seconds``;
* bus bandwidth ``busbw = algbw * factor(n)``, where the factor makes the number comparable with the
  hardware's link bandwidth whatever the number of ranks ``n``: all-reduce ``2(n-1)/n``;
  reduce-scatter and all-gather ``(n-1)/n`` (``size`` is the total, n times one rank's share);
  broadcast, reduce ``1``.

For two GPUs an all-reduce's factor is 1: each GPU sends and receives one message's worth.
"""

from __future__ import annotations

import numpy as np

from ..validate import KernelLabArgumentError

BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def bus_bandwidth(size_bytes: float, seconds: float, n_ranks: int, collective: str = "all_reduce") -> tuple[float, float]:
    """(algbw, busbw) in bytes per second, by nccl-tests' definitions (see the module docstring)."""
    if collective not in BUS_FACTORS:
        raise KernelLabArgumentError(f"collective must be one of {', '.join(BUS_FACTORS)}, got {collective!r}")
    if not isinstance(n_ranks, (int, np.integer)) or n_ranks < 1:
        raise KernelLabArgumentError(f"n_ranks must be a whole number >= 1, got {n_ranks!r}")
    if not seconds > 0:
        raise KernelLabArgumentError(f"seconds must be > 0, got {seconds!r}")
    algbw = size_bytes / seconds
    return algbw, algbw * BUS_FACTORS[collective](int(n_ranks))


def nccl_dtype(dtype, nccl):
    """NCCL's data type constant for a NumPy dtype."""
    table = {np.dtype(np.float16): "NCCL_FLOAT16", np.dtype(np.float32): "NCCL_FLOAT32",
             np.dtype(np.float64): "NCCL_FLOAT64", np.dtype(np.int32): "NCCL_INT32",
             np.dtype(np.int64): "NCCL_INT64", np.dtype(np.int8): "NCCL_INT8", np.dtype(np.uint8): "NCCL_UINT8"}
    name = table.get(np.dtype(dtype))
    if name is None:
        raise KernelLabArgumentError(f"NCCL's all-reduce here takes {', '.join(str(d) for d in table)}; got {np.dtype(dtype)}")
    return getattr(nccl, name)


class NcclAllReduce:
    """Sum-all-reduce over ``devices`` with NCCL, one communicator per GPU in this process.

    ``nccl_all_reduce = NcclAllReduce((0, 1)); nccl_all_reduce(xs, outs, streams)``: ``xs[g]`` and
    ``outs[g]`` are CuPy arrays on ``devices[g]`` (``outs[g] is xs[g]`` sums in place). Asynchronous.
    """

    def __init__(self, devices=(0, 1), *, cupy=None):
        if cupy is None:
            import cupy
        from cupy.cuda import nccl

        self.cp, self.nccl, self.devices = cupy, nccl, tuple(devices)
        self.comms = nccl.NcclCommunicator.initAll(list(self.devices))

    def __call__(self, xs, outs, streams=None):
        if not (len(xs) == len(outs) == len(self.devices)):
            raise KernelLabArgumentError(f"give one input and one output per GPU ({len(self.devices)}), "
                                         f"got {len(xs)} and {len(outs)}")
        shapes = {(x.shape, x.dtype) for x in xs} | {(o.shape, o.dtype) for o in outs}
        if len(shapes) != 1:
            raise KernelLabArgumentError(f"every input and output must have one shape and dtype, got {sorted(map(str, shapes))}")
        dtype = nccl_dtype(xs[0].dtype, self.nccl)
        cp = self.cp
        self.nccl.groupStart()
        try:
            for g, (comm, d) in enumerate(zip(self.comms, self.devices)):
                with cp.cuda.Device(d):
                    stream = streams[g] if streams is not None else cp.cuda.get_current_stream()
                    comm.allReduce(xs[g].data.ptr, outs[g].data.ptr, xs[g].size, dtype, self.nccl.NCCL_SUM, stream.ptr)
        finally:
            self.nccl.groupEnd()
