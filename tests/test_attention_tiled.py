"""The register-tiled fused forward (``kernel_lab.attention.tiled``) passes module 04's forward
check in the simulator (ragged lengths, rising scores, padding, empty and length-1 rows, causal and
not), at the simulator's default shape and at a 2 x 2 register tile with the loops unrolled, also
through ``tiled_launcher`` (the way notebook 04.3 hands the kernel its own core); shapes the kernel
cannot run, and a core that is not four device functions, are refused with a message that says why.
(The core's mistakes, fed to the check as wrong kernels: tests/test_checks_attention.py.)"""

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the tiled kernel is checked in the simulator here; "
                                "scripts/probes/attention_variants.py checks it on a GPU")

kl.setup(quiet=True)

from kernel_lab.attention import tiled  # noqa: E402
from kernel_lab.checks import attention as checks  # noqa: E402
from kernel_lab.validate import KernelLabArgumentError  # noqa: E402


@pytest.mark.parametrize("cfg", [None, tiled.TiledConfig(16, block_n=8, tm=2, cg=4, warps=1, unroll=2)],
                         ids=["default", "tile 2x2"])
def test_tiled_forward_passes_the_check(cfg, capsys):
    c = cfg or tiled.default_config(16)
    checks.check_attention_forward(
        lambda o, lse, q, k, v, lens, causal, scale: tiled.tiled_forward(o, lse, q, k, v, lens, causal, scale,
                                                                          config=c),
        name="tiled attention", head_dims=(16,), block_m=c.block_m, block_n=c.block_n, seed=13)
    assert "tiled attention: correct" in capsys.readouterr().out


@pytest.mark.parametrize("cfg, words", [
    (tiled.TiledConfig(16, block_n=8, cg=3), "power of two"),
    (tiled.TiledConfig(24, block_n=8, cg=4, warps=1, tm=1), r"multiple of 4 \* cg"),
    (tiled.TiledConfig(16, block_n=12, cg=4, warps=1, tm=1, unroll=2), "unroll"),
])
def test_shapes_it_cannot_run_are_refused(cfg, words):
    with pytest.raises(KernelLabArgumentError, match=words):
        tiled.tiled_forward_kernel(cfg)


def test_the_launcher_takes_a_core_and_refuses_what_is_not_one(capsys):
    c = tiled.default_config(16)
    checks.check_attention_forward(tiled.tiled_launcher(tiled.core_parts), name="tiled attention", head_dims=(16,),
                                   causal=(True,), block_m=c.block_m, block_n=c.block_n, row_group=c.cg, seed=14)
    assert "tiled attention: correct" in capsys.readouterr().out
    with pytest.raises(KernelLabArgumentError, match="four device functions"):
        q = np.zeros((1, 1, 8, 16), np.float32)
        tiled.tiled_launcher(lambda cfg: None)(q, q[..., 0], q, q, q)


def test_the_layout_matches_the_shared_memory_of_the_config():
    cfg = tiled.TiledConfig(64, block_n=32)
    lay = tiled.layout(cfg)
    k_at, v_at, p_at, total = cfg.smem_floats()
    assert (lay.K_AT, lay.V_AT, lay.KP, lay.PP) == (k_at, v_at, 68, 36)
    assert (lay.TM, lay.TN, lay.CG, lay.TD, lay.NCH, lay.LOG_CG) == (4, 4, 8, 8, 2, 3)
