"""LAFAN1 motion retargeted to the Unitree G1 (CSV, 30 fps) -> a trajectory store.

Each CSV file is one clip (``dance1_subject1.csv`` ...): comma-separated floats with no
header, one row per frame, 7 root values (position xyz, quaternion xyzw) then 29 joint
angles.  Every clip becomes one episode.  See docs/importers.md, "LAFAN1", for the columns and
the finite-difference scheme.
"""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Sequence

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.importers._common import (
    SourceFormatError,
    open_writer,
    progress,
    sorted_natural,
    source_attrs,
)

__all__ = ["G1_JOINT_NAMES", "IMPORTER_VERSION", "SourceFormatError", "import_lafan_g1",
           "read_g1_csv"]

IMPORTER_VERSION = "1"

#: The G1 29-DoF joint order of the retargeted CSV columns 7..35.
G1_JOINT_NAMES: tuple[str, ...] = (
    "left_hip_pitch_joint", "left_hip_roll_joint", "left_hip_yaw_joint", "left_knee_joint",
    "left_ankle_pitch_joint", "left_ankle_roll_joint",
    "right_hip_pitch_joint", "right_hip_roll_joint", "right_hip_yaw_joint", "right_knee_joint",
    "right_ankle_pitch_joint", "right_ankle_roll_joint",
    "waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint",
    "left_shoulder_pitch_joint", "left_shoulder_roll_joint", "left_shoulder_yaw_joint",
    "left_elbow_joint", "left_wrist_roll_joint", "left_wrist_pitch_joint", "left_wrist_yaw_joint",
    "right_shoulder_pitch_joint", "right_shoulder_roll_joint", "right_shoulder_yaw_joint",
    "right_elbow_joint", "right_wrist_roll_joint", "right_wrist_pitch_joint",
    "right_wrist_yaw_joint",
)
_N_COLS = 7 + len(G1_JOINT_NAMES)
_OTHER_ROBOTS = {7 + 19: "Unitree H1 (7 + 19 columns)", 7 + 27: "Unitree H1_2 (7 + 27 columns)"}


def _locate_bad_row(path: str) -> str:
    """The first malformed line of a CSV, described (only called once loadtxt has failed)."""
    with open(path, newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), start=1):
            if not row:
                return f"line {lineno} is empty"
            if len(row) != _N_COLS:
                return f"line {lineno} has {len(row)} values, expected {_N_COLS}"
            for col, text in enumerate(row):
                try:
                    float(text)
                except ValueError:
                    return f"line {lineno}, column {col} holds {text!r}, not a number"
    return "the file could not be parsed"


def _digits(token: bytes) -> int:
    token = token.strip().lower().split(b"e")[0]
    return len(token.split(b".")[1]) if b"." in token else len(token.lstrip(b"+-"))


