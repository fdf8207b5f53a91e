"""Builders of tiny, faithful source datasets for the importer tests (no network).

Each builder follows the recipes of ../shared/reference/dataset-formats.md and returns what
it wrote, so tests can also compare against their own independent reading of the files.
"""

from __future__ import annotations

import io
import json
import os
import tracemalloc
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

# ------------------------------------------------------------------ LIBERO
LIBERO_TASKS = {
    # file task name -> language written in the BDDL (lower-cased by bddl)
    "open_the_middle_drawer_of_the_cabinet": "open the middle layer of the drawer",
    "put_the_bowl_on_the_plate": "put the bowl on the plate",
    "KITCHEN_SCENE10_put_the_butter_at_the_back_in_the_basket": "put the butter at the back in the basket",
}


def make_libero_suite(
    root: Path,
    rng: np.random.Generator,
    *,
    suite: str = "libero_goal",
    tasks: Sequence[str] = tuple(LIBERO_TASKS)[:2],
    demos: Sequence[str] = ("demo_0", "demo_1", "demo_2", "demo_10"),
    lengths: Sequence[int] = (6, 8, 7, 5),
    state_dims: Sequence[int] | None = None,
    hw: tuple[int, int] = (8, 8),
) -> Path:
    """A suite directory of ``<task>_demo.hdf5`` files laid out as LIBERO releases them."""
    d = root / suite
    d.mkdir(parents=True)
    for ti, task in enumerate(tasks):
        S = 79 if state_dims is None else state_dims[ti]
        with h5py.File(d / f"{task}_demo.hdf5", "w") as f:
            data = f.create_group("data")
            data.attrs["env_name"] = "Libero_Kitchen_Tabletop_Manipulation"
            data.attrs["problem_info"] = json.dumps({
                "problem_name": "libero_kitchen_tabletop_manipulation",
                "domain_name": "robosuite",
                "language_instruction": LIBERO_TASKS[task],
            })
            data.attrs["macros_image_convention"] = "opengl"
            data.attrs["bddl_file_name"] = f"/home/user/bddl_files/{suite}/{task}.bddl"
            data.attrs["env_args"] = json.dumps({"type": 1, "env_name": "x", "env_kwargs": {
                "control_freq": 20, "camera_heights": hw[0], "camera_widths": hw[1]}})
            data.attrs["tag"] = "libero-v1"
            total = 0
            for name, T in zip(demos, lengths):
                g = data.create_group(name)
                act = np.c_[rng.uniform(-1, 1, (T, 6)), rng.choice([-1.0, 1.0], (T, 1))]
                states = rng.normal(size=(T, S))
                g["actions"] = act
                g["states"] = states
                g["robot_states"] = rng.normal(size=(T, 9))
                r = np.zeros(T, np.uint8)
                r[-1] = 1
                g["rewards"] = r
                g["dones"] = r.copy()
                g["obs/agentview_rgb"] = rng.integers(0, 256, (T, *hw, 3), dtype=np.uint8)
                g["obs/eye_in_hand_rgb"] = rng.integers(0, 256, (T, *hw, 3), dtype=np.uint8)
                g["obs/gripper_states"] = rng.normal(size=(T, 2))
                g["obs/joint_states"] = rng.normal(size=(T, 7))
                ee = rng.normal(size=(T, 6))
                g["obs/ee_states"] = ee
                g["obs/ee_pos"] = ee[:, :3]
                g["obs/ee_ori"] = ee[:, 3:]
                g.attrs["num_samples"] = T
                g.attrs["model_file"] = "<mujoco/>"
                g.attrs["init_state"] = states[0]
                total += T
            data.attrs["num_demos"] = len(demos)
            data.attrs["total"] = total
    return d


