"""Does a dataset written by ``LeRobotWriter`` load in LeRobot's own ``LeRobotDataset``?

Not a pytest module (LeRobot needs torch, which the project does not depend on).  Run it with a
Python that has both numbatraj and LeRobot (codebase v3.0: lerobot 0.4.x) installed, e.g. the
throwaway virtualenv it was run in (lerobot 0.4.4 pins torch<2.11, which this machine's disk does
not hold, hence ``--no-deps`` and its runtime deps by hand)::

    python3.11 -m venv /tmp/lrvenv && P=/tmp/lrvenv/bin/pip
    $P install torch==2.14.1 torchvision==0.29.1
    $P install --no-deps lerobot==0.4.4 torchcodec==0.17.0
    $P install -e . 'datasets>=4,<5' 'huggingface-hub>=0.34.2,<0.36' 'accelerate>=1.10,<2' \
        draccus==0.10.0 jsonlines termcolor deepdiff einops imageio gymnasium pandas
    LD_LIBRARY_PATH=/tmp/ffmpeg8 /tmp/lrvenv/bin/python bench/lerobot_compat_check.py \
        [--codec libsvtav1 --codec libx264] [--streaming] [--video-backend torchcodec]

LeRobot decodes with torchcodec (torchvision 0.29 has no ``io.VideoReader``, so its "pyav"
backend is gone), and torchcodec needs FFmpeg's shared libraries.  Without a system FFmpeg,
``/tmp/ffmpeg8`` holds links named ``libavutil.so.60`` etc. to the FFmpeg 8 libraries bundled
in PyAV's wheel (``site-packages/av.libs/libavutil-*.so.60.*``, and likewise for avcodec,
avformat, avdevice, avfilter, swscale, swresample).

For each codec it writes a small dataset (two cameras, three episodes of unequal length,
``state_dim != action_dim``, two tasks, ``checkpoint=True``), opens it with
``LeRobotDataset(repo_id=..., root=...)`` (offline: nothing is downloaded) and compares, item by
item, what LeRobot returns against what was written:

- number of episodes, frames and tasks; per-episode lengths in ``meta.episodes``;
- ``observation.state`` and ``action`` exactly (float32);
- ``episode_index``, ``frame_index``, ``index``, ``timestamp`` (float32 ``k / fps``), ``task``;
- camera frames decoded by LeRobot against the rgb written, within a codec tolerance (mean
  absolute error per frame), plus an identity check: each decoded frame is closer to the frame
  written at that index than to its neighbours (so a timestamp off by one frame fails);
- ``meta/stats.json`` loads through LeRobot, with the shapes LeRobot expects, and its vector
  min / max / mean agree with the rows written;
- LeRobot's decoded frames against PyAV decoding the same mp4 on its own (reported: the pixel
  error against what was written is the codec's, not a misread);
- a second ``LeRobotDataset(episodes=[1, 2], delta_timestamps=...)``: rows and frames at
  offsets -2, 0, +1 frames, with the padding flags at episode edges;
- the writer's extra features (``features=``: ``next.reward``, ``next.done``,
  ``observation.environment_state``) exactly as written;
- numbatraj's ``BatchLoader(delta_timestamps=...)`` over the imported store against
  ``LeRobotDataset(delta_timestamps=...)`` item by item (values and ``_is_pad`` exactly,
  frames exactly), here and on the suite's adversarial fixture (``check_batch_loader``).

``--streaming`` also writes with ``checkpoint=False`` (episodes share one mp4, so LeRobot must
use ``from_timestamp``).  Prints PASS/FAIL per codec and exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from numbatraj.lerobot.write import LeRobotWriter  # noqa: E402

FPS = 30
H, W = 64, 96
CAMERAS = ["front", "wrist"]
JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
STATE_NAMES = [f"{j}.pos" for j in JOINTS]  # 6
ACTION_NAMES = [f"{j}.pos" for j in JOINTS[:4]]  # 4: state_dim != action_dim
LENGTHS = [23, 40, 31]
TASKS = ["put the cube in the bowl", "stack the cubes"]
# Mean absolute error (0..255) a decoded frame may have against the frame written.  CRF 30
# on these small synthetic frames stays well under it; a wrong or shifted frame does not.
MEAN_TOL = 8.0
#: the writer's extra features (an offline-RL dataset's reward and done, an env state)
EXTRA_FEATURES = {"next.reward": ("float32", (1,)), "next.done": ("bool", (1,)),
                  "observation.environment_state": ("float32", (3,))}


def camera_frame(cam: int, ep: int, k: int) -> np.ndarray:
    """A gradient with a square that moves several pixels a frame: neighbours differ."""
    img = np.empty((H, W, 3), np.uint8)
    img[..., 0] = np.linspace(30, 200, W, dtype=np.uint8)[None, :]
    img[..., 1] = np.linspace(60, 160, H, dtype=np.uint8)[:, None]
    img[..., 2] = 70 + 80 * cam + 10 * ep
    x = (7 * k + 13 * cam + 5 * ep) % (W - 16)
    y = (3 * k + 20 * cam) % (H - 16)
    img[y : y + 16, x : x + 16] = (250, 240, 40) if cam == 0 else (20, 40, 230)
    return img


def write_dataset(root: Path, codec: str, checkpoint: bool = True) -> dict:
    """Write the dataset and return what was written (float32 rows, uint8 frames)."""
    states, actions, ep_idx, frame_idx, tasks = [], [], [], [], []
    frames: dict[str, list[np.ndarray]] = {c: [] for c in CAMERAS}
    extra: dict[str, list[np.ndarray]] = {k: [] for k in EXTRA_FEATURES}
    with LeRobotWriter(
        root, FPS, STATE_NAMES, ACTION_NAMES, CAMERAS, H, W,
        checkpoint=checkpoint, codec=codec, robot_type="so101_follower",
        features=EXTRA_FEATURES,
    ) as w:
        for ep, n in enumerate(LENGTHS):
            task = TASKS[ep % 2]
            w.begin_episode(task)
            for k in range(n):
                t = k / FPS + ep
                state = np.sin(t + np.arange(len(STATE_NAMES))) * 40.0 + 0.123456789
                action = state[: len(ACTION_NAMES)] + np.cos(3 * t) * 2.0
                fr = {c: camera_frame(i, ep, k) for i, c in enumerate(CAMERAS)}
                ex = {"next.reward": np.float32(np.sin(t) + ep),
                      "next.done": np.bool_(k == n - 1),
                      "observation.environment_state": np.cos(t + np.arange(3, dtype=np.float32))}
                w.add_frame(state, action, fr, extra=ex)
                for key, v in ex.items():
                    extra[key].append(np.asarray(v))
                states.append(np.asarray(state, np.float32))
                actions.append(np.asarray(action, np.float32))
                ep_idx.append(ep)
                frame_idx.append(k)
                tasks.append(task)
                for c in CAMERAS:
                    frames[c].append(fr[c])
            w.end_episode()
    return {
        "state": np.stack(states), "action": np.stack(actions),
        "episode_index": np.array(ep_idx), "frame_index": np.array(frame_idx),
        "timestamp": (np.array(frame_idx, np.float64) / FPS).astype(np.float32),
        "task": tasks, "frames": {c: np.stack(v) for c, v in frames.items()},
        "extra": {k: np.stack(v) for k, v in extra.items()},
    }


def pyav_frames(path: Path) -> np.ndarray:
    """Every frame of an mp4 decoded by PyAV alone, as (n, H, W, 3) uint8 rgb."""
    import av

    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def _np(x) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def check_loaded(root: Path, repo_id: str, want: dict, backend: str | None) -> tuple[list, dict]:
    """Open ``root`` with LeRobotDataset and compare.  Returns (failures, figures)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    fails: list[str] = []
    figs: dict = {}
    n_total = sum(LENGTHS)

    def expect(cond: bool, what: str) -> None:
        if not cond:
            fails.append(what)

    t0 = time.perf_counter()
    ds = LeRobotDataset(repo_id=repo_id, root=root, video_backend=backend)
    figs["load_s"] = time.perf_counter() - t0
    figs["backend"] = getattr(ds, "video_backend", getattr(ds, "_video_backend", None))
    meta = ds.meta
    expect(ds.num_episodes == len(LENGTHS), f"num_episodes {ds.num_episodes} != {len(LENGTHS)}")
    expect(ds.num_frames == n_total, f"num_frames {ds.num_frames} != {n_total}")
    expect(len(ds) == n_total, f"len(ds) {len(ds)} != {n_total}")
    expect(len(ds.hf_dataset) == n_total, f"len(hf_dataset) {len(ds.hf_dataset)} != {n_total}")
    expect(meta.fps == FPS, f"fps {meta.fps} != {FPS}")
    expect(meta.total_tasks == len(TASKS), f"total_tasks {meta.total_tasks} != {len(TASKS)}")
    want_keys = sorted(f"observation.images.{c}" for c in CAMERAS)
    expect(sorted(meta.video_keys) == want_keys, f"video_keys {meta.video_keys} != {want_keys}")
    lengths = [int(x) for x in meta.episodes["length"]]
    expect(lengths == LENGTHS, f"meta.episodes length {lengths} != {LENGTHS}")
    expect(meta.shapes["observation.state"] == (len(STATE_NAMES),),
           f"state shape {meta.shapes['observation.state']}")
    expect(meta.shapes["action"] == (len(ACTION_NAMES),), f"action shape {meta.shapes['action']}")

    # Item by item, the way a training loop reads it.
    mean_errs: list[float] = []
    all_errs: list[np.ndarray] = []
    agree_max = 0  # LeRobot's decode against PyAV decoding the same mp4 on its own
    pyav_cache: dict[str, np.ndarray] = {}
    max_err = 0
    identity_bad = 0
    first_err: dict[str, str] = {}

    def once(key: str, msg: str) -> None:
        if key not in first_err:
            first_err[key] = msg
            fails.append(msg)

    t0 = time.perf_counter()
    for i in range(len(ds)):
        item = ds[i]
        k = int(want["frame_index"][i])
        ep = int(want["episode_index"][i])
        for key in ("observation.state", "action"):
            got = _np(item[key])
            ref = want["state" if key == "observation.state" else "action"][i]
            if got.dtype != np.float32 or got.shape != ref.shape or not np.array_equal(got, ref):
                once(key, f"{key} at index {i}: got {got.dtype}{got.shape} {got}, wrote {ref}")
        for key, wrote in want["extra"].items():  # the writer's features=
            got, ref = _np(item[key]), wrote[i].reshape(-1)
            if got.reshape(-1).shape != ref.shape or not np.array_equal(got.reshape(-1), ref):
                once(key, f"{key} at index {i}: got {got.dtype}{got.shape} {got}, wrote {ref}")
        for key in ("episode_index", "frame_index", "index"):
            got = int(_np(item[key]))
            ref = i if key == "index" else int(want[key][i])
            if got != ref:
                once(key, f"{key} at index {i}: got {got}, wrote {ref}")
        ts = _np(item["timestamp"])
        if ts.dtype != np.float32 or float(ts) != float(want["timestamp"][i]):
            once("timestamp", f"timestamp at index {i}: got {ts.dtype} {float(ts)!r}, "
                              f"wrote {float(want['timestamp'][i])!r}")
        if item["task"] != want["task"][i]:
            once("task", f"task at index {i}: got {item['task']!r}, wrote {want['task'][i]!r}")
        for c in CAMERAS:
            key = f"observation.images.{c}"
            got = _np(item[key])
            if got.shape != (3, H, W) or got.dtype != np.float32:
                once(f"shape-{c}", f"{key} at index {i}: got {got.dtype}{got.shape}, "
                                   f"expected float32 (3, {H}, {W})")
                continue
            img = np.clip(np.rint(got.transpose(1, 2, 0) * 255.0), 0, 255).astype(np.int16)
            ref_all = want["frames"][c]
            err = np.abs(img - ref_all[i].astype(np.int16))
            mean_errs.append(float(err.mean()))
            all_errs.append(err.ravel().astype(np.uint8))
            vpath = root / meta.get_video_file_path(ep, key)
            if str(vpath) not in pyav_cache:
                pyav_cache[str(vpath)] = pyav_frames(vpath)
            start = round(float(meta.episodes[ep][f"videos/{key}/from_timestamp"]) * FPS)
            own = pyav_cache[str(vpath)][start + k].astype(np.int16)
            agree_max = max(agree_max, int(np.abs(img - own).max()))
            max_err = max(max_err, int(err.max()))
            if err.mean() > MEAN_TOL:
                once(f"pix-{c}", f"{key} at index {i} (episode {ep}, frame {k}): mean abs error "
                                 f"{err.mean():.2f} > {MEAN_TOL}")
            for j in (i - 1, i + 1):  # neighbours within the same episode
                if 0 <= j < n_total and want["episode_index"][j] == ep:
                    e2 = np.abs(img - ref_all[j].astype(np.int16)).mean()
                    if e2 <= err.mean():
                        identity_bad += 1
                        once(f"id-{c}", f"{key} at index {i}: decoded frame is as close to the "
                                        f"frame written at {j} ({e2:.2f}) as to {i} "
                                        f"({err.mean():.2f}): wrong frame returned")
    figs["items_s"] = time.perf_counter() - t0
    all_err = np.concatenate(all_errs) if all_errs else np.zeros(1)
    figs["pix_p99"] = float(np.percentile(all_err, 99))
    figs["pix_p999"] = float(np.percentile(all_err, 99.9))
    figs["lerobot_vs_pyav_max"] = agree_max
    figs["pix_mean"] = float(np.mean(mean_errs)) if mean_errs else float("nan")
    figs["pix_worst_frame_mean"] = float(np.max(mean_errs)) if mean_errs else float("nan")
    figs["pix_max"] = max_err
    figs["identity_bad"] = identity_bad

    # meta/stats.json through LeRobot's loader.
    stats = meta.stats
    if stats is None:
        fails.append("meta.stats is None: meta/stats.json did not load")
    else:
        for key, ref in (("observation.state", want["state"]), ("action", want["action"])):
            st = stats.get(key)
            if st is None:
                fails.append(f"stats.json has no {key!r}")
                continue
            for name, fn in (("min", np.min), ("max", np.max), ("mean", np.mean)):
                got = np.asarray(st.get(name), np.float64)
                exp = fn(ref.astype(np.float64), axis=0)
                if got.shape != exp.shape or not np.allclose(got, exp, rtol=1e-5, atol=1e-5):
                    fails.append(f"stats[{key!r}][{name!r}] {got} != rows {exp}")
        for c in CAMERAS:
            st = stats.get(f"observation.images.{c}")
            if st is None:
                fails.append(f"stats.json has no observation.images.{c}")
                continue
            for name in ("min", "max", "mean", "std"):
                shp = np.asarray(st.get(name)).shape
                if shp != (3, 1, 1):
                    fails.append(f"stats[observation.images.{c}][{name!r}] shape {shp} != (3,1,1)")
            lo, hi = np.asarray(st["min"]), np.asarray(st["max"])
            if not (0.0 <= lo.min() and hi.max() <= 1.0):
                fails.append(f"stats[observation.images.{c}] not in [0, 1]: {lo.ravel()} "
                             f"{hi.ravel()}")
        figs["stats_keys"] = sorted(stats)

    fails += check_delta_subset(root, repo_id, want, backend, LeRobotDataset)
    return fails, figs


