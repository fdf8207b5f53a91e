"""LIBERO demonstrations (robomimic-style HDF5, one ``<TASK>_demo.hdf5`` per task) -> a store.

A suite directory (``libero_goal/``, ``libero_10/`` ...) holds one file per task; each file
holds ``data/demo_<k>`` groups.  Every demo becomes one episode; tasks are ordered by file
name and demos by their integer suffix (``demo_10`` after ``demo_9``).  See
docs/importers.md, "LIBERO", for the columns and caveats.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
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

__all__ = ["IMPORTER_VERSION", "SourceFormatError", "import_libero", "language_from_filename"]

IMPORTER_VERSION = "1"

#: The two recorded cameras, in the order of the ``images`` column's camera axis.
CAMERAS = ("agentview_rgb", "eye_in_hand_rgb")
_FLIPS = {False: "none", None: "none", "none": "none", True: "vertical",
          "vertical": "vertical", "both": "both"}
_SCENE_PREFIX = re.compile(r"^.*?SCENE\d+_")


def language_from_filename(task_name: str) -> str:
    """The task sentence LIBERO's benchmark derives from a task file name.

    Names that start upper-case (libero_10/90: ``KITCHEN_SCENE3_turn_on_the_stove``) lose
    their scene prefix; then underscores become spaces.
    """
    name = task_name
    if name[:1].isupper():
        name = _SCENE_PREFIX.sub("", name, count=1)
    return " ".join(name.split("_"))


def _problem_language(raw: str, where: str) -> tuple[str, str]:
    """``(language_instruction, problem_name)`` from the ``problem_info`` JSON attribute."""
    try:
        info = json.loads(raw)
    except ValueError as exc:
        raise SourceFormatError(f"{where}: attribute 'problem_info' is not JSON: {exc}") from None
    lang = info.get("language_instruction", "")
    if isinstance(lang, list):
        lang = " ".join(str(t) for t in lang)
    return str(lang).strip().strip('"'), str(info.get("problem_name", ""))


@dataclass
class _Task:
    path: str
    name: str
    demos: list[str]
    lengths: list[int]
    state_dim: int
    image_hw: tuple[int, int] | None
    attrs: dict[str, str] = field(default_factory=dict)
    #: per-step numeric datasets beyond the fixed ones, present in every demo of the task
    #: with one dtype and row shape: demo-relative path -> (dtype, row shape)
    extras: dict[str, tuple[np.dtype, tuple[int, ...]]] = field(default_factory=dict)
    account: SourceAccount | None = None


#: The datasets every demo must hold (the cameras too when images are imported).
_FIXED = ("actions", "states", "rewards", "dones", "obs/joint_states", "obs/gripper_states")
#: ``data`` attributes read into named manifest entries.
_DATA_ATTRS = ("problem_info", "env_name", "bddl_file_name", "tag", "macros_image_convention")


def _extra_datasets(g: h5py.Group, T: int) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """Per-step numeric datasets of one demo other than the fixed ones and the cameras."""
    out: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}

    def visit(name: str, obj: Any) -> None:
        if (isinstance(obj, h5py.Dataset) and name not in _FIXED
                and name not in {f"obs/{c}" for c in CAMERAS}
                and obj.dtype.kind in "biuf" and obj.ndim >= 1 and obj.shape[0] == T):
            out[name] = (obj.dtype, tuple(obj.shape[1:]))

    g.visititems(visit)
    return out


def _scan_task(path: str, images: bool, demos_per_task: int | None) -> _Task:
    """Check one task file's layout and shapes without reading its rows."""
    stem = os.path.basename(path)[: -len(".hdf5")]
    name = stem.removesuffix("_demo")
    with source_errors(path), open_source(path) as f:
        data = f.get("data")
        if not isinstance(data, h5py.Group):
            raise SourceFormatError(f"{path}: no 'data' group; not a LIBERO/robomimic demo file")
        demos = sorted_natural(k for k in data if k.startswith("demo_"))
        if not demos:
            raise SourceFormatError(f"{path}: group 'data' holds no demo_<k> groups")
        if demos_per_task is not None:
            demos = demos[:demos_per_task]
        a = data.attrs
        if "problem_info" not in a:
            raise SourceFormatError(f"{path}: group 'data' has no 'problem_info' attribute")
        language, problem = _problem_language(attr_text(a["problem_info"]), path)
        account = SourceAccount(f, r"data/demo_\d+")
        kept: list[str] = []
        # problem_info is also kept whole (domain_name ...), as source.problem_info
        attrs = scalar_attrs(a, "source.", skip=_DATA_ATTRS[1:], recorded=kept)
        account.use("data", *kept, *[k for k in _DATA_ATTRS if k in a])
        attrs |= {
            "language": language,
            "language_from_filename": language_from_filename(name),
            "problem_name": problem,
            "env_name": attr_text(a.get("env_name", "")),
            "bddl_file_name": attr_text(a.get("bddl_file_name", "")),
            "tag": attr_text(a.get("tag", "")),
            "image_convention": attr_text(a.get("macros_image_convention", "opengl")),
            "file": os.path.basename(path),
        }
        lengths: list[int] = []
        state_dim = -1
        hw: tuple[int, int] | None = None
        extras: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None
        for demo in demos:
            g = data[demo]
            where = f"{path}: data/{demo}"
            T = h5_dataset(g, "actions", where).shape[0]
            expect: dict[str, tuple[int, ...] | None] = {
                "actions": (7,), "states": None, "rewards": (), "dones": (),
                "obs/joint_states": (7,), "obs/gripper_states": (2,),
            }
            if images:
                expect.update({f"obs/{c}": None for c in CAMERAS})
            for key, row in expect.items():
                ds = h5_dataset(g, key, where)
                if ds.shape[0] != T:
                    raise SourceFormatError(
                        f"{where}/{key} has {ds.shape[0]} rows but actions has {T}; "
                        f"every dataset of a demo must have the same length"
                    )
                if row is not None and ds.shape[1:] != row:
                    raise SourceFormatError(
                        f"{where}/{key} rows have shape {ds.shape[1:]}, expected {row}"
                    )
            st = g["states"]
            if st.ndim != 2:
                raise SourceFormatError(f"{where}/states has shape {st.shape}, expected (T, S)")
            if state_dim not in (-1, st.shape[1]):
                raise SourceFormatError(
                    f"{where}/states is {st.shape[1]} wide but earlier demos of the task are "
                    f"{state_dim} wide"
                )
            state_dim = st.shape[1]
            if images:
                for c in CAMERAS:
                    shp = g[f"obs/{c}"].shape
                    if len(shp) != 4 or shp[3] != 3 or g[f"obs/{c}"].dtype != np.uint8:
                        raise SourceFormatError(
                            f"{where}/obs/{c} is {g[f'obs/{c}'].dtype} {shp}, "
                            f"expected uint8 (T, H, W, 3)"
                        )
                    if hw not in (None, shp[1:3]):
                        raise SourceFormatError(
                            f"{where}/obs/{c} images are {shp[1:3]}, earlier ones {hw}"
                        )
                    hw = (int(shp[1]), int(shp[2]))
            if "num_samples" in g.attrs:
                n = int(attr_text(g.attrs["num_samples"]))
                if n != T:
                    raise SourceFormatError(
                        f"{where}: attribute num_samples = {n} but the datasets have {T} rows"
                    )
            if T == 0:
                raise SourceFormatError(f"{where}: the demo has no rows")
            lengths.append(int(T))
            found = _extra_datasets(g, T)
            extras = found if extras is None else {
                k: v for k, v in extras.items() if found.get(k) == v
            }
    account.use("data/demo_0", "num_samples")
    for key in _FIXED:
        account.use(f"data/demo_0/{key}")
    if images:
        for c in CAMERAS:
            account.use(f"data/demo_0/obs/{c}")
    return _Task(path, name, demos, lengths, state_dim, hw, attrs, extras or {}, account)