# ------------------------------------------------------------------ LAFAN1 / G1 CSV
def make_lafan_csv(path: Path, rng: np.random.Generator, T: int = 12, n_joints: int = 29) -> np.ndarray:
    """A retargeted clip: no header, ``7 + n_joints`` columns, 6 decimals."""
    root = np.c_[np.cumsum(rng.normal(scale=0.02, size=(T, 2)), axis=0), np.full(T, 0.79)]
    # a smooth orientation path: rotation vectors taking small random steps
    rv = np.cumsum(rng.normal(scale=0.1, size=(T, 3)), axis=0)
    ang = np.linalg.norm(rv, axis=1, keepdims=True)
    q = np.c_[np.sin(ang / 2) * rv / ang, np.cos(ang / 2)]  # x, y, z, w
    rows = np.c_[root, q, rng.uniform(-1, 1, (T, n_joints))]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, rows, delimiter=",", fmt="%.6f")
    return rows


# ------------------------------------------------------------------ D4RL
def make_d4rl(
    path: Path,
    rng: np.random.Generator,
    *,
    n: int = 10,
    ends: Sequence[int] = (3,),
    timeouts_at: Sequence[int] | None = (7,),
    obs_dim: int = 11,
    dtype: Any = np.float32,
    reward_2d: bool = False,
    next_obs: bool = True,
) -> None:
    """A flat D4RL file; ``ends`` are terminal rows, ``timeouts_at`` time-limit rows."""
    with h5py.File(path, "w") as f:
        f["observations"] = rng.normal(size=(n, obs_dim)).astype(dtype)
        if next_obs:
            f["next_observations"] = rng.normal(size=(n, obs_dim)).astype(dtype)
        f["actions"] = rng.uniform(-1, 1, (n, 3)).astype(dtype)
        rew = rng.normal(size=(n, 1) if reward_2d else (n,)).astype(dtype)
        f["rewards"] = rew
        term = np.zeros(n, np.bool_)
        term[list(ends)] = True
        f["terminals"] = term
        if timeouts_at is not None:
            to = np.zeros(n, np.bool_)
            to[list(timeouts_at)] = True
            f["timeouts"] = to
        f["infos/qpos"] = rng.normal(size=(n, 6)).astype(np.float32)
        f["infos/qvel"] = rng.normal(size=(n, 6)).astype(np.float32)
        f["infos/action_log_probs"] = rng.normal(size=n).astype(np.float32)
        f["metadata/algorithm"] = np.bytes_("SAC")
        f["metadata/iteration"] = np.int32(1000)


# ------------------------------------------------------------------ Minari
def _jpeg(img: np.ndarray) -> np.ndarray:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    return np.frombuffer(buf.getvalue(), np.uint8)


def _box(dtype: str, shape: Sequence[int], low: float, high: float) -> dict[str, Any]:
    return {"type": "Box", "dtype": dtype, "shape": list(shape),
            "low": np.full(shape, low).tolist(), "high": np.full(shape, high).tolist()}


