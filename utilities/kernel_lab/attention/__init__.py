"""Module 04: attention. Float64 NumPy references (``reference``), the online-softmax algorithm in
NumPy with the classic mistakes (``online``), CUDA-core kernels in Numba (``kernels``), the
register-tiled fused forward on CUDA cores (``tiled``, FlashAttention-2's loop), the tensor-core
forward with cuBLASDx (``tensor_core``, GPU only) and the benchmarks (``bench``).
"""

from . import online, reference  # noqa: F401
