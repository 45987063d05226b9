"""The checks of module 01's warp and occupancy exercises (kernel_lab.checks.warps_occupancy).

Every check must accept a right answer and reject the classic wrong ones with a message that
names the mistake: a warp sum that forgets a shuffle step, a prefix sum that shuffles the wrong
way, a compaction that loses the lane offset, an occupancy calculator that ignores the register
limit, and the untouched exercise stubs ("not done yet").

The kernels run on a GPU when there is one and otherwise in Kernel Lab's simulator, at sizes of a
few hundred elements (the simulator runs each thread as a Python thread). Tests that need warp
functions skip, with the reason, when the simulator does not provide them.
"""

import math

import numpy as np
import pytest

import kernel_lab as kl  # chooses GPU or simulator before numba.cuda is imported
from kernel_lab.checks import warps_occupancy as wo
from kernel_lab.environment import on_simulator
from kernel_lab.validate import KernelLabArgumentError

kl.setup(quiet=True)  # under the simulator this installs Kernel Lab's extensions (warp functions, ...)
from numba import cuda  # noqa: E402


def _warp_functions_missing():
    """A reason to skip when the simulator lacks warp functions, else None."""
    if not on_simulator():
        return None
    import kernel_lab.simulator as ksim

    probe = getattr(ksim, "supports_warp_operations", None)
    if probe is None:
        return "kernel_lab.simulator has no supports_warp_operations(): its warp functions are not there yet"
    if not probe():
        return "kernel_lab.simulator.supports_warp_operations() is False: no warp shuffles or votes to test with"
    return None


_MISSING = _warp_functions_missing()
needs_warp = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

WARP = 32
FULL = 0xFFFFFFFF
THREADS = 64  # small blocks: two warps each, cheap in the simulator
WPB = THREADS // WARP
SIZES = [("small", 100), ("three blocks", 3 * THREADS + 5)]


# ---------------------------------------------------------------------------------------------
# Warp sum

def make_sum(first=16, last=1, stub=False, warp_level_only=False, blocks=2):
    """A full-array sum: grid-stride loop, warp shuffle sum, warps combined in shared memory,
    one atomic per block. The arguments build the classic mistakes."""

    @cuda.jit(device=True)
    def warp_sum(v):
        if stub:
            return v
        offset = first
        while offset >= last:
            v += cuda.shfl_down_sync(FULL, v, offset)
            offset //= 2
        return v

    @cuda.jit
    def array_sum(x, out):
        totals = cuda.shared.array(WPB, np.float32)
        acc = np.float32(0)
        i = cuda.grid(1)
        while i < x.size:
            acc += x[i]
            i += cuda.gridsize(1)
        lane, warp = cuda.threadIdx.x % WARP, cuda.threadIdx.x // WARP
        acc = warp_sum(acc)
        if warp_level_only:  # the mistake: only warp 0's total reaches out
            if cuda.threadIdx.x == 0:
                cuda.atomic.add(out, 0, acc)
            return
        if lane == 0:
            totals[warp] = acc
        cuda.syncthreads()
        if warp == 0:
            total = warp_sum(totals[lane] if lane < WPB else np.float32(0))
            if lane == 0:
                cuda.atomic.add(out, 0, total)

    def launch(out, x):
        out[0] = 0
        array_sum[max(1, min(kl.blocks_for(x.size, THREADS), blocks)), THREADS](x, out)

    return launch


def _fails(check, *args, **kwargs):
    with pytest.raises(kl.CheckFailed) as info:
        check(*args, **kwargs)
    return str(info.value)


@needs_warp
def test_warp_sum_accepts_a_right_kernel(capsys):
    wo.check_warp_sum(make_sum(), sizes=SIZES, block=THREADS)
    assert capsys.readouterr().out.strip() == "warp sum: correct for all 2 sizes (small, three blocks)"


