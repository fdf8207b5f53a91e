"""Transport: HDF5 files and compression filters.  No RL vocabulary, no Numba."""

from numbatraj.io.hdf5 import (
    COMPRESSIONS,
    compression_kwargs,
    describe_compression,
    ensure_filter_plugins,
    open_h5_read,
)

__all__ = [
    "COMPRESSIONS",
    "compression_kwargs",
    "describe_compression",
    "ensure_filter_plugins",
    "open_h5_read",
]
