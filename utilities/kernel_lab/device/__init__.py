"""The bottom layer: device functions a kernel calls (intrinsics and their simulator models).

A module here may import only the simulator, ``environment`` (to know whether kernels run on a GPU or
in the simulator) and ``validate``; every other layer may import it (tests/test_package_layers.py
holds the order). ``dp4a``: DP4A and PRMT (inline PTX on a GPU, Python twins in the simulator).
Hopper (compute capability 9.0+; a compile for an older target is refused with a message):
``mbarrier`` (init, arrive, arrive with expected bytes, wait on a phase's parity, the fences),
``bulk_copy`` (``cp.async.bulk`` global -> shared completing on an mbarrier, and shared -> global
completing in bulk async-groups: store, commit, wait for the reads), ``hopper_ptx`` (the
target check and address helpers they share), and ``async_copy_sim``, their simulator model (barrier
counts and phases, copies that land in pieces, stores that land at their wait, named protocol mistakes);
``tensor_map`` (``TensorMap2D``, the host tensor map of a 2-D array, encoded by the CUDA driver on a GPU),
``tma`` (``cp.async.bulk.tensor`` 2-D load and store with that map, its fence, the swizzled tile index)
and ``tma_sim``, their model on top of ``async_copy_sim``.
``wgmma`` (warpgroup MMA from shared-memory descriptors: fence, mma_async, commit, wait; setmaxnreg),
``wgmma_layout`` (its host side: descriptor, swizzle, tile layouts, fragment) and ``wgmma_sim`` (its model).

The package's other device modules still sit at the top level under their first names, because
notebooks import them there (``kernel_lab.vector_loads``, ``bitcast``, ``acquire``, ``mma_ptx`` with its
model ``_mma_sim``, ``cache_hint_loads``); the layer test counts them in this layer all the same.
"""
