"""The parameters of a :class:`~numbatraj.lerobot.write.LeRobotWriter`: :class:`WriterSettings`.

One frozen dataclass, checked and normalised when it is made, so that the constructor and
:meth:`~numbatraj.lerobot.write.LeRobotWriter.resume` (which fills the codec, CRF and file
sizes from the directory) build a writer from the same checked values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import numbatraj.lerobot.schema as S
from numbatraj.errors import SchemaError

__all__ = ["FEATURE_DTYPES", "ExtraSpec", "WriterSettings", "extra_features"]

#: dtypes an extra feature may have: the ones the importer stores as a column.
FEATURE_DTYPES: frozenset[str] = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
})
#: Feature names the writer fills itself (plus every camera's key).
RESERVED_FEATURES: frozenset[str] = frozenset({S.ACTION_KEY, S.STATE_KEY, *S.FRAME_COLUMNS})

#: One extra feature: ``(name, dtype, shape)`` (shape as declared in info.json, ``(1,)`` for
#: a scalar).
ExtraSpec = tuple[str, str, tuple[int, ...]]


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise SchemaError(f"extra feature {name!r}: shape {shape!r} is not a tuple of sizes")
    if len(shape) == 0:
        return (1,)  # a scalar, declared as LeRobot declares one: shape [1]
    dims = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise SchemaError(
                f"extra feature {name!r}: shape {tuple(shape)!r} must hold positive sizes"
            )
        dims.append(int(d))
    if len(dims) > 1:
        # LeRobot reads a 2-D feature as a nested Array2D column; only scalars and vectors
        # are written (a fixed-size list each), so its loader and the importer agree
        raise SchemaError(
            f"extra feature {name!r}: shape {tuple(dims)!r}; extra features are scalars or "
            f"vectors (shape (), (1,) or (n,)); flatten it to ({int(np.prod(dims))},)"
        )
    return tuple(dims)


def extra_features(features: Any, camera_keys: tuple[str, ...] = ()) -> tuple[ExtraSpec, ...]:
    """``features`` (``name -> (dtype, shape)`` or ``name -> {"dtype", "shape"}`` as in
    ``meta/info.json``) checked and normalised, in the given order.

    Raises
    ------
    SchemaError
        A name that is reserved (state, action, a camera, the bookkeeping columns) or
        cannot be a store column, an unsupported dtype, a bad shape; the feature is named.
    """
    if features is None:
        return ()
    if not isinstance(features, Mapping):
        raise SchemaError(
            f"features must be a mapping name -> (dtype, shape), got {type(features).__name__}"
        )
    out: list[ExtraSpec] = []
    for name, ft in features.items():
        if not isinstance(name, str) or not name:
            raise SchemaError(f"extra feature names must be non-empty strings, got {name!r}")
        if name in RESERVED_FEATURES or name in camera_keys or name.startswith(
            "observation.images."
        ):
            raise SchemaError(
                f"extra feature {name!r} clashes with a feature the writer fills itself "
                f"(state, action, the cameras, {sorted(S.FRAME_COLUMNS)})"
            )
        if any(c in name for c in ",=/") or name != name.strip():
            raise SchemaError(
                f"extra feature {name!r} cannot be a column name (',', '=', '/' or "
                f"surrounding spaces)"
            )
        if isinstance(ft, Mapping):
            dtype, shape = ft.get("dtype"), ft.get("shape")
        elif isinstance(ft, (tuple, list)) and len(ft) == 2:
            dtype, shape = ft
        else:
            raise SchemaError(
                f"extra feature {name!r} is {ft!r}; expected (dtype, shape) or "
                f"{{'dtype': ..., 'shape': ...}}"
            )
        try:
            dt = np.dtype(dtype).name if dtype is not None else None
        except TypeError:
            dt = None
        if dt not in FEATURE_DTYPES:
            raise SchemaError(
                f"extra feature {name!r} has dtype {dtype!r}; expected one of "
                f"{sorted(FEATURE_DTYPES)}"
            )
        out.append((name, dt, _shape(name, shape)))
    return tuple(out)


def _camera_key(name: str) -> str:
    # as numbatraj.lerobot._tables.camera_key (kept free of its pyarrow import)
    return name if name.startswith("observation.") else "observation.images." + name


@dataclass(frozen=True)
class WriterSettings:
    """The parameters of a :class:`LeRobotWriter`, checked and normalised (see the class for
    their meaning).  :meth:`LeRobotWriter.resume` fills the ones it leaves open from the
    directory."""

    root: str
    fps: int
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    cameras: tuple[str, ...]
    height: int
    width: int
    checkpoint: bool = True
    codec: str = "libsvtav1"
    video_mb: float = 100
    data_mb: float = 100
    robot_type: str | None = None
    crf: int | None = None
    #: Extra features, normalised by :func:`extra_features` (a mapping is accepted).
    features: Any = ()

    def __post_init__(self) -> None:
        fps, height, width = self.fps, self.height, self.width
        if isinstance(fps, bool) or int(fps) != fps or fps <= 0:
            raise SchemaError(f"fps must be a positive whole number, got {fps!r}")
        if height < 1 or width < 1:
            raise SchemaError(f"height and width must be positive, got {height}x{width}")
        for what, names in (("state_names", self.state_names), ("action_names", self.action_names)):
            if len(names) == 0 or len(set(names)) != len(names):
                raise SchemaError(f"{what} must be non-empty and unique, got {list(names)}")
        if len(self.cameras) == 0 or len(set(self.cameras)) != len(self.cameras):
            # At least one: numbatraj's importer stores an images column (no zero extent).
            raise SchemaError(
                f"camera names must be non-empty and unique, got {list(self.cameras)}"
            )
        if not self.video_mb > 0 or not self.data_mb > 0:
            raise SchemaError(
                f"video_mb and data_mb must be positive, got {self.video_mb}, {self.data_mb}"
            )
        normal = {
            "root": os.path.abspath(os.fspath(self.root)),
            "fps": int(fps),
            "state_names": tuple(str(n) for n in self.state_names),
            "action_names": tuple(str(n) for n in self.action_names),
            "cameras": tuple(str(c) for c in self.cameras),
            "height": int(height),
            "width": int(width),
            "checkpoint": bool(self.checkpoint),
            "features": extra_features(
                dict((n, (d, s)) for n, d, s in self.features)
                if isinstance(self.features, tuple) else self.features,
                tuple(_camera_key(c) for c in self.cameras),
            ),
        }
        for name, value in normal.items():  # a frozen dataclass normalises through this door
            object.__setattr__(self, name, value)
