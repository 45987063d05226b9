"""Module 09's foundation on the CPU (kernel_lab.multigpu, kernel_lab.checks.multigpu).

The one-shot all-reduce's protocol runs for two simulated GPUs (two halves of one grid, staging
stores that other blocks see only after a system-scope fence); the right device function passes
and each classic mistake is named. The probe's skip paths, peer-access enabling, the launcher's
input validation and NCCL's bus bandwidth run against fakes: no GPU, no CuPy needed.
"""

from types import SimpleNamespace

import numpy as np
import pytest

import kernel_lab as kl

kl.setup(quiet=True)
from numba import cuda  # noqa: E402

from kernel_lab.check import CheckFailed  # noqa: E402
from kernel_lab.multigpu import nccl as knccl  # noqa: E402
from kernel_lab.multigpu import probe as kprobe  # noqa: E402
from kernel_lab.validate import KernelLabArgumentError  # noqa: E402

sim_only = pytest.mark.skipif(not kl.on_simulator(), reason="runs the protocol in the simulator (no GPU needed)")


# --- the protocol in the simulator -----------------------------------------------------------------

@sim_only
def test_the_right_protocol_passes_every_schedule(capsys):
    from kernel_lab.checks.multigpu import check_one_shot_protocol
    from kernel_lab.multigpu.one_shot import one_shot_block

    check_one_shot_protocol(one_shot_block)
    assert "correct on two simulated GPUs for 6 schedules" in capsys.readouterr().out


@sim_only
@pytest.mark.parametrize("variant, named", [
    ("no_fence", "missing fence"),
    ("gpu_fence", "a fence of the wrong scope"),
    ("reset_too_early", "flag reset too early"),
    ("no_wait", "the reader does not wait"),
])
def test_each_classic_mistake_is_named(variant, named):
    from kernel_lab.checks.multigpu import check_one_shot_protocol
    from kernel_lab.multigpu.simulated import MISTAKES

    with pytest.raises(CheckFailed) as info:
        check_one_shot_protocol(MISTAKES[variant])
    text = str(info.value)
    assert text.startswith(f"one-shot all-reduce: {named}"), text
    assert "Hint:" in text


@sim_only
def test_the_unsolved_stub_is_told_not_done_yet():
    """The exercise's stub writes nothing: "not done yet", not a protocol mistake. A missing fence
    also leaves every sum NaN (the peer's share was never seen), but its blocks did publish."""
    from kernel_lab.checks.multigpu import check_one_shot_protocol

    @cuda.jit(device=True)
    def stub(b, nblocks, x, mine, peer, my_flags, peer_flags, out, epoch):
        pass

    with pytest.raises(CheckFailed, match="^one-shot all-reduce: not done yet: no block published its share"):
        check_one_shot_protocol(stub)


@sim_only
def test_a_missing_fence_is_invisible_without_delayed_stores():
    """What the model adds: with stores visible at once (the simulator's usual memory) the mistake passes."""
    from kernel_lab.multigpu.simulated import MISTAKES, run_two_halves

    assert run_two_halves(MISTAKES["no_fence"], seed=0, scope=None).kind == "ok"
    assert run_two_halves(MISTAKES["no_fence"], seed=0).kind == "wrong"


@sim_only
def test_delayed_stores_forward_to_their_block_and_publish_at_the_launch_end():
    import kernel_lab.simulator as ksim

    @cuda.jit
    def store_then_read(d, out):
        if cuda.threadIdx.x == 0:
            d[1] = 5.0
            out[0] = d[1]  # the block reads its own pending store

    d = ksim.DelayedStores(np.zeros(3, np.float32), "system")
    out = np.zeros(1, np.float32)
    store_then_read[1, 32](d, out)
    assert out[0] == 5.0 and d.base.tolist() == [0.0, 5.0, 0.0] and d.pending_count() == 0
    with pytest.raises(ValueError, match="scope"):
        ksim.DelayedStores(np.zeros(2), "block")


@sim_only
def test_late_blocks_start_only_when_the_others_wait_or_finish():
    """Block 1 is late: block 0 never polls, so block 1 starts after block 0 has finished."""
    from kernel_lab.simulator.grid import block_schedule, schedule

    @cuda.jit
    def record(order, counter):
        if cuda.threadIdx.x == 0:
            order[cuda.blockIdx.x] = cuda.atomic.add(counter, 0, 1)
            cuda.threadfence()

    for seed in range(4):
        order, counter = np.zeros(2, np.int32), np.zeros(1, np.int32)
        with block_schedule("interleaved", seed=seed, late=[0]) as chosen:
            assert "late=[0]" in repr(chosen)
            record[2, 32](order, counter)
        assert order.tolist() == [1, 0], seed
    assert schedule.late == frozenset()