def check_delta_subset(root: Path, repo_id: str, want: dict, backend: str | None,
                       dataset_cls) -> list[str]:
    """Episodes [1, 2] only, with delta_timestamps: exercises the episode table's
    dataset_from_index / dataset_to_index (padding at episode edges) and from_timestamp."""
    fails: list[str] = []
    cam = f"observation.images.{CAMERAS[0]}"
    deltas = [-2, 0, 1]
    ds = dataset_cls(
        repo_id=repo_id, root=root, episodes=[1, 2], video_backend=backend,
        delta_timestamps={"observation.state": [d / FPS for d in deltas], "action": [0.0],
                          cam: [d / FPS for d in deltas]},
    )
    sel = np.flatnonzero(np.isin(want["episode_index"], [1, 2]))
    if len(ds) != len(sel):
        return [f"episodes=[1, 2]: len {len(ds)} != {len(sel)}"]
    for pos, i in enumerate(sel):
        item = ds[pos]
        ep, k = int(want["episode_index"][i]), int(want["frame_index"][i])
        n = LENGTHS[ep]
        if int(_np(item["index"])) != i:
            fails.append(f"episodes=[1, 2] item {pos}: index {int(_np(item['index']))} != {i}")
            break
        js = [min(max(k + d, 0), n - 1) for d in deltas]  # LeRobot clamps to the episode
        rows = want["state"][i - k + np.array(js)]
        got = _np(item["observation.state"])
        pad = _np(item["observation.state_is_pad"]).tolist()
        want_pad = [not (0 <= k + d < n) for d in deltas]
        if not np.array_equal(got, rows) or pad != want_pad:
            fails.append(f"episodes=[1, 2] delta state at episode {ep} frame {k}: "
                         f"pad {pad} (want {want_pad}), rows equal {np.array_equal(got, rows)}")
            break
        frames = _np(item[cam])
        for slot, j in enumerate(js):
            img = np.rint(frames[slot].transpose(1, 2, 0) * 255.0).astype(np.int16)
            ref = want["frames"][CAMERAS[0]][i - k + j].astype(np.int16)
            if np.abs(img - ref).mean() > MEAN_TOL:
                fails.append(f"episodes=[1, 2] delta frame {deltas[slot]} at episode {ep} "
                             f"frame {k}: mean abs error {np.abs(img - ref).mean():.2f}")
                return fails
    return fails


