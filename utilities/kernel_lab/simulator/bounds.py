"""Turning a thread's failure into a message a learner can act on.

When a simulated CUDA thread raises, Numba's simulator only prefixes the exception with the
thread's index. For the commonest failure, an index outside an array (NumPy's IndexError), this
module finds the kernel line that failed, the exact ``array[index]`` expression on it (Python
3.11 records the column of each operation), works out the array's name, kind and shape and the
value of each index, and raises `OutOfBoundsAccess` with a hint. Any other failure keeps its type
and gets the old ``tid=[...] ctaid=[...]:`` prefix.
"""

import ast
import dis
import linecache
import re

from .errors import KernelLabSimulatorError, OutOfBoundsAccess, UndefinedShuffleValue
from .frames import format_dim3, format_site, is_internal

_NUMPY_AXIS = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")
_ATOMICS = {
    "add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
    "cas", "compare_and_swap",
}  # fmt: skip
_SAFE_NODES = (
    ast.Expression, ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple,
    ast.Subscript, ast.Slice, ast.Load, ast.operator, ast.unaryop,
)  # fmt: skip


def translate_failure(exc, thread):
    """The exception to report for `exc`, raised by the simulated CUDA thread `thread`."""
    if isinstance(exc, KernelLabSimulatorError):
        return exc
    if isinstance(exc, IndexError):
        try:
            translated = _out_of_bounds(exc, thread)
        except Exception:  # noqa: BLE001 - never let the message builder hide the real error
            translated = None
        if translated is not None:
            return translated.with_traceback(exc.__traceback__)
    return _with_thread_prefix(exc, thread)


def _with_thread_prefix(exc, thread):
    prefix = f"tid={list(thread.threadIdx)} ctaid={list(thread.blockIdx)}"
    message = f"{prefix}: {exc}" if str(exc) else prefix
    try:
        new = type(exc)(message)
    except Exception:  # noqa: BLE001 - exception types with unusual constructors
        exc.add_note(prefix)
        return exc
    return new.with_traceback(exc.__traceback__)


def _failing_frame(exc):
    """The innermost traceback entry in the learner's code."""
    entry, tb = None, exc.__traceback__
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            entry = tb
        tb = tb.tb_next
    return entry


def _segment(code, lasti):
    positions = list(code.co_positions())[lasti // 2]
    lineno, end_lineno, col, end_col = positions
    if None in positions:
        return None, lineno
    lines = linecache.getlines(code.co_filename)
    if not lines or end_lineno > len(lines):
        return None, lineno
    if lineno == end_lineno:
        text = lines[lineno - 1].encode()[col:end_col].decode()
    else:
        parts = [lines[lineno - 1].encode()[col:].decode()]
        parts += lines[lineno : end_lineno - 1]
        parts.append(lines[end_lineno - 1].encode()[:end_col].decode())
        text = "".join(parts)
    return text, lineno


def _safe_eval(node, frame):
    if not all(isinstance(n, _SAFE_NODES) for n in ast.walk(ast.Expression(node))):
        raise ValueError("not a plain expression")
    code = compile(ast.Expression(node), "<kernel_lab>", "eval")
    return eval(code, frame.f_globals, dict(frame.f_locals))  # noqa: S307 - names only


def _out_of_bounds(exc, thread):
    entry = _failing_frame(exc)
    if entry is None:
        return None
    frame, lasti = entry.tb_frame, entry.tb_lasti
    code = frame.f_code
    text, lineno = _segment(code, lasti)
    site = (code.co_filename, entry.tb_lineno, code.co_name)
    if text is None:
        return None
    node = ast.parse(text.strip(), mode="eval").body
    opname = dis.opname[code.co_code[lasti]]
    if isinstance(node, ast.Subscript):
        array_node, index_node = node.value, node.slice
        verb = "writes" if opname == "STORE_SUBSCR" else "reads"
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _ATOMICS
        and len(node.args) >= 2
    ):
        array_node, index_node = node.args[0], node.args[1]
        verb = f"updates (cuda.atomic.{node.func.attr})"
    else:
        return None
    array_text = ast.unparse(array_node)
    array = _safe_eval(array_node, frame)
    index_parts = index_node.elts if isinstance(index_node, ast.Tuple) else [index_node]
    values = []
    for part in index_parts:
        try:
            values.append(_safe_eval(part, frame))
        except Exception:  # noqa: BLE001 - show what we can
            values.append(None)
    who = f"thread {format_dim3(thread.threadIdx)} of block {format_dim3(thread.blockIdx)}"
    for part, value in zip(index_parts, values):
        if type(value).__name__ == "UndefinedValue":
            return UndefinedShuffleValue(
                f"{who} uses a value that is undefined on a GPU as an index "
                f"(`{ast.unparse(part)}` in `{ast.unparse(node)}`).\n  {value.origin}\n"
                f"  at {format_site(site)}"
            )
    shape = tuple(int(s) for s in getattr(array, "shape", ()))
    dtype = getattr(getattr(array, "dtype", None), "name", "?")
    kind, declared = _memory_kind(array, thread)
    shown = [
        f"{ast.unparse(p)} = {_show(v)}"
        for p, v in zip(index_parts, values)
        if v is not None and not isinstance(p, ast.Constant)
    ]
    if isinstance(node, ast.Subscript):
        expr = ast.unparse(node)
    else:
        expr = f"{array_text}[{ast.unparse(index_node)}]"
    lines = [
        f"{who} {verb} `{expr}`" + (f" with {', '.join(shown)}" if shown else "")
        + f", outside the {kind} array `{array_text}`"
        + (f" (declared as `{declared}`)" if declared and declared != array_text else "")
        + f" of shape {shape} ({dtype}).",
    ]
    match = _NUMPY_AXIS.search(str(exc))
    axis_size = None
    if match:
        idx, axis, axis_size = (int(g) for g in match.groups())
        valid = f"0..{axis_size - 1}" if axis_size else "none (the axis has length 0)"
        lines.append(f"  Index {idx} on axis {axis}; valid indices there are {valid}.")
    else:
        lines.append(f"  NumPy says: {exc}")
    lines.append(f"  at {format_site(site)}")
    lines.append(_hint(thread, shape, kind, axis_size))
    return OutOfBoundsAccess("\n".join(lines))


