"""Minari HDF5 datasets (``data/main_data.hdf5`` + ``data/metadata.json``) -> a store.

Each ``episode_<id>`` group is one episode of ``n`` steps with ``n + 1`` observations.  The
store keeps one row per step: ``obs`` = observations ``[0, n)``, ``next_obs`` = observations
``[1, n]``.  Dict and Tuple spaces become one column per leaf (``obs.<key>``); JPEG-encoded
image observations (Minari >= 0.5.3) are decoded to uint8 with Pillow.  See
docs/importers.md, "Minari".
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.importers._common import (
    SourceAccount,
    SourceFormatError,
    attr_text,
    column_name,
    open_source,
    open_writer,
    progress,
    scalar_attrs,
    sorted_natural,
    source_attrs,
    source_errors,
)

__all__ = ["IMPORTER_VERSION", "SourceFormatError", "import_minari"]

IMPORTER_VERSION = "1"

_META_KEYS = ("dataset_id", "minari_version", "total_episodes", "total_steps", "data_format",
              "jpeg_encoding", "algorithm_name", "code_permalink", "observation_space",
              "action_space", "env_spec", "ref_min_score", "ref_max_score")


@dataclass(frozen=True)
class _Leaf:
    """One source dataset path inside an episode group and how it becomes column(s)."""

    path: str          # e.g. "observations/pixels"
    kind: str          # "obs", "action", "reward", "done", "truncated", "info"
    spec: ColumnSpec
    jpeg: bool


def _find(path: str) -> tuple[str, str | None]:
    """``(main_data.hdf5, metadata.json or None)`` for a dataset dir, its data dir or the file."""
    path = os.fspath(path)
    for cand in (path, os.path.join(path, "main_data.hdf5"),
                 os.path.join(path, "data", "main_data.hdf5")):
        if os.path.isfile(cand):
            meta = os.path.join(os.path.dirname(cand), "metadata.json")
            return cand, meta if os.path.isfile(meta) else None
    raise FileNotFoundError(f"no Minari data/main_data.hdf5 under {path!r}")


def _space_at(space: dict[str, Any] | None, keys: list[str]) -> dict[str, Any] | None:
    for k in keys:
        if space is None:
            return None
        if space.get("type") == "Dict":
            space = space.get("subspaces", {}).get(k)
        elif space.get("type") == "Tuple" and k.startswith("_index_"):
            subs = space.get("subspaces", [])
            i = int(k[len("_index_"):])
            space = subs[i] if i < len(subs) else None
        else:
            return None
    return space


def _decode_jpeg(buf: np.ndarray, where: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is part of the lerobot extra
        raise SourceFormatError(
            f"{where} holds JPEG frames; install Pillow to decode them"
        ) from None
    try:
        img = Image.open(io.BytesIO(np.asarray(buf, np.uint8).tobytes()))
        if img.mode not in ("L", "RGB"):
            return np.asarray(img.convert("RGB"))
        return np.asarray(img)
    except (OSError, ValueError, SyntaxError) as exc:  # PIL's errors for a bad image
        raise SourceFormatError(f"{where}: a frame is not a decodable JPEG ({exc})") from None


def _leaves(g: h5py.Group, ep: str, file: str, spaces: dict[str, Any]) -> list[_Leaf]:
    """The schema of one episode group."""
    out: list[_Leaf] = []
    kinds = {"observations": "obs", "actions": "action", "rewards": "reward",
             "terminations": "done", "truncations": "truncated", "infos": "info"}
    for key in ("observations", "actions", "rewards", "terminations", "truncations"):
        if key not in g:
            raise SourceFormatError(f"{file}: {ep} has no {key!r} (holds: {', '.join(g)})")

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, h5py.Group):
            for k in sorted_natural(obj):
                walk(obj[k], f"{path}/{k}")
            return
        top, *rest = path.split("/")
        kind = kinds[top]
        where = f"{file}: {ep}/{path}"
        vlen = h5py.check_vlen_dtype(obj.dtype)
        space = _space_at(spaces.get(top), rest)
        img_shape = tuple(space.get("shape", ())) if space and space.get("dtype") == "uint8" else ()
        jpeg = vlen is not None and np.dtype(vlen) == np.uint8
        packed = obj.dtype == np.uint8 and len(img_shape) >= 2 and obj.shape[1:] != img_shape
        if not jpeg and packed:
            jpeg = obj.ndim == 2  # equal-length JPEGs stored as one 2-D uint8 array
        if jpeg:
            if obj.shape[0] == 0:
                raise SourceFormatError(f"{where}: no frames")
            shape = _decode_jpeg(obj[0], where).shape
            dt: np.dtype[Any] = np.dtype(np.uint8)
        elif obj.dtype.kind in "biuf" and obj.ndim >= 1:
            shape, dt = obj.shape[1:], obj.dtype
        elif kind == "info":
            return  # strings and other non-numeric infos are left out (listed in the manifest)
        else:
            raise SourceFormatError(f"{where}: dtype {obj.dtype} cannot be stored (numeric only)")
        if kind == "reward" and dt.kind != "f":
            dt = np.dtype(np.float64)
        if kind in ("done", "truncated"):
            dt = np.dtype(np.bool_)
        base = {"obs": "obs", "action": "action", "info": "info"}.get(kind, kind)
        name = column_name(base, *rest) if kind in ("obs", "action", "info") else kind
        out.append(_Leaf(path, kind, ColumnSpec(name, dt, shape), jpeg))

    for key in kinds:
        if key in g:
            walk(g[key], key)
    return out


def _episode_rows(g: h5py.Group, ep: str, file: str, leaves: list[_Leaf]) -> dict[str, np.ndarray]:
    """One episode's columns (an info recorded ``n + 1`` times loses its reset row 0)."""
    n = g["actions"].shape[0] if isinstance(g["actions"], h5py.Dataset) else None
    rows: dict[str, np.ndarray] = {}
    for leaf in leaves:
        where = f"{file}: {ep}/{leaf.path}"
        if leaf.path not in g:
            raise SourceFormatError(f"{where} is missing (present in the first episode)")
        ds = g[leaf.path]
        if n is None:
            n = ds.shape[0] - (1 if leaf.kind == "obs" else 0)
        want = n + 1 if leaf.kind == "obs" else n
        if leaf.kind == "info" and ds.shape[0] == n + 1:
            want = n + 1
        if ds.shape[0] != want:
            raise SourceFormatError(
                f"{where} has {ds.shape[0]} rows, expected {want} for an episode of {n} steps"
            )
        if leaf.jpeg:
            a = np.stack([_decode_jpeg(ds[i], where) for i in range(ds.shape[0])])
        else:
            a = ds[()]
        if a.shape[1:] != leaf.spec.shape:
            raise SourceFormatError(
                f"{where} rows have shape {a.shape[1:]}, the first episode's {leaf.spec.shape}"
            )
        a = a.astype(leaf.spec.dtype, copy=False)
        if leaf.kind == "obs":
            rows[leaf.spec.name] = a[:-1]
            rows["next_" + leaf.spec.name] = a[1:]
        elif leaf.kind == "info" and len(a) == n + 1:
            rows[leaf.spec.name] = a[1:]
        else:
            rows[leaf.spec.name] = a
    return rows