# --- the probe, peer access, validation and NCCL's arithmetic, with fakes --------------------------

class FakeRuntime:
    def __init__(self, count, peer=lambda i, j: True, already=()):
        self.count, self.peer, self.already, self.device, self.enabled = count, peer, set(already), 0, []

    def getDeviceCount(self):
        if self.count is None:
            raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
        return self.count

    def getDeviceProperties(self, i):
        return {"name": b"NVIDIA H200", "multiProcessorCount": 132}

    def deviceCanAccessPeer(self, i, j):
        return int(self.peer(i, j))

    def getDevice(self):
        return self.device

    def setDevice(self, d):
        self.device = d

    def deviceEnablePeerAccess(self, j):
        if (self.device, j) in self.already:
            error = RuntimeError("cudaErrorPeerAccessAlreadyEnabled")
            error.status = 704
            raise error
        self.enabled.append((self.device, j))


class FakeNvml:
    NVML_NVLINK_MAX_LINKS = 18

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetNvLinkState(self, handle, link):
        return 1


def test_probe_skips_in_the_simulator_with_its_reason():
    if not kl.on_simulator():
        pytest.skip("this machine runs on a GPU")
    report = kprobe.probe()
    assert report.count == 0 and not report.usable
    assert "simulator" in report.skip_reason and "2 GPUs" in report.skip_reason
    assert report.describe().startswith("no GPU: ")


@pytest.mark.parametrize("runtime, reason", [
    (FakeRuntime(None), "no GPU is visible (RuntimeError: cudaErrorNoDevice"),
    (FakeRuntime(0), "this machine has 0 GPU(s); this needs 2"),
    (FakeRuntime(1), "this machine has 1 GPU(s); this needs 2"),
    (FakeRuntime(2, peer=lambda i, j: (i, j) != (1, 0)), "peer access is not possible between GPU 1 -> GPU 0"),
])
def test_probe_says_why_it_skips(runtime, reason):
    report = kprobe.probe(runtime=runtime, nvml=FakeNvml())
    assert not report.usable and report.skip_reason.startswith(reason), report.skip_reason


def test_probe_on_two_peers_with_nvlink():
    report = kprobe.probe(runtime=FakeRuntime(2), nvml=FakeNvml())
    assert report.usable and report.count == 2 and report.names == ["NVIDIA H200"] * 2
    assert report.peer == {(0, 1): True, (1, 0): True} and report.nvlinks == {0: 18, 1: 18}
    assert "GPU 1: NVIDIA H200, 18 active NVLink(s)" in report.describe()
    unknown = kprobe.probe(runtime=FakeRuntime(2), nvml=SimpleNamespace())  # no nvmlInit: NVML missing
    assert unknown.nvlinks == {0: None, 1: None} and "NVLink: unknown" in unknown.describe()


def test_enable_peer_access_is_idempotent_and_restores_the_device():
    rt = FakeRuntime(3, peer=lambda i, j: {i, j} != {0, 2}, already={(1, 0)})
    rt.device = 2
    missing = kprobe.enable_peer_access((0, 1, 2), runtime=rt)
    assert missing == [(0, 2), (2, 0)]
    assert rt.enabled == [(0, 1), (1, 2), (2, 1)] and rt.device == 2


def test_launcher_validates_its_inputs():
    from kernel_lab.multigpu.one_shot import validate_pair

    ws = SimpleNamespace(n=8, dtype=np.dtype(np.float32), devices=(0, 1))
    x = [np.zeros(8, np.float32), np.zeros(8, np.float32)]
    out = [np.zeros(8, np.float32), np.zeros(8, np.float32)]
    validate_pair(x, out, ws)
    for xs, outs, message in [
        (x[:1], out, "give one input and one output per GPU"),
        ([x[0], np.zeros(9, np.float32)], out, "input 1 has shape (9,)"),
        (x, [out[0], np.zeros(8, np.float16)], "output 1 is float16, the workspace float32"),
        (x, [x[0], out[1]], "an output is its own input"),
        ([x[0], SimpleNamespace(ndim=1, size=8, dtype=np.dtype(np.float32), shape=(8,), device=SimpleNamespace(id=0))],
         out, "input 1 lives on GPU 0, expected GPU 1"),
    ]:
        with pytest.raises(KernelLabArgumentError) as info:
            validate_pair(xs, outs, ws)
        assert message in str(info.value)


