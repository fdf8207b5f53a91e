"""Helpers shared by the file-format importers (LIBERO, LAFAN1, D4RL, Minari, robomimic, DP).

Nothing here knows a format: sorting of group names by their integer suffix, decoding of
HDF5 attribute values, the manifest attributes every importer records, the progress bar,
and the writer wrapper that leaves nothing at ``out`` when an import fails.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import h5py
import numpy as np

from numbatraj._version import __version__
from numbatraj.data.column import ColumnSpec
from numbatraj.data.store_stats import close_with_stats
from numbatraj.data.writer import TrajectoryStoreWriter
from numbatraj.errors import IntegrityError, NumbatrajError, SourceFormatError
from numbatraj.io.atomic import publish_lock
from numbatraj.io.hdf5 import open_h5_read

__all__ = [
    "SourceAccount",
    "SourceFormatError",
    "attr_text",
    "column_name",
    "default_out",
    "h5_dataset",
    "natural_key",
    "open_writer",
    "progress",
    "open_source",
    "scalar_attrs",
    "sorted_natural",
    "source_attrs",
    "source_errors",
]

T = TypeVar("T")


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key comparing digit runs as integers: ``demo_9`` sorts before ``demo_10``."""
    parts: list[Any] = _DIGITS.split(name)
    parts[1::2] = [int(p) for p in parts[1::2]]
    return (*parts, name)


def sorted_natural(names: Iterable[str]) -> list[str]:
    """``names`` ordered by :func:`natural_key`."""
    return sorted(names, key=natural_key)


def attr_text(value: Any) -> str:
    """An HDF5 attribute or scalar dataset value as text (``str``, ``bytes``, numpy scalars)."""
    if isinstance(value, np.ndarray):
        if value.shape == ():
            value = value[()]
        elif value.dtype.kind in "SOU":
            return ",".join(attr_text(v) for v in value.ravel())
        else:
            return ",".join(str(v) for v in value.ravel().tolist())
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def scalar_attrs(
    attrs: Mapping[str, Any], prefix: str, *, skip: Sequence[str] = (),
    recorded: list[str] | None = None,
) -> dict[str, str]:
    """HDF5 attributes as manifest strings under ``prefix``; arrays longer than 64 are skipped
    (``recorded``, when given, receives the names of the attributes that were kept, so that
    a :class:`SourceAccount` lists the others).

    JSON strings are re-serialised compactly so that they fit on one manifest line.
    """
    out: dict[str, str] = {}
    for key, value in attrs.items():
        if key in skip:
            continue
        if isinstance(value, np.ndarray) and value.size > 64:
            continue
        if recorded is not None:
            recorded.append(key)
        text = attr_text(value)
        if text[:1] in "{[":
            try:
                text = json.dumps(json.loads(text), separators=(",", ":"))
            except ValueError:
                pass
        out[f"{prefix}{key}"] = _one_line(text)
    return out


def source_attrs(fmt: str, source: str | os.PathLike[str], importer_version: str) -> dict[str, str]:
    """The manifest attributes every importer records: what was read, by which importer."""
    return {
        "source_format": fmt,
        "source": _one_line(os.path.abspath(os.fspath(source))),
        "importer": f"numbatraj.importers.{fmt}",
        "importer_version": f"{importer_version} (numbatraj {__version__})",
    }


