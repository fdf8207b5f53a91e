"""The LeRobot import, fed malformed metadata and data of every kind, raises only numbatraj
errors (never AttributeError/KeyError/TypeError or a raw pyarrow/PyAV error), each naming the
file or key, and leaves nothing at ``out``.

Entries the importer does not rely on (a feature's ``names`` or ``info`` block, a camera's
declared shape -- the frames are decoded and resized to ``height x width`` --, an absent
``dtype`` of state/action -- read as float32 --, ``chunks_size``) are not checked, so
malformed values there import; everything it reads is."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from numbatraj.errors import NumbatrajError
from numbatraj.lerobot.read import import_lerobot_v3
from tests.lerobot.lerobot_fixtures import adversarial_spec, write_dataset

INFO = "meta/info.json"
DATA0 = "data/chunk-000/file-000.parquet"
EPS0 = "meta/episodes/chunk-000/file-000.parquet"
TASKS = "meta/tasks.parquet"


def _info(edit):
    def apply(root):
        path = os.path.join(root, INFO)
        doc = json.load(open(path))
        doc = edit(doc)
        open(path, "w").write(json.dumps(doc))
    return apply


def _set(*keys, value):
    def edit(doc):
        d = doc
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
        return doc
    return _info(edit)


def _drop(*keys):
    def edit(doc):
        d = doc
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
        return doc
    return _info(edit)


def _raw(rel, data):
    def apply(root):
        open(os.path.join(root, rel), "wb").write(data)
    return apply


def _table(rel, edit):
    def apply(root):
        path = os.path.join(root, rel)
        t = pq.read_table(path)
        pq.write_table(edit(t), path)
    return apply


def _replace_col(name, arr_fn):
    def edit(t):
        i = t.schema.get_field_index(name)
        return t.set_column(i, name, arr_fn(t))
    return edit


def _drop_col(name):
    return lambda t: t.drop_columns([name])


def _truncate(rel, keep):
    def apply(root):
        path = os.path.join(root, rel)
        data = open(path, "rb").read()
        open(path, "wb").write(data[:keep(len(data))])
    return apply


def _first_video(root):
    for dirpath, _, files in sorted(os.walk(os.path.join(root, "videos"))):
        for f in sorted(files):
            return os.path.relpath(os.path.join(dirpath, f), root)
    raise AssertionError("no video")


CASES = {
    # info.json of the wrong shape or types
    "info_list": (_raw(INFO, b"[1, 2, 3]"), INFO),
    "info_not_json": (_raw(INFO, b"{not json"), INFO),
    "info_binary": (_raw(INFO, b"\xff\xfe\x00garbage"), INFO),
    "info_empty": (_raw(INFO, b""), INFO),
    "features_list": (_set("features", value=[1, 2]), "features"),
    "features_missing": (_drop("features"), "features"),
    "feature_not_object": (_set("features", "observation.state", value="float32"),
                           "observation.state"),
    "state_shape_string": (_set("features", "observation.state", "shape", value="6"),
                           "observation.state"),
    "state_shape_missing": (_drop("features", "observation.state", "shape"),
                            "observation.state"),
    "fps_string": (_set("fps", value="thirty"), "fps"),
    "fps_missing": (_drop("fps"), "fps"),
    "fps_zero": (_set("fps", value=0), "fps"),
    "data_path_missing": (_drop("data_path"), "data_path"),
    "data_path_number": (_set("data_path", value=3), "data_path"),
    "video_path_list": (_set("video_path", value=["x"]), "video_path"),
    "video_path_unknown_field": (_set("video_path", value="videos/{camera}/{x}.mp4"),
                                 "video_path"),
    "data_path_unknown_field": (_set("data_path", value="data/{nope}.parquet"), "data_path"),
    "data_path_positional": (_set("data_path", value="data/{}.parquet"), "data_path"),
    "total_episodes_string": (_set("total_episodes", value="seven"), "total_episodes"),
    "total_frames_missing": (_drop("total_frames"), "total_frames"),
    # the tables
    "data_not_parquet": (_raw(DATA0, b"PAR1 garbage PAR1"), DATA0),
    "data_state_strings": (_table(DATA0, _replace_col(
        "observation.state", lambda t: pa.array(["x"] * t.num_rows))), "observation.state"),
    "data_index_floats": (_table(DATA0, _replace_col(
        "index", lambda t: pa.array([0.5] * t.num_rows))), "index"),
    "data_episode_index_null": (_table(DATA0, _replace_col(
        "episode_index", lambda t: pa.array([None] * t.num_rows, pa.int64()))), "episode_index"),
    "data_missing_timestamp": (_table(DATA0, _drop_col("timestamp")), "timestamp"),
    "data_action_ragged": (_table(DATA0, _replace_col(
        "action", lambda t: pa.array([[1.0]] * t.num_rows))), "action"),
    "episodes_missing_length": (_table(EPS0, _drop_col("length")), "length"),
    "episodes_length_strings": (_table(EPS0, _replace_col(
        "length", lambda t: pa.array(["5"] * t.num_rows))), "length"),
    "episodes_video_chunk_missing": (_table(EPS0, _drop_col(
        "videos/observation.images.front/chunk_index")), "observation.images.front"),
    "episodes_from_ts_strings": (_table(EPS0, _replace_col(
        "videos/observation.images.front/from_timestamp",
        lambda t: pa.array(["a"] * t.num_rows))), "from_timestamp"),
    "episodes_not_parquet": (_raw(EPS0, b"nope"), EPS0),
    "tasks_missing_index": (_table(TASKS, _drop_col("task_index")), "task_index"),
    "tasks_index_strings": (_table(TASKS, _replace_col(
        "task_index", lambda t: pa.array(["a"] * t.num_rows))), "task_index"),
    "tasks_not_parquet": (_raw(TASKS, b""), TASKS),
    "rejected_not_list": (_raw("meta/rejected_episodes.json", b'{"rejected_episodes": 3}'),
                          "rejected_episodes"),
    "rejected_strings": (_raw("meta/rejected_episodes.json", b'{"rejected_episodes": ["a"]}'),
                         "rejected"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_only_numbatraj_errors_naming_the_culprit(tmp_path, case):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    edit, needle = CASES[case]
    edit(root)
    out = tmp_path / "out" / "store.h5"
    with pytest.raises(Exception) as info:  # noqa: B017, PT011 - the type is what is checked
        import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    exc = info.value
    assert isinstance(exc, NumbatrajError), f"{type(exc).__name__} leaked: {exc}"
    if needle is not None:
        assert needle in str(exc), (needle, str(exc))
    left = sorted(os.listdir(out.parent)) if out.parent.exists() else []
    assert left == [], left


@pytest.mark.parametrize("where", ["header", "middle"])
def test_truncated_video_is_a_numbatraj_error(tmp_path, where):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    rel = _first_video(root)
    _truncate(rel, (lambda n: 200) if where == "header" else (lambda n: n // 2))(root)
    out = tmp_path / "out" / "store.h5"
    with pytest.raises(Exception) as info:  # noqa: B017, PT011
        import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    exc = info.value
    assert isinstance(exc, NumbatrajError), f"{type(exc).__name__} leaked: {exc}"
    assert os.path.basename(rel) in str(exc) or "observation.images" in str(exc), str(exc)
    assert not out.exists()
