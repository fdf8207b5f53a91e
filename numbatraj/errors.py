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
    "SourceFormatError",
    "LeRobotFormatError",
    "ResumeError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "HubPushError",
    "UnsupportedCodecError",
    "RateLimitTimeoutError",
    "LockedError",
    "WriteFailedError",
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


class SourceFormatError(SchemaError):
    """A source dataset is not laid out as its format requires.

    The message names the file, the group or dataset, what was found and what was expected.
    """


class LeRobotFormatError(SchemaError):
    """A directory is not a LeRobot v3.0 dataset this importer can read (wrong version,
    missing feature, unsupported camera type, malformed metadata).  The message names the
    file and the value found."""


class ResumeError(SchemaError):
    """A directory cannot be resumed: written without checkpoints, or recorded with other
    settings (fps, cameras, resolution, joint names, codec) than the session asks for."""


class DatasetExistsError(NumbatrajError, FileExistsError):
    """A directory already holds a dataset (or a rejection list) and resuming was not asked."""


class DatasetNotFoundError(NumbatrajError, FileNotFoundError):
    """A dataset is in none of the caches and downloading was not allowed."""


class HubPushError(NumbatrajError, OSError):
    """The Hub refused or could not be reached, or no token was found."""


class UnsupportedCodecError(NumbatrajError, ValueError):
    """A video codec this PyAV build cannot encode; the message lists those it can."""


class RateLimitTimeoutError(NumbatrajError, TimeoutError):
    """A replay insert or sample waited longer than its timeout for the rate limiter to let
    it through (writers ran ahead of the learner, or the learner ahead of the writers)."""


class LockedError(NumbatrajError, BlockingIOError):
    """Another process (or thread) holds the publish lock of a destination and this
    operation does not wait for it (see :func:`numbatraj.io.atomic.publish_lock`); the
    message names the holder's pid and what it is doing."""


class WriteFailedError(NumbatrajError, OSError):
    """A write, flush, fsync, close or rename failed (``ENOSPC``, ``EIO``...) or what was
    written does not read back; nothing was published and the previous file is intact.
    ``errno`` is the failing call's when there was one."""
