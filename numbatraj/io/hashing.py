"""SHA-256 of files, read in large blocks so hashing a multi-GB file stays disk-bound."""

from __future__ import annotations

import hashlib
import os
import re

__all__ = ["HASH_BLOCK_BYTES", "check_sha256_hex", "sha256_file", "sha256_prefix"]

#: Bytes read per call while hashing a file.
HASH_BLOCK_BYTES = 4 << 20

_HEX64 = re.compile(r"[0-9a-f]{64}")


def check_sha256_hex(value: str, *, what: str = "sha256") -> str:
    """Return ``value`` lower-cased if it is 64 hex digits, else raise ``ValueError``.

    Parameters
    ----------
    value : str
        A hex SHA-256 digest, in either case.
    what : str
        The argument's name, used in the error message.
    """
    if not isinstance(value, str) or not _HEX64.fullmatch(value.lower()):
        raise ValueError(f"{what} must be 64 hex digits, got {value!r}")
    return value.lower()


def sha256_prefix(
    path: str | os.PathLike[str], n_bytes: int | None = None
) -> tuple[hashlib._Hash, int]:
    """Hash the first ``n_bytes`` of a file (all of it when None).

    Returns
    -------
    hasher : hashlib sha256 object
        Still open, so a caller can keep feeding it the bytes that follow.
    n : int
        Bytes actually hashed (less than ``n_bytes`` when the file is shorter).
    """
    h = hashlib.sha256()
    done = 0
    buf = bytearray(HASH_BLOCK_BYTES)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n_bytes is None or done < n_bytes:
            want = HASH_BLOCK_BYTES if n_bytes is None else min(HASH_BLOCK_BYTES, n_bytes - done)
            got = f.readinto(view[:want])
            if not got:
                break
            h.update(view[:got])
            done += got
    return h, done


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a whole file.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    """
    return sha256_prefix(path)[0].hexdigest()
