"""Diffusion Policy zarr replay buffers (``data/<key>``, ``meta/episode_ends``) -> a store.

A replay buffer is a zarr (v2) group, as a directory (``pusht_cchi_v7_replay.zarr``) or a
``.zarr.zip``.  Every ``data/<key>`` array holds all episodes' rows; ``meta/episode_ends`` is
the cumulative end row of each episode.  Each key becomes one column of the same name and
dtype.  Needs the ``zarr`` package (the ``importers`` extra).  See docs/importers.md,
"Diffusion Policy".
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import IntegrityError
from numbatraj.importers._common import (
    SourceFormatError,
    default_out,
    open_writer,
    progress,
    sorted_natural,
    source_attrs,
    source_errors,
)

__all__ = ["IMPORTER_VERSION", "SourceFormatError", "import_diffusion_policy"]

IMPORTER_VERSION = "1"

_READ_ERRORS = (ValueError, KeyError, TypeError, RuntimeError, OSError, zipfile.BadZipFile)


def _open_group(path: str) -> tuple[Any, Any]:
    """``(zarr group, store to close or None)`` for a directory store or a ``.zip`` store."""
    try:
        import zarr
    except ImportError:  # pragma: no cover - zarr is the optional 'importers' extra
        raise ModuleNotFoundError(
            "importing a Diffusion Policy zarr buffer needs the zarr package: "
            "pip install 'numbatraj[importers]'"
        ) from None
    if not os.path.exists(path):
        raise FileNotFoundError(f"zarr replay buffer {path!r} does not exist")
    store = None
    if os.path.isfile(path) and not zipfile.is_zipfile(path):
        raise IntegrityError(
            f"{path}: not a zip file (a .zarr.zip that is truncated, corrupt or of another "
            f"format)"
        )
    try:
        if os.path.isfile(path):
            store = zarr.storage.ZipStore(path, mode="r")
            return zarr.open_group(store, mode="r"), store
        return zarr.open_group(path, mode="r"), None
    except _READ_ERRORS as exc:
        if store is not None:
            store.close()
        raise SourceFormatError(f"{path}: not a readable zarr group ({exc})") from None


def _array(group: Any, key: str, path: str) -> Any:
    import zarr

    try:
        obj = group[key]
    except KeyError:
        raise SourceFormatError(f"{path}: no array {key!r} in the replay buffer") from None
    except _READ_ERRORS as exc:  # e.g. a codec numcodecs does not know (Jpeg2k)
        hint = ""
        if "imagecodecs" in str(exc):
            hint = (" (Diffusion Policy's robomimic caches compress images with imagecodecs' "
                    "Jpeg2k: install imagecodecs and register its numcodecs codecs first)")
        raise SourceFormatError(f"{path}: array {key!r} cannot be opened: {exc}{hint}") from None
    if not isinstance(obj, zarr.Array):
        raise SourceFormatError(f"{path}: {key!r} is a group, expected an array")
    return obj


def _member_names(path: str, group: str) -> list[str]:
    """Names under ``group/``, listed from the directory or zip itself.

    Listing through zarr would open (and decode the metadata of) every array at once, so an
    array with an unknown codec could not be named; opening them one by one can.
    """
    if os.path.isfile(path):
        with zipfile.ZipFile(path) as z:
            parts = [n.split("/") for n in z.namelist()]
        names = {p[1] for p in parts if len(p) > 2 and p[0] == group}
    else:
        d = os.path.join(path, group)
        if not os.path.isdir(d):
            names = set()
        else:
            names = {n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))}
    if not names:
        raise SourceFormatError(f"{path}: no arrays under {group + '/'!r} in the replay buffer")
    return sorted_natural(names)


def _episode_ends(group: Any, path: str) -> np.ndarray:
    ends = np.asarray(_array(group, "meta/episode_ends", path)[...])
    if ends.ndim != 1 or ends.dtype.kind not in "iu":
        raise SourceFormatError(
            f"{path}: meta/episode_ends is {ends.dtype} {ends.shape}, expected 1-D integers"
        )
    if ends.size == 0:
        raise SourceFormatError(f"{path}: meta/episode_ends is empty (no episodes)")
    steps = np.diff(np.concatenate([[0], ends.astype(np.int64)]))
    if (steps <= 0).any():
        i = int(np.flatnonzero(steps <= 0)[0])
        prev = int(ends[i - 1]) if i else 0
        raise SourceFormatError(
            f"{path}: meta/episode_ends[{i}] = {int(ends[i])} does not exceed the previous end "
            f"{prev}; ends must increase strictly (no empty episodes)"
        )
    return ends.astype(np.int64)


def import_diffusion_policy(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    keys: Sequence[str] | None = None,
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> str:
    """Import a Diffusion Policy zarr replay buffer, one episode per ``episode_ends`` entry.

    Parameters
    ----------
    path : path-like
        The ``.zarr`` directory or ``.zarr.zip`` file.
    out : path-like, optional
        Destination store; default ``<name>.h5`` in the current directory.
    keys : sequence of str, optional
        The ``data/`` arrays to import; all of them by default.
    overwrite : bool
        Replace an existing store at ``out``.
    show_progress : bool, optional
        Progress bar; by default shown when stderr is a terminal.

    Returns
    -------
    str
        The written store: one column per ``data/<key>``, same name, dtype and row shape
        (PushT's ``img`` stays float32 0..255).

    Raises
    ------
    SourceFormatError
        No ``data`` group or ``meta/episode_ends``, ends that do not increase, arrays whose
        length is not ``episode_ends[-1]``, an unknown key, a codec that cannot decode.
    """
    path = os.fspath(path)
    if out is None:
        out = default_out(path)
    with source_errors(path):
        group, store = _open_group(path)
        try:
            ends = _episode_ends(group, path)
            data_keys = _member_names(path, "data")
            all_keys = list(data_keys)
            if keys is not None:
                unknown = [k for k in keys if k not in data_keys]
                if unknown:
                    raise SourceFormatError(
                        f"{path}: data/ has no {unknown}; it holds {', '.join(data_keys)}"
                    )
                data_keys = list(keys)
            if not data_keys:
                raise SourceFormatError(f"{path}: group 'data' holds no arrays")
            arrays = {k: _array(group, f"data/{k}", path) for k in data_keys}
            n = int(ends[-1])
            specs = []
            for k, a in arrays.items():
                if len(a.shape) == 0 or a.shape[0] != n:
                    raise SourceFormatError(
                        f"{path}: data/{k} has shape {a.shape} but meta/episode_ends[-1] = {n}; "
                        f"every data array must have {n} rows"
                    )
                specs.append(ColumnSpec(k, np.dtype(a.dtype), tuple(a.shape[1:])))
            attrs: dict[str, Any] = source_attrs("diffusion_policy", path, IMPORTER_VERSION)
            attrs.update({
                "obs_alignment": "as recorded (PushT: obs[t] before action[t])",
                "episode_index": "meta/episode_ends (cumulative ends)",
                "meta_arrays": ",".join(_member_names(path, "meta")),
                "zarr_format": str(group.metadata.zarr_format),
            })
            attrs["columns_from"] = ",".join(f"{k}=data/{k}" for k in data_keys)
            skipped = [f"data/{k}" for k in all_keys if k not in data_keys]
            skipped += [f"meta/{k}" for k in _member_names(path, "meta") if k != "episode_ends"]
            if skipped:
                attrs["skipped"] = ",".join(skipped)
            root_attrs = dict(group.attrs)
            if root_attrs:
                attrs["source.attrs"] = json.dumps(root_attrs, separators=(",", ":"), default=str)
            # the attributes of the groups and of the imported arrays, so none is dropped
            # (a skipped array's go with it)
            holders = {"data": group["data"], "meta": group["meta"],
                       "meta/episode_ends": group["meta/episode_ends"],
                       **{f"data/{k}": a for k, a in arrays.items()}}
            for where, obj in holders.items():
                extra = dict(obj.attrs)
                if extra:
                    attrs[f"source.attrs.{where}"] = json.dumps(
                        extra, separators=(",", ":"), default=str)
            starts = np.concatenate([[0], ends[:-1]])
            name = os.path.basename(default_out(path, ""))
            with open_writer(out, specs, env_id=name, attrs=attrs, overwrite=overwrite) as w:
                for i in progress(range(len(ends)), "diffusion-policy", show_progress):
                    s, e = int(starts[i]), int(ends[i])
                    rows = {}
                    for k, a in arrays.items():
                        try:
                            rows[k] = np.asarray(a[s:e])
                        except _READ_ERRORS as exc:
                            raise SourceFormatError(
                                f"{path}: data/{k} rows {s}:{e} (episode {i}) cannot be read: {exc}"
                            ) from None
                    w.append_rows(rows)
                    w.end_episode()
        finally:
            if store is not None:
                store.close()
    return os.fspath(out)
