"""Module 09: beyond one GPU. The machine's GPUs, peer access and NVLink (``probe``); the one-shot
all-reduce as a Numba kernel with its flag protocol, and its launcher over two GPUs (``one_shot``);
NCCL's all-reduce and bus bandwidth by NCCL's definitions (``nccl``); the protocol run in the
simulator as two halves of one grid, with its classic mistakes (``simulated``).

Nothing is imported here: ``one_shot`` and ``simulated`` compile kernels, and ``nccl`` needs CuPy.
"""
