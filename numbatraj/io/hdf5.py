"""HDF5 helpers over h5py: filter plugins, compression presets, read-only opening."""

from __future__ import annotations

import os
from typing import Any

import h5py

__all__ = [
    "COMPRESSIONS",
    "compression_kwargs",
    "describe_compression",
    "ensure_filter_plugins",
    "open_h5_read",
]

#: Compression presets a column may opt into.  ``None`` (the default) stores raw chunks.
COMPRESSIONS: tuple[str, ...] = ("gzip", "lz4", "zstd", "blosc")

_DEFAULT_LEVEL = {"gzip": 4, "zstd": 3, "blosc": 5}

# HDF5 filter ids of the plugins hdf5plugin ships, for describing foreign files.
_FILTER_NAMES = {
    1: "gzip",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    32001: "blosc",
    32026: "blosc2",
    32004: "lz4",
    32015: "zstd",
    307: "bzip2",
    32008: "bitshuffle",
}

_plugins_loaded = False


def ensure_filter_plugins() -> None:
    """Register the filters shipped by ``hdf5plugin`` (Blosc, LZ4, Zstd, ...) with libhdf5.

    Importing ``hdf5plugin`` registers them for this process, so files compressed by other
    tools decode without ``HDF5_PLUGIN_PATH``.  Called on every open; the import happens once.
    """
    global _plugins_loaded
    if not _plugins_loaded:
        import hdf5plugin  # noqa: F401  (registration is the import's side effect)

        _plugins_loaded = True


def open_h5_read(path: str | os.PathLike[str], *, chunk_cache_bytes: int = 16 << 20) -> h5py.File:
    """Open ``path`` read-only with the filter plugins registered.

    ``chunk_cache_bytes`` sizes the per-dataset chunk cache (h5py's default is 1 MiB, which
    makes a row-at-a-time read re-decode whole chunks).
    """
    ensure_filter_plugins()
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path!r}")
    try:
        return h5py.File(path, "r", rdcc_nbytes=chunk_cache_bytes, rdcc_nslots=10007)
    except OSError as exc:
        raise OSError(f"{path!r} is not a readable HDF5 file: {exc}") from exc


def compression_kwargs(name: str | None, level: int | None = None) -> dict[str, Any]:
    """Keyword arguments for ``h5py.Group.create_dataset`` implementing a compression preset.

    Parameters
    ----------
    name : {None, "gzip", "lz4", "zstd", "blosc"}
        ``gzip`` is shuffle + deflate; ``blosc`` is Blosc-LZ4 with byte shuffle.
    level : int, optional
        Compression level where the codec has one.
    """
    if name is None:
        return {}
    if name not in COMPRESSIONS:
        raise ValueError(
            f"compression {name!r} is not one of {', '.join(map(repr, COMPRESSIONS))} or None"
        )
    ensure_filter_plugins()
    import hdf5plugin

    lvl = _DEFAULT_LEVEL.get(name, 0) if level is None else int(level)
    if name == "gzip":
        return {"compression": "gzip", "compression_opts": lvl, "shuffle": True}
    if name == "lz4":
        return dict(hdf5plugin.LZ4())
    if name == "zstd":
        return dict(hdf5plugin.Zstd(clevel=lvl))
    return dict(hdf5plugin.Blosc(cname="lz4", clevel=lvl, shuffle=hdf5plugin.Blosc.SHUFFLE))


def describe_compression(ds: h5py.Dataset) -> str:
    """A short human-readable name for the filter pipeline of ``ds`` (``"none"`` if raw)."""
    plist = ds.id.get_create_plist()
    names = []
    for i in range(plist.get_nfilters()):
        fid = plist.get_filter(i)[0]
        names.append(_FILTER_NAMES.get(fid, f"filter{fid}"))
    return "+".join(names) if names else "none"
