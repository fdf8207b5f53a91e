"""What a window batch holds: the fields resolved from a store and the loader's arguments.

:func:`resolve_fields` turns ``deltas`` / ``delta_timestamps`` / ``columns`` / ``normalize``
/ ``images`` into a list of :class:`Field`, checking every name and value against the store
first, so a mistake is one clear error before any data is loaded.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from numbatraj.data.store import TrajectoryStore
from numbatraj.errors import SchemaError

__all__ = [
    "NORM_EPS",
    "NORM_MODES",
    "TOLERANCE_S",
    "Field",
    "aliases",
    "delta_indices",
    "resolve_fields",
]

#: LeRobot's tolerance on ``delta_timestamps``: ``|ts * fps - round(ts * fps)| / fps <= 1e-4``.
TOLERANCE_S = 1e-4

#: LeRobot's epsilon in ``(x - mean) / (std + eps)`` and ``(x - min) / (max - min + eps)``.
NORM_EPS = 1e-8

NORM_MODES = ("mean_std", "min_max")
IMAGE_MODES = ("uint8", "float")


@dataclass(frozen=True)
class Field:
    """One key of a batch.

    ``column`` is the store column it is gathered from and ``camera`` the camera slot for a
    LeRobot ``observation.images.<cam>`` alias (None otherwise).  ``deltas`` (int64
    ``(T,)``) makes it a window field, shaped ``(B, T, *row_shape)``.  ``mode`` is ``"raw"``
    (the column's dtype, bit for bit), ``"mean_std"``/``"min_max"`` (float32, normalised) or
    ``"unit"`` (uint8 images as float32 in [0, 1]).  ``params`` holds the float32 ``a, s, c,
    d`` of ``((x - a) / s) * c + d`` for the normalising modes.
    """

    key: str
    column: str
    camera: int | None
    row_shape: tuple[int, ...]
    dtype: np.dtype
    deltas: np.ndarray | None
    mode: str
    params: tuple[np.ndarray, ...] | None = None

    @property
    def shape_tail(self) -> tuple[int, ...]:
        """``(T, *row_shape)`` for a window field, ``row_shape`` otherwise."""
        if self.deltas is None:
            return self.row_shape
        return (int(self.deltas.shape[0]), *self.row_shape)


def aliases(store: TrajectoryStore) -> dict[str, tuple[str, int | None]]:
    """LeRobot feature name -> ``(store column, camera slot)`` on a store imported from LeRobot.

    Empty for other stores.  ``observation.state`` is ``qpos``, ``action`` is ``action`` and
    ``observation.images.<cam>`` is slot ``i`` of ``images`` (cameras in the order the
    manifest's ``attr.cameras`` lists them, which is the import's sorted order).
    """
    m = store.manifest
    if not m.get("attr.source_format", "").startswith("lerobot"):
        return {}
    out: dict[str, tuple[str, int | None]] = {}
    if "qpos" in store:
        out["observation.state"] = ("qpos", None)
    cams = [c for c in m.get("attr.cameras", "").split(",") if c]
    if "images" in store:
        for i, cam in enumerate(cams):
            name = cam if cam.startswith("observation.images.") else f"observation.images.{cam}"
            out[name] = ("images", i)
    return out


def _names_hint(store: TrajectoryStore, alias: Mapping[str, Any]) -> str:
    text = f"columns: {', '.join(store.columns)}"
    if alias:
        text += f"; LeRobot names: {', '.join(alias)}"
    return text


def _offsets(key: str, values: Any) -> np.ndarray:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise SchemaError(f"deltas[{key!r}] must be a sequence of int frame offsets, "
                          f"got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise SchemaError(
                f"deltas[{key!r}] holds {v!r} ({type(v).__name__}); frame offsets must be "
                f"integers (use delta_timestamps for offsets in seconds)"
            )
        out.append(int(v))
    if not out:
        raise SchemaError(f"deltas[{key!r}] is empty; give at least one frame offset (0 = now)")
    return np.asarray(out, dtype=np.int64)


def delta_indices(delta_timestamps: Mapping[str, Any], fps: float | None,
                  where: str = "the store") -> dict[str, list[int]]:
    """``delta_timestamps`` (seconds) as frame offsets, LeRobot's way: ``round(ts * fps)``.

    Every ``ts`` must satisfy ``|ts * fps - round(ts * fps)| / fps <= 1e-4`` (LeRobot's
    ``tolerance_s``); otherwise :class:`SchemaError` lists the offending values.
    """
    if fps is None:
        raise SchemaError(
            f"delta_timestamps needs the store's fps, and {where} records none (manifest "
            f"attr.fps); give frame offsets with deltas= instead"
        )
    out: dict[str, list[int]] = {}
    for key, values in delta_timestamps.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise SchemaError(f"delta_timestamps[{key!r}] must be a sequence of seconds")
        ts = [float(v) for v in values]
        bad = [t for t in ts if not math.isfinite(t)
               or abs(t * fps - round(t * fps)) / fps > TOLERANCE_S]
        if bad:
            raise SchemaError(
                f"delta_timestamps[{key!r}] = {bad} are not multiples of 1/{fps:g} s within "
                f"LeRobot's tolerance of {TOLERANCE_S:g} s"
            )
        out[key] = [int(round(t * fps)) for t in ts]
    return out


def _norm_params(store: TrajectoryStore, key: str, column: str, mode: str,
                 row_shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    stats = store.stats(column)
    need = ("mean", "std") if mode == "mean_std" else ("min", "max")
    for s in need:
        if s not in stats:
            raise SchemaError(f"normalize[{key!r}] = {mode!r} needs stats {s!r} of column "
                              f"{column!r}; the store records {', '.join(stats) or 'none'}")
        if tuple(np.shape(stats[s])) != row_shape:
            raise SchemaError(
                f"stats {s!r} of column {column!r} have shape {np.shape(stats[s])}, expected the "
                f"row shape {row_shape}"
            )
    eps = np.float32(NORM_EPS)
    if mode == "mean_std":
        a = stats["mean"].astype(np.float32)
        scale = stats["std"].astype(np.float32) + eps
        c, d = np.float32(1), np.float32(0)
    else:
        a = stats["min"].astype(np.float32)
        scale = (stats["max"].astype(np.float32) - a) + eps
        c, d = np.float32(2), np.float32(-1)
    n = int(np.prod(row_shape, dtype=np.int64))
    return (
        np.ascontiguousarray(a.reshape(n)),
        np.ascontiguousarray(scale.reshape(n)),
        np.full(n, c, np.float32),
        np.full(n, d, np.float32),
    )


def _is_image(dtype: np.dtype, row_shape: tuple[int, ...]) -> bool:
    return dtype == np.uint8 and len(row_shape) >= 3


def resolve_fields(
    store: TrajectoryStore,
    *,
    deltas: Mapping[str, Any] | None = None,
    delta_timestamps: Mapping[str, Any] | None = None,
    columns: Iterable[str] | None = None,
    normalize: Mapping[str, str] | None = None,
    images: str = "uint8",
) -> list[Field]:
    """The fields of a batch, in order: ``columns`` (default: every store column), then any
    ``deltas`` key not among them.  Raises :class:`SchemaError` naming the culprit."""
    if deltas is not None and delta_timestamps is not None:
        raise SchemaError("give deltas (frames) or delta_timestamps (seconds), not both")
    if images not in IMAGE_MODES:
        raise SchemaError(f"images={images!r}; expected one of {', '.join(IMAGE_MODES)}")
    alias = aliases(store)

    def lookup(what: str, name: Any) -> tuple[str, int | None]:
        if isinstance(name, str):
            if name in store:
                return name, None
            if name in alias:
                return alias[name]
        raise SchemaError(f"{what} names {name!r}, which {store.path!r} does not have; "
                          f"{_names_hint(store, alias)}")

    if delta_timestamps is not None:
        for key in delta_timestamps:
            lookup("delta_timestamps", key)
        windows = {k: np.asarray(v, np.int64) for k, v in
                   delta_indices(delta_timestamps, store.fps, repr(store.path)).items()}
    else:
        windows = {}
        for key, values in (deltas or {}).items():
            lookup("deltas", key)
            windows[key] = _offsets(key, values)
    if columns is None:
        keys = list(store.columns)
    else:
        if isinstance(columns, str):
            raise SchemaError(f"columns must be a sequence of names, got the string {columns!r}")
        keys = list(columns)
    keys += [k for k in windows if k not in keys]
    if not keys:
        raise SchemaError("columns is empty and no deltas are given; name at least one column")
    norm = dict(normalize or {})
    for key, mode in norm.items():
        lookup("normalize", key)
        if key not in keys:
            raise SchemaError(f"normalize names {key!r}, which is not among the batch's keys "
                              f"({', '.join(keys)})")
        if mode not in NORM_MODES:
            raise SchemaError(f"normalize[{key!r}] = {mode!r}; expected one of "
                              f"{', '.join(NORM_MODES)}")
    fields = []
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise SchemaError(f"columns names {key!r} twice")
        seen.add(key)
        column, camera = lookup("columns", key)
        spec = store.spec(column)
        row_shape = spec.shape if camera is None else spec.shape[1:]
        mode, params, dtype = "raw", None, spec.dtype
        if key in norm:
            if _is_image(spec.dtype, row_shape):
                raise SchemaError(f"normalize[{key!r}]: {key!r} is an image column; use "
                                  f"images='float' for [0, 1] and normalise in the model")
            mode = norm[key]
            params = _norm_params(store, key, column, mode, spec.shape)
            if camera is not None:  # pragma: no cover - cameras are images, refused above
                raise SchemaError(f"normalize[{key!r}]: a camera slot cannot be normalised")
            dtype = np.dtype(np.float32)
        elif images == "float" and _is_image(spec.dtype, row_shape):
            mode, dtype = "unit", np.dtype(np.float32)
        fields.append(Field(key, column, camera, tuple(row_shape), np.dtype(dtype),
                            windows.get(key), mode, params))
    return fields


def describe_aliases(store: TrajectoryStore) -> str:
    """One line per LeRobot alias of ``store`` (for errors and ``repr``)."""
    return json.dumps({k: list(v) for k, v in aliases(store).items()})
