"""A placeholder for "whatever garbage the GPU would have returned".

A warp shuffle that reads from a lane which is not taking part (outside the mask, exited, or not
existing in a partial last warp) returns an undefined value on a GPU. Raising an error at the
shuffle itself would be too strict: in a masked reduction, lanes 8-15 often read garbage that
nobody ever uses, and the kernel is correct. So the simulator returns an `UndefinedValue`.

Arithmetic on it quietly gives another `UndefinedValue` (garbage in, garbage out). Anything that
would make the garbage matter raises `UndefinedShuffleValue` with the story of where it came from:
converting it to a number (which is what storing it into an array does), using it as an index,
or asking whether it is true (``if``, ``while``, ``and``/``or``, comparisons used in a branch,
``max``/``min``).
"""

import sys
import threading

from .errors import UndefinedShuffleValue
from .frames import format_dim3, format_site, user_frame


class UndefinedValue:
    """Stands for the undefined result of a shuffle; raises as soon as it matters."""

    __slots__ = ("origin", "lane_text")
    __array_ufunc__ = None  # make NumPy scalars hand arithmetic over to us
    __array_priority__ = 1000

    def __init__(self, origin, lane_text):
        self.origin = origin  # why the value is undefined (which shuffle, which source lane)
        self.lane_text = lane_text  # which thread received it

    # --- using the value: raise -------------------------------------------------------------
    def _used(self, how):
        frame = user_frame(sys._getframe(2))
        where = ""
        if frame is not None:
            site = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
            where = f"\n  used {how} at {format_site(site)}"
        user = threading.current_thread()
        if hasattr(user, "lane") and hasattr(user, "warp_id"):
            lane_text = (
                f"lane {user.lane} of warp {user.warp_id} (thread "
                f"{format_dim3(user.threadIdx)} of block {format_dim3(user.blockIdx)})"
            )
        else:
            lane_text = self.lane_text
        if lane_text == self.lane_text:
            story = f": {self.origin}"
        else:  # the garbage travelled: another lane received it, then computed or shuffled it here
            story = f". It derives from what {self.lane_text} received: {self.origin}"
        raise UndefinedShuffleValue(
            f"{lane_text} uses a value that is undefined on a GPU{story}{where}\n"
            "Hint: a shuffle may only read from lanes that take part in it. Make the mask name "
            "every lane you read from (and make sure those lanes exist and have not returned), "
            "or make sure the lanes that read garbage do not use it (for a tree reduction, only "
            "lane 0's result is meaningful)."
        )

    def __bool__(self):
        self._used("as a condition (if/while/and/or, or inside max/min)")

    def __float__(self):
        self._used("as a number (for example stored into an array)")

    def __int__(self):
        self._used("as a number (for example stored into an array)")

    def __index__(self):
        self._used("as an index")

    def __complex__(self):
        self._used("as a number")

    def __repr__(self):
        return "<undefined value from a warp shuffle>"

    __str__ = __repr__

    def __format__(self, spec):
        self._used("in formatted output")

    def __hash__(self):
        self._used("as a dictionary key")

    # --- computing with the value: stay undefined -------------------------------------------
    def _same(self, *args):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _same
    __mod__ = __rmod__ = __pow__ = __rpow__ = __divmod__ = __rdivmod__ = _same
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _same
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _same
    __neg__ = __pos__ = __abs__ = __invert__ = _same
    __round__ = __trunc__ = __floor__ = __ceil__ = _same
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _same


def is_undefined(value):
    return type(value) is UndefinedValue
