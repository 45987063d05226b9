"""The code-generation cache's table of bindings, and its patcher on a stand-in libmathdx.

``codegen_cache.BINDINGS`` says what the cache does with each function of
``nvmath.bindings.mathdx``. These tests hold the table's shape, and run the generic patcher on a
small Python stand-in for libmathdx (handles numbered differently per "process", code generation
counted): a cold run stores entries, a second process is answered from disk with no code generation
and the same results, verify mode generates everything again and finds no difference, and a changed
generator is reported as a difference. No nvmath-python needed, except for the last test, which
checks the table against the real binding module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import warnings
from enum import IntEnum

import pytest

from kernel_lab.tensor_cores import codegen_cache as cg

HAVE_NVMATH = importlib.util.find_spec("nvmath") is not None


# ---- the table -----------------------------------------------------------------------------------

def test_every_rule_has_a_wrapper_and_names_a_binding():
    for name, rule in cg.BINDINGS.items():
        assert name.startswith(("cublasdx_", "commondx_")), name
        assert type(rule) in cg._WRAPPERS, f"{name}: no wrapper for {type(rule).__name__}"
    kinds = {type(rule) for rule in cg.BINDINGS.values()}
    assert kinds == set(cg._WRAPPERS) - {cg.PassThrough}, "every kind of rule is used; pass-through is the default"


def test_expensive_calls_are_all_in_the_table():
    """The calls that run NVRTC: a binding missing here would pass through and generate every time."""
    for name in ("cublasdx_finalize_tensors", "cublasdx_finalize_pipelines", "cublasdx_finalize_device_functions",
                 "cublasdx_finalize_code", "cublasdx_get_trait_int64", "cublasdx_get_trait_int64s",
                 "cublasdx_get_trait_str_size", "cublasdx_get_trait_str"):
        assert not isinstance(cg.BINDINGS[name], (cg.PassThrough, cg.Describe, cg.SetOption)), name
    tensors = cg.BINDINGS["cublasdx_finalize_tensors"]
    assert tensors.stable_uid and "UID" in tensors.ints
    assert cg.BINDINGS["cublasdx_get_tensor_trait_int64"].uid


def test_descriptions_name_other_objects_by_reference():
    """Key formation on stand-in arguments: handles become references (resolved to their own
    descriptions, so the process's numbering never enters a key), enums become ints, and an argument
    given as a raw pointer leaves the object undescribed."""
    tensor = cg.BINDINGS["cublasdx_create_tensor"]
    assert tensor.kind == "tensor" and tensor.used == 0
    assert tensor.parts(11, Enum.B) == (("ref", 11), 2)
    fn = cg.BINDINGS["cublasdx_create_device_function"]
    assert fn.parts(11, Enum.A, 2, [21, 22]) == (("ref", 11), 1, [("ref", 21), ("ref", 22)])
    with pytest.raises(cg.Uncacheable):
        fn.parts(11, Enum.A, 2, 0x7F00_0000)  # a pointer to the handles
    strided = cg.BINDINGS["cublasdx_create_tensor_strided"]
    assert strided.parts(1, 2, 0, 2, (4, 8), [8, 1]) == (1, 2, 0, 2, (4, 8), (8, 1))
    with pytest.raises(cg.Uncacheable):
        strided.parts(1, 2, 0, 2, 0x1000, 0x2000)


class Enum(IntEnum):
    A = 1
    B = 2


# ---- a stand-in libmathdx --------------------------------------------------------------------------

class FakeMathdx:
    """Enough of ``nvmath.bindings.mathdx`` for one kernel: a descriptor, two tensors, a Matmul trait,
    a device function and its code. Handles start at ``first`` (another process numbers them
    differently); a tensor's UID is a per-process counter; ``generations`` counts NVRTC runs;
    ``salt`` changes the generated LTO-IR (a code generator that changed under the cache)."""

    class CublasdxTensorTrait(IntEnum):
        STORAGE_BYTES = 0
        ALIGNMENT_BYTES = 1
        UID = 2
        LOGICAL_SIZE = 3
        MEMORY_SPACE = 4

    class CublasdxPipelineTrait(IntEnum):
        STORAGE_BYTES = 0

    class CublasdxDeviceFunctionTrait(IntEnum):
        SYMBOL = 0

    class CommondxOption(IntEnum):
        TARGET_SM = 0
        CODE_ISA = 1

    def __init__(self, first=1000, salt=b""):
        self.next, self.salt = first, salt
        self.objects, self.final, self.uids, self.ltoir = {}, set(), {}, {}
        self.generations = 0

    def get_version_ex(self):
        return (0, 3, 2)

    def _new(self, *desc):
        self.next += 7
        self.objects[self.next] = list(desc)
        return self.next

    def _content(self, h):
        return tuple(self._content(p[1]) if isinstance(p, tuple) and p[:1] == ("h",) else
                     tuple(self._content(q[1]) for q in p) if isinstance(p, list) else p
                     for p in self.objects[h])

    def _symbol(self, f):
        return "f" + hashlib.sha256(repr(self._content(f)).encode()).hexdigest()[:16]

    # describing
    def cublasdx_create_descriptor(self):
        return self._new("descriptor")

    def cublasdx_set_operator_int64(self, h, op, value):
        self.objects[h].append(("op", int(op), int(value)))

    def cublasdx_create_tensor(self, h, tensor_type):
        return self._new("tensor", ("h", h), int(tensor_type))

    def cublasdx_create_device_function(self, h, ftype, count, args):
        return self._new("function", ("h", h), int(ftype), [("h", a) for a in args])

    def commondx_create_code(self):
        return self._new("code")

    def commondx_set_code_option_int64(self, code, option, value):
        self.objects[code].append(("option", int(option), int(value)))

    # generating
    def cublasdx_finalize_tensors(self, count, tensors):
        assert count == len(tensors)
        self.generations += 1
        for t in tensors:
            self.final.add(t)
            self.uids[t] = len(self.uids) + 1

    def cublasdx_get_tensor_trait_int64(self, t, trait):
        if t not in self.final:
            raise RuntimeError(f"tensor {t} is not finalized")
        if trait == self.CublasdxTensorTrait.UID:
            return self.uids[t]
        return 16 * len(repr(self._content(t))) + int(trait)

    def cublasdx_get_tensor_trait_str_size(self, t, trait):  # not in the table: passes through
        if t not in self.final:
            raise RuntimeError(f"tensor {t} is not finalized")
        return 8

    def cublasdx_get_trait_int64(self, h, trait):
        self.generations += 1
        return len(repr(self._content(h))) * 1000 + int(trait)

    def cublasdx_get_device_function_trait_str_size(self, f, trait):
        return len(self._symbol(f)) + 1

    def cublasdx_get_device_function_trait_str(self, f, trait, size, buf):
        buf[:size] = self._symbol(f).encode() + b"\0"

    def cublasdx_finalize_device_functions(self, code, count, functions):
        for f in functions:
            for t in self.objects[f][3]:
                if t[1] not in self.final:
                    raise RuntimeError("a device function's tensors must be finalized first")
        self.generations += 1
        text = repr((self._content(code), [self._content(f) for f in functions]))
        self.ltoir[code] = self.salt + hashlib.sha256(text.encode()).digest() * 4

    def commondx_get_code_ltoir_size(self, code):
        return len(self.ltoir[code])

    def commondx_get_code_ltoir(self, code, size, buf):
        buf[:size] = self.ltoir[code][:size]

    def commondx_get_code_option_int64(self, code, option):
        if code not in self.ltoir:
            raise RuntimeError("no code generated")
        return 90

    def cublasdx_destroy_descriptor(self, h):
        self.objects.pop(h)


def kernel(M):
    """What nvmath does for one kernel, through the (wrapped) module attributes."""
    d = M.cublasdx_create_descriptor()
    M.cublasdx_set_operator_int64(d, Enum.A, 128)
    M.cublasdx_set_operator_int64(d, Enum.B, 90)
    a, b = M.cublasdx_create_tensor(d, 0), M.cublasdx_create_tensor(d, 1)
    M.cublasdx_finalize_tensors(2, [a, b])
    T = M.CublasdxTensorTrait
    out = {"uid": M.cublasdx_get_tensor_trait_int64(a, T.UID),
           "bytes": M.cublasdx_get_tensor_trait_int64(b, T.STORAGE_BYTES),
           "trait": M.cublasdx_get_trait_int64(d, Enum.B)}
    f = M.cublasdx_create_device_function(d, 3, 2, [a, b])
    code = M.commondx_create_code()
    M.commondx_set_code_option_int64(code, M.CommondxOption.TARGET_SM, 90)
    M.cublasdx_finalize_device_functions(code, 1, [f])
    size = M.commondx_get_code_ltoir_size(code)
    buf = bytearray(size)
    M.commondx_get_code_ltoir(code, size, buf)
    out.update(ltoir=bytes(buf), isa=M.commondx_get_code_option_int64(code, M.CommondxOption.CODE_ISA),
               tensor_str=M.cublasdx_get_tensor_trait_str_size(a, 0))
    return out


def _process(tmp_path, first, salt=b""):
    """A new 'process': a fresh stand-in module (its own handle numbers) and a cache installed on it."""
    M = FakeMathdx(first, salt)
    cache = cg.CodegenCache(tmp_path, mathdx=M)
    cg._install(cache)
    return M, cache


def test_a_second_process_is_answered_from_disk(tmp_path, monkeypatch):
    monkeypatch.delenv(cg.VERIFY_ENV, raising=False)
    monkeypatch.delenv("KERNEL_LAB_WARM_CACHE", raising=False)
    M1, cold = _process(tmp_path, first=1000)
    first = kernel(M1)
    assert cold.misses == 4 and cold.hits == 0
    M2, warm = _process(tmp_path, first=5000)
    second = kernel(M2)
    # the pass-through call made the tensors real (one batched finalization); nothing else generated
    assert M2.generations == 1 and warm.misses == 0 and warm.hits == 4
    assert second == first
    assert first["uid"] >= cg._VIRTUAL_UID_BASE, "a UID derived from the description, not libmathdx's counter"


def test_cold_counts(tmp_path, monkeypatch):
    monkeypatch.delenv(cg.VERIFY_ENV, raising=False)
    M, cache = _process(tmp_path, first=1000)
    kernel(M)
    assert M.generations == 3  # the tensors (one batch), the Matmul trait, the code
    assert cache.missed == {"tensor-traits": 2, "trait": 1, "code": 1} and cache.hits == 0
    assert cg.disk_usage(tmp_path)[0] == 4


def test_verify_mode_generates_again_and_finds_no_difference(tmp_path, monkeypatch):
    monkeypatch.delenv(cg.VERIFY_ENV, raising=False)
    first = kernel(_process(tmp_path, first=1000)[0])
    monkeypatch.setenv(cg.VERIFY_ENV, "1")
    M, cache = _process(tmp_path, first=9000)
    assert kernel(M) == first
    assert M.generations == 3, "verify mode runs every generation, as without the cache"
    assert cache.misses == 0 and cache.hits == 4
    assert [(what, same) for what, _, same in cache.verified] == [
        ("tensor-traits", True), ("tensor-traits", True), ("trait", True), ("code", True)]


def test_verify_mode_reports_a_changed_generator(tmp_path, monkeypatch):
    """A cache entry that no longer matches what libmathdx generates (the failure the cache would
    otherwise hide: wrong code, silently) is counted and warned about."""
    monkeypatch.delenv(cg.VERIFY_ENV, raising=False)
    kernel(_process(tmp_path, first=1000)[0])
    monkeypatch.setenv(cg.VERIFY_ENV, "1")
    M, cache = _process(tmp_path, first=9000, salt=b"changed")
    with pytest.warns(UserWarning, match="code entry .* differs from a fresh generation"):
        out = kernel(M)
    assert out["ltoir"].startswith(b"changed"), "verify mode returns the fresh generation"
    assert [what for what, _, same in cache.verified if not same] == ["code"]


def test_a_descriptor_changed_after_use_is_never_cached(tmp_path, monkeypatch):
    monkeypatch.delenv(cg.VERIFY_ENV, raising=False)
    M, cache = _process(tmp_path, first=1000)
    d = M.cublasdx_create_descriptor()
    t = M.cublasdx_create_tensor(d, 0)
    M.cublasdx_set_operator_int64(d, Enum.A, 64)  # after a tensor was derived from it
    M.cublasdx_finalize_tensors(1, [t])
    assert cache.misses == 0 and cache.hits == 0 and cg.disk_usage(tmp_path)[0] == 0
    assert M.cublasdx_get_tensor_trait_int64(t, M.CublasdxTensorTrait.UID) == 1, "libmathdx's own UID"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M.cublasdx_destroy_descriptor(d)


@pytest.mark.skipif(not HAVE_NVMATH, reason="needs nvmath-python (pip install -e '.[cu13]') for its binding module")
def test_the_table_matches_nvmaths_binding_module():
    """Every binding the table names exists in nvmath.bindings.mathdx, and every trait it stores
    is a member of the binding's enum (a renamed function would otherwise pass through uncached)."""
    from nvmath.bindings import mathdx

    wrapped = set(cg.wrapped_bindings(mathdx))
    assert set(cg.BINDINGS) <= wrapped, sorted(set(cg.BINDINGS) - wrapped)
    for name, rule in cg.BINDINGS.items():
        if isinstance(rule, cg.FinalizeObjects):
            enum = getattr(mathdx, rule.trait_enum)
            assert {rule.get_int, rule.get_ints or rule.get_int} <= wrapped, name
            for trait in (*rule.ints, *(t for t, _ in rule.arrays)):
                assert trait in enum.__members__, (name, trait)
        if isinstance(rule, cg.ReadTrait):
            assert hasattr(mathdx, rule.trait_enum), name
