"""validate_store: one read-only pass that reports every violation it finds."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from numbatraj.data.checksums import CHECKSUM_GROUP, ColumnDigests, load_digests, verify_chunks
from numbatraj.data.column import RESERVED_COLUMNS, STORE_DATASETS, ColumnSpec
from numbatraj.data.layout import inspect_layout
from numbatraj.errors import NumbatrajError
from numbatraj.io.hdf5 import open_h5_read

__all__ = ["ValidationReport", "validate_store"]

_SLAB_BYTES = 64 << 20


@dataclass
class ValidationReport:
    """The outcome of :func:`validate_store`.  ``ok`` is true when ``errors`` is empty."""

    path: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    n_rows: int = 0
    n_episodes: int = 0
    foreign: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors

    def __str__(self) -> str:
        head = f"{self.path}: " + (
            "ok" if self.ok else f"{len(self.errors)} error(s)"
        ) + f" ({self.n_rows} rows, {self.n_episodes} episodes" + (
            ", foreign file)" if self.foreign else ")"
        )
        lines = [head]
        lines += [f"  error: {e}" for e in self.errors]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _reserved_problem(spec: ColumnSpec) -> str | None:
    dt, shape = spec.dtype, spec.shape
    if spec.name == "reward" and (dt.kind != "f" or shape != ()):
        return f"reserved column 'reward' should be a float scalar per row, is {dt.name} {shape}"
    if spec.name in ("done", "truncated") and (shape != () or dt.kind not in "biu"):
        return f"reserved column {spec.name!r} should be a bool-like scalar, is {dt.name} {shape}"
    if spec.name == "action" and dt.kind not in "iuf":
        return f"reserved column 'action' should be numeric, is {dt.name}"
    return None


def _read_problem(ds: h5py.Dataset) -> str | None:
    """Read ``ds`` end to end in slabs; return what went wrong, if anything."""
    n = ds.shape[0] if ds.ndim else 0
    row_bytes = max(1, ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64)))
    step = max(1, _SLAB_BYTES // row_bytes)
    try:
        if ds.ndim == 0:
            ds[()]
        for start in range(0, n, step):
            ds[start : min(n, start + step)]
    except Exception as exc:  # an unreadable chunk, a missing filter plugin...
        return f"dataset {ds.name.lstrip('/')!r} cannot be read: {type(exc).__name__}: {exc}"
    return None


def _chunk_problems(
    ds: h5py.Dataset, name: str, cd: ColumnDigests, n_rows: int
) -> list[str]:
    """Every chunk of column ``name`` that fails its digest or cannot be decoded."""
    c = cd.chunk_rows
    row_bytes = max(1, ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64)))
    per_slab = max(1, _SLAB_BYTES // max(1, row_bytes * c))
    n_chunks = cd.digests.size
    out: list[str] = []

    def report(k: int, what: str) -> None:
        lo, hi = cd.rows(k, n_rows)
        out.append(f"column {name!r} rows {lo}..{hi - 1} (chunk {k}) {what}")

    for k0 in range(0, n_chunks, per_slab):
        k1 = min(n_chunks, k0 + per_slab)
        lo, hi = k0 * c, min(n_rows, k1 * c)
        buf = np.empty((hi - lo, *ds.shape[1:]), ds.dtype)
        try:
            ds.read_direct(buf, source_sel=np.s_[lo:hi])
        except Exception:  # noqa: BLE001 - find which chunk(s), one at a time
            for k in range(k0, k1):
                a, b = cd.rows(k, n_rows)
                one = np.empty((b - a, *ds.shape[1:]), ds.dtype)
                try:
                    ds.read_direct(one, source_sel=np.s_[a:b])
                except Exception as exc:  # noqa: BLE001 - reported
                    report(k, f"cannot be decoded: {type(exc).__name__}: {exc}")
                    continue
                for kk, _, _ in verify_chunks(name, cd, k, one, n_rows):
                    report(kk, "fails its checksum")
            continue
        for k, _, _ in verify_chunks(name, cd, k0, buf, n_rows):
            report(k, "fails its checksum")
    return out


def validate_store(path: str | os.PathLike[str]) -> ValidationReport:
    """Check a store without modifying it and report every violation found.

    Checks: the episode index (offsets start at 0 and are the running sum of lengths; lengths
    are positive and sum to the row count), every column's length, the manifest's dtypes and
    shapes against the datasets, the types of the reserved columns, the manifest digest and
    every dataset digest it records, and every chunk of every column against its digest
    (each failing chunk reported with its column and rows), and that every dataset reads
    end to end.  Never repairs anything.
    """
    report = ValidationReport(path=os.fspath(path))
    try:
        f = open_h5_read(path)
    except OSError as exc:
        report.errors.append(str(exc))
        return report
    with f:
        try:
            layout, problems = inspect_layout(f, repr(report.path))
        except NumbatrajError as exc:
            report.errors.append(str(exc))
            return report
        except Exception as exc:
            report.errors.append(f"cannot read the store's metadata: {type(exc).__name__}: {exc}")
            return report
        report.errors.extend(problems)
        try:
            raw = f["__manifest__"][()] if "__manifest__" in f else None
            digests, more = load_digests(f, layout.manifest, layout.columns, layout.n_rows, raw)
        except Exception as exc:  # noqa: BLE001 - reported
            digests, more = {}, [f"cannot read the checksums: {type(exc).__name__}: {exc}"]
        report.errors.extend(more)
        if layout.manifest and layout.manifest.get("checksums", "none") == "none" \
                and not layout.foreign and layout.manifest.get("format_version") != "1":
            report.warnings.append("written with checksums=False: column data is unchecked")
        report.n_rows = layout.n_rows
        report.n_episodes = int(layout.lengths.shape[0]) if layout.lengths.ndim == 1 else 0
        report.foreign = layout.foreign
        for name, spec in layout.columns.items():
            if name in RESERVED_COLUMNS:
                problem = _reserved_problem(spec)
                if problem:
                    (report.warnings if layout.foreign else report.errors).append(problem)
        try:
            entries = list(f.items())
        except Exception as exc:  # noqa: BLE001 - reported
            report.errors.append(f"cannot list the store's datasets: {type(exc).__name__}: {exc}")
            entries = []
        for name, obj in entries:
            if not isinstance(obj, h5py.Dataset):
                continue
            if name in digests:
                report.errors.extend(_chunk_problems(obj, name, digests[name], layout.n_rows))
            elif name in layout.columns or name in STORE_DATASETS:
                problem = _read_problem(obj)
                if problem:
                    report.errors.append(problem)
        if layout.foreign:
            ignored = [
                k for k, v in entries
                if k not in layout.columns and k not in STORE_DATASETS and k != CHECKSUM_GROUP
            ]
            if ignored:
                report.warnings.append(
                    f"top-level entries not recognised as columns (leading axis is not "
                    f"{layout.n_rows} rows, or not a numeric dataset): {', '.join(ignored)}"
                )
    return report
