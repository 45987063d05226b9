"""The bottom layer: device functions a kernel calls (intrinsics and their simulator models).

A module here may import only the simulator, ``environment`` (to know whether kernels run on a GPU or
in the simulator) and ``validate``; every other layer may import it (tests/test_package_layers.py
holds the order). ``dp4a``: DP4A and PRMT (inline PTX on a GPU, Python twins in the simulator).

The package's other device modules still sit at the top level under their first names, because
notebooks import them there (``kernel_lab.vector_loads``, ``bitcast``, ``acquire``, ``mma_ptx`` with its
model ``_mma_sim``, ``cache_hint_loads``); the layer test counts them in this layer all the same.
"""