# delta_timestamps for the BatchLoader check: ACT's chunk (longer than the shortest episode, so
# the end pads), Diffusion Policy's two observation frames, and offsets on both sides.
LOADER_DELTAS = {
    "observation.state": [-2, -1, 0],
    "next.reward": [0, 1, 2],
    "observation.environment_state": [-1, 0],
    "action": list(range(-1, 30)),
    "observation.images.front": [-1, 0, 2],
    "observation.images.wrist": [0],
}


def check_batch_loader(root: Path, repo_id: str, backend: str | None, workdir: Path,
                       dataset_cls, deltas: dict | None = None, size: tuple[int, int] = (H, W),
                       exact_cameras: tuple[str, ...] | None = None,
                       ) -> tuple[list[str], dict]:
    """numbatraj's ``BatchLoader`` over the imported store against LeRobot's own items.

    The directory is imported with ``import_lerobot_v3`` at its own frame size (no resize),
    then one unshuffled epoch of ``BatchLoader(delta_timestamps=...)`` batches (LeRobot
    feature names as keys, ``images="float"``) is compared with ``LeRobotDataset(root,
    delta_timestamps=...)[i]`` for every frame: state, action and every ``*_is_pad`` exactly;
    camera frames exactly when LeRobot decodes with PyAV (the decoder numbatraj's import
    uses), else the largest difference is reported.  ``exact_cameras`` (default: every
    camera) are the ones stored at their own size; a resized camera is only reported.
    Returns (failures, figures)."""
    from numbatraj.lerobot import import_lerobot_v3
    from numbatraj.training import BatchLoader

    fails: list[str] = []
    figs: dict = {}
    deltas = deltas or LOADER_DELTAS
    dts = {k: [d / FPS for d in v] for k, v in deltas.items()}
    store = workdir / f"{root.name}.h5"
    t0 = time.perf_counter()
    import_lerobot_v3(root, store, height=size[0], width=size[1], overwrite=True,
                      show_progress=False)
    figs["loader: import s"] = time.perf_counter() - t0
    ds = dataset_cls(repo_id=repo_id, root=root, delta_timestamps=dts, video_backend=backend)
    loader = BatchLoader(str(store), 16, delta_timestamps=dts, shuffle=False, drop_last=False,
                         images="float", output="numpy")
    n_items, frame_max, resized = 0, 0.0, set()
    # LeRobot's items are addressed by position in its parquet rows, which need not be in
    # index order (the fixture shuffles them); the store row of a frame is its global index.
    position = {int(v): p for p, v in enumerate(ds.hf_dataset["index"])}
    for batch in loader:
        for b, i in enumerate(batch["index"].tolist()):
            if i not in position:
                fails.append(f"loader row {i}: LeRobot has no frame with index {i}")
                return fails, figs
            item = ds[position[i]]
            n_items += 1
            if int(_np(item["index"])) != i or int(_np(item["episode_index"])) != \
                    int(batch["episode_index"][b]):
                fails.append(f"loader row {i}: index/episode_index {i}/"
                             f"{int(batch['episode_index'][b])} differ from LeRobot's "
                             f"{int(_np(item['index']))}/{int(_np(item['episode_index']))}")
                return fails, figs
            for key in deltas:
                got, ref = batch[key][b], _np(item[key])
                pad, ref_pad = batch[key + "_is_pad"][b], _np(item[key + "_is_pad"])
                if not np.array_equal(pad, ref_pad):
                    fails.append(f"loader row {i} {key}_is_pad {pad.tolist()} != LeRobot's "
                                 f"{ref_pad.tolist()}")
                    return fails, figs
                if key.startswith("observation.images.") and exact_cameras is not None \
                        and key not in exact_cameras:
                    resized.add(key)  # pad flags compared above; pixels resized by design
                    continue
                if key.startswith("observation.images.") and got.shape[:1] == (1,) \
                        and ref.shape == got.shape[1:]:
                    # LeRobot squeezes the time axis of a camera window of one offset
                    # (``frames.squeeze(0)``); numbatraj keeps (T, ...) for every key with
                    # deltas, as its docs say.  The values must still agree.
                    got = got[0]
                    figs["loader: LeRobot squeezes 1-offset camera windows"] = True
                if got.shape != ref.shape or got.dtype != ref.dtype:
                    fails.append(f"loader row {i} {key}: {got.dtype}{got.shape} != LeRobot's "
                                 f"{ref.dtype}{ref.shape}")
                    return fails, figs
                if key.startswith("observation.images."):
                    err = float(np.abs(got - ref).max()) * 255.0
                    frame_max = max(frame_max, err)
                    if (backend or "").lower() == "pyav" and err != 0.0:
                        fails.append(f"loader row {i} {key}: frames differ from LeRobot's "
                                     f"(max {err:.1f}/255) though both decode with PyAV")
                        return fails, figs
                elif not np.array_equal(got, ref):
                    fails.append(f"loader row {i} {key}: values differ from LeRobot's "
                                 f"(max abs {float(np.abs(got - ref).max())})")
                    return fails, figs
    loader.close()
    if n_items != len(ds):
        fails.append(f"loader epoch covered {n_items} frames, LeRobot has {len(ds)}")
    figs["loader: frames compared"] = n_items
    figs["loader: max frame difference (0..255)"] = frame_max
    figs["loader: frames exact"] = frame_max == 0.0
    if exact_cameras is not None:
        figs["loader: resized cameras (pad flags compared, pixels not)"] = sorted(resized)
    return fails, figs


