"""Every attention launcher refuses a kv_lens outside 0 .. seq_k with a message naming the entry."""

import numpy as np
import pytest

import kernel_lab  # noqa: F401  (before numba.cuda: it picks GPU or simulator)
from kernel_lab.attention import kernels, lengths, tiled
from kernel_lab.validate import KernelLabArgumentError
from numba import cuda


def _inputs(b=2, h=1, n=4, nk=5, d=64):  # a head_dim every launcher has a configuration for
    rng = np.random.default_rng(0)
    q, k, v = (cuda.to_device(rng.standard_normal(s).astype(np.float32)) for s in ((b, h, n, d), (b, h, nk, d),
                                                                                     (b, h, nk, d)))
    return cuda.device_array((b, h, n, d), np.float32), cuda.device_array((b, h, n), np.float32), q, k, v


@pytest.mark.parametrize("bad, entry", [([5, 6], "kv_lens[1] = 6"), ([-1, 3], "kv_lens[0] = -1")])
def test_the_check_names_the_entry_outside_the_keys(bad, entry):
    with pytest.raises(KernelLabArgumentError, match=entry.replace("[", r"\[").replace("]", r"\]")):
        lengths.check_kv_lens(bad, 2, 5)


def test_the_check_takes_full_lengths_and_zeros():
    assert lengths.check_kv_lens([0, 5], 2, 5).tolist() == [0, 5]
    with pytest.raises(KernelLabArgumentError, match="one length per batch entry"):
        lengths.check_kv_lens([1, 2, 3], 2, 5)
    with pytest.raises(KernelLabArgumentError, match="integers"):
        lengths.check_kv_lens([1.5, 2.0], 2, 5)


@pytest.mark.parametrize("launch", [kernels.naive_forward, kernels.fused_forward, tiled.tiled_forward],
                         ids=["naive", "fused", "tiled"])
@pytest.mark.parametrize("on_device", [False, True], ids=["host", "device"])
def test_every_cuda_core_launcher_refuses_a_length_past_the_keys(launch, on_device):
    o, lse, q, k, v = _inputs()
    bad = np.array([5, 9], np.int32)  # 9 > 5 keys: the kernels would read past K and V
    lens = cuda.to_device(bad) if on_device else bad
    with pytest.raises(KernelLabArgumentError, match=r"kv_lens\[1\] = 9"):
        launch(o, lse, q, k, v, lens, False, 0.5)


def test_a_device_array_is_checked_once_and_reused():
    good = cuda.to_device(np.array([3, 5], np.int32))
    assert lengths.kv_lens_on_device(good, 2, 5) is good
    assert lengths.kv_lens_on_device(None, 2, 5) is lengths.kv_lens_on_device(None, 2, 5)
    with pytest.raises(KernelLabArgumentError, match="int32"):
        lengths.kv_lens_on_device(cuda.to_device(np.array([3, 5], np.int64)), 2, 5)
