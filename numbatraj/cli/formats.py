"""``numbatraj import <format>`` subcommands for LIBERO, LAFAN1, D4RL, Minari, robomimic and
Diffusion Policy zarr.  Thin: each parses its arguments and calls one importer.

Every one reads ``numbatraj import FORMAT SOURCE [--out PATH] [--overwrite]``."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def _done(path: str) -> int:
    from numbatraj.data.store import TrajectoryStore

    with TrajectoryStore(path) as s:
        print(f"wrote {path}: {s.n_episodes} episodes, {s.n_rows} rows, "
              f"columns {', '.join(s.columns)}")
    return 0


def _bar(a: argparse.Namespace) -> bool:
    return bool(getattr(a, "progress", False))


def _libero(a: argparse.Namespace) -> int:
    from numbatraj.importers.libero import import_libero

    flip: Any = {"none": False}.get(a.flip_images, a.flip_images)
    return _done(import_libero(a.suite_dir, a.out, images=not a.no_images, demos_per_task=a.demos,
                               flip_images=flip, overwrite=a.overwrite,
                               show_progress=_bar(a)))


def _lafan(a: argparse.Namespace) -> int:
    from numbatraj.importers.lafan import import_lafan_g1

    return _done(import_lafan_g1(a.paths, a.out, overwrite=a.overwrite, show_progress=_bar(a)))


def _d4rl(a: argparse.Namespace) -> int:
    from numbatraj.importers.d4rl import import_d4rl

    return _done(import_d4rl(a.path, a.out, drop_tail=a.drop_tail, overwrite=a.overwrite,
                             show_progress=_bar(a)))


def _minari(a: argparse.Namespace) -> int:
    from numbatraj.importers.minari import import_minari

    return _done(import_minari(a.path, a.out, overwrite=a.overwrite, show_progress=_bar(a)))


def _robomimic(a: argparse.Namespace) -> int:
    from numbatraj.importers.robomimic import import_robomimic

    return _done(import_robomimic(a.path, a.out, filter_key=a.filter_key,
                                  images=not a.no_images, overwrite=a.overwrite,
                                  show_progress=_bar(a)))


def _dp(a: argparse.Namespace) -> int:
    from numbatraj.importers.diffusion_policy import import_diffusion_policy

    return _done(import_diffusion_policy(a.path, a.out, overwrite=a.overwrite,
                                         show_progress=_bar(a)))


def _common(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--out", default=None, help=f"destination store (default: {default})")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.set_defaults(extras=("importers",))


def register(subparsers: Any) -> None:
    """Add one ``numbatraj import <format>`` subcommand per format to ``subparsers``."""
    p = subparsers.add_parser("libero", help="LIBERO demonstration HDF5 files of one suite")
    p.add_argument("suite_dir", help="directory of <TASK>_demo.hdf5 files")
    p.add_argument("--no-images", action="store_true", help="skip the two camera streams")
    p.add_argument("--demos", type=int, default=None, metavar="N", help="first N demos per task")
    p.add_argument("--flip-images", choices=("none", "vertical", "both"), default="none",
                   help="LIBERO images are bottom-up (OpenGL); flip them (default: as recorded)")
    _common(p, "<suite>.h5, or <suite>.lowdim.h5 with --no-images")
    p.set_defaults(func=_libero)

    p = subparsers.add_parser("lafan", help="LAFAN1 retargeted to the Unitree G1 (CSV, 30 fps)")
    p.add_argument("paths", nargs="+", help="CSV files, or directories of them")
    _common(p, "lafan_g1.h5")
    p.set_defaults(func=_lafan)

    p = subparsers.add_parser("d4rl", help="a flat D4RL-style HDF5 file")
    p.add_argument("path")
    p.add_argument("--drop-tail", action="store_true",
                   help="drop rows after the last terminal/timeout (robomimic does)")
    _common(p, "<file stem>.h5")
    p.set_defaults(func=_d4rl)

    p = subparsers.add_parser("minari", help="a Minari HDF5 dataset directory")
    p.add_argument("path", help="dataset directory (holding data/main_data.hdf5)")
    _common(p, "<dataset name>.h5")
    p.set_defaults(func=_minari)

    p = subparsers.add_parser("robomimic", help="a robomimic HDF5 file")
    p.add_argument("path")
    p.add_argument("--filter-key", default=None, help="import only the demos of mask/<KEY>")
    p.add_argument("--no-images", action="store_true", help="skip uint8 image observations")
    _common(p, "<file stem>.h5")
    p.set_defaults(func=_robomimic)

    p = subparsers.add_parser("diffusion-policy", aliases=["dp-zarr"],
                              help="a Diffusion Policy zarr replay buffer (.zarr or .zarr.zip)")
    p.add_argument("path")
    _common(p, "<name>.h5")
    p.set_defaults(func=_dp)
