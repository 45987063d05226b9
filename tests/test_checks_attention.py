"""Module 04's checks: every named mistake, fed to its check as a wrong kernel, gets its message;
the package's right kernels pass.

Most wrong kernels here are launchers that write what the mistake computes (replayed in NumPy by
``kernel_lab.attention.online``) into the device outputs: the checks only see outputs, and this
keeps the tests fast. One wrong Numba kernel (the -inf guard forgotten) runs in the simulator, and
the right kernels of ``kernel_lab.attention.kernels`` run there at head_dim 8.
"""

import math

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="wrong kernels are fed to the checks in the simulator")

kl.setup(quiet=True)
from numba import cuda, float32  # noqa: E402

from kernel_lab import CheckFailed  # noqa: E402
from kernel_lab.attention import kernels, online, reference  # noqa: E402
from kernel_lab.checks import attention as checks  # noqa: E402

D = (8,)  # head_dim: small, the checks' logic does not depend on it
BM = BN = 4  # block sizes of the right kernels here: seq = 2 * 4 + 3 = 11, three query blocks


def host(*arrays):
    return tuple(a.copy_to_host() for a in arrays)


# --- online softmax ---------------------------------------------------------------------------------

def softmax_emulated(mistake):
    def launch(out, lse, x):
        p, l_ = online.online_softmax(x.copy_to_host(), mistake=mistake)
        out.copy_to_device(p)
        lse.copy_to_device(l_)
    return launch


def test_online_softmax_right_kernel_passes(capsys):
    checks.check_online_softmax(kernels.online_softmax, seed=1)
    assert "online softmax: correct for all 4 cases" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, message", [("max_not_subtracted", "max not subtracted"),
                                              ("normaliser_stale_max", "normaliser wrong max"),
                                              ("lse_without_max", "lse wrong"), ("lse_log2", "lse wrong")])
def test_online_softmax_names_the_mistake(mistake, message):
    with pytest.raises(CheckFailed, match=f"Hint \\({message}\\)"):
        checks.check_online_softmax(softmax_emulated(mistake), seed=2)


@cuda.jit
def softmax_without_guard(out, lse, x):  # the mistake: exp(-inf - -inf) on a row of -inf
    r = cuda.grid(1)
    if r < x.shape[0]:
        m = float32(-math.inf)
        ell = float32(0)
        for j in range(x.shape[1]):
            m_new = max(m, x[r, j])
            ell = ell * math.exp(m - m_new) + math.exp(x[r, j] - m_new)
            m = m_new
        for j in range(x.shape[1]):
            out[r, j] = math.exp(x[r, j] - m) / ell
        lse[r] = m + math.log(ell)


def test_online_softmax_names_nan_rows_of_a_numba_kernel():
    with pytest.raises(CheckFailed, match=r"Hint \(fully masked nan\)"):
        checks.check_online_softmax(lambda o, l_, x: softmax_without_guard[1, 32](o, l_, x), seed=3)


def test_online_softmax_unfinished_exercise():
    def stub(out, lse, x):
        raise NotImplementedError("write the kernel")
    with pytest.raises(CheckFailed, match="not done yet"):
        checks.check_online_softmax(stub, seed=4)


# --- forward ------------------------------------------------------------------------------------------

def forward_emulated(mistake=None, nan_empty=False, **changes):
    def launch(o, lse, q, k, v, lens, causal, scale):
        kw = dict(scale=scale, kv_lens=lens.copy_to_host(), causal=causal)
        kw.update(changes)
        out, l_ = online.blocked_forward(*host(q, k, v), block_n=BN, block_m=BM, mistake=mistake, **kw)
        if nan_empty:
            out[~np.isfinite(l_)] = np.nan
        o.copy_to_device(out)
        lse.copy_to_device(l_)
    return launch


def fused(o, lse, q, k, v, lens, causal, scale):
    kernels.fused_forward(o, lse, q, k, v, lens, causal, scale, block_m=BM, block_n=BN)


def test_forward_right_kernels_pass(capsys):
    checks.check_attention_forward(fused, head_dims=D, block_m=BM, block_n=BN, seed=5)
    checks.check_attention_forward(forward_emulated(), head_dims=(8, 16), block_m=BM, block_n=BN, seed=7)
    assert capsys.readouterr().out.count("fused attention: correct for head_dim") == 2


@pytest.mark.parametrize("mistake, message", [
    ("normaliser_stale_max", "normaliser wrong max"), ("normaliser_block_max", "normaliser wrong max"),
    ("acc_not_rescaled", "acc not rescaled"), ("mask_after_max", "mask after max"),
    ("causal_strict", "causal off by one"), ("causal_plus_one", "causal off by one"),
    ("diagonal_block_skipped", "diagonal block skipped"), ("lse_without_max", "lse wrong"),
    ("lse_log2", "lse wrong"), ("not_normalised", "not normalised")])
