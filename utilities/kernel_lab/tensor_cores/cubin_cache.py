"""An on-disk cache of linked cubins for kernels that link cuBLASDx code, keyed by everything that
goes into the link.

Why it exists
-------------
With the code-generation cache warm (``codegen_cache``), compiling a cuBLASDx kernel still costs
Numba's typing and lowering, NVVM (LLVM IR -> LTO-IR) and nvJitLink, which links the kernel's
LTO-IR with about a megabyte of cuBLASDx LTO-IR per device function and optimises and assembles the
whole (docs/compile-time.md has the measured split). Numba's own disk cache cannot keep these
kernels (it refuses libraries with linking files), so this module keeps the final cubin instead.

What the key holds
------------------
A SHA-256 of: the target (``sm_90a``, ...), the library's NVVM options, register limit and LTO
flag, its LLVM IR (the kernel after Numba's lowering, so any change to the kernel's Python source,
argument types, constants or launch bounds changes it), the bytes of every file or code object it
links (the cuBLASDx LTO-IR, whose symbols are content hashes of their descriptions), whether it
links cudadevrt, and the versions of numba-cuda, NVVM, nvJitLink and cuda-core. A hit skips NVVM
and the link; Numba's lowering still runs (it is what produces the key). Libraries with no linked
files are left alone (they compile in well under a second).

Entries live next to the code-generation cache, in ``$KERNEL_LAB_CACHE_DIR/cubin`` (default
``~/.cache/kernel_lab/cubin``); ``KERNEL_LAB_NO_CUBIN_CACHE=1`` turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import threading
from pathlib import Path

FORMAT_VERSION = 1
_ACTIVE = None


def default_dir() -> Path:
    root = os.environ.get("KERNEL_LAB_CACHE_DIR") or Path.home() / ".cache" / "kernel_lab"
    return Path(root) / "cubin"


def warm_roots() -> list[Path]:
    """Read-only cache roots consulted after the writable one: ``$KERNEL_LAB_WARM_CACHE``, a
    ``:``-separated list (an image ships its warm cache there; learners' new entries go to
    ``$KERNEL_LAB_CACHE_DIR``)."""
    return [Path(p) for p in os.environ.get("KERNEL_LAB_WARM_CACHE", "").split(os.pathsep) if p]


def arch_name(cc) -> str:
    """``(9, 0, "a")`` -> ``"sm_90a"``; ``(8, 6)`` -> ``"sm_86"`` (the linker's spelling)."""
    return f"sm_{cc[0]}{cc[1]}{cc[2] if len(cc) > 2 else ''}"


def link_cc(cc) -> tuple:
    """The compute capability Numba links for on a GPU of capability ``cc``: Hopper and later get
    the architecture-specific ``a`` variant (``CUDACodeLibrary._ensure_cc``). Warming must use the
    same, or its entries would never be found."""
    cc = tuple(cc)
    if len(cc) == 3:
        return cc
    return (cc[0], cc[1], "a" if cc >= (9, 0) else "")


# Numba mangles a per-process counter into every function's name (an ABI tag ``v<uid>``, written
# ``B<len>v<uid>``) and into each module's ID, so the same kernel reads differently in two processes
# that compiled other functions first; and a library keeps the modules it links in a set, so their
# order changes from process to process too. The key sees the modules in a canonical order, with
# each uid replaced by its order of first appearance in that order.
_UID_TAG = re.compile(r"B(\d+)v(\d+)")


def _uids(text):
    return [m.group(2) for m in _UID_TAG.finditer(text) if int(m.group(1)) == 1 + len(m.group(2))]


def normalise_names(texts, mapping=None) -> list[str]:
    """The texts with Numba's per-process function uids replaced by their order of appearance."""
    mapping = {} if mapping is None else mapping

    def sub(m):
        if int(m.group(1)) != 1 + len(m.group(2)):  # not an abi tag holding a uid
            return m.group(0)
        return f"B#v{mapping.setdefault(m.group(2), len(mapping))}"

    return [_UID_TAG.sub(sub, t) for t in texts]


def canonical_modules(llvm_strs, entry: str = "") -> list[str]:
    """The library's LLVM modules, without their IDs, sorted by their uid-free text (ties by the uids'
    numeric order), with uids then numbered across all of them and the entry name: two processes that
    built the same kernel get the same list; any other difference in the code changes it."""
    mods = []
    for ir in llvm_strs:
        text = ir if isinstance(ir, str) else bytes(ir).decode("latin-1")
        text = "\n".join(line for line in text.split("\n") if not line.startswith("; ModuleID")).strip()
        mods.append((normalise_names([text])[0], [int(u) for u in _uids(text)], text))
    mods.sort(key=lambda m: (m[0], m[1]))
    return normalise_names([m[2] for m in mods] + [entry])


def make_key(arch: str, options: dict, llvm_strs, linked: list, versions: tuple, entry: str = "") -> str:
    """The cache key: pure, so that it can be tested without a GPU or nvmath.

    ``linked`` holds ``(kind, bytes)`` pairs, one per linked file or code object, in any order (a
    library keeps them in a set); ``entry`` is the kernel's (mangled) name."""
    texts = canonical_modules(llvm_strs, entry)
    h = hashlib.sha256()
    h.update(repr((FORMAT_VERSION, arch, sorted((str(k), repr(v)) for k, v in options.items()),
                   versions)).encode())
    for text in texts:
        h.update(b"\0ir\0")
        h.update(text.encode())
    for kind, digest in sorted((kind, hashlib.sha256(data).hexdigest()) for kind, data in linked):
        h.update(f"\0{kind}\0{digest}".encode())
    return h.hexdigest()


def _dist(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> tuple:
    """Versions of everything between the LLVM IR and the cubin."""
    out = [("numba-cuda", _dist("numba-cuda")), ("cuda-core", _dist("cuda-core"))]
    for name in ("nvidia-nvjitlink", "nvidia-nvjitlink-cu13", "nvidia-nvjitlink-cu12",
                 "nvidia-nvvm", "nvidia-cuda-nvcc-cu12"):
        v = _dist(name)
        if v:
            out.append((name, v))
    try:
        from cuda.bindings import nvjitlink

        out.append(("nvjitlink", tuple(nvjitlink.version())))
    except Exception:  # noqa: BLE001 - the key gets less specific, the package versions remain
        pass
    try:
        from numba.cuda.cudadrv import nvvm

        out.append(("nvvm", tuple(nvvm.NVVM().get_version()), tuple(nvvm.NVVM().get_ir_version())))
    except Exception:  # noqa: BLE001
        pass
    return tuple(out)


def _linked_blobs(library) -> list | None:
    """``(kind, bytes)`` of every file the library links, or None if one cannot be read exactly."""
    out = []
    for item in library._linking_files:
        data = getattr(item, "data", None)
        if data is not None:  # a LinkableCode object (nvmath passes its LTO-IR this way)
            if isinstance(data, str):
                data = data.encode()
            out.append((f"{type(item).__name__}:nrt={bool(getattr(item, 'nrt', False))}", bytes(data)))
            continue
        try:
            out.append((Path(str(item)).suffix, Path(str(item)).read_bytes()))
        except OSError:
            return None
    if library.needs_cudadevrt:
        out.append(("cudadevrt", b"cudadevrt"))
    return out


class CubinCache:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.versions = versions()
        self.hits = 0
        self.misses = 0
        self.lock = threading.Lock()

    def key_for(self, library, cc) -> str | None:
        if not library._linking_files or not library._lto:
            return None
        linked = _linked_blobs(library)
        if linked is None:
            return None
        options = dict(library._nvvm_options, max_registers=library._max_registers)
        return make_key(arch_name(cc), options, library.llvm_strs, linked, self.versions,
                        entry=library._entry_name or "")

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.cubin"

    def load(self, key: str):
        """``(cubin, entry name inside it)`` for ``key`` from this cache, or from a read-only warm
        cache shipped with an image (``$KERNEL_LAB_WARM_CACHE``), or None."""
        for folder in [self.root] + [Path(r) / "cubin" for r in warm_roots()]:
            path = folder / key[:2] / f"{key}.cubin"
            try:
                return path.read_bytes(), path.with_suffix(".entry").read_text()
            except OSError:
                continue
        return None

    def store(self, key: str, cubin: bytes, entry: str) -> None:
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            for target, data in ((path.with_suffix(".entry"), entry.encode()), (path, cubin)):
                tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, target)  # the cubin last: an entry counts once its cubin is there
        except OSError:
            pass  # read-only or full: the cache is an optimisation only


def _as_object_code(cubin: bytes, name: str):
    from cuda.core import ObjectCode

    return ObjectCode.from_cubin(cubin, name=name)


def _cubin_bytes(result) -> bytes:
    code = getattr(result, "code", result)
    return bytes(code)


def install_on(library_class, cache: CubinCache) -> None:
    """Wrap ``library_class.get_cubin`` (Numba's ``CUDACodeLibrary``; tests pass a stand-in)."""
    original = library_class.get_cubin

    def get_cubin(self, cc=None):
        cc = self._ensure_cc(cc)
        if self._cubin_cache.get(cc):
            return self._cubin_cache[cc]
        try:
            key = cache.key_for(self, cc)
        except Exception:  # noqa: BLE001 - anything unexpected: link as usual
            key = None
        if key is not None:
            found = cache.load(key)
            if found is not None:
                data, entry = found
                with cache.lock:
                    cache.hits += 1
                obj = _as_object_code(data, self._entry_name or self.name)
                # the cubin names the kernel as the process that linked it did (see _UID_TAG):
                # look it up by that name
                self._entry_name = entry
                self._cubin_cache[cc] = obj
                self._linkerinfo_cache[cc] = ""
                return obj
        result = original(self, cc)
        if key is not None:
            with cache.lock:
                cache.misses += 1
            cache.store(key, _cubin_bytes(result), self._entry_name or "")
        return result

    get_cubin.__wrapped__ = original
    library_class.get_cubin = get_cubin


def enable(cache_dir=None):
    """Install the cubin cache into Numba's CUDA code library (once per process); return it."""
    global _ACTIVE
    if os.environ.get("KERNEL_LAB_NO_CUBIN_CACHE"):
        return None
    if _ACTIVE is not None:
        return _ACTIVE
    try:
        from numba.cuda import codegen

        codegen.CUDACodeLibrary.get_cubin  # noqa: B018 - absent under the CUDA simulator
    except (ImportError, AttributeError):
        return None
    cache = CubinCache(Path(cache_dir) if cache_dir else default_dir())
    install_on(codegen.CUDACodeLibrary, cache)
    _ACTIVE = cache
    return cache


def active():
    return _ACTIVE


def stats() -> dict:
    c = _ACTIVE
    return {} if c is None else {"hits": c.hits, "misses": c.misses, "dir": str(c.root)}
