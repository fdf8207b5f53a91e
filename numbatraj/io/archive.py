"""Safe extraction of ``.tar.zst`` and ``.tar.gz`` archives: :func:`safe_extract`.

An archive from elsewhere is hostile until proven otherwise.  Every member is checked before
a byte of it is written: only regular files and directories are accepted; an absolute path,
a ``..`` component, a symbolic or hard link, a device or FIFO, a sparse file, a name seen
twice, or a member over the size limit is refused with :class:`UnsafeArchiveError` naming
the member.  The archive is read as a stream (zstandard frames are decompressed as they
arrive, never held whole), and everything goes into a temporary directory beside the
destination.  Only when the last member is in, the completion marker is written (last), the
tree is synced and the directory is renamed into place.  A refused or truncated archive
leaves the destination exactly as it was.

Also refused: a member named like the completion marker at the top level (the marker, its
temporary names, a directory of that name); a stream that does not decode to its end
(the gzip CRC and length, zstandard frame checks: the whole stream is read, past the tar
end-of-archive blocks, so a flipped bit is an error even when no sha256 is declared); more
than ``max_total_bytes`` in all (default :data:`MAX_TOTAL_BYTES`, 256 GiB) or more than
``max_ratio`` times the archive's own size (default :data:`MAX_RATIO`, 1000; a bomb is
stopped at the header of the member that crosses either limit).  ``./``-rooted archives
(``tar -C dir -czf x.tar.gz .``) are accepted: the ``./`` member is the root itself.

One extraction per destination: :func:`safe_extract` holds the destination's publish lock
(a second extraction waits) and removes the temporaries killed extractions left.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from numbatraj.errors import UnsafeArchiveError
from numbatraj.io.atomic import (
    fsync_dir,
    publish_lock,
    remove_stale_temps,
    replace_dir,
    temp_path,
    write_bytes,
)

__all__ = [
    "ARCHIVE_SUFFIXES",
    "COMPLETE_MARKER",
    "MAX_RATIO",
    "MAX_TOTAL_BYTES",
    "ExtractResult",
    "archive_kind",
    "check_member_name",
    "is_complete",
    "read_marker",
    "safe_extract",
    "sniff_kind",
    "write_marker",
]

#: Suffixes :func:`safe_extract` understands, longest first.
ARCHIVE_SUFFIXES = (".tar.zst", ".tzst", ".tar.gz", ".tgz")
#: Name of the completion marker written last inside an extracted tree.
COMPLETE_MARKER = ".extract-complete.json"
_BLOCK = 1 << 20
#: Default largest sum of extracted file sizes.
MAX_TOTAL_BYTES = 256 << 30
#: Default largest ratio of extracted bytes to the archive's size (plus 1 MiB of slack).
MAX_RATIO = 1000.0


@dataclass(frozen=True)
class ExtractResult:
    """What :func:`safe_extract` put in place.

    Attributes
    ----------
    path : str
        The destination directory (complete, marker included).
    files : tuple of str
        Relative POSIX paths of the regular files extracted, in archive order.
    bytes : int
        Sum of their sizes.
    """

    path: str
    files: tuple[str, ...]
    bytes: int


def archive_kind(name: str) -> str:
    """``"zst"`` or ``"gz"`` from a file name's suffix.

    Raises
    ------
    UnsafeArchiveError
        When the name ends in none of :data:`ARCHIVE_SUFFIXES` (they are listed).
    """
    low = name.lower()
    if low.endswith((".tar.zst", ".tzst")):
        return "zst"
    if low.endswith((".tar.gz", ".tgz")):
        return "gz"
    raise UnsafeArchiveError(
        f"{name}: not a supported archive; expected one of {', '.join(ARCHIVE_SUFFIXES)}"
    )


def sniff_kind(path: str | os.PathLike[str]) -> str | None:
    """``"zst"`` or ``"gz"`` from a file's first bytes (its magic number), else None."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x28\xb5\x2f\xfd":
        return "zst"
    if head[:2] == b"\x1f\x8b":
        return "gz"
    return None


def check_member_name(name: str, archive: str = "archive") -> str:
    """The member's path normalised to ``a/b/c``; refuses absolute paths and ``..``.

    Raises
    ------
    UnsafeArchiveError
        Naming ``archive`` and the member.
    """
    if not name or "\x00" in name:
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an empty or NUL-bearing name")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} climbs out with '..'")
    if not parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} names no path")
    if parts[0].startswith(COMPLETE_MARKER):
        raise UnsafeArchiveError(
            f"{archive}: member {name!r} is named like the completion marker "
            f"{COMPLETE_MARKER!r} (it would forge the completion marker); refused as unsafe"
        )
    return "/".join(parts)