def check_test_fixture(workdir: Path, backend: str | None, dataset_cls) -> tuple[list, dict]:
    """The suite's own adversarial LeRobot fixture (tests/lerobot/lerobot_fixtures.py: 7
    unequal episodes split unevenly over data, episode and video files, padding frames, an
    AV1 and an H.264 camera of different sizes) with LeRobot's RL features, through the
    same BatchLoader check.  The store holds one frame size, so the wrist camera (32x24) is
    resized to the front camera's 40x30: its frames are reported, not compared."""
    sys.path.insert(0, str(ROOT / "tests" / "lerobot"))
    from lerobot_fixtures import adversarial_spec
    from lerobot_fixtures import write_dataset as write_fixture

    root = workdir / "ds-test-fixture"
    if root.exists():
        shutil.rmtree(root)
    extra = {"next.reward": ("float32", [1]), "next.done": ("bool", [1]),
             "observation.environment_state": ("float32", [3])}
    # rows in index order, as LeRobot writes them: LeRobot addresses its parquet rows by
    # position (the shuffled-rows variant is a numbatraj robustness test, not LeRobot data)
    write_fixture(root, adversarial_spec(extra_features=extra, seed=3, shuffle_rows=False))
    deltas = {"observation.state": [-1, 0], "action": list(range(10)),
              "next.reward": [0, 1, 2], "observation.images.front": [-2, 0],
              "observation.images.wrist": [0, 1]}
    return check_batch_loader(root, "numbatraj/compat-test-fixture", backend, workdir,
                              dataset_cls, deltas=deltas, size=(30, 40),
                              exact_cameras=("observation.images.front",))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codec", action="append", default=None,
                    help="libsvtav1 and/or libx264 (repeatable; default both)")
    ap.add_argument("--video-backend", default=None,
                    help="LeRobot's decoder (default: LeRobot's own choice, torchcodec if present)")
    ap.add_argument("--workdir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the written datasets")
    ap.add_argument("--streaming", action="store_true",
                    help="also write with checkpoint=False (episodes share one mp4)")
    args = ap.parse_args()
    codecs = args.codec or ["libsvtav1", "libx264"]

    work = Path(args.workdir or tempfile.mkdtemp(prefix="numbatraj-lrcompat-"))
    work.mkdir(parents=True, exist_ok=True)
    # Offline and self-contained: LeRobot must read the directory as it is, never the Hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("HF_HOME", str(work / "hf_home"))
    os.environ.setdefault("HF_LEROBOT_HOME", str(work / "lerobot_home"))

    try:
        import lerobot
        ver = getattr(lerobot, "__version__", None)
        if ver is None:
            from importlib.metadata import version
            ver = version("lerobot")
        from lerobot.datasets.lerobot_dataset import CODEBASE_VERSION
    except Exception as exc:
        print(f"FAIL: cannot import LeRobot: {exc!r}")
        return 2
    import torch

    print(f"lerobot {ver} (CODEBASE_VERSION {CODEBASE_VERSION}), torch {torch.__version__}, "
          f"python {sys.version.split()[0]}; workdir {work}")
    results = {}
    runs = [(c, True) for c in codecs] + ([(c, False) for c in codecs] if args.streaming else [])
    for codec, checkpoint in runs:
        name = codec if checkpoint else f"{codec} checkpoint=False"
        root = work / f"ds-{codec}{'' if checkpoint else '-stream'}"
        if root.exists():
            shutil.rmtree(root)
        print(f"\n== {name}: writing {len(LENGTHS)} episodes {LENGTHS}, cameras {CAMERAS} "
              f"{W}x{H}, state {len(STATE_NAMES)}, action {len(ACTION_NAMES)}")
        try:
            want = write_dataset(root, codec, checkpoint)
        except Exception:
            traceback.print_exc()
            results[name] = (["LeRobotWriter raised (see traceback)"], {})
            continue
        try:
            fails, figs = check_loaded(root, f"numbatraj/compat-{root.name}", want,
                                       args.video_backend)
        except Exception as exc:
            traceback.print_exc()
            fails, figs = [f"LeRobotDataset raised {type(exc).__name__}: {exc}"], {}
        try:
            from lerobot.datasets.lerobot_dataset import LeRobotDataset

            lfails, lfigs = check_batch_loader(root, f"numbatraj/compat-{root.name}",
                                               args.video_backend, work, LeRobotDataset)
        except Exception as exc:
            traceback.print_exc()
            lfails, lfigs = [f"BatchLoader check raised {type(exc).__name__}: {exc}"], {}
        fails, figs = fails + lfails, {**figs, **lfigs}
        results[name] = (fails, figs)
        for k, v in figs.items():
            print(f"   {k}: {v:.3f}" if isinstance(v, float) else f"   {k}: {v}")
        for f in fails:
            print(f"   FAIL: {f}")

    print("\n== the suite's adversarial fixture, with next.reward/next.done/environment_state")
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        fails, figs = check_test_fixture(work, args.video_backend, LeRobotDataset)
    except Exception as exc:
        traceback.print_exc()
        fails, figs = [f"fixture check raised {type(exc).__name__}: {exc}"], {}
    results["test fixture"] = (fails, figs)
    for k, v in figs.items():
        print(f"   {k}: {v:.3f}" if isinstance(v, float) else f"   {k}: {v}")
    for f in fails:
        print(f"   FAIL: {f}")

    print("\n== summary")
    ok = True
    for codec, (fails, figs) in results.items():
        status = "PASS" if not fails else "FAIL"
        ok &= not fails
        px = (f"max abs pixel error {figs['pix_max']}, mean {figs['pix_mean']:.2f}, "
              f"p99 {figs['pix_p99']:.0f}, worst frame mean {figs['pix_worst_frame_mean']:.2f}; "
              f"LeRobot vs PyAV decode max {figs['lerobot_vs_pyav_max']}"
              if "pix_max" in figs else "no frames compared")
        print(f"{status} {codec}: {px}; {len(fails)} failure(s)")
    if not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
