"""robomimic HDF5 (``data/demo_<k>`` with ``obs/*``, ``next_obs/*``, ``mask/*``) -> a store.

Every demo becomes one episode, in the order of its integer suffix.  A filter key
(``mask/train``, ``mask/valid`` ...) selects a subset.  Observations keep their recorded dtype
and shape (images stay uint8 HWC).  See docs/importers.md, "robomimic".
"""

from __future__ import annotations

import json
import os
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.importers._common import (
    SourceAccount,
    SourceFormatError,
    attr_text,
    column_name,
    default_out,
    h5_dataset,
    open_source,
    open_writer,
    progress,
    scalar_attrs,
    sorted_natural,
    source_attrs,
    source_errors,
)

__all__ = ["IMPORTER_VERSION", "SourceFormatError", "import_robomimic", "robomimic_filter_keys"]

IMPORTER_VERSION = "1"

_FIXED = {"actions": "action", "states": "state", "rewards": "reward", "dones": "done",
          "actions_abs": "action_abs"}


def robomimic_filter_keys(f: h5py.File) -> dict[str, list[str]]:
    """``mask/<key>`` -> the demo names it lists (decoded from fixed-length bytes)."""
    mask = f.get("mask")
    if not isinstance(mask, h5py.Group):
        return {}
    return {
        k: [attr_text(x) for x in mask[k][()]]
        for k in mask
        if isinstance(mask[k], h5py.Dataset)
    }


def _is_image(ds: h5py.Dataset) -> bool:
    return ds.dtype == np.uint8 and ds.ndim >= 3


def _schema(g: h5py.Group, where: str, images: bool) -> tuple[dict[str, str], list[str]]:
    """Source path -> column name for the first demo, and the image keys left out."""
    h5_dataset(g, "actions", where)
    if not isinstance(g.get("obs"), h5py.Group):
        raise SourceFormatError(f"{where}: no 'obs' group (holds: {', '.join(g)})")
    cols = {k: c for k, c in _FIXED.items() if isinstance(g.get(k), h5py.Dataset)}
    skipped: list[str] = []
    for grp in ("obs", "next_obs", "action_dict"):
        if not isinstance(g.get(grp), h5py.Group):
            continue
        for key in sorted_natural(g[grp]):
            ds = g[grp][key]
            if not isinstance(ds, h5py.Dataset):
                continue
            if not images and _is_image(ds):
                skipped.append(f"{grp}/{key}")
                continue
            cols[f"{grp}/{key}"] = column_name(grp, key)
    return cols, skipped