def test_forward_names_the_mistake(mistake, message):
    with pytest.raises(CheckFailed, match=f"Hint \\({message}\\)"):
        checks.check_attention_forward(forward_emulated(mistake), head_dims=D, block_m=BM, block_n=BN, seed=8)


@pytest.mark.parametrize("changes, message", [(dict(causal=False), "causal ignored"),
                                              (dict(kv_lens=None), "kv lens ignored")])
def test_forward_names_an_ignored_mask(changes, message):
    with pytest.raises(CheckFailed, match=f"Hint \\({message}\\)"):
        checks.check_attention_forward(forward_emulated(**changes), head_dims=D, causal=(True,), block_m=BM,
                                       block_n=BN, seed=9)


def test_forward_names_nan_in_fully_masked_rows():
    with pytest.raises(CheckFailed, match=r"Hint \(fully masked nan\)"):
        checks.check_attention_forward(forward_emulated(nan_empty=True), head_dims=D, block_m=BM, block_n=BN, seed=10)


def test_forward_reports_unwritten_rows():
    def last_row_missing(o, lse, q, k, v, lens, causal, scale):
        forward_emulated()(o, lse, q, k, v, lens, causal, scale)
        o[:, :, -1] = checks.poisoned_host(o.shape[0] * o.shape[1] * o.shape[3], np.float32).reshape(
            o.shape[0], o.shape[1], o.shape[3])
    with pytest.raises(CheckFailed, match="never written"):
        checks.check_attention_forward(last_row_missing, head_dims=D, block_m=BM, block_n=BN, seed=11)


def test_forward_tolerance_follows_the_format():
    # a float32 kernel's error passes at float32's tolerance; float16 rounding of the output does not
    def fp16_output(o, lse, q, k, v, lens, causal, scale):
        forward_emulated()(o, lse, q, k, v, lens, causal, scale)
        o.copy_to_device(o.copy_to_host().astype(np.float16).astype(np.float32))
    with pytest.raises(CheckFailed, match="elements are wrong"):
        checks.check_attention_forward(fp16_output, head_dims=D, block_m=BM, block_n=BN, seed=12)
    checks.check_attention_forward(fp16_output, head_dims=D, block_m=BM, block_n=BN, fmt="float16", seed=12)


# --- backward -----------------------------------------------------------------------------------------

def backward_emulated(mistake=None, nan_empty=False):
    def launch(dq, dk, dv, q, k, v, o, lse, d_o, lens, causal, scale):
        args = host(q, k, v, d_o)
        kw = dict(scale=scale, kv_lens=lens.copy_to_host(), causal=causal)
        grads = (reference.backward(*args, **kw) if mistake is None else
                 online.backward_with_mistake(*args, mistake=mistake, **kw))
        for dev, g in zip((dq, dk, dv), grads):
            g = g.astype(np.float32)
            if nan_empty:
                g[~np.isfinite(lse.copy_to_host())] = np.nan
            dev.copy_to_device(g)
    return launch


def test_backward_right_kernels_pass(capsys):
    def launch(dq, dk, dv, q, k, v, o, lse, d_o, lens, causal, scale):
        kernels.backward(dq, dk, dv, q, k, v, o, lse, d_o, lens, causal, scale, block_m=BM, block_n=BN)
    checks.check_attention_backward(launch, head_dims=D, block_m=BM, seed=13)
    checks.check_attention_backward(backward_emulated(), head_dims=D, block_m=BM, seed=14)
    assert capsys.readouterr().out.count("dQ, dK, dV correct") == 2


@pytest.mark.parametrize("mistake, message", [("delta_missing", "delta missing"), ("p_without_lse", "p without lse"),
                                              ("scale_missing", "scale missing"),
                                              ("mask_missing", "backward mask missing")])
def test_backward_names_the_mistake(mistake, message):
    with pytest.raises(CheckFailed, match=f"Hint \\({message}\\)"):
        checks.check_attention_backward(backward_emulated(mistake), head_dims=D, block_m=BM, seed=15)


def test_backward_names_nan_in_fully_masked_rows():
    with pytest.raises(CheckFailed, match=r"Hint \(fully masked nan\)"):
        checks.check_attention_backward(backward_emulated(nan_empty=True), head_dims=D, block_m=BM, seed=16)


# --- real Numba kernels with one mistake each (the package's fused kernel, edited) ---------------------

FUSED_MUTANTS = {
    "acc not rescaled": ("acc[c] *= alpha", "acc[c] *= 1.0"),
    "normaliser wrong max": ("ell *= alpha", "ell *= 1.0"),
    "causal off by one": ("(not causal or j <= i)", "(not causal or j < i)"),
    "diagonal block skipped": ("min(kv_len, q0 + BM) if causal", "min(kv_len, q0) if causal"),
    "lse wrong": ("lse[b, h, i] = m + math.log(ell)", "lse[b, h, i] = math.log(ell)"),
    "mask after max": (  # the block max also sees the scores of masked keys
        "                    if j < kv_len and (not causal or j <= i):  # mask before the max",
        "                    raw = float32(0)\n"
        "                    for c in range(0, D, 4):\n"
        "                        k0, k1, k2, k3 = load4(ks, (jj, c))\n"
        "                        raw += qr[c] * k0 + qr[c + 1] * k1 + qr[c + 2] * k2 + qr[c + 3] * k3\n"
        "                    block_max = max(block_max, raw)\n"
        "                    if j < kv_len and (not causal or j <= i):  # mask before the max"),
}


