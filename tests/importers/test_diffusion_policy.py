"""Diffusion Policy zarr importer: gated against readings that do not go through the importer.

The hand-written v2 store is read back from its raw chunk files with json + numpy (no zarr);
the Blosc store through plain zarr calls, split by episode_ends in a Python loop.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

pytest.importorskip("zarr")

from numbatraj import TrajectoryStore, validate_store  # noqa: E402
from numbatraj.cli import main  # noqa: E402
from numbatraj.importers._common import SourceFormatError  # noqa: E402
from numbatraj.importers.diffusion_policy import import_diffusion_policy  # noqa: E402
from tests.importers.format_fixtures import (
    check_store_stats,  # noqa: E402
    make_dp_zarr_blosc,
    make_dp_zarr_raw,
    peak_traced_bytes,
    zip_dir,
)


def read_raw_v2(read_bytes, key):
    """One uncompressed, single-chunk v2 array from its .zarray and chunk file."""
    meta = json.loads(read_bytes(f"{key}/.zarray"))
    assert meta["compressor"] is None and meta["chunks"] == meta["shape"]
    raw = read_bytes(f"{key}/" + ".".join("0" * len(meta["shape"])))
    return np.frombuffer(raw, dtype=np.dtype(meta["dtype"])).reshape(meta["shape"])


def expected_from(read_bytes, keys):
    ends = read_raw_v2(read_bytes, "meta/episode_ends")
    lengths, prev = [], 0
    for e in ends:
        lengths.append(int(e) - prev)
        prev = int(e)
    return {k: read_raw_v2(read_bytes, f"data/{k}") for k in keys}, lengths


def check(out, expected, lengths):
    with TrajectoryStore(out) as s:
        assert list(s.episode_lengths) == lengths
        assert set(s.columns) == set(expected)
        for k, want in expected.items():
            got = s.load_column(k)
            assert got.dtype == want.dtype and np.array_equal(got, want), k
        m = s.manifest
    assert validate_store(out).ok
    return m


KEYS = ("action", "img", "keypoint", "n_contacts", "state")


def test_dp_handwritten_v2_store(tmp_path, rng):
    src = tmp_path / "pusht_cchi_v7_replay.zarr"
    make_dp_zarr_raw(src, rng, lengths=(3, 4))
    out = tmp_path / "o.h5"
    import_diffusion_policy(src, out)
    check_store_stats(out)
    expected, lengths = expected_from(lambda p: (src / p).read_bytes(), KEYS)
    assert lengths == [3, 4]
    m = check(out, expected, lengths)
    assert m["attr.zarr_format"] == "2" and m["attr.meta_arrays"] == "episode_ends"
    assert m["env_id"] == "pusht_cchi_v7_replay"


def test_dp_zip_store_and_cli(tmp_path, rng, monkeypatch):
    src = tmp_path / "buf.zarr"
    make_dp_zarr_raw(src, rng, lengths=(2, 5, 1))
    zipped = tmp_path / "buf.zarr.zip"
    zip_dir(src, zipped)
    monkeypatch.chdir(tmp_path)
    assert main(["import", "diffusion-policy", str(zipped)]) == 0
    with zipfile.ZipFile(zipped) as z:
        expected, lengths = expected_from(z.read, KEYS)
    check(tmp_path / "buf.h5", expected, lengths)


def test_dp_blosc_store_chunk_boundaries_and_key_subset(tmp_path, rng):
    import zarr

    src = tmp_path / "blosc.zarr"
    lengths = [4, 1, 7, 3]   # chunks of 5 rows: episodes straddle chunk boundaries
    make_dp_zarr_blosc(src, rng, lengths)
    out = tmp_path / "o.h5"
    import_diffusion_policy(src, out, keys=["state", "img"])
    with TrajectoryStore(out) as s:
        assert "data/action" in s.manifest["attr.skipped"].split(",")  # left out by keys=
    g = zarr.open_group(str(src), mode="r")
    ends = list(g["meta"]["episode_ends"][:])
    expected = {}
    for k in ("state", "img"):
        arr = g["data"][k]
        parts, start = [], 0
        for e in ends:
            parts.append(arr[start:e])
            start = e
        expected[k] = np.concatenate(parts)
    check(out, expected, lengths)


def _write_zarray(src, key, **changes):
    meta = json.loads((src / key / ".zarray").read_text())
    meta.update(changes)
    (src / key / ".zarray").write_text(json.dumps(meta))


@pytest.mark.parametrize("case,needle", [
    ("no_ends", "no array 'meta/episode_ends'"),
    ("short", "data/state has shape (6, 5) but meta/episode_ends[-1] = 7"),
    ("decreasing", "meta/episode_ends[1] = 3 does not exceed the previous end 3"),
    ("key", "data/ has no ['pixels']"),
    ("codec", "data/action"),
])
def test_dp_bad_input(tmp_path, rng, case, needle):
    src = tmp_path / "bad.zarr"
    make_dp_zarr_raw(src, rng, lengths=(3, 4))
    keys = None
    if case == "no_ends":
        for p in (src / "meta" / "episode_ends").iterdir():
            p.unlink()
        (src / "meta" / "episode_ends").rmdir()
    elif case == "short":
        a = rng.normal(size=(6, 5)).astype(np.float32)
        _write_zarray(src, "data/state", shape=[6, 5], chunks=[6, 5])
        (src / "data/state/0.0").write_bytes(a.tobytes())
    elif case == "decreasing":
        (src / "meta/episode_ends/0").write_bytes(np.array([3, 3], np.int64).tobytes())
    elif case == "key":
        keys = ["state", "pixels"]
    else:
        _write_zarray(src, "data/action", compressor={"id": "imagecodecs_jpeg2k", "level": 50})
    out = tmp_path / "o.h5"
    with pytest.raises(SourceFormatError) as ei:
        import_diffusion_policy(src, out, keys=keys)
    assert needle in str(ei.value) and "bad.zarr" in str(ei.value)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_dp_streams_one_episode_at_a_time(tmp_path, rng):
    lengths = [400] * 8
    src = tmp_path / "big.zarr"
    make_dp_zarr_blosc(src, rng, lengths)
    per_episode = 400 * (5 * 4 + 2 * 4 + 12 * 12 * 3)
    peak = peak_traced_bytes(lambda: import_diffusion_policy(src, tmp_path / "o.h5"))
    assert peak < 5 * per_episode   # the source holds 8 episodes


def test_example_script_runs(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "import_diffusion_policy.py"
    monkeypatch.setattr(sys, "argv", [str(script)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert ": ok (" in out and "columns:" in out