def make_minari(
    root: Path,
    rng: np.random.Generator,
    *,
    lengths: Sequence[int] = (4, 3),
    kind: str = "box",
    obs_dim: int = 3,
) -> Path:
    """A Minari dataset directory; ``kind`` is ``box``, ``image`` (JPEG vlen) or ``dict``."""
    d = root / "test" / "dummy-v0"
    (d / "data").mkdir(parents=True)
    if kind == "box":
        obs_space = _box("float64", [obs_dim], -1e308, 1e308)
    elif kind == "image":
        obs_space = _box("uint8", [32, 32, 3], 0, 255)
    else:
        obs_space = {"type": "Dict", "subspaces": {
            "achieved": _box("float64", [2], -1e308, 1e308),
            "pixels": _box("uint8", [32, 32, 3], 0, 255)}}
    meta = {
        "dataset_id": "test/dummy-v0", "total_episodes": len(lengths),
        "total_steps": int(sum(lengths)), "data_format": "hdf5", "jpeg_encoding": True,
        "observation_space": json.dumps(obs_space),
        "action_space": json.dumps(_box("float32", [2], -1, 1)),
        "env_spec": json.dumps({"id": "Dummy-v0", "max_episode_steps": 100}),
        "minari_version": "0.5.3", "author": ["tests"],
    }
    (d / "data" / "metadata.json").write_text(json.dumps(meta))
    vlen = h5py.vlen_dtype(np.uint8)

    def jpeg_ds(g: h5py.Group, name: str, m: int) -> None:
        frames = rng.integers(0, 256, (m, 32, 32, 3), dtype=np.uint8)
        ds = g.create_dataset(name, (m,), dtype=vlen)
        for i in range(m):
            ds[i] = _jpeg(frames[i])

    with h5py.File(d / "data" / "main_data.hdf5", "w", track_order=True) as f:
        for e, n in enumerate(lengths):
            g = f.create_group(f"episode_{e}")
            g.attrs["id"] = e
            g.attrs["seed"] = 100 + e
            g.attrs["total_steps"] = n
            if kind == "box":
                g.create_dataset("observations", data=rng.normal(size=(n + 1, obs_dim)),
                                 chunks=True, maxshape=(None, obs_dim))
            elif kind == "image":
                jpeg_ds(g, "observations", n + 1)
            else:
                g["observations/achieved"] = rng.normal(size=(n + 1, 2))
                jpeg_ds(g.require_group("observations"), "pixels", n + 1)
            g["actions"] = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
            g["rewards"] = rng.normal(size=n)
            term = np.zeros(n, np.bool_)
            term[-1] = e == 0
            g["terminations"] = term
            trunc = np.zeros(n, np.bool_)
            trunc[-1] = e != 0
            g["truncations"] = trunc
            g["infos/success"] = rng.random(n + 1) > 0.5
    return d


# ------------------------------------------------------------------ robomimic
def make_robomimic(
    path: Path,
    rng: np.random.Generator,
    *,
    demos: Sequence[str] = ("demo_1", "demo_2", "demo_10"),
    lengths: Sequence[int] = (5, 7, 4),
    hw: tuple[int, int] = (8, 8),
    next_obs: bool = True,
) -> None:
    """A robomimic file with obs/next_obs, an image key and train/valid filter keys."""
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "env_version": "1.5.1",
                                             "type": 1, "env_kwargs": {}})
        for name, T in zip(demos, lengths):
            g = data.create_group(name)
            g["actions"] = rng.uniform(-1, 1, (T, 7))
            g["states"] = rng.normal(size=(T, 32))
            g["rewards"] = rng.random(T)
            dn = np.zeros(T, np.int64)
            dn[-1] = 1
            g["dones"] = dn
            obs = {
                "robot0_eef_pos": rng.normal(size=(T + 1, 3)),
                "robot0_eef_quat": rng.normal(size=(T + 1, 4)),
                "agentview_image": rng.integers(0, 256, (T + 1, *hw, 3), dtype=np.uint8),
            }
            for k, v in obs.items():
                g[f"obs/{k}"] = v[:-1]
                if next_obs:
                    g[f"next_obs/{k}"] = v[1:]
            g.attrs["num_samples"] = T
            g.attrs["model_file"] = "<mujoco/>"
        data.attrs["total"] = int(sum(lengths))
        f["mask/train"] = np.array([b"demo_1", b"demo_10"], dtype="S")
        f["mask/valid"] = np.array([b"demo_2"], dtype="S")