@needs_warp
def test_warp_sum_names_a_missing_last_shuffle_step():
    message = _fails(wo.check_warp_sum, make_sum(last=2), sizes=SIZES)
    assert "every 2nd lane" in message and "last shuffle step (offset 1) is missing" in message
    assert "off by the same factor" not in message  # a one-element result has no pattern of factors


@needs_warp
def test_warp_sum_names_a_missing_first_shuffle_step():
    message = _fails(wo.check_warp_sum, make_sum(first=8), sizes=SIZES)
    assert "only lanes 0-15 reach lane 0" in message and "offset 16" in message


@needs_warp
def test_warp_sum_names_a_step_that_adds_the_own_value():
    message = _fails(wo.check_warp_sum, make_sum(first=32), sizes=SIZES)
    assert "counted 4 times" in message and "own value" in message


@needs_warp
def test_warp_sum_points_past_the_warp_when_the_warp_part_is_right():
    message = _fails(wo.check_warp_sum, make_sum(warp_level_only=True), sizes=SIZES)
    assert "counted exactly once" in message and "how warps or blocks are combined" in message


@needs_warp
def test_warp_sum_stub_is_not_done_yet():
    message = _fails(wo.check_warp_sum, make_sum(stub=True), sizes=SIZES)
    assert message.startswith("warp sum: the exercise is not done yet")


# ---------------------------------------------------------------------------------------------
# Warp prefix sum

def make_scan(kind="right"):
    @cuda.jit(device=True)
    def scan(v, lane):
        if kind == "stub":
            return v
        own = v
        offset = 1
        while offset < (16 if kind == "stops early" else WARP):
            if kind == "shuffles down":
                other = cuda.shfl_down_sync(FULL, v, offset)
                if lane + offset < WARP:
                    v += other
            else:
                other = cuda.shfl_up_sync(FULL, v, offset)
                if kind == "no lane guard" or lane >= offset:
                    v += other
            offset *= 2
        if kind == "exclusive":
            v -= own
        return v

    @cuda.jit
    def warp_scan(x, out):
        i = cuda.grid(1)
        lane = cuda.threadIdx.x % WARP
        v = x[i] if i < x.size else np.float32(0)
        v = scan(v, lane)
        if i < x.size:
            out[i] = v

    return lambda out, x: warp_scan[kl.blocks_for(x.size, THREADS), THREADS](x, out)


@needs_warp
def test_prefix_sum_accepts_a_right_kernel(capsys):
    wo.check_warp_prefix_sum(make_scan(), sizes=SIZES)
    assert capsys.readouterr().out.strip() == "warp prefix sum: correct for all 2 sizes (small, three blocks)"


@needs_warp
def test_prefix_sum_names_the_wrong_shuffle_direction():
    message = _fails(wo.check_warp_prefix_sum, make_scan("shuffles down"), sizes=SIZES)
    assert "suffix sums" in message and "shfl_up_sync" in message


@needs_warp
def test_prefix_sum_names_a_missing_lane_guard():
    message = _fails(wo.check_warp_prefix_sum, make_scan("no lane guard"), sizes=SIZES)
    assert "if lane >= offset" in message


@needs_warp
def test_prefix_sum_names_missing_steps():
    message = _fails(wo.check_warp_prefix_sum, make_scan("stops early"), sizes=SIZES)
    assert "only the last 16 elements" in message


@needs_warp
def test_prefix_sum_names_an_exclusive_scan():
    message = _fails(wo.check_warp_prefix_sum, make_scan("exclusive"), sizes=SIZES)
    assert "exclusive" in message


@needs_warp
def test_prefix_sum_stub_is_not_done_yet():
    message = _fails(wo.check_warp_prefix_sum, make_scan("stub"), sizes=SIZES)
    assert message.startswith("warp prefix sum: the exercise is not done yet")


# ---------------------------------------------------------------------------------------------
# Compaction

