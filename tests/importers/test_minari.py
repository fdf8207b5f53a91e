"""Minari importer: gated against an h5py reading of the fixture, exact on every column."""

from __future__ import annotations

import io
import json
import os

import h5py
import numpy as np
import pytest
from PIL import Image

import numbatraj.data.store_stats as store_stats_mod
from numbatraj import TrajectoryStore, validate_store
from numbatraj.cli import main
from numbatraj.importers._common import SourceFormatError
from numbatraj.importers.minari import import_minari
from tests.importers.format_fixtures import check_store_stats, make_minari, peak_traced_bytes


def _frames(ds):
    return np.array([np.array(Image.open(io.BytesIO(bytes(ds[i])))) for i in range(len(ds))])


def expected_minari(d, kind):
    """Episodes by numeric id; n+1 observations split into obs / next_obs."""
    cols = {}

    def add(name, arr):
        cols.setdefault(name, []).append(arr)

    with h5py.File(d / "data" / "main_data.hdf5", "r") as f:
        ids = sorted(int(k.split("_")[1]) for k in f)
        lengths = []
        for i in ids:
            g = f[f"episode_{i}"]
            n = len(g["actions"])
            lengths.append(n)
            if kind == "box":
                o = {"obs": g["observations"][:]}
            elif kind == "image":
                o = {"obs": _frames(g["observations"])}
            else:
                o = {"obs.achieved": g["observations"]["achieved"][:],
                     "obs.pixels": _frames(g["observations"]["pixels"])}
            for k, v in o.items():
                add(k, v[:n])
                add("next_" + k, v[1:])
            add("action", g["actions"][:])
            add("reward", g["rewards"][:])
            add("done", g["terminations"][:])
            add("truncated", g["truncations"][:])
            add("info.success", g["infos"]["success"][1:])
    return {k: np.concatenate(v) for k, v in cols.items()}, lengths


@pytest.mark.parametrize("kind", ["box", "image", "dict"])
def test_minari_matches_independent_reading(tmp_path, rng, kind):
    lengths = (4, 3, 5, 2, 3, 2, 2, 2, 2, 2, 6)   # 11 episodes: episode_10 after episode_9
    d = make_minari(tmp_path, rng, lengths=lengths, kind=kind)
    out = tmp_path / "o.h5"
    import_minari(d, out)
    check_store_stats(out)
    expected, lens = expected_minari(d, kind)
    assert lens == list(lengths)
    with TrajectoryStore(out) as s:
        assert list(s.episode_lengths) == lens
        assert set(s.columns) == set(expected)
        for c, want in expected.items():
            got = s.load_column(c)
            assert got.dtype == want.dtype and np.array_equal(got, want), c
        m = s.manifest
    assert validate_store(out).ok
    assert m["env_id"] == "test/dummy-v0" and m["attr.source.minari_version"] == "0.5.3"
    assert m["attr.episode_seeds"] == ",".join(str(100 + i) for i in range(len(lengths)))
    assert json.loads(m["attr.source.observation_space"])["type"] == (
        "Dict" if kind == "dict" else "Box")
    if kind != "box":
        assert "pixels" in m["attr.jpeg_decoded"] or m["attr.jpeg_decoded"] == "observations"


def test_minari_cli_default_name(tmp_path, rng, monkeypatch):
    d = make_minari(tmp_path / "src", rng)
    monkeypatch.chdir(tmp_path)
    assert main(["import", "minari", str(d / "data")]) == 0
    expected, _lens = expected_minari(d, "box")
    with TrajectoryStore(tmp_path / "dummy-v0.h5") as s:
        assert np.array_equal(s.load_column("next_obs"), expected["next_obs"])


@pytest.mark.parametrize("case,needle", [
    ("obs_len", "episode_1/observations has 3 rows, expected 4"),
    ("missing", "episode_1 has no 'rewards'"),
    ("arrow", "data_format is 'arrow'"),
    ("total", "total_episodes = 5"),
    ("extra", "episode_1 holds ['infos/extra']"),
])
def test_minari_bad_input(tmp_path, rng, case, needle):
    d = make_minari(tmp_path, rng)
    h5 = d / "data" / "main_data.hdf5"
    meta_path = d / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    with h5py.File(h5, "a") as f:
        g = f["episode_1"]
        if case == "obs_len":
            o = g["observations"][:3]
            del g["observations"]
            g["observations"] = o
        elif case == "missing":
            del g["rewards"]
        elif case == "extra":
            g["infos/extra"] = np.zeros(4)
    if case == "arrow":
        meta["data_format"] = "arrow"
    if case == "total":
        meta["total_episodes"] = 5
    meta_path.write_text(json.dumps(meta))
    out = tmp_path / "o.h5"
    with pytest.raises(SourceFormatError) as ei:
        import_minari(d, out)
    assert needle in str(ei.value)
    assert ("main_data.hdf5" in str(ei.value)) or ("metadata.json" in str(ei.value))
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_minari_bad_jpeg(tmp_path, rng):
    d = make_minari(tmp_path, rng, kind="image")
    with h5py.File(d / "data" / "main_data.hdf5", "a") as f:
        f["episode_1/observations"][2] = np.arange(50, dtype=np.uint8)
    with pytest.raises(SourceFormatError, match="episode_1/observations: a frame is not"):
        import_minari(d, tmp_path / "o.h5")
    assert not (tmp_path / "o.h5").exists()


def test_minari_streams_one_episode_at_a_time(tmp_path, rng, monkeypatch):
    d = make_minari(tmp_path, rng, lengths=(1500,) * 8, obs_dim=64)
    per_episode = 1501 * 64 * 8 + 1500 * (2 * 4 + 8 + 2 + 1)
    monkeypatch.setattr(store_stats_mod, "_STATS_BYTES", 1 << 16)  # stats read back in slabs
    peak = peak_traced_bytes(lambda: import_minari(d, tmp_path / "o.h5"))
    assert peak < 5 * per_episode   # the source holds 8 episodes


def test_example_script_runs(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "import_minari.py"
    monkeypatch.setattr(sys, "argv", [str(script)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert ": ok (" in out and "columns:" in out


def test_minari_equal_length_jpegs_packed_2d(tmp_path, rng):
    """Minari stores JPEGs that happen to share one length as a 2-D uint8 array."""
    d = make_minari(tmp_path, rng, kind="image")
    frame = np.full((32, 32, 3), 77, np.uint8)
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG")
    jpeg = np.frombuffer(buf.getvalue(), np.uint8)
    with h5py.File(d / "data" / "main_data.hdf5", "a") as f:
        for ep in ("episode_0", "episode_1"):
            n = len(f[ep]["actions"])
            del f[ep]["observations"]
            f[ep]["observations"] = np.tile(jpeg, (n + 1, 1))
    out = tmp_path / "o.h5"
    import_minari(d, out)
    decoded = np.array(Image.open(io.BytesIO(jpeg.tobytes())))
    with TrajectoryStore(out) as s:
        obs = s.load_column("obs")
        assert obs.shape == (7, 32, 32, 3)
        assert all(np.array_equal(o, decoded) for o in obs)
