"""validate_store: one read-only pass that reports every violation it finds."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np

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


def validate_store(path: str | os.PathLike[str]) -> ValidationReport:
    """Check a store without modifying it and report every violation found.

    Checks: the episode index (offsets start at 0 and are the running sum of lengths; lengths
    are positive and sum to the row count), every column's length, the manifest's dtypes and
    shapes against the datasets, the types of the reserved columns, and that every dataset
    reads end to end.  Never repairs anything.
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
        report.n_rows = layout.n_rows
        report.n_episodes = int(layout.lengths.shape[0]) if layout.lengths.ndim == 1 else 0
        report.foreign = layout.foreign
        for name, spec in layout.columns.items():
            if name in RESERVED_COLUMNS:
                problem = _reserved_problem(spec)
                if problem:
                    (report.warnings if layout.foreign else report.errors).append(problem)
        for name, obj in f.items():
            if isinstance(obj, h5py.Dataset) and (name in layout.columns or name in STORE_DATASETS):
                problem = _read_problem(obj)
                if problem:
                    report.errors.append(problem)
        if layout.foreign:
            ignored = [
                k for k, v in f.items()
                if k not in layout.columns and k not in STORE_DATASETS
            ]
            if ignored:
                report.warnings.append(
                    f"top-level entries not recognised as columns (leading axis is not "
                    f"{layout.n_rows} rows, or not a numeric dataset): {', '.join(ignored)}"
                )
    return report