def _demo_rows(
    g: h5py.Group, task_index: int, n_tasks: int, state_width: int, images: bool, flip: str,
    extras: dict[str, str] | None = None,
) -> dict[str, np.ndarray]:
    js = np.asarray(g["obs/joint_states"][()], dtype=np.float64)
    gs = np.asarray(g["obs/gripper_states"][()], dtype=np.float64)
    T = js.shape[0]
    pose = np.concatenate([js, gs], axis=1)
    delta = np.zeros_like(pose)
    delta[1:] = pose[1:] - pose[:-1]
    onehot = np.zeros((T, n_tasks), dtype=np.float64)
    onehot[:, task_index] = 1.0
    states = np.asarray(g["states"][()], dtype=np.float64)
    state = np.full((T, state_width), np.nan, dtype=np.float64)
    state[:, : states.shape[1]] = states
    rows = {
        "state": state,
        "joint_states": js,
        "gripper_states": gs,
        "qpos": np.concatenate([pose, delta, onehot], axis=1),
        "action": np.asarray(g["actions"][()], dtype=np.float64),
        "reward": np.asarray(g["rewards"][()]).astype(np.float32),
        "done": np.asarray(g["dones"][()]).astype(np.uint8),
        "task_index": np.full(T, task_index, dtype=np.int64),
    }
    for key, col in (extras or {}).items():
        rows[col] = np.asarray(g[key][()])
    if images:
        cams = [np.asarray(g[f"obs/{c}"][()]) for c in CAMERAS]
        img = np.stack(cams, axis=1).transpose(0, 1, 4, 2, 3)  # (T, 2, 3, H, W)
        if flip == "vertical":
            img = img[..., ::-1, :]
        elif flip == "both":
            img = img[..., ::-1, ::-1]
        rows["images"] = np.ascontiguousarray(img)
    return rows


