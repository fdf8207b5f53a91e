"""import_lerobot_v3 against an independent oracle on datasets built to break bookkeeping.

The oracle (:func:`oracle`) shares no code with the importer: it reads every data file whole
and sorts all rows by their global index, decodes every frame of every video file into memory
and picks each episode's frames by nearest timestamp (``from_timestamp + j / fps``), the way
LeRobot's own loader does, then resizes with Pillow.  The importer streams instead.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import av
import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from numbatraj.data.store import TrajectoryStore
from numbatraj.data.validate import validate_store
from numbatraj.errors import LeRobotFormatError
from numbatraj.io.atomic import is_temp_name
from numbatraj.lerobot import read as lerobot_import
from numbatraj.lerobot.read import NORM_STD_FLOOR, import_lerobot_v3
from tests.importers.format_fixtures import check_store_stats
from tests.lerobot.lerobot_fixtures import (
    PAD_EPISODE,
    CameraSpec,
    adversarial_spec,
    expected_code,
    frame_code,
    read_code,
    write_dataset,
)
from tests.lerobot.test_lerobot_writer_support import record


def _decode_all(path: str) -> tuple[np.ndarray, list[np.ndarray]]:
    times, frames = [], []
    with av.open(path) as c:
        for f in c.decode(video=0):
            times.append(float(f.pts * f.time_base))
            frames.append(f.to_ndarray(format="rgb24"))
    return np.asarray(times), frames


def oracle(root: str, height: int, width: int) -> dict[str, object]:
    """Every column of the expected store, computed the slow, obvious way."""
    info = json.load(open(os.path.join(root, "meta/info.json")))
    fps = info["fps"]
    cams = sorted(k for k, v in info["features"].items() if v["dtype"] == "video")
    rows = pa.concat_tables(
        [pq.read_table(p) for p in sorted(glob.glob(f"{root}/data/*/*.parquet"))]
    ).to_pydict()
    order = np.argsort(rows["index"])
    eps_table = pa.concat_tables(
        [pq.read_table(p) for p in sorted(glob.glob(f"{root}/meta/episodes/*/*.parquet"))]
    ).to_pylist()
    eps_table.sort(key=lambda r: r["episode_index"])
    rej_path = os.path.join(root, "meta/rejected_episodes.json")
    rejected = (
        set(json.load(open(rej_path))["rejected_episodes"]) if os.path.exists(rej_path) else set()
    )
    videos = {}
    qpos, action, task, images, lengths, codes = [], [], [], [], [], []
    for ep in eps_table:
        e = ep["episode_index"]
        if e in rejected:
            continue
        mine = [int(i) for i in order if rows["episode_index"][i] == e]
        lengths.append(len(mine))
        qpos += [rows["observation.state"][i] for i in mine]
        action += [rows["action"][i] for i in mine]
        task += [rows["task_index"][i] for i in mine]
        for j in range(len(mine)):
            per_cam = []
            for cam in cams:
                path = os.path.join(
                    root,
                    info["video_path"].format(
                        video_key=cam,
                        chunk_index=ep[f"videos/{cam}/chunk_index"],
                        file_index=ep[f"videos/{cam}/file_index"],
                    ),
                )
                if path not in videos:
                    videos[path] = _decode_all(path)
                times, frames = videos[path]
                t = ep[f"videos/{cam}/from_timestamp"] + j / fps
                k = int(np.argmin(np.abs(times - t)))
                assert abs(times[k] - t) < 1e-4, (path, t, times[k])
                img = Image.fromarray(frames[k])
                if img.size != (width, height):
                    img = img.resize((width, height), Image.BILINEAR)
                per_cam.append(np.asarray(img).transpose(2, 0, 1))
            images.append(np.stack(per_cam))
            codes.append((e, j))
    q = np.asarray(qpos, np.float32)
    a = np.asarray(action, np.float32)
    return {
        "qpos": q,
        "action": a,
        "task_index": np.asarray(task, np.int32),
        "images": np.stack(images),
        "lengths": np.asarray(lengths),
        "codes": codes,
        "cams": cams,
        "norm_qpos_mean": q.astype(np.float64).mean(0).astype(np.float32),
        "norm_qpos_std": np.maximum(q.astype(np.float64).std(0), NORM_STD_FLOOR).astype(np.float32),
        "norm_action_mean": a.astype(np.float64).mean(0).astype(np.float32),
        "norm_action_std": np.maximum(a.astype(np.float64).std(0), NORM_STD_FLOOR).astype(
            np.float32
        ),
    }


def _check_against_oracle(
    root: str, out: str, height: int, width: int, cam_ids: dict[str, int]
) -> None:
    exp = oracle(root, height, width)
    with TrajectoryStore(out) as s:
        np.testing.assert_array_equal(s.episode_lengths, exp["lengths"])
        for col in ("qpos", "action", "task_index"):
            got = s.load_column(col)
            assert got.dtype == exp[col].dtype
            np.testing.assert_array_equal(got, exp[col])
        images = s.load_column("images")
        assert images.shape == exp["images"].shape
        # The oracle decodes with the same library: identical pixels are expected.
        np.testing.assert_array_equal(images, exp["images"])
        # And every frame is the one it claims to be, read from its colour code.
        cams = s.manifest["attr.cameras"].split(",")
        assert cams == exp["cams"] == sorted(cams)
        for r, (e, j) in enumerate(exp["codes"]):
            for c, cam in enumerate(cams):
                assert read_code(images[r, c]) == expected_code(cam_ids[cam], e, j), (r, cam)
        # Pixels stay within a codec tolerance of what was encoded.
        for r in (0, len(exp["codes"]) // 2, len(exp["codes"]) - 1):
            e, j = exp["codes"][r]
            for c, cam in enumerate(cams):
                src = np.asarray(
                    Image.fromarray(frame_code(cam_ids[cam], e, j, 24, 32)).resize(
                        (width, height), Image.BILINEAR
                    )
                ).transpose(2, 0, 1)
                # stripe interiors only: edges blur under the codec and the resize
                inner = slice(width // 16, width // 8)
                assert np.abs(images[r, c][:, :, inner].astype(int) - src[:, :, inner]).max() <= 12
    with h5py.File(out) as f:
        for name in ("norm_qpos_mean", "norm_qpos_std", "norm_action_mean", "norm_action_std"):
            assert f[name].dtype == np.float32
            np.testing.assert_allclose(f[name][()], exp[name], rtol=2e-6, atol=1e-7)
    assert validate_store(out).ok


def _cam_ids(spec) -> dict[str, int]:
    return {cam.name: i for i, cam in enumerate(spec.cameras)}


def test_adversarial_av1_and_h264_matches_oracle(tmp_path):
    spec = adversarial_spec()
    root = write_dataset(tmp_path / "ds", spec)
    out = str(tmp_path / "store.h5")
    assert import_lerobot_v3(root, out, height=24, width=32, show_progress=False) == out
    assert not [p for p in os.listdir(tmp_path) if is_temp_name(p)]  # no temporary left
    _check_against_oracle(root, out, 24, 32, _cam_ids(spec))
    with TrajectoryStore(out) as s:
        m = s.manifest
        assert json.loads(m["attr.tasks"]) == {"0": "pick the cube", "1": "place it\nin the bowl"}
        assert m["attr.fps"] == "30" and m["attr.source"] == os.path.abspath(root)
        assert s.n_rows == sum(spec.lengths)


@pytest.mark.parametrize("text_col", ["__index_level_0__", "task"])
def test_all_h264_resized_rejected_episodes_float_sizes(tmp_path, text_col):
    cams = [
        CameraSpec(
            "cam_b",
            codec="h264",
            width=32,
            height=24,
            files=[[0, 1], [2, 3, 4]],
            keys=[(0, 0), (1, 0)],
            gap=1,
        ),
        CameraSpec(
            "cam_a",
            codec="h264",
            width=48,
            height=36,
            files=[[0], [1, 2], [3, 4]],
            keys=[(0, 0), (0, 1), (0, 2)],
            lead=2,
        ),
    ]
    spec = adversarial_spec(
        lengths=[6, 3, 8, 5, 4],
        cameras=cams,
        data_files=[[0, 1, 2, 3, 4]],
        data_keys=[(0, 0)],
        meta_files=[[0, 1], [2, 3, 4]],
        meta_keys=[(0, 0), (0, 1)],
        episode_task=[1, 0, 1, 0, 0],
        rejected=[1, 3],
        float_sizes=True,
        task_text_column=text_col,
    )
    root = write_dataset(tmp_path / "ds", spec)
    out = str(tmp_path / "store.h5")
    import_lerobot_v3(root, out, height=18, width=24, show_progress=False)
    _check_against_oracle(root, out, 18, 24, _cam_ids(spec))
    with TrajectoryStore(out) as s:
        assert s.n_episodes == 3 and s.n_rows == 6 + 8 + 4
        assert json.loads(s.manifest["attr.rejected_episodes"]) == [1, 3]
        assert s.manifest["attr.source_episodes"] == "0,2,4"


def test_rejected_episodes_left_out_of_normalisation(tmp_path):
    spec = adversarial_spec(rejected=[3])
    root = write_dataset(tmp_path / "ds", spec)
    out_all, out_rej = str(tmp_path / "a.h5"), str(tmp_path / "r.h5")
    import_lerobot_v3(root, out_rej, height=24, width=32, show_progress=False)
    os.remove(os.path.join(root, "meta/rejected_episodes.json"))
    import_lerobot_v3(root, out_all, height=24, width=32, show_progress=False)
    assert "qpos" in check_store_stats(out_rej)  # stats/<column>/ over the kept episodes
    with h5py.File(out_all) as fa, h5py.File(out_rej) as fr:
        assert fr["qpos"].shape[0] == fa["qpos"].shape[0] - spec.lengths[3]
        assert not np.allclose(fa["norm_qpos_mean"][()], fr["norm_qpos_mean"][()])
        starts = np.cumsum([0] + spec.lengths)
        kept = np.concatenate([fa["qpos"][starts[e] : starts[e + 1]] for e in range(7) if e != 3])
        np.testing.assert_allclose(
            fr["norm_qpos_mean"][()], kept.astype(np.float64).mean(0), rtol=2e-6
        )


def test_std_floor_applies_to_constant_joints(tmp_path):
    spec = adversarial_spec(state_dim=3)
    root = write_dataset(tmp_path / "ds", spec)
    out = str(tmp_path / "s.h5")
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    with h5py.File(out) as f:
        assert np.all(f["norm_qpos_std"][()] >= NORM_STD_FLOOR)
        assert np.all(f["norm_action_std"][()] > NORM_STD_FLOOR)  # these joints move


def test_existing_output_reused_only_when_it_validates_and_its_fingerprint_matches(tmp_path):
    from numbatraj.errors import DatasetExistsError

    root = write_dataset(tmp_path / "ds", adversarial_spec())
    out = tmp_path / "s.h5"
    for junk in (b"not a store", b"\x89HDF\r\n\x1a\n truncated"):
        out.write_bytes(junk)
        with pytest.raises(DatasetExistsError, match="does not validate.*overwrite"):
            import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
        assert out.read_bytes() == junk
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False, force=True)  # alias
    assert validate_store(str(out)).ok
    first = out.stat().st_mtime_ns
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False)  # reused
    assert out.stat().st_mtime_ns == first
    with pytest.raises(DatasetExistsError, match="fingerprint"):  # other parameters
        import_lerobot_v3(root, out, height=12, width=16, show_progress=False)
    other = write_dataset(tmp_path / "other", adversarial_spec())
    with pytest.raises(DatasetExistsError, match="fingerprint"):  # another dataset
        import_lerobot_v3(other, out, height=24, width=32, show_progress=False)
    import_lerobot_v3(other, out, height=24, width=32, show_progress=False, overwrite=True)
    with TrajectoryStore(out) as st:
        assert st.manifest["attr.source"] == str(other)


def test_padding_frames_are_never_imported(tmp_path):
    spec = adversarial_spec()
    root = write_dataset(tmp_path / "ds", spec)
    out = str(tmp_path / "s.h5")
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    with TrajectoryStore(out) as s:
        codes = {read_code(img[c])[1] for img in s.load_column("images") for c in range(2)}
    assert PAD_EPISODE not in codes and codes == set(range(7))


def test_cli_import_root(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    out = tmp_path / "cli.h5"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "numbatraj",
            "import",
            "lerobot",
            "--root",
            root,
            "--out",
            str(out),
            "--height",
            "24",
            "--width",
            "32",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out) and validate_store(str(out)).ok
    r = subprocess.run(
        [sys.executable, "-m", "numbatraj", "import", "lerobot", "--root", root],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2 and "--out" in r.stderr
    (tmp_path / "ds" / "meta" / "info.json").write_text('{"codebase_version": "v2.1"}')
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "numbatraj",
            "import",
            "lerobot",
            "--root",
            root,
            "--out",
            str(tmp_path / "x.h5"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 1 and "v2.1" in r.stderr and not (tmp_path / "x.h5").exists()


def test_cli_repo_default_output_from_cache(tmp_path, monkeypatch):
    from numbatraj.cli import main

    monkeypatch.setenv("NUMBATRAJ_CACHE", str(tmp_path / "cache"))
    write_dataset(tmp_path / "cache" / "lerobot" / "Org__so101-demo", adversarial_spec())
    assert (
        main(
            [
                "import",
                "lerobot",
                "--repo",
                "Org/so101-demo",
                "--height",
                "24",
                "--width",
                "32",
                "--no-download",
                "--quiet",
            ]
        )
        == 0
    )
    assert validate_store(str(tmp_path / "cache" / "stores" / "Org__so101-demo_24x32.h5")).ok
    assert main(["import", "lerobot", "--repo", "Org/absent", "--no-download", "--quiet"]) == 1


@pytest.mark.slow
def test_example_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    r = subprocess.run(
        [sys.executable, "examples/import_lerobot.py", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "episodes" in r.stdout


def test_progress_bar_on_a_terminal_only(tmp_path, monkeypatch):
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    root = write_dataset(tmp_path / "ds", adversarial_spec())
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    import_lerobot_v3(root, tmp_path / "a.h5", height=24, width=32)
    text = tty.getvalue()
    assert "48.0/48.0" in text and "frame/s" in text and "100%" in text  # done, rate
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    import_lerobot_v3(root, tmp_path / "b.h5", height=24, width=32)
    import_lerobot_v3(root, tmp_path / "c.h5", height=24, width=32, show_progress=False)
    assert pipe.getvalue() == ""


def test_failed_import_keeps_a_concurrent_imports_temp_file(tmp_path, monkeypatch):
    rec = record(tmp_path / "ds", [3], codec="libx264")
    out = str(tmp_path / "store.h5")
    others = [out + ".tmp", out + ".tmp.tmp", out + ".0badf00d.tmp", out + ".0badf00d.tmp.tmp"]
    for p in others:
        with open(p, "wb") as fh:
            fh.write(b"another import's bytes")

    def boom(*a, **kw):
        raise RuntimeError("decoder failed")

    monkeypatch.setattr(lerobot_import, "_write_rows", boom)
    with pytest.raises(RuntimeError, match="decoder failed"):
        lerobot_import.import_lerobot_v3(rec.root, out, height=8, width=8, progress=False)
    assert not os.path.exists(out)
    assert sorted(os.listdir(tmp_path)) == sorted(["ds"] + [os.path.basename(p) for p in others])
    for p in others:
        with open(p, "rb") as fh:
            assert fh.read() == b"another import's bytes"
    monkeypatch.undo()
    lerobot_import.import_lerobot_v3(rec.root, out, height=8, width=8, progress=False)
    assert os.path.isfile(out)
    assert np.all([os.path.exists(p) for p in others])


def test_import_publishes_once_with_its_norm_stats(tmp_path, monkeypatch):
    """One rename into place, no reopening of the published store to add the norm stats."""
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    out = str(tmp_path / "s.h5")
    renamed_to: list[str] = []
    real_replace, real_link, real_file = os.replace, os.link, h5py.File
    modes: list[str] = []

    def replace(src, dst, *a, **kw):
        renamed_to.append(os.fspath(dst))
        return real_replace(src, dst, *a, **kw)

    def link(src, dst, *a, **kw):
        renamed_to.append(os.fspath(dst))
        return real_link(src, dst, *a, **kw)

    def file(name, mode="r", *a, **kw):
        if os.fspath(name).startswith(out):
            modes.append(mode)
        return real_file(name, mode, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(h5py, "File", file)
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False, force=True)
    monkeypatch.undo()
    assert renamed_to == [out]  # published exactly once, straight to ``out``
    # built once by the store writer ("w-": a new temporary name), then reopened read-only
    # once to verify it before publishing
    assert modes == ["w-", "r"]
    assert not [p for p in os.listdir(tmp_path) if is_temp_name(p)]
    with h5py.File(out, "r") as f:
        assert sorted(f) == sorted(
            ["__manifest__", "__checksums__", "action", "ep_len", "ep_offset", "images", "qpos",
             "stats", "task_index", "timestamp", "norm_action_mean", "norm_action_std", "norm_qpos_mean", "norm_qpos_std"]
        )


def _two_pass(ds: h5py.Dataset, slab: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """The statistics the import computed before it used the store writer's ``datasets=``:
    two float64 passes over the published file's column, in slabs of 65,536 rows."""
    n = ds.shape[0]
    total = np.zeros(ds.shape[1:], np.float64)
    for lo in range(0, n, slab):
        total += ds[lo : lo + slab].astype(np.float64).sum(axis=0)
    mean = total / n
    sq = np.zeros_like(mean)
    for lo in range(0, n, slab):
        d = ds[lo : lo + slab].astype(np.float64) - mean
        sq += (d * d).sum(axis=0)
    return mean, np.sqrt(sq / n)