def default_out(source: str | os.PathLike[str], suffix: str = ".h5") -> str:
    """``<source name without extension><suffix>`` in the current directory."""
    name = os.path.basename(os.path.normpath(os.fspath(source)))
    for ext in (".zarr.zip", ".hdf5", ".h5", ".zarr", ".csv"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return name + suffix


def progress(items: Sequence[T], desc: str, enabled: bool | None = None) -> Iterator[T]:
    """Iterate ``items`` with a tqdm bar on a terminal (``enabled=None``: when stderr is a tty).

    Without tqdm installed the items are yielded plainly.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if enabled:
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - tqdm is an optional extra
            enabled = False
        else:
            yield from tqdm(items, desc=desc, unit="ep", leave=False)
            return
    yield from items


@contextmanager
def open_writer(
    out: str | os.PathLike[str],
    columns: Iterable[ColumnSpec],
    *,
    env_id: str | None,
    attrs: Mapping[str, Any],
    overwrite: bool,
) -> Iterator[TrajectoryStoreWriter]:
    """A :class:`TrajectoryStoreWriter` that is aborted on any exception.

    The store is built under a temporary name of its own and renamed when the block ends
    without error, so a failed import leaves nothing at ``out`` (and removes its temporary
    file).  At close the per-column statistics of
    :func:`numbatraj.data.store_stats.store_stats` (numeric non-image columns) are written
    beside the columns, readable as ``TrajectoryStore.stats(column)``.
    Imports of one ``out`` run one at a time: a second import waits for the first
    (:func:`~numbatraj.io.atomic.publish_lock`), then finds its output (``overwrite=False``:
    :class:`FileExistsError`) or replaces it.
    """
    with publish_lock(out, wait=True, what="import"):
        w = TrajectoryStoreWriter(out, columns, env_id=env_id, attrs=attrs, overwrite=overwrite)
        try:
            yield w
        except BaseException:
            w.abort()
            raise
        try:
            close_with_stats(w)
        except BaseException:
            w.abort()
            raise


def h5_dataset(group: h5py.Group, key: str, where: str) -> h5py.Dataset:
    """``group[key]`` as a dataset, or :class:`SourceFormatError` naming ``where`` and ``key``."""
    obj = group.get(key)
    if obj is None:
        have = ", ".join(sorted(group.keys())) or "nothing"
        raise SourceFormatError(f"{where}: missing dataset {key!r} (the group holds: {have})")
    if not isinstance(obj, h5py.Dataset):
        raise SourceFormatError(f"{where}: {key!r} is a group, expected a dataset")
    return obj


def column_name(*parts: str) -> str:
    """A store column name from source path parts: ``("obs", "agentview")`` -> ``obs.agentview``."""
    name = ".".join(p.strip("/").replace("/", ".") for p in parts if p)
    return re.sub(r"[=,\s]", "_", name)


class SourceAccount:
    """Every dataset and attribute an HDF5 source holds, and which of them an import used:
    what was not used is the manifest's ``skipped`` list, so nothing is dropped unlisted.

    Entry names: a dataset's path, an attribute ``<path>@<name>`` (``@<name>`` alone for the
    file's own attributes).  With ``episode_group`` (a regular expression matching the path
    of one episode's group, e.g. ``data/demo_\\d+``), what lies inside an episode group is
    named relative to it (``obs/agentview_image``, ``@model_file``: the same name for every
    episode) and everything else is rooted with ``/`` (``/mask@note``, ``/@date``).
    """

    def __init__(self, f: h5py.File, episode_group: str | None = None) -> None:
        self._ep = re.compile(f"({episode_group})(/|$)") if episode_group else None
        self._items: dict[str, None] = {}
        self._used: set[str] = set()
        for a in f.attrs:
            self._items[self.name("", a)] = None

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                self._items[self.name(name)] = None
            for a in obj.attrs:
                self._items[self.name(name, a)] = None

        f.visititems(visit)

    def name(self, path: str, attr: str | None = None) -> str:
        """The entry name of dataset/group ``path`` (or of its attribute ``attr``)."""
        path = path.strip("/")
        if self._ep is not None:
            m = self._ep.match(path)
            path = path[m.end():] if m else "/" + path
        return _one_line(path + ("" if attr is None else f"@{attr}")).replace(",", "_")

    def use(self, path: str, *attrs: str) -> None:
        """Mark dataset ``path`` used, or (with ``attrs``) those attributes of ``path``."""
        if attrs:
            self._used.update(self.name(path, a) for a in attrs)
        else:
            self._used.add(self.name(path))

    def use_tree(self, path: str) -> None:
        """Mark everything under group ``path`` (datasets and attributes) used."""
        base = self.name(path)
        self._used.update(
            k for k in self._items
            if k == base or k.startswith(base + "/") or k.startswith(base + "@")
        )

    @property
    def items(self) -> list[str]:
        """Every entry of the source, in the order found."""
        return list(self._items)

    def skipped(self) -> list[str]:
        """The entries not used, in natural order."""
        return sorted_natural(k for k in self._items if k not in self._used)

    def record(self, attrs: dict[str, Any], key: str = "skipped") -> None:
        """Put :meth:`skipped` into manifest ``attrs`` (nothing when nothing was skipped)."""
        skipped = self.skipped()
        if skipped:
            attrs[key] = ",".join(skipped)


#: Errors a reader (h5py, numpy, json, zarr) raises for a source it cannot make sense of;
#: :func:`source_errors` turns them into numbatraj errors naming the source.
_CONTENT_ERRORS = (KeyError, ValueError, TypeError, AttributeError, IndexError)
#: OSErrors that say something about a path, not the content: passed through as they are.
_PATH_ERRORS = (FileExistsError, FileNotFoundError, PermissionError, IsADirectoryError,
                NotADirectoryError, BlockingIOError, InterruptedError)


@contextmanager
def source_errors(source: str | os.PathLike[str]) -> Iterator[None]:
    """Let only numbatraj errors leave an import of ``source`` for bad content.

    Inside the block a raw error of the readers (h5py's ``OSError``/``RuntimeError``/
    ``KeyError``, numpy's ``ValueError`` for a shape that does not fit, a JSON error...)
    becomes :class:`~numbatraj.errors.IntegrityError` (an unreadable, truncated or corrupt
    file; an ``OSError``) or :class:`SourceFormatError` (content of the wrong kind; a
    ``ValueError``), naming ``source`` and keeping the reader's message.  numbatraj errors
    and errors about a path (missing, existing, permissions, a held lock) pass unchanged.
    """
    where = os.fspath(source)
    try:
        yield
    except NumbatrajError:
        raise
    except _PATH_ERRORS:
        raise
    except (OSError, RuntimeError, zipfile.BadZipFile, EOFError) as exc:
        raise IntegrityError(
            f"{where}: cannot be read ({type(exc).__name__}: {exc}); the file is truncated, "
            f"corrupt or not of this format"
        ) from exc
    except _CONTENT_ERRORS as exc:
        raise SourceFormatError(
            f"{where}: unexpected content ({type(exc).__name__}: {exc})"
        ) from exc


def open_source(path: str | os.PathLike[str]) -> h5py.File:
    """``path`` opened read-only (:func:`~numbatraj.io.hdf5.open_h5_read`); a file that is not
    HDF5 or is truncated is :class:`~numbatraj.errors.IntegrityError` (an ``OSError``)
    naming it."""
    try:
        return open_h5_read(path)
    except _PATH_ERRORS:
        raise
    except OSError as exc:  # open_h5_read's message names the file
        raise IntegrityError(str(exc)) from exc
