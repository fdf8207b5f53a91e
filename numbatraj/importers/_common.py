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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import h5py
import numpy as np

from numbatraj._version import __version__
from numbatraj.data.column import ColumnSpec
from numbatraj.data.stats import compute_stats, stats_datasets
from numbatraj.data.writer import TrajectoryStoreWriter
from numbatraj.errors import SourceFormatError
from numbatraj.io.atomic import publish_lock

__all__ = [
    "SourceFormatError",
    "attr_text",
    "column_name",
    "default_out",
    "h5_dataset",
    "natural_key",
    "open_writer",
    "progress",
    "scalar_attrs",
    "sorted_natural",
    "source_attrs",
    "close_with_stats",
    "stats_columns",
    "store_stats",
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
    attrs: Mapping[str, Any], prefix: str, *, skip: Sequence[str] = ()
) -> dict[str, str]:
    """HDF5 attributes as manifest strings under ``prefix``; arrays longer than 64 are skipped.

    JSON strings are re-serialised compactly so that they fit on one manifest line.
    """
    out: dict[str, str] = {}
    for key, value in attrs.items():
        if key in skip:
            continue
        if isinstance(value, np.ndarray) and value.size > 64:
            continue
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


def stats_columns(columns: Mapping[str, ColumnSpec]) -> list[str]:
    """The columns that get statistics: numeric (bool/int/float), not images.

    Image columns -- ``uint8`` with a row of two or more dimensions (``images``, ``pixels``,
    camera columns such as ``obs.agentview_image``) -- are skipped: their per-pixel moments
    are not what a policy normalises with.  Bool columns are included (their statistics are
    those of the column as ``uint8``: ``mean`` is the fraction of true rows).
    """
    out = []
    for name, spec in columns.items():
        dt = np.dtype(spec.dtype)
        if dt.kind not in "biuf":
            continue
        if dt == np.uint8 and len(spec.shape) >= 2:
            continue
        out.append(name)
    return out


#: Memory the statistics of one column may use at close: the column is read back in row
#: slabs and its elements in groups so that the float64 copies stay near this bound.
_STATS_BYTES = 64 << 20


def _column_stats(writer: TrajectoryStoreWriter, name: str, n: int) -> dict[str, np.ndarray]:
    spec = writer.columns[name]
    shape = tuple(spec.shape)
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    itemsize = np.dtype(spec.dtype).itemsize
    slab = max(1, _STATS_BYTES // max(1, size * itemsize))
    group = max(1, _STATS_BYTES // (3 * 8 * n))  # compute_stats' float64 copies of a buffer

    def read(lo: int, hi: int) -> np.ndarray:
        col = writer.read_range(name, lo, hi)
        return col.view(np.uint8) if col.dtype == np.bool_ else col

    if group >= size and n <= slab:
        return compute_stats(read(0, n))
    parts: dict[str, list[np.ndarray]] = {}
    count = np.asarray(n, np.int64)
    for g0 in range(0, size, group):
        g1 = min(size, g0 + group)
        buf = np.empty((n, g1 - g0), np.uint8 if spec.dtype == np.bool_ else spec.dtype)
        for lo in range(0, n, slab):
            hi = min(n, lo + slab)
            buf[lo:hi] = read(lo, hi).reshape(hi - lo, size)[:, g0:g1]
        for key, value in compute_stats(buf).items():
            if key != "count":
                parts.setdefault(key, []).append(value)
        del buf
    out = {key: np.concatenate(v).reshape(shape) for key, v in parts.items()}
    out["count"] = count
    return out


def store_stats(writer: TrajectoryStoreWriter) -> dict[str, np.ndarray]:
    """``stats/<column>/<stat>`` datasets for the columns :func:`stats_columns` selects.

    The values of :func:`~numbatraj.data.stats.compute_stats` over the rows written so far,
    read back from the open writer (:meth:`~TrajectoryStoreWriter.read_range`) in bounded
    slabs; columns without rows get none.
    """
    stats = {}
    n = writer.n_rows
    if n:
        for name in stats_columns(writer.columns):
            stats[name] = _column_stats(writer, name, n)
    return stats_datasets(stats)


def close_with_stats(
    writer: TrajectoryStoreWriter, datasets: Mapping[str, Any] | None = None
) -> None:
    """Close (publish) ``writer`` with :func:`store_stats` stored beside the columns, through
    ``close(datasets=...)``: the store is published once, its statistics under the
    manifest's digests like every other dataset."""
    writer.close(datasets={**(datasets or {}), **store_stats(writer)})


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
    file).  At close the per-column statistics of :func:`store_stats` (numeric non-image
    columns) are written beside the columns, readable as ``TrajectoryStore.stats(column)``.
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