def _is_root(name: str) -> bool:
    """The ``.`` / ``./`` member of a ``./``-rooted archive."""
    return bool(name) and all(p in ("", ".") for p in name.replace("\\", "/").split("/"))


def _kind_of(m: tarfile.TarInfo) -> str | None:
    """Why ``m`` is refused by type, or None for a regular file or directory."""
    if m.issym():
        return f"a symbolic link (to {m.linkname!r})"
    if m.islnk():
        return f"a hard link (to {m.linkname!r})"
    if m.ischr() or m.isblk():
        return "a device"
    if m.isfifo():
        return "a FIFO"
    if m.issparse():
        return "a sparse file"
    if m.isreg() or m.isdir():
        return None
    return f"of unsupported type {m.type!r}"


@contextmanager
def _open_stream(path: str, kind: str) -> Iterator[tuple[tarfile.TarFile, IO[bytes]]]:
    with open(path, "rb") as raw:
        if kind == "zst":
            import zstandard

            reader: Any = zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
        else:
            reader = gzip.GzipFile(fileobj=raw, mode="rb")
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                yield tar, raw
            # tar stops at its end-of-archive blocks; the compressed stream's own checks
            # (gzip CRC and length, zstandard frames) run only when it is read to its end
            while reader.read(_BLOCK):
                pass
        finally:
            reader.close()


def _copy_member(src: IO[bytes], dst: str, size: int, mode: int, label: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(dst, flags, 0o755 if mode & 0o111 else 0o644)
    with os.fdopen(fd, "wb") as out:
        left = size
        while left:
            block = src.read(min(_BLOCK, left))
            if not block:
                raise UnsafeArchiveError(f"{label}: data ends {left} bytes early (truncated)")
            out.write(block)
            left -= len(block)
        out.flush()
        os.fsync(out.fileno())


class _Bar:
    """A tqdm bar over the archive's compressed bytes, when shown (tqdm is optional)."""

    def __init__(self, path: str, show: bool | None) -> None:
        self._bar: Any = None
        self._at = 0
        if show is None:
            show = sys.stderr.isatty()
        if show:
            try:
                from tqdm import tqdm
            except ImportError:  # the core install has no tqdm: no bar
                return
            self._bar = tqdm(total=os.path.getsize(path), unit="B", unit_scale=True,
                             unit_divisor=1024, desc=f"extract {os.path.basename(path)}",
                             leave=False)

    def at(self, pos: int) -> None:
        if self._bar is not None and pos > self._at:
            self._bar.update(pos - self._at)
            self._at = pos

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _extract_into(
    path: str, kind: str, tmp: str, max_member_bytes: int | None, max_total_bytes: int | None,
    max_ratio: float | None = None, show_progress: bool | None = False,
) -> tuple[list[str], int]:
    label = os.path.basename(path)
    bar = _Bar(path, show_progress)
    seen: dict[str, str] = {}
    files: list[str] = []
    total = 0
    ratio_cap = None if max_ratio is None else max_ratio * os.path.getsize(path) + (1 << 20)
    try:
        with _open_stream(path, kind) as (tar, raw):
            for m in tar:
                bar.at(raw.tell())
                if m.isdir() and _is_root(m.name):
                    continue  # "./": the destination itself
                rel = check_member_name(m.name, label)
                why = _kind_of(m)
                if why is not None:
                    raise UnsafeArchiveError(f"{label}: member {m.name!r} is {why}; refused")
                if rel in seen:
                    raise UnsafeArchiveError(
                        f"{label}: member {m.name!r} appears twice (as {seen[rel]} and "
                        f"{'dir' if m.isdir() else 'file'}); refused"
                    )
                seen[rel] = "dir" if m.isdir() else "file"
                target = os.path.join(tmp, *rel.split("/"))
                if m.isdir():
                    os.makedirs(target, mode=0o755, exist_ok=True)
                    continue
                if max_member_bytes is not None and m.size > max_member_bytes:
                    raise UnsafeArchiveError(
                        f"{label}: member {m.name!r} has {m.size} bytes, over the limit of "
                        f"{max_member_bytes}"
                    )
                total += m.size
                if max_total_bytes is not None and total > max_total_bytes:
                    raise UnsafeArchiveError(
                        f"{label}: member {m.name!r} brings the archive to {total} bytes, over "
                        f"the limit of {max_total_bytes}"
                    )
                if ratio_cap is not None and total > ratio_cap:
                    raise UnsafeArchiveError(
                        f"{label}: member {m.name!r} brings the archive to {total} bytes, more "
                        f"than {max_ratio:g} times its compressed size "
                        f"({os.path.getsize(path)} bytes); refused as a decompression bomb "
                        f"(raise max_ratio if this is expected)"
                    )
                parent = os.path.dirname(target)
                try:
                    os.makedirs(parent, mode=0o755, exist_ok=True)
                except (FileExistsError, NotADirectoryError):
                    raise UnsafeArchiveError(
                        f"{label}: member {m.name!r} lies under a path that is a file"
                    ) from None
                src = tar.extractfile(m)
                assert src is not None  # a regular file always has data
                _copy_member(src, target, m.size, m.mode, f"{label}: member {m.name!r}")
                files.append(rel)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, UnsafeArchiveError):
            raise
        msg = f"{label}: unreadable archive ({type(exc).__name__}: {exc})"
        raise UnsafeArchiveError(msg) from None
    except Exception as exc:  # zstandard.ZstdError is not an OSError
        if type(exc).__name__ != "ZstdError":
            raise
        raise UnsafeArchiveError(f"{label}: corrupt zstandard stream ({exc})") from None
    finally:
        bar.close()
    return files, total