def make_compaction(kind="right"):
    @cuda.jit
    def compact(x, out, count):
        i = cuda.grid(1)
        lane = cuda.threadIdx.x % WARP
        keep = i < x.size and x[i] > 0
        if kind == "keeps negatives":
            keep = i < x.size and x[i] < 0
        if kind == "keeps zeros":
            keep = i < x.size and x[i] >= 0
        if kind == "stub":
            return
        if kind == "atomic per element":
            if keep:
                out[cuda.atomic.add(count, 0, 1)] = x[i]
            return
        kept = cuda.ballot_sync(FULL, keep)
        n_kept = cuda.popc(kept)
        base = 0
        if lane == 0 and n_kept > 0:
            base = cuda.atomic.add(count, 0, 1 if kind == "adds one" else n_kept)
        base = cuda.shfl_sync(FULL, base, 0)
        if keep:
            rank = cuda.popc(kept & cuda.lanemask_lt())
            if kind == "loses the lane offset":
                rank = 0
            elif kind == "reversed":
                rank = n_kept - 1 - rank
            if kind == "stores float16":
                out[base + rank] = np.float16(x[i])
            else:
                out[base + rank] = x[i]

    return lambda out, count, x: compact[kl.blocks_for(x.size, THREADS), THREADS](x, out, count)


@needs_warp
def test_compaction_accepts_a_right_kernel(capsys):
    wo.check_compaction(make_compaction(), block=THREADS)  # the default cases: sizes, all kept, none kept
    assert capsys.readouterr().out.strip().startswith("compaction: correct for all 7 sizes (")


@needs_warp
def test_compaction_names_a_lost_lane_offset():
    message = _fails(wo.check_compaction, make_compaction("loses the lane offset"), sizes=SIZES)
    assert "never written" in message and "cuda.popc(ballot & cuda.lanemask_lt())" in message


@needs_warp
def test_compaction_names_a_counter_that_adds_one_per_warp():
    message = _fails(wo.check_compaction, make_compaction("adds one"), sizes=SIZES)
    assert "the counter says" in message and "up by 1 per warp" in message


@needs_warp
def test_compaction_names_values_out_of_order_within_a_warp():
    message = _fails(wo.check_compaction, make_compaction("reversed"), sizes=SIZES)
    assert "not in input order" in message and "below" in message


@needs_warp
def test_compaction_order_across_warps_is_free_when_not_asked_for():
    wo.check_compaction(make_compaction("reversed"), keep_warp_order=False, sizes=SIZES)


@needs_warp
def test_compaction_names_kept_negative_values():
    message = _fails(wo.check_compaction, make_compaction("keeps negatives"), sizes=SIZES)
    assert "non-positive values were kept" in message


@needs_warp
def test_compaction_names_kept_zeros():  # x >= 0 for x > 0: the inputs hold zeros of both signs
    message = _fails(wo.check_compaction, make_compaction("keeps zeros"), sizes=SIZES)
    assert "non-positive values were kept" in message and "not `>=`" in message


@needs_warp
def test_compaction_compares_the_kept_values_bit_for_bit():
    message = _fails(wo.check_compaction, make_compaction("stores float16"), sizes=SIZES)
    assert "are not positive elements of x" in message and "narrower type" in message


def test_compaction_inputs_hold_zeros_and_values_float16_cannot_hold():
    x = wo._compaction_input(2000, 0.45, 0.1, np.random.default_rng(0))
    assert np.count_nonzero(x == 0) > 100 and np.signbit(x[x == 0]).any() and not np.signbit(x[x == 0]).all()
    positive = x[x > 0]
    assert np.count_nonzero(positive.astype(np.float16).astype(np.float32) != positive) > 0.9 * positive.size
    keys = np.floor(np.abs(x[x != 0])).astype(int)
    assert len(set(keys)) == keys.size  # every value names its element


@needs_warp
def test_compaction_stub_is_not_done_yet():
    message = _fails(wo.check_compaction, make_compaction("stub"), sizes=SIZES)
    assert message.startswith("compaction: the exercise is not done yet")


def test_compaction_without_warp_functions_passes_when_order_is_free(capsys):
    wo.check_compaction(make_compaction("atomic per element"), keep_warp_order=False, sizes=SIZES)
    assert "correct for all 2 sizes" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Row sums: a warp per row

