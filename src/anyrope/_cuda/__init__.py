"""The CUDA fast path: one templated RawKernel (``rope.cu``) for CuPy arrays and torch CUDA tensors.

Nothing here imports CuPy or torch at import time; ``launch`` does so on first use.
"""