def test_norm_stats_are_bit_identical_to_the_two_pass_over_the_store(tmp_path, monkeypatch):
    monkeypatch.setattr(lerobot_import, "_STAT_SLAB_ROWS", 7)  # several slabs, a partial last
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    out = str(tmp_path / "s.h5")
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    with h5py.File(out, "r") as f:
        for col in ("qpos", "action"):
            mean, std = _two_pass(f[col], slab=7)
            assert f[f"norm_{col}_mean"].dtype == np.float32
            assert np.array_equal(f[f"norm_{col}_mean"][()], mean.astype(np.float32))
            floored = np.maximum(std, NORM_STD_FLOOR).astype(np.float32)
            assert np.array_equal(f[f"norm_{col}_std"][()], floored)


def test_show_progress_and_its_alias_progress(tmp_path):
    root = write_dataset(tmp_path / "ds", adversarial_spec())
    out = str(tmp_path / "s.h5")
    assert import_lerobot_v3(root, out, height=24, width=32, progress=False) == out
    assert import_lerobot_v3(
        root, out, height=24, width=32, show_progress=False, progress=False, force=True
    ) == out
    with pytest.raises(TypeError, match=r"show_progress=True and its alias progress=False"):
        import_lerobot_v3(root, out, height=24, width=32, show_progress=True, progress=False)