def _show(value):
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()  # np.int64(5) -> 5
    return repr(value)


def _memory_kind(array, thread):
    runner = thread.runner
    if type(array).__name__ == "SharedArray":
        alloc = array._alloc
        return ("dynamic shared memory" if alloc.dynamic else "shared"), alloc.name
    base = getattr(array, "base", None)
    for candidate in (array, base):
        if candidate is not None and id(candidate) in runner.shared_names:
            name, kind = runner.shared_names[id(candidate)]
            return kind, name
    if type(array).__name__ in ("FakeWithinKernelCUDAArray", "FakeCUDAArray"):
        return "global", None
    return "local", None


def _hint(thread, shape, kind, axis_size):
    runner = thread.runner
    if kind == "dynamic shared memory" and 0 in shape:
        return (
            "Hint: the kernel was launched without dynamic shared memory. Pass its size in bytes "
            "as the 4th launch parameter: kernel[blocks, threads, 0, nbytes](...)."
        )
    if kind == "local":
        return (
            "Hint: a local array (a thread's registers) has the size its declaration fixes, and no thread "
            "needs a bounds check for it: a loop or an index runs past that size. A loop bound taken from "
            "another constant than the one the array was sized by (BM where it holds BN values?), or an "
            "index into the thread's share of a tile that was not reduced to it?"
        )
    if kind in ("shared", "dynamic shared memory"):
        return (
            "Hint: missing bounds check `if i < n:`? Shared arrays have the size you declare, "
            "not the size of the data: check the index against the declared shape (room for a "
            "halo? threads of a partial last block?)."
        )
    text = "Hint: missing bounds check `if i < n:`?"
    for name, blocks, threads in zip("xyz", runner.grid_dim, runner.block_dim):
        total = blocks * threads
        if axis_size is not None and total > axis_size:
            block_word = "block" if blocks == 1 else "blocks"
            why = "the grid is rounded up to whole blocks, so " if blocks > 1 else ""
            return (
                f"{text} The launch has {total} threads along {name} ({blocks} {block_word} of "
                f"{threads}) for an axis of length {axis_size}: {why}the extra threads must skip "
                "the access."
            )
    return (
        f"{text} The index runs past the end of the array: accesses to a neighbour such as "
        "`a[i + 1]` need a check of their own (`if i + 1 < n:`)."
    )
