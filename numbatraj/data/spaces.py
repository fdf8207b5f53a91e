"""Gymnasium spaces as store columns: the one mapping the recorder and the replay share.

gymnasium is imported lazily (the ``gym`` extra); nothing here runs at import time.

=================  ===========================  ==========================================
space              column(s)                    dtype, row shape
=================  ===========================  ==========================================
``Box``            ``<name>``                   the box's dtype, ``box.shape``
``Discrete``       ``<name>``                   int64, ``()`` (the value itself, ``start``
                                                included)
``MultiDiscrete``  ``<name>``                   int64, ``nvec.shape``
``MultiBinary``    ``<name>``                   int8, ``(n,)`` or ``n`` as a shape
``Dict``           ``<name>.<key>`` per key     each sub-space's mapping, keys in the
                                                space's order, nested dicts ``a.b.c``
``Tuple``          ``<name>.<i>`` per element   each sub-space's mapping, ``i`` from 0
=================  ===========================  ==========================================

Any other space (``Text``, ``Graph``, ``Sequence``...) raises :class:`SchemaError`.
:func:`flatten` turns one sample (or a batch, with ``batch=True``) into the arrays of those
columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import SchemaError

__all__ = ["columns_from_spaces", "flatten", "space_columns"]


def _leaves(space: Any, name: str) -> list[tuple[str, Any]]:
    """``(column name, leaf space)`` pairs of ``space`` in column order."""
    from gymnasium import spaces as gs

    if isinstance(space, gs.Dict):
        out: list[tuple[str, Any]] = []
        for key, sub in space.spaces.items():
            out += _leaves(sub, f"{name}.{key}")
        return out
    if isinstance(space, gs.Tuple):
        out = []
        for i, sub in enumerate(space.spaces):
            out += _leaves(sub, f"{name}.{i}")
        return out
    if isinstance(space, (gs.Box, gs.Discrete, gs.MultiDiscrete, gs.MultiBinary)):
        return [(name, space)]
    raise SchemaError(
        f"space {name!r} is a {type(space).__name__}; a store column maps Box, Discrete, "
        f"MultiDiscrete, MultiBinary, and Dict / Tuple of them"
    )


def _spec(name: str, space: Any) -> ColumnSpec:
    from gymnasium import spaces as gs

    if isinstance(space, gs.Box):
        return ColumnSpec(name, np.dtype(space.dtype), tuple(space.shape))
    if isinstance(space, gs.Discrete):
        return ColumnSpec(name, np.dtype(np.int64), ())
    if isinstance(space, gs.MultiDiscrete):
        return ColumnSpec(name, np.dtype(np.int64), tuple(space.nvec.shape))
    return ColumnSpec(name, np.dtype(np.int8), tuple(space.shape))  # MultiBinary


def space_columns(space: Any, name: str) -> list[ColumnSpec]:
    """The columns one space maps to, named from ``name`` (see the module table)."""
    return [_spec(n, leaf) for n, leaf in _leaves(space, name)]


def columns_from_spaces(observation_space: Any, action_space: Any, *,
                        obs: str = "obs", action: str = "action",
                        extra: Mapping[str, tuple[Any, tuple[int, ...]]] | None = None,
                        ) -> list[ColumnSpec]:
    """Columns for transitions of an env: the observation's, the action's, then
    ``reward`` float32, ``done`` bool and ``truncated`` bool, then ``extra``
    (``{name: (dtype, shape)}``, e.g. ``{"next_obs": ...}`` built by the caller)."""
    cols = space_columns(observation_space, obs) + space_columns(action_space, action)
    cols += [ColumnSpec("reward", np.dtype(np.float32), ()),
             ColumnSpec("done", np.dtype(np.bool_), ()),
             ColumnSpec("truncated", np.dtype(np.bool_), ())]
    for n, (dt, shape) in (extra or {}).items():
        cols.append(ColumnSpec(n, np.dtype(dt), tuple(shape)))
    return cols


def _pick(value: Any, path: list[str], whole: str) -> Any:
    for key in path:
        try:
            value = value[int(key)] if isinstance(value, tuple) else value[key]
        except (KeyError, IndexError, TypeError) as exc:
            raise SchemaError(f"{whole}: the value has no element {key!r}") from exc
    return value


def flatten(space: Any, value: Any, name: str, *, batch: bool = False) -> dict[str, np.ndarray]:
    """The arrays of ``value`` (a sample of ``space``) per column of :func:`space_columns`.

    Each array has the column's dtype and shape ``(1, *shape)``, or ``(n, *shape)`` for a
    batch of ``n`` samples (``batch=True``: a vector env's stacked observations).
    """
    out: dict[str, np.ndarray] = {}
    for col, leaf in _leaves(space, name):
        path = col.split(".")[1 + name.count("."):]
        spec = _spec(col, leaf)
        arr = np.asarray(_pick(value, path, col))
        want = spec.shape if not batch else (arr.shape[0] if arr.ndim else 0, *spec.shape)
        if not batch:
            arr = arr.reshape(1, *spec.shape) if arr.size == int(np.prod(spec.shape)) else arr
            want = (1, *spec.shape)
        if arr.shape != want:
            raise SchemaError(f"{col}: the value has shape {arr.shape}, the space {want}")
        out[col] = np.ascontiguousarray(arr, dtype=spec.dtype)
    return out
