"""Every bookkeeping check of import_lerobot_v3 against the bad input it exists for.

Each test asserts the error class, that the message names the culprit (file, episode,
camera, value) and that nothing is left at ``out`` or beside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import namedtuple

import pytest

from numbatraj.errors import DiskSpaceError, EpisodeError, IntegrityError
from numbatraj.io import diskspace
from numbatraj.io.video import probe_video
from numbatraj.lerobot import _plan, _stream
from numbatraj.lerobot.read import LeRobotFormatError, import_lerobot_v3
from tests.lerobot.lerobot_fixtures import CameraSpec, adversarial_spec, write_dataset

WRIST = "observation.images.wrist"
FRONT = "observation.images.front"


def _import_fails(tmp_path, root, exc_type, *needles):
    out = tmp_path / "out" / "store.h5"
    with pytest.raises(exc_type) as info:
        import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    left = sorted(os.listdir(out.parent)) if out.parent.exists() else []
    assert left == [], f"a failed import left {left}"
    return msg


def _cams(**wrist_changes):
    spec = adversarial_spec()
    for k, v in wrist_changes.items():
        setattr(spec.cameras[0], k, v)
    return spec


def test_wrong_codebase_version_names_it(tmp_path):
    root = write_dataset(
        tmp_path / "ds", adversarial_spec(info_overrides={"codebase_version": "v2.1"})
    )
    _import_fails(tmp_path, root, LeRobotFormatError, "'v2.1'", "info.json", "v3.0")


def test_not_a_dataset(tmp_path):
    (tmp_path / "empty").mkdir()
    _import_fails(tmp_path, str(tmp_path / "empty"), LeRobotFormatError, "meta/info.json")


def test_camera_episodes_out_of_order_within_a_file(tmp_path):
    spec = _cams(files=[[0, 2, 1, 3], [4], [5, 6]])
    root = write_dataset(tmp_path / "ds", spec)
    _import_fails(
        tmp_path, root, IntegrityError, WRIST, "episode 2", "not in dataset order", "file-000.mp4"
    )


def test_camera_episodes_out_of_order_across_files(tmp_path):
    spec = _cams(files=[[0, 1, 2, 3, 5], [4], [6]], keys=[(0, 0), (0, 1), (1, 0)])
    root = write_dataset(tmp_path / "ds", spec)
    _import_fails(tmp_path, root, IntegrityError, WRIST, "episode 5", "across its files")


@pytest.mark.parametrize(
    "override, needles",
    [
        ({"total_frames": 47}, ["total_frames=47", "48"]),
        ({"total_episodes": 8.0}, ["total_episodes=8", "7 episodes"]),
        ({"total_episodes": 6.5}, ["total_episodes", "6.5"]),
    ],
)
def test_counts_disagreeing_with_info_json(tmp_path, override, needles):
    root = write_dataset(tmp_path / "ds", adversarial_spec(info_overrides=override))
    kind = LeRobotFormatError if override.get("total_episodes") == 6.5 else IntegrityError
    _import_fails(tmp_path, root, kind, *needles)


def test_missing_data_row(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec(drop_rows=[10]))
    _import_fails(tmp_path, root, IntegrityError, "47 rows", "total_frames=48", "missing")


def test_missing_and_duplicated_rows_that_balance_out(tmp_path):
    # Row counts agree with info.json, so only the per-episode check can see it.
    root = write_dataset(tmp_path / "ds", adversarial_spec(drop_rows=[10], duplicate_rows=[30]))
    _import_fails(
        tmp_path,
        root,
        IntegrityError,
        "episode 1",
        "index 10 are missing",
        "data/chunk-000/file-000.parquet",
    )


def test_duplicated_row(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec(drop_rows=[47], duplicate_rows=[20]))
    _import_fails(tmp_path, root, IntegrityError, "episode 3", "index 20 are duplicated")


def test_video_shorter_than_its_episodes_from_the_header(tmp_path):
    # The last file of the wrist camera (episodes 5, 6: frames 0-3, 2 padding, 6-13) loses
    # its last 3 frames, which episode 6 needs.
    spec = _cams(drop=[(2, 11), (2, 12), (2, 13)])
    root = write_dataset(tmp_path / "ds", spec)
    _import_fails(
        tmp_path, root, IntegrityError, WRIST, "episode 6", "shorter", "chunk-001/file-000.mp4"
    )


@pytest.mark.parametrize(
    "drop, needle", [((2, 13), "ends before frame 13"), ((0, 9), "has no frame 9")]
)
def test_video_shorter_or_gapped_found_while_decoding(tmp_path, monkeypatch, drop, needle):
    """Containers that record no frame count: the decoder itself must notice."""
    spec = _cams(drop=[drop])
    root = write_dataset(tmp_path / "ds", spec)

    def no_count(path):
        return dataclasses.replace(probe_video(path), n_frames=0)

    monkeypatch.setattr(_plan, "probe_video", no_count)
    _import_fails(tmp_path, root, IntegrityError, WRIST, needle)


@pytest.mark.parametrize(
    "victim, needles",
    [
        (
            "videos/observation.images.front/chunk-001/file-000.mp4",
            [FRONT, "missing", "episodes 2..5"],
        ),
        ("data/chunk-000/file-001.parquet", ["episode 3", "data file", "missing"]),
        ("meta/tasks.parquet", ["tasks.parquet", "missing"]),
    ],
)
def test_missing_file(tmp_path, victim, needles):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    os.remove(os.path.join(root, victim))
    _import_fails(tmp_path, root, IntegrityError, *needles)


@pytest.mark.parametrize(
    "victim",
    [
        "data/chunk-001/file-000.parquet",
        "meta/episodes/chunk-001/file-000.parquet",
        "meta/tasks.parquet",
    ],
)
def test_corrupt_parquet(tmp_path, victim):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    path = os.path.join(root, victim)
    data = open(path, "rb").read()
    with open(path, "wb") as fh:  # truncated: the footer is gone
        fh.write(data[: len(data) // 2])
    _import_fails(tmp_path, root, IntegrityError, victim, "not a readable Parquet file")


def test_corrupt_data_file_found_while_streaming(tmp_path, monkeypatch):
    """A footer that survives with broken pages is only seen when the rows are read."""
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    path = os.path.join(root, "data/chunk-001/file-000.parquet")
    data = bytearray(open(path, "rb").read())
    data[4:200] = b"\xff" * 196
    open(path, "wb").write(bytes(data))
    _import_fails(tmp_path, root, IntegrityError, "chunk-001/file-000.parquet")


def test_not_enough_disk_checked_before_decoding(tmp_path, monkeypatch):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(diskspace.shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 1000, 1000))

    def no_decoding(*a, **k):
        raise AssertionError("a decoder was opened before the disk space check")

    monkeypatch.setattr(_stream, "FrameCursor", no_decoding)
    msg = _import_fails(tmp_path, root, DiskSpaceError, "not enough free disk space", "store.h5")
    assert "KiB" in msg or "MiB" in msg


def test_rejected_episode_that_does_not_exist(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec(rejected=[2, 9]))
    _import_fails(tmp_path, root, IntegrityError, "rejected_episodes.json", "episode 9")


def test_malformed_rejected_file(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    with open(os.path.join(root, "meta/rejected_episodes.json"), "w") as fh:
        json.dump([1, 2], fh)
    _import_fails(tmp_path, root, LeRobotFormatError, "rejected_episodes")


def test_every_episode_rejected(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec(rejected=list(range(7))))
    _import_fails(tmp_path, root, EpisodeError, "every episode")


def test_declared_feature_missing_from_the_data_files(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    info_path = os.path.join(root, "meta/info.json")
    info = json.load(open(info_path))
    info["features"]["observation.images.top"] = {"dtype": "image", "shape": [24, 32, 3]}
    json.dump(info, open(info_path, "w"))
    _import_fails(tmp_path, root, LeRobotFormatError, "observation.images.top", "no column")


def test_state_width_disagreeing_with_info(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    info_path = os.path.join(root, "meta/info.json")
    info = json.load(open(info_path))
    info["features"]["observation.state"]["shape"] = [7]
    json.dump(info, open(info_path, "w"))
    _import_fails(tmp_path, root, IntegrityError, "observation.state", "(7,)")


def test_row_labelled_with_another_episode(tmp_path, monkeypatch):
    spec = adversarial_spec(shuffle_rows=False)
    root = write_dataset(tmp_path / "ds", spec)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = os.path.join(root, "data/chunk-000/file-000.parquet")
    t = pq.read_table(path)
    ep = t.column("episode_index").to_numpy().copy()
    ep[6] = 2  # row index 6 belongs to episode 1
    t = t.set_column(t.schema.get_field_index("episode_index"), "episode_index", pa.array(ep))
    pq.write_table(t, path)
    assert pc.sum(t.column("episode_index")).as_py() > 0
    _import_fails(tmp_path, root, IntegrityError, "episode 1", "row index 6", "labelled episode 2")


def test_unused_camera_spec_helper():
    # CameraSpec defaults describe a usable camera (guards the fixture itself).
    cam = CameraSpec("c")
    assert (cam.codec, cam.width, cam.height) == ("h264", 32, 24)


def test_write_failure_in_the_background_thread(tmp_path, monkeypatch):
    """A write that fails on the writing thread (disk full) surfaces in the caller."""
    import errno
    import threading

    from numbatraj.data.writer import TrajectoryStoreWriter

    real = TrajectoryStoreWriter.append_rows
    calls = []

    def append_rows(self, rows):
        calls.append(threading.current_thread().name)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, rows)

    monkeypatch.setattr(TrajectoryStoreWriter, "append_rows", append_rows)
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    _import_fails(tmp_path, root, OSError, "No space left")
    assert calls[0] != threading.current_thread().name  # it did run on the writing thread
    assert not [t for t in threading.enumerate() if t.name.startswith("numbatraj-")]
