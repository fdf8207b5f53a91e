"""Parquet reading over pyarrow: tables, row counts and columns as NumPy arrays.

Every failure names the file.  A file that pyarrow cannot parse (truncated, overwritten, not
Parquet at all) raises :class:`~numbatraj.errors.IntegrityError`; a column that is absent or
cannot become the requested array raises :class:`~numbatraj.errors.SchemaError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from numbatraj.errors import IntegrityError, SchemaError

__all__ = [
    "column_to_numpy",
    "parquet_column_names",
    "parquet_num_rows",
    "read_parquet",
    "table_to_numpy",
]


def _unreadable(path: str, exc: BaseException) -> IntegrityError:
    return IntegrityError(f"{path!r} is not a readable Parquet file ({type(exc).__name__}: {exc})")


def _require_file(path: str) -> None:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Parquet file {path!r} does not exist")


def parquet_num_rows(path: str | os.PathLike[str]) -> int:
    """Row count from the file footer, without reading any data page."""
    p = os.fspath(path)
    _require_file(p)
    try:
        return int(pq.ParquetFile(p).metadata.num_rows)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(p, exc) from exc


def parquet_column_names(path: str | os.PathLike[str]) -> list[str]:
    """Top-level column names from the file's schema."""
    p = os.fspath(path)
    _require_file(p)
    try:
        return list(pq.ParquetFile(p).schema_arrow.names)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(p, exc) from exc


def read_parquet(path: str | os.PathLike[str], columns: Sequence[str] | None = None) -> pa.Table:
    """Read ``columns`` (all when ``None``) of one Parquet file into an Arrow table.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    SchemaError
        A requested column is not in the file (the message lists those that are).
    IntegrityError
        The file cannot be parsed.
    """
    p = os.fspath(path)
    _require_file(p)
    try:
        pf = pq.ParquetFile(p)
        names = pf.schema_arrow.names
        if columns is not None:
            missing = [c for c in columns if c not in names]
            if missing:
                raise SchemaError(f"{p!r} has no column(s) {missing}; its columns are {names}")
        return pf.read(columns=list(columns) if columns is not None else None)
    except SchemaError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(p, exc) from exc


def column_to_numpy(column: Any, *, dtype: Any = None, where: str = "column") -> np.ndarray:
    """An Arrow column as a NumPy array.

    Scalars give ``(n,)``; fixed-size lists and lists whose rows all have one length give
    ``(n, k)``.  Nulls are refused.  ``dtype`` converts the values (``None`` keeps Arrow's).

    Parameters
    ----------
    column : pyarrow.Array or pyarrow.ChunkedArray
    dtype : numpy dtype-like, optional
    where : str
        How messages name the column (``"'action' in 'data/file-000.parquet'"``).
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if arr.null_count:
        raise SchemaError(f"{where} holds {arr.null_count} null value(s)")
    typ = arr.type
    if pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ):
        n = len(arr)
        if pa.types.is_fixed_size_list(typ):
            width = typ.list_size
        else:
            offsets = np.asarray(arr.offsets)
            sizes = np.diff(offsets)
            if n and np.any(sizes != sizes[0]):
                raise SchemaError(
                    f"{where} has list rows of different lengths "
                    f"({int(sizes.min())}..{int(sizes.max())})"
                )
            width = int(sizes[0]) if n else 0
        flat = arr.flatten()
        if flat.null_count:
            raise SchemaError(f"{where} holds null values inside its lists")
        values = flat.to_numpy(zero_copy_only=False)
        out = np.asarray(values).reshape(n, width)
    else:
        out = np.asarray(arr.to_numpy(zero_copy_only=False))
    if dtype is not None:
        target = np.dtype(dtype)
        if out.dtype.kind not in "biuf":
            raise SchemaError(f"{where} is {typ}, expected numbers convertible to {target}")
        out = out.astype(target, copy=False)
    return out


def table_to_numpy(
    table: pa.Table, dtypes: dict[str, Any], *, where: str = "table"
) -> dict[str, np.ndarray]:
    """Several columns of ``table`` through :func:`column_to_numpy`, keyed by name."""
    out: dict[str, np.ndarray] = {}
    for name, dt in dtypes.items():
        if name not in table.column_names:
            raise SchemaError(
                f"{where} has no column {name!r}; its columns are {table.column_names}"
            )
        out[name] = column_to_numpy(table.column(name), dtype=dt, where=f"{name!r} in {where}")
    return out