def test_stray_temporaries_in_the_dataset_are_not_read(tmp_path):
    """A writer's unfinished temporaries (``<name>.<16 hex>.tmp``) never match the importer's
    globs: garbage there changes nothing."""
    spec = adversarial_spec()
    root = write_dataset(tmp_path / "ds", spec)
    ref = str(tmp_path / "ref.h5")
    import_lerobot_v3(root, ref, height=24, width=32, show_progress=False)
    for rel in ("meta/episodes/chunk-000/file-000.parquet", "data/chunk-000/file-000.parquet",
                "meta/info.json", "meta/tasks.parquet"):
        path = os.path.join(root, rel + ".0123456789abcdef.tmp")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"half written")
    out = str(tmp_path / "s.h5")
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    with h5py.File(ref, "r") as a, h5py.File(out, "r") as b:
        for name in a:
            if name != "__manifest__" and isinstance(a[name], h5py.Dataset):
                assert np.array_equal(a[name][()], b[name][()]), name


# ------------------------------------------------------------------ issue 15: every feature

RL_FEATURES = {
    "next.reward": ("float32", [1]),
    "next.done": ("bool", [1]),
    "next.success": ("bool", [1]),
    "observation.environment_state": ("float32", [4]),
    "complementary_info.discrete_penalty": ("int64", [1]),
}


