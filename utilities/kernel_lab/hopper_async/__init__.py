"""Module 08: Hopper's asynchronous data movement from Numba (bulk copies, mbarriers; later TMA
tensor copies and wgmma). One file per notebook's kernels:

``bulk_copies`` (08.1): the package's copies of the learner's three kernels (one tile, many rounds
through one tile, a ring of stages in a persistent grid), their sizes for a GPU and for the
simulator, and their launchers. The intrinsics themselves are in ``kernel_lab.device``
(``mbarrier``, ``bulk_copy``), with their simulator model ``device.async_copy_sim``.
"""
