"""Column declarations: :class:`ColumnSpec` and the rules for names and dtypes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from numbatraj.errors import SchemaError
from numbatraj.io.hdf5 import COMPRESSIONS

__all__ = [
    "ColumnSpec",
    "RESERVED_COLUMNS",
    "STORE_DATASETS",
    "check_column_set",
    "recovered_spec",
]

#: Datasets the store writes itself; a column may not take these names.
STORE_DATASETS: frozenset[str] = frozenset({"ep_len", "ep_offset", "__manifest__"})

#: Names with a fixed meaning, type-checked when declared.
RESERVED_COLUMNS: frozenset[str] = frozenset({"action", "reward", "done", "truncated"})

_ALLOWED_KINDS = "biuf"  # bool, signed int, unsigned int, float

#: Every character str.splitlines() breaks on; none may appear in a manifest key or value.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@dataclass(frozen=True, init=False)
class ColumnSpec:
    """One named column of a trajectory store.

    Parameters
    ----------
    name : str
        Dataset name in the file.  No ``/``, not ``ep_len``/``ep_offset``/``__manifest__``.
    dtype : numpy dtype-like
        Element type: bool, signed/unsigned integer or float.
    shape : tuple of int
        Shape of one row: ``()`` for a scalar (a reward), ``(26,)`` for a state vector,
        ``(n_cameras, 3, H, W)`` for images.
    compression : {None, "gzip", "lz4", "zstd", "blosc"}
        Per-column opt-in; off by default (see docs/store.md for the measurements).
    compression_level : int, optional
        Codec level where the codec has one.
    """

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    compression: str | None
    compression_level: int | None

    def __init__(
        self,
        name: str,
        dtype: DTypeLike = np.float32,
        shape: int | Sequence[int] = (),
        compression: str | None = None,
        compression_level: int | None = None,
    ) -> None:
        # a hand-written __init__ so the annotation says what is accepted (any dtype-like,
        # an int or sequence of ints) while the attributes hold the coerced values
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "compression", compression)
        object.__setattr__(self, "compression_level", compression_level)
        self.__post_init__()

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name:
            raise SchemaError(f"column name must be a non-empty str, got {name!r}")
        if "/" in name:
            raise SchemaError(f"column name {name!r} contains '/', which HDF5 reads as a group")
        if name in STORE_DATASETS or name.startswith("__"):
            raise SchemaError(
                f"column name {name!r} clashes with the store's own datasets "
                f"({', '.join(sorted(STORE_DATASETS))}) or the reserved '__' prefix"
            )
        if any(ch in name for ch in "=," + LINE_BREAKS):
            raise SchemaError(f"column name {name!r} may not contain '=', ',' or a line break")
        try:
            dt = np.dtype(self.dtype)
        except TypeError as exc:
            raise SchemaError(f"column {name!r}: {self.dtype!r} is not a numpy dtype") from exc
        if dt.kind not in _ALLOWED_KINDS or dt.fields is not None or dt.subdtype is not None:
            raise SchemaError(
                f"column {name!r}: dtype {dt} is not supported; expected bool, integer or float"
            )
        object.__setattr__(self, "dtype", dt.newbyteorder("=") if dt.byteorder == ">" else dt)
        shape = self.shape
        if isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        try:
            shape = tuple(int(s) for s in shape)
        except TypeError as exc:
            raise SchemaError(
                f"column {name!r}: shape {self.shape!r} is not a tuple of int"
            ) from exc
        if any(s <= 0 for s in shape):
            raise SchemaError(f"column {name!r}: row shape {shape} has a non-positive extent")
        object.__setattr__(self, "shape", shape)
        if self.compression is not None and self.compression not in COMPRESSIONS:
            raise SchemaError(
                f"column {name!r}: compression {self.compression!r} is not one of "
                f"{', '.join(map(repr, COMPRESSIONS))} or None"
            )
        _check_reserved(name, self.dtype, shape)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64)))

    def describe(self) -> str:
        """``'float32 (26,)'`` style summary."""
        return f"{self.dtype.name} {self.shape}"


def _check_reserved(name: str, dt: np.dtype[Any], shape: tuple[int, ...]) -> None:
    if name == "reward":
        if dt.kind != "f" or shape != ():
            raise SchemaError(
                f"reserved column 'reward' must be a float scalar per row, "
                f"declared {dt.name} with row shape {shape}"
            )
    elif name in ("done", "truncated"):
        if shape != () or not (dt.kind == "b" or dt in (np.dtype(np.uint8), np.dtype(np.int8))):
            raise SchemaError(
                f"reserved column {name!r} must be a bool-like scalar per row "
                f"(bool, uint8 or int8), declared {dt.name} with row shape {shape}"
            )
    elif name == "action":
        if dt.kind not in "iuf":
            raise SchemaError(
                f"reserved column 'action' must be numeric (integer or float), declared {dt.name}"
            )


def check_column_set(columns: Any) -> dict[str, ColumnSpec]:
    """Validate a sequence of :class:`ColumnSpec` and return it as an ordered dict."""
    if isinstance(columns, ColumnSpec):
        columns = [columns]
    out: dict[str, ColumnSpec] = {}
    for c in columns:
        if not isinstance(c, ColumnSpec):
            raise SchemaError(
                f"columns must be ColumnSpec instances, got {type(c).__name__}: {c!r}"
            )
        if c.name in out:
            raise SchemaError(f"column {c.name!r} is declared twice")
        out[c.name] = c
    if not out:
        raise SchemaError("a store needs at least one column")
    return out


def recovered_spec(
    name: str, dtype: Any, shape: tuple[int, ...], compression: str | None
) -> ColumnSpec:
    """A spec for a dataset found in a file we did not write: described, not policed.

    Foreign files may use names or types our writer would refuse (an integer ``reward``);
    they are still readable, so their specs skip the declaration rules.
    """
    spec = object.__new__(ColumnSpec)
    object.__setattr__(spec, "name", name)
    object.__setattr__(spec, "dtype", np.dtype(dtype))
    object.__setattr__(spec, "shape", tuple(int(s) for s in shape))
    object.__setattr__(spec, "compression", compression)
    object.__setattr__(spec, "compression_level", None)
    return spec
