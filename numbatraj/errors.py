"""Exceptions raised by numbatraj.

Every error subclasses :class:`NumbatrajError` *and* the builtin a caller would naturally
catch (``ValueError``, ``OSError``, ``IndexError`` ...), so ``except ValueError`` keeps working
in code that does not know about numbatraj.
"""

from __future__ import annotations

__all__ = [
    "NumbatrajError",
    "SchemaError",
    "EpisodeError",
    "IntegrityError",
    "NotAStoreError",
    "RowIndexError",
    "DeviceUnavailableError",
]


class NumbatrajError(Exception):
    """Base class of every error numbatraj raises on purpose."""


class SchemaError(NumbatrajError, ValueError):
    """A column name, dtype or row shape is not what was declared or allowed."""


class EpisodeError(NumbatrajError, ValueError):
    """Columns out of step, an empty episode, or rows left outside any episode."""


class IntegrityError(NumbatrajError, OSError):
    """A file on disk contradicts itself (episode index, column lengths, manifest)."""


class NotAStoreError(IntegrityError):
    """An HDF5 file with no episode index: it cannot be opened as a trajectory store."""


class RowIndexError(NumbatrajError, IndexError):
    """A row index or range outside the valid rows."""


class DeviceUnavailableError(NumbatrajError, RuntimeError):
    """A device (CUDA) feature was asked for on a machine that cannot provide it."""
