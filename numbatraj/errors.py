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
    "DownloadError",
    "CatalogError",
    "CatalogAuthError",
    "CatalogRequestError",
    "DiskSpaceError",
    "SamplerError",
    "UnsafeArchiveError",
    "DeclarationError",
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


class DownloadError(NumbatrajError, OSError):
    """A transfer failed: an HTTP status, a dead connection, or retries used up."""


class CatalogError(NumbatrajError, OSError):
    """The catalog service refused a request or could not be reached."""


class CatalogAuthError(CatalogError, PermissionError):
    """The catalog rejected the API key (401) or its role (403)."""


class CatalogRequestError(NumbatrajError, ValueError):
    """A dataset name, version, setting or key the catalog cannot accept."""


class DiskSpaceError(NumbatrajError, OSError):
    """Not enough free disk space for the file about to be written (checked before writing)."""


class SamplerError(NumbatrajError, ValueError):
    """A sampler argument is invalid (seed, batch size, priority, window, start) or there is
    nothing to sample from."""


class UnsafeArchiveError(IntegrityError):
    """An archive member that must not be extracted (absolute path, ``..``, link, device,
    duplicate, oversize) or an archive that cannot be read to its end."""


class DeclarationError(NumbatrajError, ValueError):
    """A declaration file (such as an ``assets.kv``) is malformed or incomplete."""