def read_marker(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The completion marker of an extracted tree, or None when absent or unreadable."""
    try:
        with open(os.path.join(os.fspath(directory), COMPLETE_MARKER), encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def write_marker(directory: str, info: dict[str, Any]) -> None:
    """Write ``info`` as the completion marker (through a temporary name, then fsync)."""
    text = json.dumps(info, indent=1, sort_keys=True)
    write_bytes(os.path.join(directory, COMPLETE_MARKER), text.encode("utf-8"))


def safe_extract(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    max_member_bytes: int | None = None,
    max_total_bytes: int | None = MAX_TOTAL_BYTES,
    max_ratio: float | None = MAX_RATIO,
    marker: dict[str, Any] | None = None,
    kind: str | None = None,
    show_progress: bool | None = None,
) -> ExtractResult:
    """Extract ``archive`` into the directory ``dest``, refusing anything unsafe.

    Parameters
    ----------
    archive : path-like
        A ``.tar.zst`` / ``.tzst`` (streamed zstandard) or ``.tar.gz`` / ``.tgz`` file.
    dest : path-like
        The directory to create.  An existing one is replaced only once the new tree is
        complete.
    max_member_bytes, max_total_bytes : int, optional
        Largest regular file, and largest sum of files, accepted (a decompression bomb is
        stopped at the header of the member that crosses the limit); the sum defaults to
        :data:`MAX_TOTAL_BYTES`, None lifts it.
    max_ratio : float, optional
        Largest ratio of the sum of files to the archive's size (plus 1 MiB), default
        :data:`MAX_RATIO`; None lifts it.
    marker : dict, optional
        Extra JSON fields for the completion marker (for example the archive's digest).
    kind : {"zst", "gz"}, optional
        The compression, for a file whose name carries no suffix (see :func:`sniff_kind`);
        by default taken from the suffix.
    show_progress : bool, optional
        A progress bar over the archive's bytes (tqdm, when installed); by default only
        when standard error is a terminal.

    Returns
    -------
    ExtractResult

    Raises
    ------
    UnsafeArchiveError
        A refused member (named), an unsupported suffix, or a corrupt or truncated stream.
        Nothing is left behind: the temporary directory is removed and ``dest`` untouched.
    """
    path, dest = os.fspath(archive), os.path.abspath(os.fspath(dest))
    if kind is None:
        kind = archive_kind(path)
    elif kind not in ("zst", "gz"):
        raise ValueError(f"kind must be 'zst' or 'gz', got {kind!r}")
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    with publish_lock(dest, wait=True, what="extraction"):
        remove_stale_temps(dest)  # trees of killed extractions (the lock says: not live)
        tmp = temp_path(dest)
        os.mkdir(tmp, 0o755)
        try:
            files, total = _extract_into(path, kind, tmp, max_member_bytes, max_total_bytes,
                                         max_ratio, show_progress)
            info = dict(marker or {})
            info.update({"archive": os.path.basename(path), "files": files, "bytes": total})
            write_marker(tmp, info)  # last: its presence means every member is in
            fsync_dir(tmp)
            replace_dir(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return ExtractResult(dest, tuple(files), total)


def is_complete(directory: str | os.PathLike[str]) -> bool:
    """True when ``directory`` holds a completion marker (and so every member)."""
    d = os.fspath(directory)
    return stat.S_ISDIR(os.lstat(d).st_mode) if os.path.lexists(d) and read_marker(d) else False
