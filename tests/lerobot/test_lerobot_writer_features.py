"""LeRobotWriter's extra features (``features=``): written as data columns, declared in
info.json, given statistics, imported as columns under their LeRobot names; bad values and
declarations refused naming the feature; resume refuses another feature set.  Also: what a
killed run left in the directory is removed by the next writer or resume."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from numbatraj.errors import LockedError, ResumeError, SchemaError
from numbatraj.io.atomic import is_temp_name, temp_path
from numbatraj.lerobot import schema as S
from numbatraj.lerobot.read import import_lerobot_v3
from numbatraj.lerobot.write import LeRobotWriter
from tests.lerobot.test_lerobot_writer_support import (
    H,
    Recorded,
    W,
    action_of,
    frame_of,
    import_and_check,
    state_of,
    writer_args,
)

FEATURES = {
    "next.reward": ("float32", (1,)),
    "next.done": ("bool", ()),
    "next.success": {"dtype": "bool", "shape": [1]},
    "observation.environment_state": ("float64", (4,)),
    "complementary.count": ("int64", (3,)),
    "observation.grid": ("int16", (6,)),
}


def extra_of(ep: int, j: int, n: int) -> dict[str, np.ndarray]:
    k = np.arange(6)
    return {
        "next.reward": np.float32(0.25 * j - ep),
        "next.done": j == n - 1,
        "next.success": np.array([j % 3 == 0]),
        "observation.environment_state": np.sin(0.1 * j + ep + k[:4]),
        "complementary.count": np.array([j, ep, j * ep - 7], dtype=np.int64),
        "observation.grid": (k * (j + 1) - ep).astype(np.int16),
    }


def _write(root, lengths, *, first=0, writer=None, **kw):
    w = writer or LeRobotWriter(root, **writer_args(codec="libx264", features=FEATURES, **kw))
    rec = Recorded(os.fspath(root), [], [])
    extras: list[dict[str, np.ndarray]] = []
    for n, length in enumerate(lengths):
        ep = first + n
        w.begin_episode("pick")
        rows = [extra_of(ep, j, length) for j in range(length)]
        for j in range(length):
            w.add_frame(state_of(ep, j), action_of(ep, j),
                        {c: frame_of(i, ep, j) for i, c in enumerate(w.cameras)}, extra=rows[j])
        w.end_episode()
        rec.lengths.append(length)
        rec.tasks.append("pick")
        rec.state.append(np.stack([state_of(ep, j) for j in range(length)]))
        rec.action.append(np.stack([action_of(ep, j) for j in range(length)]))
        for i, c in enumerate(w.cameras):
            rec.frames.setdefault(c, []).append(
                np.stack([frame_of(i, ep, j) for j in range(length)]))
        extras.append({k: np.stack([r[k] for r in rows]) for k in FEATURES})
    return w, rec, extras


def _want(extras, name, dtype, shape):
    a = np.concatenate([e[name] for e in extras]).astype(dtype)
    return a.reshape(len(a), *(() if tuple(shape) in ((), (1,)) else shape))


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "streaming"])
def test_extra_features_round_trip(tmp_path, checkpoint):
    root = tmp_path / "ds"
    w, rec, extras = _write(root, [4, 7, 3], checkpoint=checkpoint)
    w.close()
    info = json.load(open(root / S.INFO_PATH))
    for name, ft in FEATURES.items():
        dt, shape = (ft["dtype"], ft["shape"]) if isinstance(ft, dict) else ft
        assert info["features"][name] == {"dtype": dt, "shape": list(shape) or [1], "names": None}
    # the parquet holds each feature under its name: scalars plain, vectors fixed lists
    table = pq.read_table(sorted(root.glob("data/chunk-*/file-*.parquet"))[0])
    assert str(table.schema.field("next.reward").type) == "float"
    assert str(table.schema.field("next.done").type) == "bool"
    assert table.schema.field("observation.grid").type.list_size == 6
    # statistics of every extra feature, over all rows
    stats = json.load(open(root / S.STATS_PATH))
    for name in ("next.reward", "observation.environment_state", "complementary.count"):
        rows = np.concatenate([e[name] for e in extras]).astype(np.float64).reshape(14, -1)
        np.testing.assert_allclose(stats[name]["mean"], rows.mean(0), rtol=1e-9)
        np.testing.assert_allclose(stats[name]["std"], rows.std(0), rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(stats[name]["max"], rows.max(0))
        assert stats[name]["count"] == [14]
    grid = np.concatenate([e["observation.grid"] for e in extras]).astype(np.float64)
    np.testing.assert_allclose(stats["observation.grid"]["min"], grid.min(0))
    out = str(tmp_path / "out.h5")
    import_and_check(rec, out)
    with h5py.File(out, "r") as f:
        for name, ft in FEATURES.items():
            dt, shape = (ft["dtype"], ft["shape"]) if isinstance(ft, dict) else ft
            got = f[name][:]
            assert got.dtype == np.dtype(dt), name
            np.testing.assert_array_equal(got, _want(extras, name, dt, shape), err_msg=name)


@pytest.mark.parametrize(
    ("features", "needle"),
    [
        ({"action": ("float32", (1,))}, "'action' clashes"),
        ({"observation.state": ("float32", (6,))}, "'observation.state' clashes"),
        ({"timestamp": ("float32", (1,))}, "'timestamp' clashes"),
        ({"observation.images.front": ("float32", (1,))}, "'observation.images.front' clashes"),
        ({"task_index": ("int64", (1,))}, "'task_index' clashes"),
        ({"next.reward": ("string", (1,))}, "'next.reward' has dtype 'string'"),
        ({"next.reward": ("complex64", (1,))}, "'next.reward' has dtype"),
        ({"next.reward": ("float32", (0,))}, "'next.reward': shape"),
        ({"next.reward": ("float32", "x")}, "'next.reward': shape 'x'"),
        ({"observation.grid": ("int16", (2, 3))},
         "'observation.grid': shape (2, 3); extra features are scalars or vectors"),
        ({"next.reward": "float32"}, "'next.reward' is 'float32'"),
        ({"a,b": ("float32", (1,))}, "'a,b' cannot be a column"),
        ({"a/b": ("float32", (1,))}, "'a/b' cannot be a column"),
    ],
)
def test_bad_feature_declarations(tmp_path, features, needle):
    with pytest.raises(SchemaError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        LeRobotWriter(tmp_path / "ds", **writer_args(codec="libx264", features=features))
    assert not (tmp_path / "ds" / S.INFO_PATH).exists()


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda e: e.pop("next.reward"), r"missing \['next.reward'\]"),
        (lambda e: e.update({"next.rewards": 1.0}), r"unknown \['next.rewards'\]"),
        (lambda e: e.update({"next.reward": "high"}), "'next.reward' has dtype <U4"),
        (lambda e: e.update({"complementary.count": np.array([1.5, 2, 3])}),
         "'complementary.count' has dtype float64, which does not convert to its declared int64"),
        (lambda e: e.update({"next.done": 1}), "'next.done' has dtype int64"),
        (lambda e: e.update({"observation.environment_state": np.zeros(5)}),
         r"'observation.environment_state' has shape \(5,\), expected \(4,\)"),
        (lambda e: e.update({"observation.grid": np.zeros((2, 3), np.int16)}),
         r"'observation.grid' has shape \(2, 3\), expected \(6,\)"),
        (lambda e: e.update({"next.reward": np.zeros(2, np.float32)}),
         r"'next.reward' has shape \(2,\), expected \(1,\)"),
        (lambda e: e.update({"next.reward": [[1.0], [2.0, 3.0]]}), "'next.reward' is not an array"),
    ],
)
def test_bad_frame_values_name_the_feature(tmp_path, change, needle):
    w = LeRobotWriter(tmp_path / "ds", **writer_args(codec="libx264", features=FEATURES))
    w.begin_episode("pick")
    good = extra_of(0, 0, 3)
    w.add_frame(state_of(0, 0), action_of(0, 0),
                {c: frame_of(i, 0, 0) for i, c in enumerate(w.cameras)}, extra=good)
    bad = dict(good)
    change(bad)
    with pytest.raises(SchemaError, match=needle):
        w.add_frame(state_of(0, 1), action_of(0, 1),
                    {c: frame_of(i, 0, 1) for i, c in enumerate(w.cameras)}, extra=bad)
    with pytest.raises(SchemaError, match="missing"):  # no extra= at all
        w.add_frame(state_of(0, 1), action_of(0, 1),
                    {c: frame_of(i, 0, 1) for i, c in enumerate(w.cameras)})
    assert w._episode["n"] == 1  # the refused frames changed nothing
    w.end_episode()
    w.close()


def test_frames_without_features_refuse_extra(tmp_path):
    with LeRobotWriter(tmp_path / "ds", **writer_args(codec="libx264")) as w:
        w.begin_episode("pick")
        with pytest.raises(SchemaError, match=r"unknown \['next.reward'\]"):
            w.add_frame(state_of(0, 0), action_of(0, 0),
                        {c: frame_of(i, 0, 0) for i, c in enumerate(w.cameras)},
                        extra={"next.reward": 1.0})
        w.discard_episode()


def test_resume_with_features_and_refusals(tmp_path):
    root = tmp_path / "ds"
    w, rec, extras = _write(root, [3, 5])
    del w  # a recorder that stopped without close(): the checkpoint is complete
    import gc

    gc.collect()
    args = writer_args(codec="libx264")
    changed = [
        None,
        {k: v for k, v in FEATURES.items() if k != "next.done"},
        {**FEATURES, "extra.one": ("float32", (1,))},
        {**FEATURES, "next.reward": ("float64", (1,))},
        {**FEATURES, "observation.environment_state": ("float64", (5,))},
    ]
    for feats in changed:
        with pytest.raises(ResumeError, match="extra features differ"):
            LeRobotWriter.resume(root, **args, features=feats)
    w2 = LeRobotWriter.resume(root, **args, features=dict(reversed(FEATURES.items())))
    _, more, more_extras = _write(root, [4], first=2, writer=w2)
    w2.close()
    for key in ("state", "action", "lengths", "tasks"):
        getattr(rec, key).extend(getattr(more, key))
    for c in more.frames:
        rec.frames[c] += more.frames[c]
    out = str(tmp_path / "out.h5")
    import_and_check(rec, out)
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(
            f["observation.environment_state"][:],
            _want(extras + more_extras, "observation.environment_state", "float64", (4,)))
        np.testing.assert_array_equal(f["next.done"][:],
                                      _want(extras + more_extras, "next.done", "bool", ()))


def test_stale_temporaries_removed_by_next_writer_and_resume(tmp_path):
    root = tmp_path / "ds"
    # a killed first run: temporaries and a .part video, no dataset yet
    (root / "meta").mkdir(parents=True)
    (root / "videos/observation.images.front/chunk-000").mkdir(parents=True)
    stale = [temp_path(str(root / S.INFO_PATH)), temp_path(str(root / S.STATS_PATH)),
             str(root / "videos/observation.images.front/chunk-000/file-000.mp4.part")]
    keep = root / "notes.txt"  # not a writer's name: left alone
    mine = [root / "download.part", root / f"x.{'a' * 16}.tmp"]  # outside meta/ data/ videos/
    for p in stale:
        open(p, "wb").write(b"half")
    keep.write_text("mine")
    for p in mine:
        p.write_bytes(b"user's")
    w = LeRobotWriter(root, **writer_args(codec="libx264"))
    assert sorted(w.resumed_removed) == sorted(stale)
    assert not any(os.path.exists(p) for p in stale) and keep.exists()
    assert all(p.exists() for p in mine)
    # a second writer or resume of the same directory while this one is open: refused
    with pytest.raises(LockedError, match="LeRobotWriter"):
        _other_process_open(root)
    w.begin_episode("pick")
    for j in range(3):
        w.add_frame(state_of(0, j), action_of(0, j),
                    {c: frame_of(i, 0, j) for i, c in enumerate(w.cameras)})
    w.end_episode()
    w.close()
    # a checkpoint killed before its journal: temporaries beside the metadata and data
    late = [temp_path(str(root / S.TASKS_PATH)),
            temp_path(str(root / S.data_file(S.DEFAULT_DATA_PATH, 0, 0)))]
    for p in late:
        open(p, "wb").write(b"x")
    w = LeRobotWriter.resume(root, **writer_args(codec="libx264"))
    assert sorted(w.resumed_removed) == sorted(late)
    w.close()
    left = [f for _, _, fs in os.walk(root) for f in fs if is_temp_name(f)]
    assert left == [mine[1].name] and not os.path.exists(str(root) + ".lock")
    assert all(p.exists() for p in mine)  # files of the user's own, beside the dataset
    import_lerobot_v3(root, tmp_path / "o.h5", height=H, width=W, show_progress=False)


def _other_process_open(root):
    """Open a writer of ``root`` in another process; its LockedError re-raised here."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from numbatraj.errors import LockedError\n"
        "from numbatraj.lerobot.write import LeRobotWriter\n"
        "from tests.lerobot.test_lerobot_writer_support import writer_args\n"
        "try:\n"
        "    LeRobotWriter.resume(sys.argv[1], **writer_args(codec='libx264'))\n"
        "except LockedError as e:\n"
        "    print('LOCKED', e)\n"
        "except Exception as e:\n"
        "    print('OTHER', type(e).__name__, e)\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True,
                          text=True, timeout=120, cwd=repo,
                          env={**os.environ, "PYTHONPATH": repo})
    if proc.stdout.startswith("LOCKED"):
        raise LockedError(11, proc.stdout)
    raise AssertionError(proc.stdout + proc.stderr)


@pytest.mark.parametrize("sidecar", [b"{not json", b'{"version": 1, "checkpoint": true, '
                                     b'"episodes": [{"nostats": 1}]}',
                                     b'{"version": 1, "checkpoint": true, "episodes": 3}'])
def test_resume_refuses_a_malformed_sidecar(tmp_path, sidecar):
    root = tmp_path / "ds"
    w, _, _ = _write(root, [3])
    w.close()
    (root / "meta" / "numbatraj_writer_stats.json").write_bytes(sidecar)
    with pytest.raises(ResumeError, match="numbatraj_writer_stats.json"):
        LeRobotWriter.resume(root, **writer_args(codec="libx264"), features=FEATURES)
    assert not os.path.exists(str(root) + ".lock")  # the lock was let go