def _expected_extra(spec, name):
    from tests.lerobot.lerobot_fixtures import extra_value

    dtype, shape = spec.extra_features[name]
    rows = [extra_value(name, dtype, shape, ep, j)
            for ep, n in enumerate(spec.lengths) for j in range(n)]
    arr = np.stack(rows)
    return arr.reshape(-1) if shape == [1] else arr


def test_reward_done_success_environment_state_become_columns(tmp_path):
    spec = adversarial_spec(extra_features=RL_FEATURES)
    root = write_dataset(tmp_path / "ds", spec)
    out = str(tmp_path / "s.h5")
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    with TrajectoryStore(out) as s:
        for name, (dtype, shape) in RL_FEATURES.items():
            spec_col = s.columns[name]
            assert spec_col.dtype == np.dtype(dtype)
            assert spec_col.shape == (() if shape == [1] else tuple(shape))
            np.testing.assert_array_equal(s.load_column(name), _expected_extra(spec, name))
        ts = s.load_column("timestamp")  # a bookkeeping feature, kept too
        j = np.concatenate([np.arange(n) for n in spec.lengths])
        np.testing.assert_array_equal(ts, (j / spec.fps).astype(np.float32))
        assert {"qpos", "action", "task_index", "images"} <= set(s.columns)
        mapping = json.loads(s.manifest["attr.feature_columns"])
        assert mapping["next.reward"] == "next.reward" and mapping["observation.state"] == "qpos"