def import_libero(
    suite_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    images: bool = True,
    demos_per_task: int | None = None,
    flip_images: bool | str = False,
    image_compression: str | None = "gzip",
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> str:
    """Import a LIBERO suite's demonstration files into one trajectory store.

    Parameters
    ----------
    suite_dir : path-like
        Directory holding the suite's ``<TASK>_demo.hdf5`` files (one per task).
    out : path-like, optional
        Destination store; default ``<suite>.h5`` (``<suite>.lowdim.h5`` without images) in
        the current directory.
    images : bool
        Import the two cameras as ``images`` uint8 ``(2, 3, H, W)``.
    demos_per_task : int, optional
        Import only the first N demos (in natural order) of each task.
    flip_images : {False, "vertical", "both"} or True
        LIBERO renders with the OpenGL convention (rows bottom-up).  ``False`` keeps the
        pixels as recorded; ``"vertical"`` (or ``True``) reverses the rows (top-down image);
        ``"both"`` also reverses the columns, as the OpenVLA and LeRobot ports do.
    image_compression : str or None
        Compression preset of the ``images`` column (shuffle+deflate by default).
    overwrite : bool
        Replace an existing store at ``out``.
    show_progress : bool, optional
        Progress bar; by default shown when stderr is a terminal.

    Returns
    -------
    str
        The path of the written store.

    Raises
    ------
    SourceFormatError
        A missing group or dataset, demo datasets of different lengths, unexpected shapes.
    FileNotFoundError
        ``suite_dir`` is missing or holds no ``.hdf5`` file.
    """
    suite_dir = os.fspath(suite_dir)
    if not os.path.isdir(suite_dir):
        raise FileNotFoundError(f"LIBERO suite directory {suite_dir!r} does not exist")
    if flip_images not in _FLIPS:
        raise ValueError(
            f"flip_images={flip_images!r}; expected False, True, 'vertical' or 'both'"
        )
    flip = _FLIPS[flip_images]
    if demos_per_task is not None and demos_per_task < 1:
        raise ValueError(f"demos_per_task={demos_per_task}, expected a positive integer")
    files = sorted_natural(f for f in os.listdir(suite_dir) if f.endswith(".hdf5"))
    if not files:
        raise FileNotFoundError(f"{suite_dir!r} holds no .hdf5 demonstration files")
    suite = os.path.basename(os.path.normpath(suite_dir))
    if out is None:
        out = default_out(suite_dir, ".h5" if images else ".lowdim.h5")
    tasks = [_scan_task(os.path.join(suite_dir, f), images, demos_per_task) for f in files]
    hws = {t.image_hw for t in tasks}
    if images and len(hws) > 1:
        raise SourceFormatError(
            f"{suite_dir}: tasks record images of different sizes {sorted(map(str, hws))}; "
            f"one store holds one image size"
        )
    n_tasks = len(tasks)
    width = max(t.state_dim for t in tasks)
    cols = [
        ColumnSpec("state", np.dtype(np.float64), (width,)),
        ColumnSpec("joint_states", np.dtype(np.float64), (7,)),
        ColumnSpec("gripper_states", np.dtype(np.float64), (2,)),
        ColumnSpec("qpos", np.dtype(np.float64), (18 + n_tasks,)),
        ColumnSpec("action", np.dtype(np.float64), (7,)),
        ColumnSpec("reward", np.dtype(np.float32)),
        ColumnSpec("done", np.dtype(np.uint8)),
        ColumnSpec("task_index", np.dtype(np.int64)),
    ]
    # per-step numeric datasets every demo of every task holds alike (robot_states,
    # obs/ee_pos ...): columns of their own; the rest is listed in ``skipped``
    common = dict(tasks[0].extras)
    for t in tasks[1:]:
        common = {k: v for k, v in common.items() if t.extras.get(k) == v}
    fixed_names = {c.name for c in cols} | {"images"}
    extra_cols = {k: column_name(k) for k in sorted_natural(common)
                  if column_name(k) not in fixed_names}
    for key, col in extra_cols.items():
        cols.append(ColumnSpec(col, common[key][0], common[key][1]))
    if images:
        h, w = tasks[0].image_hw  # type: ignore[misc]
        cols.append(ColumnSpec("images", np.dtype(np.uint8), (2, 3, h, w),
                               compression=image_compression))
    attrs: dict[str, Any] = source_attrs("libero", suite_dir, IMPORTER_VERSION)
    attrs.update({
        "suite": suite,
        "fps": 20,
        "n_tasks": n_tasks,
        "obs_alignment": "obs[t] recorded after action[t] (LIBERO steps, then records)",
        "state": "recorded MuJoCo flattened sim state, not remapped; NaN past task.<i>.state_dim",
        "qpos_layout": f"joint_states(7),gripper_states(2),one-step diff(9; 0 on first row),"
                       f"task one-hot({n_tasks})",
        "done_source": "dones (uint8)",
        "reward_source": "rewards (uint8 0/1, stored as float32)",
    })
    if images:
        attrs.update({
            "image_cameras": ",".join(CAMERAS),
            "image_layout": "(camera, channel, height, width) uint8 RGB",
            "image_origin": tasks[0].attrs["image_convention"] if flip == "none" else "top-left",
            "image_flip": flip,
        })
    attrs["columns_from"] = ",".join([
        "state=states", "joint_states=obs/joint_states", "gripper_states=obs/gripper_states",
        "qpos=obs/joint_states+obs/gripper_states", "action=actions", "reward=rewards",
        "done=dones", *[f"{c}={k}" for k, c in extra_cols.items()],
        *(["images=" + "+".join(f"obs/{c}" for c in CAMERAS)] if images else []),
    ])
    all_skipped: list[str] = []
    for i, t in enumerate(tasks):
        assert t.account is not None
        for key in extra_cols:
            t.account.use(f"data/demo_0/{key}")
        skipped = t.account.skipped()
        if skipped:
            attrs[f"task.{i}.skipped"] = ",".join(skipped)
            all_skipped += [k for k in skipped if k not in all_skipped]
        for k, v in t.attrs.items():
            attrs[f"task.{i}.{k}"] = v.replace("\n", " ")
        attrs[f"task.{i}.name"] = t.name
        attrs[f"task.{i}.state_dim"] = t.state_dim
        attrs[f"task.{i}.demos"] = ",".join(t.demos)
    if all_skipped:
        attrs["skipped"] = ",".join(sorted_natural(all_skipped))
    jobs = [(i, t, d) for i, t in enumerate(tasks) for d in t.demos]
    with open_writer(out, cols, env_id=suite, attrs=attrs, overwrite=overwrite) as w:
        handles: dict[int, h5py.File] = {}
        try:
            for i, t, demo in progress(jobs, f"libero {suite}", show_progress):
                if i not in handles:
                    for f in handles.values():
                        f.close()
                    handles = {i: open_source(t.path)}
                with source_errors(t.path):
                    g = handles[i]["data"][demo]
                    rows = _demo_rows(g, i, n_tasks, width, images, flip, extra_cols)
                w.append_rows(rows)
                w.end_episode()
        finally:
            for f in handles.values():
                f.close()
    return os.fspath(out)
