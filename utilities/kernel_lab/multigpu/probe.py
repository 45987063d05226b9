"""What this machine offers module 09: how many GPUs, which pairs can read each other's memory
(peer access), and NVLink where it is cheap to ask.

``probe()`` never raises: on a machine without two usable GPUs it returns a report whose
``skip_reason`` says why, in one sentence a notebook prints before skipping its GPU cells.

* GPUs and peer access come from CuPy's runtime API: ``getDeviceCount``,
  ``deviceCanAccessPeer(i, j)`` ("can GPU i map GPU j's memory?").
* NVLink: the number of active links per GPU from NVML (``pynvml``, the ``nvidia-ml-py`` package)
  when it is installed; ``None`` (unknown) otherwise. Peer access alone does not say NVLink: two GPUs
  on one PCIe switch have it too, at a fraction of the bandwidth.

``enable_peer_access(devices)`` turns peer access on in both directions (idempotent) and returns
the pairs where it is impossible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_GPUS = 2
# cudaErrorPeerAccessAlreadyEnabled: enabling twice is not an error for us.
PEER_ACCESS_ALREADY_ENABLED = 704


@dataclass
class MultiGpuReport:
    count: int = 0
    names: list[str] = field(default_factory=list)
    peer: dict[tuple[int, int], bool] = field(default_factory=dict)  # (i, j): can GPU i read GPU j's memory
    nvlinks: dict[int, int | None] = field(default_factory=dict)  # active NVLink links per GPU; None: unknown
    skip_reason: str | None = None

    @property
    def usable(self) -> bool:
        return self.skip_reason is None

    def describe(self) -> str:
        if self.count == 0:
            return f"no GPU: {self.skip_reason}"
        lines = [f"{self.count} GPU(s)"]
        for i, name in enumerate(self.names):
            links = self.nvlinks.get(i)
            link_text = "NVLink: unknown (install nvidia-ml-py to ask NVML)" if links is None else f"{links} active NVLink(s)"
            lines.append(f"  GPU {i}: {name}, {link_text}")
        for (i, j), ok in sorted(self.peer.items()):
            lines.append(f"  peer access GPU {i} -> GPU {j}: {'yes' if ok else 'no'}")
        if self.skip_reason:
            lines.append(f"skipped: {self.skip_reason}")
        return "\n".join(lines)


def _nvlink_counts(count: int, nvml=None) -> dict[int, int | None]:
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: NVLink unknown, not an error
        return {i: None for i in range(count)}
    out: dict[int, int | None] = {}
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            active = 0
            for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    active += bool(nvml.nvmlDeviceGetNvLinkState(handle, link))
                except Exception:  # noqa: BLE001 - a link this GPU does not have
                    break
            out[i] = active
        except Exception:  # noqa: BLE001
            out[i] = None
    return out


def probe(*, runtime=None, nvml=None, min_gpus: int = MIN_GPUS) -> MultiGpuReport:
    """The GPUs, peer access between every ordered pair, NVLink per GPU where known; ``skip_reason``
    is None when at least ``min_gpus`` GPUs can all read each other's memory. ``runtime`` (CuPy's
    ``cupy.cuda.runtime``) and ``nvml`` (``pynvml``) are passed in by tests."""
    if runtime is None:
        from ..environment import on_simulator

        if on_simulator():
            return MultiGpuReport(skip_reason="kernels run in the simulator on the CPU here; this needs "
                                              f"{min_gpus} GPUs (the protocol's checks run in the simulator instead)")
        try:
            from cupy.cuda import runtime
        except Exception as exc:  # noqa: BLE001 - ImportError, or CuPy without a CUDA library
            return MultiGpuReport(skip_reason=f"CuPy is not usable here ({type(exc).__name__}: {exc}); "
                                              "module 09 reaches the GPUs through it")
    try:
        count = int(runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - no driver or no GPU
        return MultiGpuReport(skip_reason=f"no GPU is visible ({type(exc).__name__}: {exc})")
    report = MultiGpuReport(count=count)
    for i in range(count):
        try:
            name = runtime.getDeviceProperties(i)["name"]
            report.names.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:  # noqa: BLE001
            report.names.append("unknown")
    for i in range(count):
        for j in range(count):
            if i != j:
                report.peer[(i, j)] = bool(runtime.deviceCanAccessPeer(i, j))
    report.nvlinks = _nvlink_counts(count, nvml) if count else {}
    if count < min_gpus:
        report.skip_reason = f"this machine has {count} GPU(s); this needs {min_gpus} (one process drives them all)"
    else:
        missing = [pair for pair, ok in sorted(report.peer.items()) if not ok and max(pair) < min_gpus]
        if missing:
            report.skip_reason = ("peer access is not possible between " +
                                  ", ".join(f"GPU {a} -> GPU {b}" for a, b in missing) +
                                  ": the kernels of module 09 read the other GPU's memory directly")
    return report


def enable_peer_access(devices, *, runtime=None) -> list[tuple[int, int]]:
    """Enable peer access from each of ``devices`` to each other one; return the ordered pairs where
    it is not possible (empty: all enabled). Enabling twice is fine."""
    if runtime is None:
        from cupy.cuda import runtime
    missing = []
    previous = runtime.getDevice()
    try:
        for i in devices:
            for j in devices:
                if i == j:
                    continue
                if not runtime.deviceCanAccessPeer(i, j):
                    missing.append((i, j))
                    continue
                runtime.setDevice(i)
                try:
                    runtime.deviceEnablePeerAccess(j)
                except Exception as exc:  # noqa: BLE001 - cupy's CUDARuntimeError
                    if getattr(exc, "status", None) != PEER_ACCESS_ALREADY_ENABLED:
                        raise
    finally:
        runtime.setDevice(previous)
    return missing