def test_a_feature_a_column_cannot_hold_is_an_error_naming_it(tmp_path):
    spec = adversarial_spec(info_overrides={})
    root = write_dataset(tmp_path / "ds", spec)
    info_path = os.path.join(root, "meta", "info.json")
    with open(info_path) as fh:
        info = json.load(fh)
    info["features"]["language_instruction"] = {"dtype": "string", "shape": [1], "names": None}
    with open(info_path, "w") as fh:
        json.dump(info, fh)
    with pytest.raises(LeRobotFormatError, match="'language_instruction' has dtype 'string'"):
        import_lerobot_v3(root, tmp_path / "s.h5", height=24, width=32, show_progress=False)
    assert not (tmp_path / "s.h5").exists()


def test_undeclared_data_column_or_camera_is_refused_not_dropped(tmp_path):
    spec = adversarial_spec(extra_features={"next.reward": ("float32", [1])})
    root = write_dataset(tmp_path / "ds", spec)
    info_path = os.path.join(root, "meta", "info.json")
    with open(info_path) as fh:
        info = json.load(fh)
    saved = json.loads(json.dumps(info))
    del info["features"]["next.reward"]
    with open(info_path, "w") as fh:
        json.dump(info, fh)
    with pytest.raises(LeRobotFormatError, match=r"\['next.reward'\].*declare"):
        import_lerobot_v3(root, tmp_path / "s.h5", height=24, width=32, show_progress=False)
    del saved["features"]["observation.images.wrist"]  # a camera dropped from info.json
    with open(info_path, "w") as fh:
        json.dump(saved, fh)
    with pytest.raises(LeRobotFormatError, match="observation.images.wrist"):
        import_lerobot_v3(root, tmp_path / "s.h5", height=24, width=32, show_progress=False)


