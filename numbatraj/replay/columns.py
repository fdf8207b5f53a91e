"""The replay's column set: declared specs, uint8 quantisation ranges, and row checks.

A replay column is a :class:`~numbatraj.data.ColumnSpec` plus, optionally, a quantisation
range ``(low, high)``: such a column must be declared float and is stored as uint8 (one
byte per element instead of four for float32), returned by ``sample`` as float32.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from numbatraj._cuda import is_device_array
from numbatraj.data.column import ColumnSpec, check_column_set
from numbatraj.errors import SchemaError

__all__ = ["Quantization", "ReplayColumns"]


@dataclass(frozen=True)
class Quantization:
    """The range ``[low, high]`` a float column is stored in as uint8 codes 0..255."""

    low: float
    high: float

    @property
    def scale(self) -> float:
        """Codes per unit: ``255 / (high - low)``."""
        return 255.0 / (self.high - self.low)

    @property
    def step(self) -> float:
        """Value of one code: ``(high - low) / 255``."""
        return (self.high - self.low) / 255.0

    @property
    def error_bound(self) -> float:
        """Largest round-trip error for a value inside the range (half a step), before the
        float32 rounding of the result."""
        return (self.high - self.low) / 510.0


def _quantization(name: str, spec: ColumnSpec, rng: Any) -> Quantization:
    if spec.dtype.kind != "f":
        raise SchemaError(
            f"column {name!r}: quantisation needs a float column, declared {spec.dtype.name}"
        )
    try:
        low, high = (float(v) for v in rng)
    except (TypeError, ValueError):
        raise SchemaError(
            f"column {name!r}: quantisation range must be (low, high), got {rng!r}"
        ) from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise SchemaError(
            f"column {name!r}: quantisation range ({low!r}, {high!r}) must be finite with "
            f"low < high"
        )
    return Quantization(low, high)


class ReplayColumns:
    """Declared columns of a replay, with the storage dtype of each and the row checks.

    Parameters
    ----------
    columns : iterable of ColumnSpec
        Any column set (obs/action/reward/next_obs/done, qpos/qvel/action, pixels...).
    quantize : mapping of str to (low, high), optional
        Float columns stored as uint8 codes of ``[low, high]``.
    """

    def __init__(
        self, columns: Iterable[ColumnSpec], quantize: Mapping[str, Any] | None = None
    ) -> None:
        self.specs: dict[str, ColumnSpec] = check_column_set(columns)
        self.quant: dict[str, Quantization] = {}
        for name, rng in dict(quantize or {}).items():
            if name not in self.specs:
                raise SchemaError(
                    f"quantize names column {name!r}, which is not declared; declared columns: "
                    f"{', '.join(self.specs)}"
                )
            self.quant[name] = _quantization(name, self.specs[name], rng)
        self.names: tuple[str, ...] = tuple(self.specs)
        self._keys = set(self.specs)
        #: (name, spec, dtype, shape, ndim) per column: the checks of a batch add read
        #: no attribute of the spec
        self._items = tuple((n, s, s.dtype, s.shape, len(s.shape))
                            for n, s in self.specs.items())
        #: (name, dtype, row shape, scalar type or None) per column: what a row given exactly
        #: as stored looks like (``StoreReplay.add`` takes such a row without a copy)
        self.one_row_checks = tuple(
            (n, s.dtype, s.shape, s.dtype.type if s.shape == () else None)
            for n, s in self.specs.items()
        )

    def storage_dtype(self, name: str) -> np.dtype:
        """uint8 for a quantised column, else the declared dtype."""
        return np.dtype(np.uint8) if name in self.quant else self.specs[name].dtype

    def sample_dtype(self, name: str) -> np.dtype:
        """float32 for a quantised column, else the declared dtype."""
        return np.dtype(np.float32) if name in self.quant else self.specs[name].dtype

    def row_elems(self, name: str) -> int:
        return int(np.prod(self.specs[name].shape, dtype=np.int64))

    def check_rows(self, rows: Mapping[str, Any], what: str = "add") -> tuple[dict, int]:
        """Every declared column's rows as an array, and the row count ``n``.

        Each array has shape ``spec.shape`` (one row, ``n = 1``) or ``(n, *spec.shape)``.
        numpy arrays must have exactly the declared dtype (no silent casts); Python and numpy
        scalars are converted when their kind fits the column.  Raises :class:`SchemaError`
        naming the column for a missing or undeclared column, a wrong dtype or shape, or
        columns of different lengths.
        """
        if rows.keys() != self._keys:
            self._raise_names(rows, what)
        out = {}
        n = -1
        for name, spec, dtype, shape, nd in self._items:
            v = rows[name]
            if type(v) is np.ndarray:
                dt = v.dtype
                if dt is not dtype and dt != dtype:
                    raise SchemaError(
                        f"{what}: column {name!r} is {dtype.name}, got {dt.name} (no "
                        f"silent casts: convert with .astype(np.{dtype.name}) if intended)"
                    )
                vs = v.shape
            else:
                v = _coerce(name, spec, v, what)
                vs = tuple(v.shape)
            if len(vs) == nd + 1 and vs[1:] == shape:  # a batch: the common case first
                m = vs[0]
            elif vs == shape:
                m = 1
            else:
                raise SchemaError(
                    f"{what}: column {name!r} rows have shape {shape}, got an array of "
                    f"shape {vs}; expected {shape} (one row) or (n, *{shape})"
                )
            if n < 0:
                n = m
            elif m != n:
                raise SchemaError(
                    f"{what}: column {name!r} has {m} rows but column "
                    f"{self.names[0]!r} has {n}; every column needs the same number of rows"
                )
            out[name] = v
        return out, n

    def _raise_names(self, rows: Mapping[str, Any], what: str) -> None:
        specs = self.specs
        extra = [k for k in rows if k not in specs]
        if extra:
            raise SchemaError(
                f"{what}: column {extra[0]!r} is not declared; declared columns: "
                f"{', '.join(specs)}"
            )
        missing = [k for k in specs if k not in rows]
        raise SchemaError(
            f"{what}: missing column(s) {', '.join(map(repr, missing))}; every declared "
            f"column needs rows ({', '.join(specs)})"
        )


_SCALAR_KINDS = {"b": "biuf", "i": "iuf", "u": "iuf", "f": "f"}


def _check_range(name: str, dt: np.dtype, v: int | float, what: str) -> None:
    """Raise SchemaError when the Python number ``v`` does not fit column ``name``'s dtype
    ``dt`` (an integer outside ``np.iinfo``, or a finite number that would become inf)."""
    lo: int | float
    hi: int | float
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if info.min <= v <= info.max:
            return
        lo, hi = info.min, info.max
    else:
        finfo = np.finfo(dt)
        try:
            x = float(v)
        except OverflowError:  # an int beyond every float
            x = math.inf
        else:
            if not math.isfinite(x):
                return  # nan/inf are stored as such
            with np.errstate(over="ignore"):
                if math.isfinite(dt.type(x)):
                    return
        lo, hi = float(finfo.min), float(finfo.max)
    raise SchemaError(
        f"{what}: column {name!r} is {dt.name}, the value {v!r} is outside its range "
        f"[{lo}, {hi}]"
    )


def _coerce(name: str, spec: ColumnSpec, v: Any, what: str) -> np.ndarray:
    """A scalar or a non-ndarray sequence as an array of the column's dtype.

    numpy scalars of the exact dtype pass; Python scalars are converted when their kind
    fits (bool -> bool/int/float columns, int -> int/float, float -> float).
    """
    if is_device_array(v):  # a device array (StoreReplayGpu): exact dtype, no copy
        if np.dtype(v.dtype) != spec.dtype:
            raise SchemaError(
                f"{what}: column {name!r} is {spec.dtype.name}, got a device array of "
                f"{np.dtype(v.dtype).name}"
            )
        return v
    if isinstance(v, np.generic):
        if v.dtype == spec.dtype:
            return np.asarray(v)
    elif isinstance(v, (bool, int, float)):
        kind = "b" if isinstance(v, bool) else "i" if isinstance(v, int) else "f"
        if spec.dtype.kind in _SCALAR_KINDS[kind]:
            if kind != "b":
                _check_range(name, spec.dtype, v, what)
            with np.errstate(over="ignore"):
                return np.asarray(v, dtype=spec.dtype)
        raise SchemaError(
            f"{what}: column {name!r} is {spec.dtype.name}, got the Python "
            f"{type(v).__name__} {v!r}"
        )
    arr = np.asarray(v)
    if arr.dtype != spec.dtype:
        raise SchemaError(
            f"{what}: column {name!r} is {spec.dtype.name}, got {arr.dtype.name} "
            f"(no silent casts: convert with .astype(np.{spec.dtype.name}) if intended)"
        )
    return arr
