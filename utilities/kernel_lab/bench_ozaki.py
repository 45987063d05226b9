"""Kept for the command line that notebooks 07.5 and 07.6 print (``python -m kernel_lab.bench_ozaki``):
the code lives in :mod:`kernel_lab.ozaki.bench` (``python -m kernel_lab.ozaki.bench``). Imported,
this name is that module object, not a copy. Delete this file once no notebook names it."""

import sys

from .ozaki import bench as _bench

if __name__ == "__main__":
    _bench.main()
else:
    sys.modules[__name__] = _bench