def import_robomimic(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    filter_key: str | None = None,
    images: bool = True,
    image_compression: str | None = "gzip",
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> str:
    """Import a robomimic HDF5 file, one episode per demo.

    Parameters
    ----------
    path : path-like
        The ``.hdf5`` file (``low_dim_v15.hdf5``, ``image_v15.hdf5`` ...).
    out : path-like, optional
        Destination store; default ``<file stem>.h5`` (``<stem>.<filter_key>.h5`` with a
        filter key) in the current directory.
    filter_key : str, optional
        Import only the demos listed in ``mask/<filter_key>``.
    images : bool
        Import uint8 image observations (``obs/*_image``, per-row rank >= 2).
    image_compression : str or None
        Compression preset of image columns (shuffle+deflate by default).
    overwrite : bool
        Replace an existing store at ``out``.
    show_progress : bool, optional
        Progress bar; by default shown when stderr is a terminal.

    Returns
    -------
    str
        The written store.  Columns: ``action``, ``state`` (when recorded), ``reward``,
        ``done`` (uint8), ``action_abs`` (when recorded), ``obs.<key>``, ``next_obs.<key>``,
        ``action_dict.<key>``; recorded dtypes and shapes are kept.

    Raises
    ------
    SourceFormatError
        No ``data`` group or no demos, an unknown filter key (the message lists the known
        ones), a demo a mask names but the file lacks, a missing dataset, demo datasets of
        different lengths, a ``dones`` value other than 0/1.
    """
    path = os.fspath(path)
    if out is None:
        out = default_out(path, f".{filter_key}.h5" if filter_key else ".h5")
    with source_errors(path), open_source(path) as f:
        data = f.get("data")
        if not isinstance(data, h5py.Group):
            raise SourceFormatError(f"{path}: no 'data' group; not a robomimic file")
        all_demos = sorted_natural(k for k in data if k.startswith("demo_"))
        if not all_demos:
            raise SourceFormatError(f"{path}: group 'data' holds no demo_<k> groups")
        masks = robomimic_filter_keys(f)
        demos = all_demos
        if filter_key is not None:
            if filter_key not in masks:
                raise SourceFormatError(
                    f"{path}: no filter key {filter_key!r}; mask/ holds: "
                    f"{', '.join(sorted(masks)) or 'nothing'}"
                )
            missing = sorted(set(masks[filter_key]) - set(all_demos))
            if missing:
                raise SourceFormatError(
                    f"{path}: mask/{filter_key} lists {missing} which data/ lacks"
                )
            demos = sorted_natural(set(masks[filter_key]))
        first = f"{path}: data/{demos[0]}"
        sources, _ = _schema(data[demos[0]], first, images)  # left out: in the account
        specs = []
        for key, col in sources.items():
            ds = data[demos[0]][key]
            dt = np.dtype(np.uint8) if key == "dones" else ds.dtype
            if key == "rewards" and dt.kind != "f":
                dt = np.dtype(np.float64)
            if dt.kind not in "biuf":
                raise SourceFormatError(
                    f"{first}/{key} has dtype {dt}; only numeric data is stored"
                )
            comp = image_compression if _is_image(ds) else None
            specs.append(ColumnSpec(col, dt, ds.shape[1:], compression=comp))
        attrs: dict[str, Any] = source_attrs("robomimic", path, IMPORTER_VERSION)
        account = SourceAccount(f, r"data/demo_\d+")
        kept: list[str] = []
        attrs.update(scalar_attrs(data.attrs, "source.data.", recorded=kept))
        account.use("data", *kept)
        account.use("data/demo_0", "num_samples")  # checked against every demo's length
        for key in sources:
            account.use(f"data/demo_0/{key}")
        for key, names in masks.items():
            attrs[f"source.mask.{key}"] = ",".join(names)
            account.use(f"mask/{key}")
        env_args = data.attrs.get("env_args")
        env_name = ""
        if env_args is not None:
            try:
                env_name = str(json.loads(attr_text(env_args)).get("env_name", ""))
            except ValueError:
                pass
        attrs.update({
            "obs_alignment": "obs[t] before action[t]; next_obs[t] after it (when recorded)",
            "filter_key": filter_key or "none (all demos)",
            "filter_keys_available": ",".join(sorted(masks)) or "none",
            "demos": ",".join(demos),
            "columns_from": ",".join(f"{c}={k}" for k, c in sources.items()),
            "images": "uint8 (H, W, C) as recorded" if images else "left out",
        })
        # left out: image keys with images=False, datasets of other groups or of some demos
        # only, the demos' other attributes (model_file, ep_meta), large data attributes
        account.record(attrs)
        with open_writer(out, specs, env_id=env_name or None, attrs=attrs,
                         overwrite=overwrite) as w:
            for demo in progress(demos, "robomimic", show_progress):
                g = data[demo]
                where = f"{path}: data/{demo}"
                T = h5_dataset(g, "actions", where).shape[0]
                if T == 0:
                    raise SourceFormatError(f"{where}: the demo has no rows")
                if "num_samples" in g.attrs and int(attr_text(g.attrs["num_samples"])) != T:
                    raise SourceFormatError(
                        f"{where}: attribute num_samples = {attr_text(g.attrs['num_samples'])} "
                        f"but actions has {T} rows"
                    )
                rows = {}
                for spec, (key, col) in zip(specs, sources.items()):
                    ds = h5_dataset(g, key, where)
                    if ds.shape != (T, *spec.shape):
                        raise SourceFormatError(
                            f"{where}/{key} has shape {ds.shape}, expected {(T, *spec.shape)} "
                            f"(actions has {T} rows)"
                        )
                    a = ds[()]
                    if key == "dones":
                        bad = a[(a != 0) & (a != 1)]
                        if bad.size:
                            raise SourceFormatError(
                                f"{where}/dones holds {bad[0].item()!r}; expected 0 or 1"
                            )
                    rows[col] = a.astype(spec.dtype, copy=False)
                w.append_rows(rows)
                w.end_episode()
    return os.fspath(out)