def test_image_cameras_are_imported_with_every_pixel(tmp_path):
    from tests.lerobot.lerobot_fixtures import CameraSpec, frame_code

    cams = [CameraSpec("observation.images.top", width=32, height=24),
            CameraSpec("observation.images.side", width=32, height=24)]
    spec = adversarial_spec(cameras=[], image_cameras=cams,
                            extra_features={"next.reward": ("float32", [1])})
    root = write_dataset(tmp_path / "ds", spec)
    out = str(tmp_path / "s.h5")
    import_lerobot_v3(root, out, height=24, width=32, show_progress=False)
    with TrajectoryStore(out) as s:
        images = s.load_column("images")
        assert images.shape == (sum(spec.lengths), 2, 3, 24, 32)
        assert s.manifest["attr.cameras"] == "observation.images.side,observation.images.top"
        row = 0
        for ep, n in enumerate(spec.lengths):
            for j in range(n):
                # cameras sorted by name: side (id 1), top (id 0); PNG is lossless
                for c, cam_id in enumerate((1, 0)):
                    want = frame_code(cam_id, ep, j, 24, 32).transpose(2, 0, 1)
                    np.testing.assert_array_equal(images[row, c], want)
                row += 1
        np.testing.assert_array_equal(s.load_column("next.reward"),
                                      _expected_extra(spec, "next.reward"))
