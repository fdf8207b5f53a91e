"""The ``__manifest__`` block: UTF-8 ``key=value`` lines stored as a uint8 dataset.

Keys written by :func:`build_manifest`::

    format=numbatraj.trajectory_store
    format_version=2             (1: written before checksums)
    numbatraj_version=0.1.0
    env_id=walker-walk            (empty when unknown)
    seed=99                       (empty when unknown)
    n_rows=...
    n_episodes=...
    columns=state,action,reward
    column.<name>.dtype=float32
    column.<name>.shape=26        (comma separated; empty for a scalar row)
    column.<name>.compression=none
    column.<name>.chunk_rows=2048 (rows per HDF5 chunk: one digest each)
    checksums=nbh64               (none: written with checksums=False)
    digest.<dataset>=<16 hex>     (ep_len, ep_offset, __checksums__/<column>, extras)
    attr.<key>=<value>            (user attributes, as strings)
    manifest_digest=<16 hex>      (last line: digest of every byte before it)

See :mod:`numbatraj.data.checksums`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from numbatraj._version import __version__
from numbatraj.data.checksums import seal_manifest_text
from numbatraj.data.column import LINE_BREAKS, ColumnSpec
from numbatraj.errors import IntegrityError, SchemaError

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "build_manifest",
    "encode_manifest",
    "decode_manifest",
    "columns_from_manifest",
    "check_attrs",
    "check_text",
]

FORMAT_NAME = "numbatraj.trajectory_store"
FORMAT_VERSION = 2


def check_text(what: str, text: str) -> None:
    if any(ch in text for ch in LINE_BREAKS):
        raise SchemaError(
            f"{what} {text!r} contains a line break; manifest lines are one per key"
        )


def check_attrs(attrs: Mapping[str, Any] | None) -> dict[str, str]:
    """Coerce user attributes to ``str -> str`` and refuse keys or values the block cannot hold."""
    out: dict[str, str] = {}
    for key, value in (attrs or {}).items():
        if not isinstance(key, str) or not key or "=" in key:
            raise SchemaError(f"attrs key {key!r} must be a non-empty str without '='")
        check_text("attrs key", key)
        sval = str(value)
        check_text(f"attrs[{key!r}] value", sval)
        out[key] = sval
    return out


def build_manifest(
    columns: Mapping[str, ColumnSpec],
    *,
    n_rows: int,
    n_episodes: int,
    env_id: str | None,
    seed: int | None,
    attrs: Mapping[str, str],
    chunk_rows: Mapping[str, int] | None = None,
    checksums: str = "none",
) -> dict[str, str]:
    """The manifest of a store as an ordered ``str -> str`` dict."""
    m: dict[str, str] = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        "numbatraj_version": __version__,
        "env_id": "" if env_id is None else str(env_id),
        "seed": "" if seed is None else str(int(seed)),
        "n_rows": str(int(n_rows)),
        "n_episodes": str(int(n_episodes)),
        "columns": ",".join(columns),
    }
    for name, spec in columns.items():
        m[f"column.{name}.dtype"] = spec.dtype.name
        m[f"column.{name}.shape"] = ",".join(str(s) for s in spec.shape)
        m[f"column.{name}.compression"] = spec.compression or "none"
        if chunk_rows is not None:
            m[f"column.{name}.chunk_rows"] = str(int(chunk_rows[name]))
    m["checksums"] = checksums
    for key, value in attrs.items():
        m[f"attr.{key}"] = value
    return m


def encode_manifest(manifest: Mapping[str, str], *, seal: bool = False) -> np.ndarray:
    """UTF-8 bytes of the ``key=value`` lines, as a uint8 array; ``seal`` appends the
    ``manifest_digest`` line (:func:`numbatraj.data.checksums.seal_manifest_text`)."""
    text = "".join(f"{k}={v}\n" for k, v in manifest.items() if k != "manifest_digest")
    if seal:
        text = seal_manifest_text(text)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def decode_manifest(raw: np.ndarray, *, where: str = "__manifest__") -> dict[str, str]:
    """Parse a manifest block; malformed bytes raise :class:`IntegrityError` naming the line."""
    try:
        text = np.asarray(raw, dtype=np.uint8).tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IntegrityError(f"{where} is not valid UTF-8: {exc}") from exc
    out: dict[str, str] = {}
    # split on "\n" only: str.splitlines() would also break on \x0c, \x85, \u2028 ...
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise IntegrityError(f"{where} line {lineno} has no '=': {line!r}")
        out[key] = value
    return out


def columns_from_manifest(manifest: Mapping[str, str]) -> tuple[dict[str, ColumnSpec], list[str]]:
    """Column specs declared by a manifest, and a list of problems with the declarations."""
    specs: dict[str, ColumnSpec] = {}
    problems: list[str] = []
    names = [n for n in manifest.get("columns", "").split(",") if n]
    for name in names:
        dtype = manifest.get(f"column.{name}.dtype")
        shape_txt = manifest.get(f"column.{name}.shape")
        if dtype is None or shape_txt is None:
            problems.append(f"manifest lists column {name!r} without its dtype and shape")
            continue
        comp = manifest.get(f"column.{name}.compression", "none")
        try:
            shape = tuple(int(s) for s in shape_txt.split(",") if s)
            specs[name] = ColumnSpec(
                name, np.dtype(dtype), shape, compression=None if comp == "none" else comp
            )
        except (ValueError, TypeError) as exc:
            problems.append(f"manifest declaration of column {name!r} is invalid: {exc}")
    return specs, problems