def _steps(g: h5py.Group) -> int | None:
    """The episode's step count: the rows of ``actions`` (of its first leaf for a Dict)."""
    obj = g.get("actions")
    while isinstance(obj, h5py.Group):
        keys = sorted_natural(obj)
        obj = obj[keys[0]] if keys else None
    return int(obj.shape[0]) if isinstance(obj, h5py.Dataset) and obj.ndim else None


def _info_has_reset_row(g: h5py.Group, path: str) -> bool:
    ds = g.get(path)
    n = _steps(g)
    return isinstance(ds, h5py.Dataset) and n is not None and ds.ndim > 0 and \
        ds.shape[0] == n + 1


def import_minari(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> str:
    """Import a Minari HDF5 dataset, one episode per ``episode_<id>`` group.

    Parameters
    ----------
    path : path-like
        The dataset directory (``.../<dataset>-v<N>``), its ``data`` directory, or
        ``main_data.hdf5`` itself.
    out : path-like, optional
        Destination store; default ``<dataset name>.h5`` in the current directory.
    overwrite : bool
        Replace an existing store at ``out``.
    show_progress : bool, optional
        Progress bar; by default shown when stderr is a terminal.

    Returns
    -------
    str
        The written store.  Columns: ``obs`` and ``next_obs`` (or ``obs.<key>`` /
        ``next_obs.<key>`` per leaf of a Dict/Tuple space), ``action`` (or ``action.<key>``),
        ``reward``, ``done`` (= terminations), ``truncated`` (= truncations), ``info.<key>``
        (the info returned by each step: rows ``[1, n]`` of the ``n + 1`` recorded).

    Raises
    ------
    SourceFormatError
        An arrow-format dataset, a missing dataset, a length that does not fit the episode's
        step count, an episode whose keys differ from the first one's, an undecodable JPEG.
    """
    h5path, meta_path = _find(os.fspath(path))
    meta: dict[str, Any] = {}
    if meta_path is not None:
        with source_errors(meta_path), open(meta_path) as fh:
            meta = json.load(fh)
        if not isinstance(meta, dict):
            raise SourceFormatError(
                f"{meta_path}: expected a JSON object, got {type(meta).__name__}"
            )
        if meta.get("data_format", "hdf5") != "hdf5":
            raise SourceFormatError(
                f"{meta_path}: data_format is {meta.get('data_format')!r}; only 'hdf5' is supported"
            )
    spaces: dict[str, Any] = {}
    for key, top in (("observation_space", "observations"), ("action_space", "actions")):
        raw = meta.get(key)
        if isinstance(raw, str):
            try:
                spaces[top] = json.loads(raw)
            except ValueError:
                pass
    dataset_dir = os.path.dirname(os.path.dirname(os.path.abspath(h5path)))
    if out is None:
        out = os.path.basename(dataset_dir) + ".h5"
    with source_errors(h5path), open_source(h5path) as f:
        episodes = sorted_natural(k for k in f if k.startswith("episode_"))
        if not episodes:
            raise SourceFormatError(f"{h5path}: no episode_<id> groups")
        leaves = _leaves(f[episodes[0]], episodes[0], h5path, spaces)
        names = {lf.path for lf in leaves}
        specs: list[ColumnSpec] = []
        for lf in leaves:
            specs.append(lf.spec)
            if lf.kind == "obs":
                specs.append(ColumnSpec("next_" + lf.spec.name, lf.spec.dtype, lf.spec.shape))
        attrs = source_attrs("minari", dataset_dir, IMPORTER_VERSION)
        attrs.update({
            "obs_alignment": "obs[t] before action[t], next_obs[t] after it (n+1 observations)",
            "info_alignment": "info[t] is the info returned by step t (the reset info, row 0 "
                              "of n + 1, is left out: listed in skipped as <info>[reset row])",
            "done_source": "terminations",
            "truncated_source": "truncations",
            "jpeg_decoded": ",".join(lf.path for lf in leaves if lf.jpeg) or "none",
            "episodes": ",".join(episodes) if len(episodes) <= 64 else f"{episodes[0]}..",
        })
        for key in [*[k for k in _META_KEYS if k in meta], *[k for k in meta if k not in
                                                             _META_KEYS]]:
            v = meta[key]  # every key of metadata.json (author, description, ... too)
            attrs[f"source.{key}"] = (v if isinstance(v, str) else json.dumps(v)).replace(
                "\n", " ")
        account = SourceAccount(f, r"episode_\d+")
        kept: list[str] = []
        attrs.update(scalar_attrs(f.attrs, "source.attrs.", recorded=kept))
        account.use("", *kept)
        for lf in leaves:
            account.use(f"episode_0/{lf.path}")
        attrs["columns_from"] = ",".join(
            f"{name}={lf.path}" for lf in leaves
            for name in ((lf.spec.name, "next_" + lf.spec.name) if lf.kind == "obs"
                         else (lf.spec.name,))
        )
        if all(attr_text(f[e].attrs["id"]) == e[len("episode_"):] for e in episodes
               if "id" in f[e].attrs):
            account.use("episode_0", "id")  # the groups' own numbers (else listed)
        for e in episodes:
            ea = f[e].attrs
            if "total_steps" in ea:
                n_steps = _steps(f[e])
                if n_steps is not None and attr_text(ea["total_steps"]) != str(n_steps):
                    raise SourceFormatError(
                        f"{h5path}: {e} has attribute total_steps = "
                        f"{attr_text(ea['total_steps'])} but {n_steps} actions"
                    )
                account.use("episode_0", "total_steps")
        seeds = [attr_text(f[e].attrs["seed"]) for e in episodes if "seed" in f[e].attrs]
        if len(seeds) == len(episodes):
            attrs["episode_seeds"] = ",".join(seeds)
            account.use("episode_0", "seed")
        if meta.get("total_episodes") not in (None, len(episodes)):
            raise SourceFormatError(
                f"{meta_path}: total_episodes = {meta['total_episodes']} but {h5path} holds "
                f"{len(episodes)} episode groups"
            )
        env_id = str(meta.get("dataset_id") or os.path.basename(dataset_dir))
        for ep in episodes:  # before writing: the skipped list is part of the manifest
            extra = {lf.path for lf in _leaves(f[ep], ep, h5path, spaces)} - names
            if extra:
                raise SourceFormatError(
                    f"{h5path}: {ep} holds {sorted(extra)} which the first episode lacks"
                )
        skipped = account.skipped()
        reset = sorted_natural(
            lf.path for lf in leaves
            if lf.kind == "info" and any(_info_has_reset_row(f[e], lf.path) for e in episodes)
        )
        # the reset info (row 0 of an info recorded n + 1 times) has no step to go with
        skipped += [f"{p}[reset row]" for p in reset]
        if skipped:
            attrs["skipped"] = ",".join(skipped)
        with open_writer(out, specs, env_id=env_id, attrs=attrs, overwrite=overwrite) as w:
            for ep in progress(episodes, "minari", show_progress):
                w.append_rows(_episode_rows(f[ep], ep, h5path, leaves))
                w.end_episode()
    return os.fspath(out)
