"""Module 06: the autotuner with a fake timing function: best pick, disk cache, key separation."""

import json

import pytest

from kernel_lab.tensor_cores.configs import GemmConfig
from kernel_lab.tensor_cores.tuner import Tuner, cache_file, knob_effects
from kernel_lab.validate import KernelLabArgumentError

CANDIDATES = [GemmConfig(128, 128, 32, 256), GemmConfig(64, 128, 32, 128), GemmConfig(128, 64, 64, 128),
              GemmConfig(128, 128, 32, 256, prefetch=False)]


def fake_time(cfg):
    """A made-up cost model: bigger tiles are faster, no prefetch is slower, 64-wide N fails."""
    if cfg.tile_n == 64:
        raise RuntimeError("too many resources requested for launch")
    return 10.0 / (cfg.tile_m * cfg.tile_n / 4096) * (1.0 if cfg.prefetch else 1.5)


@pytest.fixture
def tuner(tmp_path):
    return Tuner("block_gemm", kernel_version="t1", cache_dir=tmp_path, gpu="Fake GPU | GPU-1")


def test_picks_the_fastest_and_records_failures(tuner):
    res = tuner.tune(CANDIDATES, fake_time, shape=(4096, 4096, 4096), dtypes=("float16", "float32"))
    assert res.best == GemmConfig(128, 128, 32, 256) and not res.from_cache
    failed = [t for t in res.trials if t.ms is None]
    assert len(failed) == 1 and "too many resources" in failed[0].error
    table = res.table()
    assert table.splitlines()[1].startswith(CANDIDATES[0].label()) and "failed" in table


def test_second_run_comes_from_disk_without_timing(tuner, tmp_path):
    tuner.tune(CANDIDATES, fake_time, shape=(512, 512, 512), dtypes=("float16",))
    calls = []
    again = Tuner("block_gemm", kernel_version="t1", cache_dir=tmp_path, gpu="Fake GPU | GPU-1")
    res = again.tune(CANDIDATES, lambda c: calls.append(c) or 1.0, shape=(512, 512, 512), dtypes=("float16",))
    assert res.from_cache and res.best == GemmConfig(128, 128, 32, 256) and calls == []
    data = json.loads(cache_file(tmp_path).read_text())
    assert data["format"] == 1 and len(data["entries"]) == 1


@pytest.mark.parametrize("change", ["gpu", "shape", "dtype", "version", "family"])
def test_every_part_of_the_key_separates_entries(tmp_path, change):
    base = dict(family="block_gemm", kernel_version="t1", gpu="Fake GPU | GPU-1")
    t1 = Tuner(base["family"], kernel_version=base["kernel_version"], cache_dir=tmp_path, gpu=base["gpu"])
    t1.tune(CANDIDATES, fake_time, shape=(256, 256, 256), dtypes=("float16",))
    shape, dtypes = (256, 256, 256), ("float16",)
    if change == "gpu":
        base["gpu"] = "Fake GPU | GPU-2"
    elif change == "shape":
        shape = (256, 256, 512)
    elif change == "dtype":
        dtypes = ("int8",)
    elif change == "version":
        base["kernel_version"] = "t2"
    else:
        base["family"] = "pipeline_gemm"
    t2 = Tuner(base["family"], kernel_version=base["kernel_version"], cache_dir=tmp_path, gpu=base["gpu"])
    res = t2.tune(CANDIDATES, fake_time, shape=shape, dtypes=dtypes)
    assert not res.from_cache


def test_refresh_times_again_and_forget_drops(tuner):
    tuner.tune(CANDIDATES, fake_time, shape=(1, 2, 3), dtypes=("float16",))
    res = tuner.tune(CANDIDATES, fake_time, shape=(1, 2, 3), dtypes=("float16",), refresh=True)
    assert not res.from_cache
    tuner.forget()
    assert not tuner.tune(CANDIDATES, fake_time, shape=(1, 2, 3), dtypes=("float16",)).from_cache


def test_a_cached_winner_that_is_no_longer_a_candidate_is_tuned_again(tuner):
    tuner.tune(CANDIDATES, fake_time, shape=(8, 8, 8), dtypes=("float16",))
    res = tuner.tune(CANDIDATES[1:], fake_time, shape=(8, 8, 8), dtypes=("float16",))
    assert not res.from_cache and res.best == GemmConfig(128, 128, 32, 256, prefetch=False)


def test_all_failing_and_bad_inputs(tuner):
    def boom(cfg):
        raise RuntimeError("no")
    with pytest.raises(RuntimeError, match="every candidate failed"):
        tuner.tune(CANDIDATES, boom, shape=(1, 1, 1), dtypes=("x",))
    with pytest.raises(KernelLabArgumentError, match="at least one candidate"):
        tuner.tune([], fake_time, shape=(1, 1, 1), dtypes=("x",))
    with pytest.raises(KernelLabArgumentError, match="must be a function"):
        tuner.tune(CANDIDATES, 3, shape=(1, 1, 1), dtypes=("x",))
    res = tuner.tune(CANDIDATES, lambda c: float("nan") if c.prefetch else 2.0, shape=(2, 2, 2), dtypes=("x",))
    assert res.best == CANDIDATES[3]


def test_corrupt_cache_file_is_ignored(tuner, tmp_path):
    cache_file(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    cache_file(tmp_path).write_text("{not json")
    assert not tuner.tune(CANDIDATES, fake_time, shape=(3, 3, 3), dtypes=("f",)).from_cache


def test_knob_effects_reports_best_time_per_value(tuner):
    res = tuner.tune(CANDIDATES, fake_time, shape=(9, 9, 9), dtypes=("f",))
    eff = knob_effects(res.trials, ["prefetch", "tile_m"])
    assert eff["prefetch"][True] < eff["prefetch"][False]
    assert set(eff["tile_m"]) == {64, 128}


def test_env_var_sets_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path / "here"))
    assert cache_file() == tmp_path / "here" / "tuner.json"