def test_bus_bandwidth_follows_nccl_tests():
    algbw, busbw = knccl.bus_bandwidth(1e9, 0.01, 2)
    assert algbw == pytest.approx(1e11) and busbw == pytest.approx(1e11)  # 2(n-1)/n = 1 for two GPUs
    assert knccl.bus_bandwidth(1e9, 0.01, 8)[1] == pytest.approx(1.75e11)
    assert knccl.bus_bandwidth(1e9, 0.01, 4, "all_gather")[1] == pytest.approx(0.75e11)
    with pytest.raises(KernelLabArgumentError, match="collective must be one of"):
        knccl.bus_bandwidth(1, 1, 2, "alltoall")
    with pytest.raises(KernelLabArgumentError, match="seconds must be > 0"):
        knccl.bus_bandwidth(1, 0, 2)


def test_nccl_dtypes():
    fake = SimpleNamespace(NCCL_FLOAT16=6, NCCL_FLOAT32=7)
    assert knccl.nccl_dtype(np.float32, fake) == 7 and knccl.nccl_dtype(np.float16, fake) == 6
    with pytest.raises(KernelLabArgumentError, match="complex64"):
        knccl.nccl_dtype(np.complex64, fake)


# --- 09.1's peer read, the check in a child simulator, 09.2's table -----------------------------

@sim_only
def test_the_package_peer_reads_pass_their_check(capsys):
    from kernel_lab.checks.multigpu import check_peer_read
    from kernel_lab.multigpu.peer import peer_read, peer_read_scalar

    check_peer_read(peer_read)
    check_peer_read(peer_read_scalar, "scalar", vector=False)
    out = capsys.readouterr().out
    assert "peer read: correct for all 4 sizes" in out and "scalar: correct for all 4 sizes" in out


def test_the_protocol_check_runs_in_a_child_simulator(capsys):
    """What a GPU machine does (its Numba targets the GPU): the source goes to a child Python with the
    simulator on, closure constants included, and the verdict comes back the same."""
    from kernel_lab.checks.multigpu import check_one_shot_protocol
    from kernel_lab.multigpu.one_shot import one_shot_block
    from kernel_lab.multigpu.simulated import MISTAKES

    check_one_shot_protocol(one_shot_block, in_child=True, seeds=(0, 1))
    assert "correct on two simulated GPUs for 2 schedules" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="^one-shot all-reduce: a fence of the wrong scope"):
        check_one_shot_protocol(MISTAKES["gpu_fence"], in_child=True, seeds=(0,))


def test_the_child_refuses_a_closure_it_cannot_send():
    from kernel_lab.checks.multigpu import source_job

    table = [1, 2]

    def uses_a_list(b):
        return table[b]

    with pytest.raises(CheckFailed, match="uses `table` from an enclosing function"):
        source_job(uses_a_list)
    assert source_job(test_the_child_refuses_a_closure_it_cannot_send)["closure"] == {}


def test_the_all_reduce_table_follows_nccl_and_says_the_goals(capsys):
    from kernel_lab.multigpu.timing import MESSAGE_BYTES, all_reduce_table

    assert MESSAGE_BYTES[0] == 4096 and MESSAGE_BYTES[-1] == 1 << 30 and len(MESSAGE_BYTES) == 10
    lines = all_reduce_table([(4096, 0.010, 0.020), (65536, 0.012, 0.011), (256 << 20, 1.0, 0.75)])
    assert lines[1].split()[:2] == ["4", "KB"] and "2.00x" in lines[1]
    assert "<= 64 KB: your latency at 0.92x NCCL's at worst (goal >= 1.0x: NOT met" in lines[-2]
    assert "256 MB: your bus bandwidth at 0.75x NCCL's (goal >= 0.8x: NOT met)" in lines[-1]
    assert "268.4 GB/s" in lines[3]  # 256 MiB in 1 ms, x 2(n-1)/n = 1 for two GPUs


def test_time_collective_validates_its_arguments():
    from kernel_lab.multigpu.timing import time_collective

    with pytest.raises(KernelLabArgumentError, match="one stream per GPU"):
        time_collective(lambda: None, [object()], (0, 1), cupy=SimpleNamespace())
    with pytest.raises(KernelLabArgumentError, match="iters must be > 0"):
        time_collective(lambda: None, [], iters=0, cupy=SimpleNamespace())


def test_the_peer_copy_line_relates_each_read_to_the_copy(capsys):
    from kernel_lab.bench import Measurement
    from kernel_lab.multigpu.peer import against_peer_copy

    gib = float(1 << 30)
    copy = Measurement("peer copy", 2.7, bytes=gib)
    reads = [Measurement("scalar", 4.0, bytes=gib), Measurement("vector", 3.0, bytes=gib)]
    lines = against_peer_copy(reads, copy, also=[Measurement("local", 0.4, bytes=gib)], goal=0.85)
    assert "90.0% of the peer copy" in lines[2] and "675.0% of the peer copy" in lines[3]
    assert lines[-1] == "your best kernel (vector): 90% of the peer copy's bandwidth (goal 85%: met)"