def _refuse_cut_last_number(path: str) -> None:
    """A file cut inside its last number still parses, as another number: refuse a last
    line with no newline whose last value has fewer digits than the line before's."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 64 * 1024))
        tail = fh.read()
    if not tail or tail.endswith((b"\n", b"\r")):
        return
    lines = tail.splitlines()
    if len(lines) < 2:
        return
    last, before = lines[-1].split(b","), lines[-2].split(b",")
    if len(last) == len(before) and _digits(last[-1]) < _digits(before[-1]):
        raise SourceFormatError(
            f"{path}: the last line has no newline and its last value {last[-1].decode()!r} "
            f"is shorter than the line before's {before[-1].decode()!r}; the file looks "
            f"truncated"
        )


def read_g1_csv(path: str | os.PathLike[str]) -> np.ndarray:
    """One retargeted G1 clip as float64 ``(T, 36)``.

    Raises
    ------
    SourceFormatError
        An empty file, a row that is short, long or not numeric (naming the line), a
        non-finite value, a file cut inside its last number (no final newline and a last
        value shorter than the line before's), or a file of another robot (H1, H1_2),
        named as such.
    """
    path = os.fspath(path)
    _refuse_cut_last_number(path)
    try:
        with warnings.catch_warnings():  # an empty file warns; it is reported below instead
            warnings.simplefilter("ignore", UserWarning)
            rows = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError:
        raise SourceFormatError(f"{path}: {_locate_bad_row(path)}") from None
    if rows.shape[0] == 0:
        raise SourceFormatError(f"{path}: the clip has no rows")
    n = rows.shape[1]
    if n != _N_COLS:
        robot = _OTHER_ROBOTS.get(n)
        if robot is not None:
            raise SourceFormatError(
                f"{path}: {n} columns look like a {robot} clip; only the G1 "
                f"(7 + 29 = {_N_COLS} columns) is supported"
            )
        raise SourceFormatError(f"{path}: rows have {n} values, expected {_N_COLS} (G1: 7 + 29)")
    bad = np.argwhere(~np.isfinite(rows))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        raise SourceFormatError(f"{path}: line {r + 1}, column {c} is {rows[r, c]}, not finite")
    return rows


def _diff(x: np.ndarray, fps: float) -> np.ndarray:
    """Central differences inside, one-sided at both ends; zeros for a one-frame clip."""
    v = np.zeros_like(x)
    if len(x) > 1:
        v[1:-1] = (x[2:] - x[:-2]) * (fps / 2.0)
        v[0] = (x[1] - x[0]) * fps
        v[-1] = (x[-1] - x[-2]) * fps
    return v


def _quat_mul_xyzw(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ax, ay, az, aw = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    bx, by, bz, bw = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.stack([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ], axis=1)


def _rotvec_xyzw(q: np.ndarray) -> np.ndarray:
    """Rotation vectors (axis * angle, angle in [0, pi]) of unit quaternions."""
    q = np.where(q[:, 3:4] < 0, -q, q)
    s = np.linalg.norm(q[:, :3], axis=1)
    angle = 2.0 * np.arctan2(s, q[:, 3])
    safe = np.where(s > 1e-12, s, 1.0)
    scale = np.where(s > 1e-12, angle / safe, 2.0 / np.maximum(q[:, 3], 1e-300))
    return q[:, :3] * scale[:, None]


def _angular_velocity(quat_xyzw: np.ndarray, fps: float) -> np.ndarray:
    """World-frame angular velocity from orientations, with the same stencil as :func:`_diff`."""
    q = quat_xyzw / np.linalg.norm(quat_xyzw, axis=1, keepdims=True)
    w = np.zeros((len(q), 3))
    if len(q) > 1:
        conj = q * np.array([-1.0, -1.0, -1.0, 1.0])
        w[1:-1] = _rotvec_xyzw(_quat_mul_xyzw(q[2:], conj[:-2])) * (fps / 2.0)
        w[0] = _rotvec_xyzw(_quat_mul_xyzw(q[1:2], conj[0:1]))[0] * fps
        w[-1] = _rotvec_xyzw(_quat_mul_xyzw(q[-1:], conj[-2:-1]))[0] * fps
    return w


PathArg = str | os.PathLike[str]


def _entries(d: str, given: str) -> list[str]:
    """Every entry of directory ``d`` (named from ``given``), folders with a final ``/``."""
    rel = os.path.relpath(d, given)
    return [("" if rel == "." else rel + "/") + n + ("/" if os.path.isdir(os.path.join(d, n))
                                                    else "")
            for n in os.listdir(d)]


def _list_clips(paths_or_dir: PathArg | Sequence[PathArg]) -> tuple[list[str], list[str]]:
    """The clip files, and the entries of the given directories that are not read (other
    robots' folders, READMEs ...), for the manifest's ``skipped``."""
    items = [paths_or_dir] if isinstance(paths_or_dir, (str, os.PathLike)) else list(paths_or_dir)
    files: list[str] = []
    skipped: list[str] = []
    for item in [os.fspath(i) for i in items]:
        if os.path.isdir(item):
            given = item
            found = [f for f in os.listdir(item) if f.endswith(".csv")]
            if not found and os.path.isdir(os.path.join(item, "g1")):
                skipped += [e for e in _entries(item, given) if e != "g1/"]
                item = os.path.join(item, "g1")
                found = [f for f in os.listdir(item) if f.endswith(".csv")]
            if not found:
                raise FileNotFoundError(f"{item!r} holds no .csv clip")
            files += [os.path.join(item, f) for f in sorted_natural(found)]
            clips = {os.path.relpath(os.path.join(item, f), given) for f in found}
            skipped += [e for e in _entries(item, given) if e not in clips]
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise FileNotFoundError(f"LAFAN1 clip {item!r} does not exist")
    if not files:
        raise FileNotFoundError("no LAFAN1 clip given")
    return files, sorted_natural(skipped)


def import_lafan_g1(
    paths_or_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    *,
    fps: float = 30.0,
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> str:
    """Import retargeted LAFAN1 G1 clips (CSV) into one store, one episode per clip.

    Parameters
    ----------
    paths_or_dir : path-like or sequence of path-like
        CSV files and/or directories of them (a directory with a ``g1/`` folder and no CSV of
        its own is read from ``g1/``).  Files of a directory are taken in natural name order.
    out : path-like, optional
        Destination store; default ``lafan_g1.h5`` in the current directory.
    fps : float
        Frame rate of the clips (30 for LAFAN1); sets the velocity time step.
    overwrite : bool
        Replace an existing store at ``out``.
    show_progress : bool, optional
        Progress bar; by default shown when stderr is a terminal.

    Returns
    -------
    str
        The path of the written store.  Columns (all float64 but ``clip_index`` int64):
        ``root_pos`` (3), ``root_quat`` (4, xyzw as in the CSV), ``joint_pos`` (29),
        ``root_lin_vel`` (3), ``root_ang_vel`` (3, world frame), ``joint_vel`` (29),
        ``clip_index``.
    """
    files, skipped = _list_clips(paths_or_dir)
    if out is None:
        out = "lafan_g1.h5"
    if fps <= 0:
        raise ValueError(f"fps={fps}, expected a positive frame rate")
    names = [os.path.basename(f).removesuffix(".csv") for f in files]
    cols = [
        ColumnSpec("root_pos", np.dtype(np.float64), (3,)),
        ColumnSpec("root_quat", np.dtype(np.float64), (4,)),
        ColumnSpec("joint_pos", np.dtype(np.float64), (len(G1_JOINT_NAMES),)),
        ColumnSpec("root_lin_vel", np.dtype(np.float64), (3,)),
        ColumnSpec("root_ang_vel", np.dtype(np.float64), (3,)),
        ColumnSpec("joint_vel", np.dtype(np.float64), (len(G1_JOINT_NAMES),)),
        ColumnSpec("clip_index", np.dtype(np.int64)),
    ]
    attrs = source_attrs("lafan", os.path.dirname(os.path.abspath(files[0])), IMPORTER_VERSION)
    attrs.update({
        "robot": "unitree_g1_29dof",
        "fps": f"{fps:g}",
        "joint_names": ",".join(G1_JOINT_NAMES),
        "root_quat_order": "xyzw (scalar last, as in the CSV)",
        "frame": "world, Z-up, metres, radians",
        "velocity_scheme": "central difference inside a clip, one-sided at its first and last "
                           "frame, zero for a one-frame clip; dt = 1/fps",
        "root_ang_vel_frame": "world; rotation vector of q[t+1]*conj(q[t-1]) / (2 dt)",
        "clips": ",".join(names),
        # every CSV value is imported: these three columns hold the 36 of each row as read
        "columns_from": "root_pos=csv[0:3],root_quat=csv[3:7],joint_pos=csv[7:36],"
                        "root_lin_vel=d/dt root_pos,root_ang_vel=d/dt root_quat,"
                        "joint_vel=d/dt joint_pos,clip_index=clip file order",
    })
    if skipped:  # entries of the given directories that are not clips
        attrs["skipped"] = ",".join(e.replace(",", "_") for e in skipped)
    for i, f in enumerate(files):
        attrs[f"clip.{i}.file"] = os.path.basename(f)
    with open_writer(out, cols, env_id="lafan1_g1", attrs=attrs, overwrite=overwrite) as w:
        for i, f in progress(list(enumerate(files)), "lafan g1", show_progress):
            rows = read_g1_csv(f)
            w.append_rows({
                "root_pos": rows[:, 0:3],
                "root_quat": rows[:, 3:7],
                "joint_pos": rows[:, 7:],
                "root_lin_vel": _diff(rows[:, 0:3], fps),
                "root_ang_vel": _angular_velocity(rows[:, 3:7], fps),
                "joint_vel": _diff(rows[:, 7:], fps),
                "clip_index": np.full(len(rows), i, dtype=np.int64),
            })
            w.end_episode()
    return os.fspath(out)
