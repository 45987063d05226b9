"""Module 06: configuration enumeration and validity rules (pure Python)."""

import pytest

from kernel_lab.tensor_cores import configs
from kernel_lab.tensor_cores.configs import GemmConfig, PipelineConfig, Space
from kernel_lab.validate import KernelLabArgumentError


def test_default_configs_are_valid_on_hopper_and_ampere():
    for prec, tk in [("float16", 32), ("bfloat16", 32), ("tf32", 16), ("int8", 64), ("int4", 64)]:
        cfg = GemmConfig(precision=prec, tile_k=tk)
        assert cfg.problems((9, 0)) == [], (prec, cfg.problems((9, 0)))
        assert cfg.problems((8, 0)) == []
    assert PipelineConfig().problems((9, 0)) == []


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(tile_m=100), "multiples of 16"),
    (dict(tile_k=24), "multiple of 16 for float16"),
    (dict(threads=100), "multiple of 32"),
    (dict(threads=64), "spill"),
    (dict(tile_m=256, tile_n=256, tile_k=64), "shared memory"),
    (dict(tile_m=0), "positive whole number"),
])
def test_each_invalid_knob_gets_its_reason(kwargs, fragment):
    problems = GemmConfig(**kwargs).problems((9, 0))
    assert any(fragment in p for p in problems), problems


def test_precision_specific_rules():
    assert any("8.0 or newer" in p for p in GemmConfig(precision="bfloat16").problems((7, 5)))
    assert any("multiple of 32" in p for p in GemmConfig(precision="int8", tile_k=16).problems())
    assert GemmConfig(precision="int8").b_k_major and not GemmConfig(precision="float16").b_k_major
    with pytest.raises(KernelLabArgumentError, match="unknown precision"):
        configs.precision("fp12")


def test_shared_memory_arithmetic():
    cfg = GemmConfig(128, 128, 32, 256, "float16")
    assert cfg.a_elems == 128 * 32 and cfg.b_elems == 32 * 128
    assert cfg.smem_bytes() == (4096 + 4096) * 2 + 8 * 128
    i8 = GemmConfig(128, 64, 64, 128, "int8")
    assert (i8.lda, i8.ldb) == (64, 64) and i8.b_elems == 64 * 64
    assert PipelineConfig(128, 128, 64, 128, "int8", 3).smem_bytes() == 3 * (256 * 64 + 16)


def test_enumeration_is_valid_deterministic_and_respects_the_space():
    space = Space(tile_m=(64, 128), tile_n=(64, 128), threads=(128, 256), prefetch=(True, False))
    a = configs.enumerate_configs("float16", (9, 0), space)
    b = configs.enumerate_configs("float16", (9, 0), space)
    assert a == b and len(a) > 4
    assert all(not c.problems((9, 0)) for c in a)
    assert {c.tile_m for c in a} <= {64, 128} and {c.tile_k for c in a} <= {32, 64}
    assert a[0].tile_m * a[0].tile_n == max(c.tile_m * c.tile_n for c in a)  # largest tiles first
    assert len(set(a)) == len(a)


def test_enumeration_filters_what_does_not_fit():
    big = Space(tile_m=(256,), tile_n=(256,), tile_k=(64,), threads=(256,), prefetch=(True,))
    assert configs.enumerate_configs("float16", (9, 0), big) == []


def test_pipeline_enumeration_depends_on_the_gpu_shared_memory():
    space = Space(tile_m=(128,), tile_n=(128, 256), threads=(128, 256), depth=(2, 4, 8))
    hopper = configs.enumerate_pipeline_configs("int8", (9, 0), space)
    ada = configs.enumerate_pipeline_configs("int8", (8, 9), space)
    assert hopper and len(ada) < len(hopper)
    assert all(c.smem_bytes() <= configs.OPTIN_SMEM_LIMIT[(8, 9)] for c in ada)
    assert PipelineConfig(depth=3, tile_k=64).min_k() == 192
    assert any("unpacked" in p for p in PipelineConfig(precision="int4").problems())


def test_grid_rounds_up_and_rejects_nonsense():
    assert configs.grid_for(1, 1, 128, 128) == (1, 1, 1)
    assert configs.grid_for(129, 257, 128, 128, 3) == (2, 3, 3)
    with pytest.raises(KernelLabArgumentError, match="m must be"):
        configs.grid_for(0, 5, 128, 128)
    assert configs.waves(4096, 4096, GemmConfig(256, 128, 32, 256), 132) == pytest.approx(512 / 132)


def test_the_persistent_schedule_is_a_config_field_that_keeps_old_keys():
    plain = PipelineConfig(128, 256, 64, 256, "float16", 3)
    assert "persistent_group_m" not in plain.as_dict()  # cache keys and job labels as before
    persistent = PipelineConfig(128, 256, 64, 256, "float16", 3, persistent_group_m=8)
    assert PipelineConfig(**persistent.as_dict()) == persistent
    assert "persistent (bands of 8)" in persistent.label()
    assert any("persistent_group_m" in p for p in PipelineConfig(persistent_group_m=-1).problems())