# ------------------------------------------------------------------ Diffusion Policy zarr
def _zjson(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def make_dp_zarr_raw(path: Path, rng: np.random.Generator, lengths: Sequence[int] = (3, 4)) -> dict[str, np.ndarray]:
    """A zarr v2 replay buffer written by hand (uncompressed, one chunk per array)."""
    n = int(sum(lengths))
    arrays = {
        "data/img": (rng.integers(0, 256, (n, 96, 96, 3)).astype(np.float32)),
        "data/state": rng.uniform(0, 512, (n, 5)).astype(np.float32),
        "data/keypoint": rng.uniform(0, 512, (n, 9, 2)).astype(np.float32),
        "data/n_contacts": rng.integers(0, 3, (n, 1)).astype(np.float32),
        "data/action": rng.uniform(0, 512, (n, 2)).astype(np.float32),
        "meta/episode_ends": np.cumsum(lengths).astype(np.int64),
    }
    for g in ("", "data", "meta"):
        _zjson(path / g / ".zgroup", {"zarr_format": 2})
    for key, a in arrays.items():
        _zjson(path / key / ".zarray", {
            "zarr_format": 2, "shape": list(a.shape), "chunks": list(a.shape),
            "dtype": a.dtype.str, "compressor": None, "fill_value": 0, "order": "C",
            "filters": None})
        (path / key / ".".join("0" * a.ndim)).write_bytes(np.ascontiguousarray(a).tobytes())
    return arrays


def make_dp_zarr_blosc(path: Path, rng: np.random.Generator, lengths: Sequence[int]) -> dict[str, np.ndarray]:
    """A Blosc-compressed zarr v2 buffer written through the zarr package, time-chunked."""
    import zarr
    from numcodecs import Blosc

    n = int(sum(lengths))
    arrays = {
        "data/state": rng.normal(size=(n, 5)).astype(np.float32),
        "data/action": rng.normal(size=(n, 2)).astype(np.float32),
        "data/img": rng.integers(0, 256, (n, 12, 12, 3), dtype=np.uint8),
        "meta/episode_ends": np.cumsum(lengths).astype(np.int64),
    }
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    comp = Blosc(cname="lz4", clevel=5, shuffle=Blosc.NOSHUFFLE)
    for key, a in arrays.items():
        chunks = (min(len(a), 5), *a.shape[1:])
        root.create_array(key, shape=a.shape, dtype=a.dtype, chunks=chunks,
                          compressors=None if key.startswith("meta") else comp)
        root[key][...] = a
    return arrays


def zip_dir(src: Path, dst: Path) -> None:
    """Pack a directory store into a ``.zarr.zip`` (ZipStore layout: paths relative to root)."""
    with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as z:
        for dirpath, _, files in os.walk(src):
            for fn in files:
                full = Path(dirpath) / fn
                z.write(full, full.relative_to(src).as_posix())


# ------------------------------------------------------------------ memory
def peak_traced_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes traced by tracemalloc (numpy buffers included) while ``fn`` runs.

    The store writer's checksum kernels are compiled (or loaded from Numba's cache) first:
    that is once per process, not the import's working set."""
    from numbatraj.data.checksums import ChunkDigester, digest_chunks

    d = ChunkDigester(4, 3)
    d.feed(np.zeros((6, 3), np.uint8))
    d.finish()
    digest_chunks(np.zeros(64, np.uint8), 8)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def check_store_stats(out) -> list[str]:
    """Every numeric non-image column of the store at ``out`` has ``stats(col)`` equal to
    ``compute_stats`` of the column as loaded (bool as uint8); image columns have none.
    Returns the columns checked."""

    from numbatraj import TrajectoryStore
    from numbatraj.data.stats import STAT_NAMES, compute_stats
    from numbatraj.errors import SchemaError

    checked = []
    with TrajectoryStore(out) as s:
        for name in s.columns:
            spec = s.spec(name)
            col = s.load_column(name)
            if np.dtype(spec.dtype) == np.uint8 and len(spec.shape) >= 2:
                try:
                    s.stats(name)
                except SchemaError:
                    continue
                raise AssertionError(f"image column {name!r} has statistics")
            got = s.stats(name)
            want = compute_stats(col.view(np.uint8) if col.dtype == np.bool_ else col)
            assert sorted(got) == sorted(STAT_NAMES), (name, sorted(got))
            for key in STAT_NAMES:
                np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=0,
                                           err_msg=f"{name}/{key}")
            checked.append(name)
    assert checked, "no column has statistics"
    return checked
