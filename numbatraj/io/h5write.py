"""Writing HDF5 files so that a failed write is an exception, never a crash.

Two rules every numbatraj HDF5 writer follows (the store writer, replay checkpoints):

- :func:`flushed`: each dataset is flushed explicitly (``H5Dflush``, which raises) before
  its object is let go.  A dataset's small writes wait in HDF5's sieve buffer (its chunks
  in the chunk cache) until the dataset is closed, and h5py closes it when the object is
  garbage collected, where a failed write is only printed ("Can't decrement id ref
  count"); the next flush or close of the file then segfaults (libhdf5 2.0, h5py 3.16:
  measured by tests/integrity/test_faults.py under strace fault injection).
- :func:`close_discarded`: a file whose writes failed is closed with its descriptor first
  pointed at ``/dev/null``, so HDF5's closing flush writes nowhere and succeeds instead of
  failing again (or crashing) on the real file, which is then deleted.
"""

from __future__ import annotations

import os

import h5py

__all__ = ["LIBVER", "close_discarded", "flushed"]

#: HDF5 file-format bounds of every file numbatraj writes: the 1.10 format, whose metadata
#: (superblock, object headers, chunk indexes) carries checksums libhdf5 verifies on read.
LIBVER = ("v110", "v110")


def flushed(ds: h5py.Dataset) -> h5py.Dataset:
    """``ds`` with its buffered data written (raises the write's error)."""
    ds.flush()
    return ds


def close_discarded(f: h5py.File) -> None:
    """Close ``f``, whose writes failed and which is about to be deleted, writing nothing."""
    try:
        fd = int(f.id.get_vfd_handle())
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    except (OSError, RuntimeError, ValueError, TypeError):
        pass
    try:
        f.close()
    except (OSError, RuntimeError):
        pass
