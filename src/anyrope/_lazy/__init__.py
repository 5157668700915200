"""Lazy array libraries (dask): above the pipeline, which they call block by block."""