def make_row_sums(kind="right"):
    @cuda.jit
    def row_sums(x, out):
        row = cuda.grid(1) // WARP
        if kind == "no block offset":
            row = cuda.threadIdx.x // WARP  # the mistake: only the first block's warps have rows
        lane = cuda.threadIdx.x % WARP
        if row < x.shape[0]:
            acc = np.float32(0)
            j = lane
            while j < x.shape[1]:
                acc += x[row, j]
                j += WARP
            offset = 16
            while offset > 0:
                acc += cuda.shfl_down_sync(FULL, acc, offset)
                offset //= 2
            if lane == 0:
                out[row] = acc

    return lambda out, x: row_sums[kl.blocks_for(x.shape[0] * WARP, THREADS), THREADS](x, out)


@needs_warp
def test_row_sums_accepts_a_warp_per_row(capsys):
    wo.check_row_sums(make_row_sums(), row=64, block=THREADS)
    assert capsys.readouterr().out == "row sums: correct for all 3 sizes (1 row, 5 rows, many rows)\n"


@needs_warp
def test_row_sums_has_more_rows_than_a_block_has_warps():
    message = _fails(wo.check_row_sums, make_row_sums("no block offset"), row=64, block=THREADS)
    assert "sizes that fail: 5 rows, many rows" in message and "never written" in message


# ---------------------------------------------------------------------------------------------
# Occupancy calculator (pure Python: runs the same everywhere)