@pytest.mark.parametrize("message", FUSED_MUTANTS)
def test_forward_names_the_mistake_of_a_numba_kernel(message):
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(kernels.fused_forward_kernel.__wrapped__))
    old, new = FUSED_MUTANTS[message]
    assert old in source, f"the mutant '{message}' no longer applies: update FUSED_MUTANTS"
    namespace = dict(vars(kernels))
    exec(source.replace(old, new).replace("@functools.lru_cache(maxsize=None)\n", ""), namespace)
    kernel = namespace["fused_forward_kernel"](8, BM, BN)

    def launch(o, lse, q, k, v, lens, causal, scale):
        kernel[(-(-q.shape[2] // BM), q.shape[0] * q.shape[1]), BM](o, lse, q, k, v, lens, causal, np.float32(scale))

    with pytest.raises(CheckFailed, match=f"Hint \\({message}\\)"):
        checks.check_attention_forward(launch, head_dims=D, block_m=BM, block_n=BN, seed=17)


# --- the register-tiled kernel (04.3's second exercise): the mistakes of its lanes --------------------

from kernel_lab.attention import tiled  # noqa: E402

TCFG = tiled.default_config(16)  # the simulator's shape: one warp, row groups of 4 lanes, 8 keys per tile
TD = (16,)


def tiled_emulated(mistake):
    def launch(o, lse, q, k, v, lens, causal, scale):
        out, l_ = online.tiled_forward(*host(q, k, v), scale=scale, kv_lens=lens.copy_to_host(), causal=causal,
                                       block_n=TCFG.block_n, row_group=TCFG.cg, mistake=mistake)
        o.copy_to_device(out.astype(np.float32))
        lse.copy_to_device(l_.astype(np.float32))
    return launch


def check_tiled(launch, seed, **kw):
    checks.check_attention_forward(launch, name="tiled attention", head_dims=TD, block_m=TCFG.block_m,
                                   block_n=TCFG.block_n, row_group=TCFG.cg, seed=seed, **kw)


def test_tiled_emulation_without_a_mistake_passes(capsys):
    check_tiled(tiled_emulated(None), seed=18)
    assert "tiled attention: correct" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, message", [("row_max_per_lane", "row max not shared"),
                                              ("normaliser_partial", "normaliser not summed")])
def test_tiled_names_the_mistake_of_its_lanes(mistake, message):
    with pytest.raises(CheckFailed, match=f"Hint \\({message}\\)"):
        check_tiled(tiled_emulated(mistake), seed=19)


def test_tiled_mistakes_are_named_only_for_a_tiled_kernel():
    # without row_group the check does not know the lanes: no hint that talks about them
    with pytest.raises(CheckFailed) as info:
        checks.check_attention_forward(tiled_emulated("row_max_per_lane"), head_dims=TD, block_m=TCFG.block_m,
                                       block_n=TCFG.block_n, seed=19)
    assert "row group" not in str(info.value)


# Real Numba kernels: the package's core (kernel_lab.attention.tiled.core_parts), edited.
TILED_MUTANTS = {
    "row max not shared": ("                mx = max(mx, cuda.shfl_xor_sync(FULL, mx, 1 << bit))",
                           "                mx = max(mx, mx)"),
    "normaliser not summed": ("            ell += cuda.shfl_xor_sync(FULL, ell, 1 << bit)",
                              "            ell += float32(0)"),
    "acc not rescaled": ("oacc[i, c] *= alpha", "oacc[i, c] *= float32(1)"),
    "normaliser wrong max": ("lrow[i] = lrow[i] * alpha + part", "lrow[i] = lrow[i] + part"),
    "p not synced": ("        cuda.syncwarp(FULL)  # P is read by the other lanes of the row group", ""),
    "nothing accumulated": ("                    oacc[i, c] += pf[i, jj] * vf[c]", "                    pass"),
}


@pytest.mark.parametrize("message", TILED_MUTANTS)
def test_tiled_names_the_mistake_of_a_numba_kernel(message):
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(tiled.core_parts.__wrapped__))
    old, new = TILED_MUTANTS[message]
    assert old in source, f"the mutant '{message}' no longer applies: update TILED_MUTANTS"
    namespace = dict(vars(tiled))
    exec(source.replace(old, new).replace("@functools.lru_cache(maxsize=None)\n", ""), namespace)
    launch = tiled.tiled_launcher(namespace["core_parts"])
    with pytest.raises(CheckFailed, match=f"Hint \\({message}\\)"):
        check_tiled(launch, seed=20)
