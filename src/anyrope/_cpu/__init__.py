"""Fast paths for arrays in host memory (NumPy, PyTorch on the CPU)."""