def right_calculator(limits, threads, regs, smem):
    warps = -(-threads // limits.warp_size)
    regs_per_warp = -(-regs * limits.warp_size // limits.reg_alloc_unit) * limits.reg_alloc_unit
    per_quarter = (limits.regs_per_sm // limits.sub_partitions) // regs_per_warp if regs_per_warp else math.inf
    smem_alloc = -(-(smem + limits.smem_reserved_per_block) // limits.smem_alloc_unit) * limits.smem_alloc_unit
    return {"threads": limits.max_warps_per_sm // warps, "blocks": limits.max_blocks_per_sm,
            "registers": per_quarter * limits.sub_partitions // warps,
            "shared_memory": limits.smem_per_sm // smem_alloc if smem_alloc else math.inf}


def changed(**replace):
    def calculator(limits, threads, regs, smem):
        result = right_calculator(limits, threads, regs, smem)
        for key, fn in replace.items():
            result[key] = fn(limits, threads, regs, smem)
        return result
    return calculator


def test_occupancy_calculator_accepts_the_right_rules(capsys):
    wo.check_occupancy_calculator(right_calculator)
    assert capsys.readouterr().out.strip() == f"occupancy calculator: correct for all {len(wo.OCCUPANCY_CASES)} cases"


def test_occupancy_calculator_names_an_ignored_register_limit():
    message = _fails(wo.check_occupancy_calculator, changed(registers=lambda *a: math.inf))
    assert "ignores the register limit" in message


def test_occupancy_calculator_names_unrounded_registers():
    unrounded = changed(registers=lambda L, t, r, s: (L.regs_per_sm // 4 // (r * 32)) * 4 // -(-t // 32))
    message = _fails(wo.check_occupancy_calculator, unrounded)
    assert "units of 256" in message and "33 registers" in message


def test_occupancy_calculator_names_the_register_file_quarters():
    whole_file = changed(registers=lambda L, t, r, s: L.regs_per_sm // (-(-r * 32 // 256) * 256) // -(-t // 32))
    message = _fails(wo.check_occupancy_calculator, whole_file)
    assert "split between the SM's 4 schedulers" in message


def test_occupancy_calculator_names_the_reserved_shared_memory():
    no_reserve = changed(shared_memory=lambda L, t, r, s: L.smem_per_sm // (-(-s // 128) * 128) if s else math.inf)
    message = _fails(wo.check_occupancy_calculator, no_reserve)
    assert "smem_reserved_per_block" in message


def test_occupancy_calculator_names_partial_warps():
    message = _fails(wo.check_occupancy_calculator, changed(threads=lambda L, t, r, s: L.max_threads_per_sm // t))
    assert "whole warps" in message and "80 threads" in message


def test_occupancy_calculator_names_a_missing_budget():
    def no_registers(*args):
        result = right_calculator(*args)
        del result["registers"]
        return result

    message = _fails(wo.check_occupancy_calculator, no_registers)
    assert "no entry for registers" in message


def test_occupancy_calculator_stub_is_not_done_yet():
    assert "not done yet" in _fails(wo.check_occupancy_calculator, lambda *args: None)

    def raises(*args):
        raise NotImplementedError

    assert "not done yet" in _fails(wo.check_occupancy_calculator, raises)


def test_occupancy_calculator_wants_whole_blocks():
    message = _fails(wo.check_occupancy_calculator, changed(registers=lambda L, t, r, s: 65536 / (r * t)))
    assert "whole number of blocks" in message


@pytest.mark.parametrize("case, expected", [
    (((9, 0), 256, 64, 0), 4),       # registers: 2048 per warp, 8 warps per quarter
    (((9, 0), 1024, 72, 0), 0),      # 2304 per warp x 32 warps > 65536: cannot launch
    (((9, 0), 128, 32, 48 * 1024), 4),  # 50176 bytes per block
    (((9, 0), 256, 33, 0), 6),       # 33 -> 40 registers per thread
    (((8, 6), 256, 32, 0), 6),       # 48 warps per SM
    (((7, 0), 256, 32, 24 * 1024), 4),  # no reserved shared memory before 8.0
])
def test_reference_matches_hand_computed_occupancy(case, expected):
    cc, threads, regs, smem = case
    limits = wo.sm_limits(cc)
    assert min(min(wo._reference_limits(limits, threads, regs, smem).values()), limits.max_blocks_per_sm) == expected


def test_reference_never_grows_with_more_resources():
    limits = wo.sm_limits((9, 0))
    for threads in (32, 96, 256, 1024):
        blocks = [wo._reference_limits(limits, threads, r, 0)["registers"] for r in range(1, 256)]
        assert all(a >= b for a, b in zip(blocks, blocks[1:]))
        blocks = [wo._reference_limits(limits, threads, 32, s)["shared_memory"] for s in range(0, 100_000, 997)]
        assert all(a >= b for a, b in zip(blocks, blocks[1:]))


def test_sm_limits_table():
    h100 = wo.sm_limits((9, 0))
    assert (h100.max_warps_per_sm, h100.max_blocks_per_sm, h100.smem_per_sm) == (64, 32, 228 * 1024)
    assert wo.sm_limits((7, 0)).smem_reserved_per_block == 0 and wo.sm_limits((7, 0)).smem_alloc_unit == 256
    with pytest.raises(KernelLabArgumentError, match="no SM limits for compute capability 1.0"):
        wo.sm_limits((1, 0))


@pytest.mark.parametrize("n", [1 << 22, (1 << 22) + 7])
def test_compaction_accepts_a_right_result_at_the_gpu_size(n):
    # The GPU's "large" case has 4M elements: past 2**21 the float32 inputs keep fewer fraction bits
    # than key + fraction needs, and a value once rounded up to the next element's key, so a
    # correct kernel failed on every GPU run (a false failure the simulator's small sizes hid).
    rng = np.random.default_rng(5)
    x = wo._compaction_input(n, 0.45, 0.1, rng)
    keys = np.floor(np.abs(x.astype(np.float64)))
    assert len(np.unique(keys[x != 0])) == np.count_nonzero(x != 0)  # every value names its own element
    kept = x[x > 0]
    got = rng.permutation(kept)  # the order across warps is free without keep_warp_order
    out = np.concatenate([got, wo.poisoned_host(n - kept.size, np.float32)])
    guard = wo.poisoned_host(wo._GUARD, np.float32)
    assert wo._compaction_problem(x, out, guard, kept.size, keep_warp_order=False) is None
