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

``wgmma_gemm`` (08.3): the package's copies of what the learner writes for one warpgroup's GEMM tile
with ``wgmma`` (the descriptor packed by hand, the descriptors of two K-major tiles, one 64 x N x 16
step and the store of its accumulator fragment, a block's K loop over two swizzled stages with one
group in flight), ``load_stage`` (the threads' 16-byte copies into the 128-byte swizzle), sizes and
launchers. The intrinsics are ``device.wgmma`` (layouts in ``device.wgmma_layout``), modelled by
``device.wgmma_sim``.

``ws_gemm`` (08.4): the warp-specialised, persistent fp16 GEMM: the package's copies of the learner's
producer (one thread of warpgroup 0 issues each K-tile's two TMA loads into a ring of stages, on
``full`` and ``empty`` mbarriers) and consumer (warpgroups 1 and 2 each multiply 64 rows of a 128 x N
tile with wgmma and release each stage once its group is done), the helpers they call (``ring_slot``,
``mma_ktile``, ``release``), the kernel around them (``make_ws_gemm``), the tensor maps, sizes and the
launcher.
"""
