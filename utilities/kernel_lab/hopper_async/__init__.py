"""Module 08: Hopper's asynchronous data movement from Numba (bulk copies, mbarriers; later TMA
tensor copies and wgmma). One file per notebook's kernels:

``bulk_copies`` (08.1): the package's copies of the learner's three kernels (one tile, many rounds
through one tile, a ring of stages in a persistent grid), their sizes for a GPU and for the
simulator, and their launchers. The intrinsics themselves are in ``kernel_lab.device``
(``mbarrier``, ``bulk_copy``), with their simulator model ``device.async_copy_sim``.

``tma_tiles`` (08.2): the package's copies of the learner's tensor-copy kernels (a tiled copy, a tiled
transpose through the 128-byte swizzled layout, the transpose in a persistent grid with a ring of
stages), the host's ``tensor_maps``, their sizes and launchers, ``bank_ways`` (the bank conflicts of
the transposition in each layout) and 01.3's fastest transpose as the course's own peer. The
intrinsics are ``device.tensor_map`` and ``device.tma``, modelled by ``device.tma_sim``.
"""
