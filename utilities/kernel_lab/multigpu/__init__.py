"""Module 09: beyond one GPU. The machine's GPUs, peer access and NVLink (``probe``); 09.1's peer-read
kernels, their launcher and the peer copy they are measured against (``peer``); the one-shot
all-reduce as a Numba kernel with its flag protocol, and its launcher over two GPUs (``one_shot``);
NCCL's all-reduce and bus bandwidth by NCCL's definitions (``nccl``); the protocol run in the
simulator as two halves of one grid, with its classic mistakes (``simulated``); timing a collective
over the GPUs of one process and 09.2's comparison with NCCL (``timing``).

Nothing is imported here: ``one_shot`` and ``simulated`` compile kernels, and ``nccl`` needs CuPy.
"""
