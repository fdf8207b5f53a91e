"""Recognise a trajectory store inside an open HDF5 file and list what is wrong with it.

One function, :func:`inspect_layout`, is shared by :class:`~numbatraj.TrajectoryStore`
(which refuses a file with any problem) and :func:`~numbatraj.validate_store` (which reports
them all), so the two can never disagree about what a valid store is.
"""

from __future__ import annotations

from dataclasses import dataclass

import h5py
import numpy as np

from numbatraj.data.column import STORE_DATASETS, ColumnSpec, recovered_spec
from numbatraj.data.episode_index import exact_total, index_problems, offsets_from_lengths
from numbatraj.data.manifest import FORMAT_NAME, columns_from_manifest, decode_manifest
from numbatraj.errors import NotAStoreError
from numbatraj.io.hdf5 import describe_compression

__all__ = ["StoreLayout", "inspect_layout"]


@dataclass(frozen=True)
class StoreLayout:
    """What a file holds, as far as it could be read."""

    manifest: dict[str, str]
    foreign: bool
    columns: dict[str, ColumnSpec]
    n_rows: int
    lengths: np.ndarray
    offsets: np.ndarray


def _native(dt: np.dtype) -> np.dtype:
    return dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt


def inspect_layout(f: h5py.File, where: str) -> tuple[StoreLayout, list[str]]:
    """Read the episode index, manifest and column metadata of ``f``.

    Returns the layout and every problem found (empty when the store is consistent).
    Raises :class:`NotAStoreError` when the file has no episode index at all.
    """
    if "ep_len" not in f and "ep_offset" not in f:
        top = ", ".join(sorted(f.keys())[:12]) or "nothing"
        raise NotAStoreError(
            f"{where} has no episode index (no 'ep_len' or 'ep_offset' dataset; top level holds "
            f"{top}), so it is not a trajectory store. Convert it with an importer "
            f"(numbatraj.importers, numbatraj.lerobot; see docs/importers.md)"
        )
    problems: list[str] = []
    foreign = "__manifest__" not in f
    manifest: dict[str, str] = {}
    if not foreign:
        manifest = decode_manifest(f["__manifest__"][()], where=f"{where}: __manifest__")
        if manifest.get("format") != FORMAT_NAME:
            problems.append(
                f"manifest format is {manifest.get('format')!r}, expected {FORMAT_NAME!r}"
            )

    if "ep_len" in f:
        lengths = np.asarray(f["ep_len"][()])
    else:
        problems.append("the file has ep_offset but no ep_len dataset")
        lengths = np.zeros(0, np.int64)
    derivable = lengths.ndim == 1 and lengths.dtype.kind in "iu"
    if "ep_offset" in f:
        offsets = np.asarray(f["ep_offset"][()])
    else:
        if not foreign:
            problems.append("the file has ep_len but no ep_offset dataset")
        # foreign files may carry lengths only
        offsets = offsets_from_lengths(lengths) if derivable else np.zeros(0, np.int64)

    columns: dict[str, ColumnSpec] = {}
    if foreign:
        n_rows = exact_total(lengths) if lengths.dtype.kind in "iu" else 0
        for name, obj in f.items():
            if name in STORE_DATASETS or not isinstance(obj, h5py.Dataset):
                continue
            if obj.ndim >= 1 and obj.shape[0] == n_rows and obj.dtype.kind in "biuf":
                columns[name] = recovered_spec(
                    name, _native(obj.dtype), obj.shape[1:], describe_compression(obj)
                )
        if not columns:
            sizes = {k: v.shape for k, v in f.items() if isinstance(v, h5py.Dataset)}
            problems.append(
                f"no dataset has {n_rows} rows (the sum of ep_len); datasets found: {sizes}"
            )
    else:
        declared, decl_problems = columns_from_manifest(manifest)
        problems.extend(decl_problems)
        try:
            n_rows = int(manifest.get("n_rows", ""))
        except ValueError:
            problems.append(f"manifest n_rows is {manifest.get('n_rows')!r}, not an integer")
            n_rows = exact_total(lengths) if lengths.dtype.kind in "iu" else 0
        n_eps = manifest.get("n_episodes")
        if n_eps is not None and n_eps != str(lengths.shape[0]):
            problems.append(
                f"manifest n_episodes is {n_eps} but ep_len has {lengths.shape[0]} episodes"
            )
        for name, spec in declared.items():
            obj = f.get(name)
            if not isinstance(obj, h5py.Dataset):
                problems.append(
                    f"manifest names column {name!r} but the file has no dataset {name!r}"
                )
                continue
            ok = True
            if _native(obj.dtype) != spec.dtype:
                problems.append(
                    f"column {name!r}: manifest says {spec.dtype.name}, dataset is {obj.dtype.name}"
                )
                ok = False
            if obj.shape[1:] != spec.shape:
                problems.append(
                    f"column {name!r}: manifest row shape {spec.shape}, dataset rows "
                    f"{obj.shape[1:]}"
                )
                ok = False
            if obj.ndim == 0 or obj.shape[0] != n_rows:
                rows = obj.shape[0] if obj.ndim else "a scalar"
                problems.append(f"column {name!r} has {rows} rows, the store has {n_rows}")
                ok = False
            if ok:
                columns[name] = spec
    problems.extend(index_problems(lengths, offsets, n_rows))
    layout = StoreLayout(
        manifest=manifest,
        foreign=foreign,
        columns=columns,
        n_rows=n_rows,
        lengths=lengths.astype(np.int64) if lengths.dtype.kind in "iu" else lengths,
        offsets=offsets.astype(np.int64) if offsets.dtype.kind in "iu" else offsets,
    )
    return layout, problems
