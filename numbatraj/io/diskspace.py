"""Free-space checks made before a large write starts, not half way through it."""

from __future__ import annotations

import os
import shutil

from numbatraj.errors import DiskSpaceError

__all__ = ["format_bytes", "free_bytes", "require_free_space"]


def format_bytes(n: float) -> str:
    """``n`` bytes as a short human string (``"1.5 GiB"``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _existing_parent(path: str) -> str:
    """``path`` itself when it is a directory, else its nearest existing ancestor."""
    here = os.path.abspath(path)
    if os.path.isdir(here):
        return here
    while True:
        parent = os.path.dirname(here)
        if os.path.isdir(parent) or parent == here:
            return parent
        here = parent


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes available to this user on the file system that would hold ``path``.

    ``path`` need not exist: the nearest existing ancestor directory is asked.
    """
    return int(shutil.disk_usage(_existing_parent(os.fspath(path))).free)


def require_free_space(
    path: str | os.PathLike[str],
    nbytes: int,
    *,
    what: str = "the output",
    margin: float = 0.05,
) -> int:
    """Raise :class:`~numbatraj.errors.DiskSpaceError` unless ``nbytes`` fit beside ``path``.

    Parameters
    ----------
    path : path-like
        The file about to be written (it need not exist yet).
    nbytes : int
        Estimated size of the write.
    what : str
        How the message names the file (``"the store 'out.h5'"``).
    margin : float
        Extra fraction of ``nbytes`` required on top, for metadata and estimation error.

    Returns
    -------
    int
        The free bytes found.
    """
    need = int(nbytes * (1.0 + margin))
    where = _existing_parent(os.fspath(path))
    free = int(shutil.disk_usage(where).free)
    if free < need:
        raise DiskSpaceError(
            f"not enough free disk space for {what}: about {format_bytes(need)} needed "
            f"({nbytes} bytes estimated + {margin:.0%}), {format_bytes(free)} free in {where!r}"
        )
    return free
