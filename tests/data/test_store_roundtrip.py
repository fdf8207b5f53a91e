"""Round trips through TrajectoryStoreWriter / TrajectoryStore, checked with plain h5py too."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter, validate_store
from numbatraj.data.manifest import decode_manifest
from tests.data.store_helpers import WALKER, random_rows, write_store
from tests.reference import episode_offsets_ref

MIXED = [
    ColumnSpec("f32", np.float32, (5,)),
    ColumnSpec("f64", np.float64),
    ColumnSpec("i16", np.int16, (2, 3)),
    ColumnSpec("i64", np.int64),
    ColumnSpec("u8img", np.uint8, (2, 3, 4, 5)),
    ColumnSpec("flag", np.bool_, (3,)),
    ColumnSpec("reward", np.float32),
    ColumnSpec("done", np.bool_),
]


def test_round_trip_across_chunk_boundaries(tmp_path, rng):
    path = tmp_path / "mixed.h5"
    lengths = [37, 1, 64, 100, 3]
    # chunks of 16 rows and appends of 7 rows: every episode straddles chunk boundaries
    expected = write_store(
        path, MIXED, lengths, rng, append_rows=7,
        chunk_rows={c.name: 16 for c in MIXED}, env_id="unit", seed=5, attrs={"k": "v"},
    )
    with TrajectoryStore(path) as s:
        assert s.n_rows == sum(lengths)
        assert s.n_episodes == len(lengths)
        assert list(s.columns) == [c.name for c in MIXED]
        for c in MIXED:
            assert s.columns[c.name].dtype == c.dtype and s.columns[c.name].shape == c.shape
            got = s.load_column(c.name)
            assert got.dtype == c.dtype
            np.testing.assert_array_equal(got, expected[c.name])
            # a slab that crosses several chunks
            np.testing.assert_array_equal(s.read_range(c.name, 13, 150), expected[c.name][13:150])
        np.testing.assert_array_equal(s.episode_lengths, lengths)
        np.testing.assert_array_equal(s.episode_offsets, episode_offsets_ref(lengths))
        for i, (off, n) in enumerate(zip(episode_offsets_ref(lengths), lengths)):
            ep = s.episode(i)
            for c in MIXED:
                np.testing.assert_array_equal(ep[c.name], expected[c.name][off : off + n])
        assert s.manifest["env_id"] == "unit" and s.manifest["seed"] == "5"
        assert s.manifest["attr.k"] == "v"
        assert not s.is_foreign


def test_layout_with_plain_h5py(tmp_path, rng):
    path = tmp_path / "walker.h5"
    lengths = [50, 70]
    expected = write_store(path, WALKER, lengths, rng, env_id="walker-walk", seed=99)
    with h5py.File(path, "r") as f:
        for c in WALKER:
            ds = f[c.name]
            assert ds.chunks is not None, "every column is chunked"
            assert ds.maxshape[0] is None and ds.maxshape[1:] == c.shape
            assert ds.dtype == c.dtype
            np.testing.assert_array_equal(ds[()], expected[c.name])
        assert f["ep_len"].dtype == np.int64 and f["ep_offset"].dtype == np.int64
        np.testing.assert_array_equal(f["ep_len"][()], lengths)
        np.testing.assert_array_equal(f["ep_offset"][()], [0, 50])
        raw = f["__manifest__"][()]
        assert raw.dtype == np.uint8
    text = raw.tobytes().decode("utf-8")
    lines = text.splitlines()
    assert "format_version=2" in lines and "checksums=nbh64" in lines
    assert lines[-1].startswith("manifest_digest=")
    assert "env_id=walker-walk" in lines and "seed=99" in lines
    assert "n_rows=120" in lines and "n_episodes=2" in lines
    assert "columns=state,action,reward,done" in lines
    assert "column.state.dtype=float32" in lines and "column.state.shape=26" in lines
    assert "column.reward.shape=" in lines
    assert decode_manifest(raw)["numbatraj_version"]


def test_read_range_into_out(tmp_path, rng):
    path = tmp_path / "s.h5"
    expected = write_store(path, WALKER[:1], [40, 60], rng)
    with TrajectoryStore(path) as s:
        out = np.full((25, 26), -1, np.float32)
        got = s.read_range("state", 30, 55, out=out)
        assert got is out
        np.testing.assert_array_equal(out, expected["state"][30:55])
        assert s.read_range("state", 100, 100).shape == (0, 26)


def test_compressed_columns_round_trip(tmp_path, rng):
    cols = [
        ColumnSpec("g", np.float32, (8,), compression="gzip"),
        ColumnSpec("l", np.float32, (8,), compression="lz4"),
        ColumnSpec("z", np.uint8, (3, 8, 8), compression="zstd"),
        ColumnSpec("b", np.uint8, (3, 8, 8), compression="blosc"),
    ]
    path = tmp_path / "c.h5"
    expected = write_store(path, cols, [30, 45], rng)
    with TrajectoryStore(path) as s:
        for c in cols:
            np.testing.assert_array_equal(s.load_column(c.name), expected[c.name])
        assert "gzip" in s.storage("g")["compression"] and "shuffle" in s.storage("g")["compression"]
        assert s.storage("l")["compression"] == "lz4"
        assert s.storage("z")["compression"] == "zstd"
        assert s.storage("b")["compression"] == "blosc"
        assert s.columns["z"].compression == "zstd"
    assert validate_store(path).ok


_DTYPES = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint16, np.bool_]


@st.composite
def column_sets(draw):
    n = draw(st.integers(1, 4))
    cols = []
    for i in range(n):
        dt = draw(st.sampled_from(_DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 4), max_size=3)))
        cols.append(ColumnSpec(f"c{i}", dt, shape))
    lengths = draw(st.lists(st.integers(1, 40), min_size=0, max_size=6))
    append_rows = draw(st.integers(1, 17))
    chunk = draw(st.integers(1, 32))
    return cols, lengths, append_rows, chunk


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=column_sets(), seed=st.integers(0, 2**32 - 1))
def test_property_random_columns_and_episode_splits(tmp_path_factory, spec, seed):
    cols, lengths, append_rows, chunk = spec
    rng = np.random.default_rng(seed)
    path = tmp_path_factory.mktemp("prop") / "p.h5"
    expected = write_store(
        path, cols, lengths, rng, append_rows=append_rows,
        chunk_rows={c.name: chunk for c in cols},
    )
    with TrajectoryStore(path) as s:
        assert s.n_rows == sum(lengths) and s.n_episodes == len(lengths)
        np.testing.assert_array_equal(s.episode_offsets, episode_offsets_ref(lengths))
        for c in cols:
            np.testing.assert_array_equal(s.load_column(c.name), expected[c.name])


def test_empty_store_is_valid(tmp_path):
    path = tmp_path / "empty.h5"
    with TrajectoryStoreWriter(path, [ColumnSpec("x", np.float32, (2,))]):
        pass
    with TrajectoryStore(path) as s:
        assert s.n_rows == 0 and s.n_episodes == 0
        assert s.load_column("x").shape == (0, 2)


def test_writer_reports_progress(tmp_path, rng):
    spec = ColumnSpec("x", np.int32)
    w = TrajectoryStoreWriter(tmp_path / "w.h5", [spec])
    w.append("x", random_rows(spec, 5, rng))
    assert w.n_rows == 0 and w.n_episodes == 0
    assert w.end_episode() == 5
    assert w.n_rows == 5 and w.n_episodes == 1
    w.append_rows({"x": random_rows(spec, 2, rng)})
    w.end_episode()
    w.close()
    assert w.closed
    w.close()  # idempotent
    with TrajectoryStore(tmp_path / "w.h5") as s:
        np.testing.assert_array_equal(s.episode_lengths, [5, 2])


@pytest.mark.parametrize("shape", [(), (1,), (3, 1)])
def test_single_row_episodes(tmp_path, rng, shape):
    spec = ColumnSpec("x", np.float64, shape)
    path = tmp_path / "one.h5"
    expected = write_store(path, [spec], [1, 1, 1], rng)
    with TrajectoryStore(path) as s:
        np.testing.assert_array_equal(s.load_column("x"), expected["x"])
        np.testing.assert_array_equal(s.episode(-1)["x"], expected["x"][2:3])


def _one_episode_writer(path, **kw) -> TrajectoryStoreWriter:
    w = TrajectoryStoreWriter(path, [ColumnSpec("q", np.float32, (3,))], **kw)
    w.append("q", np.arange(12, dtype=np.float32).reshape(4, 3))
    w.end_episode()
    return w


def test_close_writes_extra_datasets_before_publishing(tmp_path, monkeypatch):
    import os

    path = str(tmp_path / "s.h5")
    w = _one_episode_writer(path)
    np.testing.assert_array_equal(w.read_range("q", 1, 3), [[3, 4, 5], [6, 7, 8]])
    extra = {
        "norm_q_mean": np.array([4.5, 5.5, 6.5], np.float32),
        "scale": np.float64(2.0),
        "mask": np.array([[True, False]]),
    }
    published = []
    real_link = os.link  # overwrite=False publishes by a hard link

    def link(src, dst, *a, **kw):
        with h5py.File(src, "r") as f:  # complete under its temporary name already
            published.append((os.fspath(dst), sorted(f)))
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "link", link)
    w.close(datasets=extra)
    monkeypatch.undo()
    assert published == [(path, sorted(["q", "ep_len", "ep_offset", "__manifest__", "__checksums__", *extra]))]
    with h5py.File(path, "r") as f:
        for name, value in extra.items():
            assert f[name].dtype == np.asarray(value).dtype
            np.testing.assert_array_equal(f[name][()], value)
    with TrajectoryStore(path) as s:  # extra datasets are not columns
        assert list(s.columns) == ["q"] and s.n_rows == 4
    assert validate_store(path).ok


@pytest.mark.parametrize(
    "datasets, needle",
    [
        ({"q": np.zeros(3)}, "clashes with a column"),
        ({"ep_len": np.zeros(3)}, "clashes with a column"),
        ({"__x": np.zeros(3)}, "reserved '__' prefix"),
        ({"a/b": np.zeros(3)}, "without '/'"),
        ({"": np.zeros(3)}, "non-empty str"),
        ({"names": np.array(["a", "b"])}, "expected a numeric or bool array"),
    ],
)
def test_close_refuses_bad_datasets_and_stays_open(tmp_path, datasets, needle):
    from numbatraj.errors import SchemaError

    path = tmp_path / "s.h5"
    w = _one_episode_writer(path)
    with pytest.raises(SchemaError, match=needle):
        w.close(datasets=datasets)
    assert not w.closed and not path.exists()
    w.close(datasets={"ok": np.ones(2)})
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["ok"][()], [1.0, 1.0])


def test_read_range_bounds(tmp_path):
    from numbatraj.errors import RowIndexError, SchemaError

    w = _one_episode_writer(tmp_path / "s.h5")
    assert w.read_range("q", 4, 4).shape == (0, 3)
    with pytest.raises(RowIndexError, match=r"outside the 4 row\(s\) appended"):
        w.read_range("q", 2, 5)
    with pytest.raises(SchemaError, match="not declared"):
        w.read_range("x", 0, 1)
    w.abort()


def test_sync_every_bytes_flushes_and_datasyncs_the_temporary_file(tmp_path, monkeypatch):
    import os

    from numbatraj.data import writer as writer_mod
    from numbatraj.errors import SchemaError

    synced: list[str] = []

    def datasync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else "?")

    monkeypatch.setattr(writer_mod, "_datasync", datasync)
    path = str(tmp_path / "s.h5")
    w = TrajectoryStoreWriter(path, [ColumnSpec("q", np.float32, (256,))], sync_every_bytes=3000)
    flushes = []
    real_flush = w._file.flush
    monkeypatch.setattr(w._file, "flush", lambda: (flushes.append(1), real_flush()))
    row = np.ones((1, 256), np.float32)  # 1 KiB a row
    for _ in range(7):
        w.append("q", row)
    w.end_episode()
    assert len(synced) == 2 and len(flushes) == 2  # after rows 3 and 6 (3 KiB each time)
    if synced[0] != "?":
        assert synced == [os.path.abspath(w.tmp_path)] * 2
    w.close()
    assert w._sync_fd == -1
    with TrajectoryStore(path) as s:
        assert s.n_rows == 7
    w = TrajectoryStoreWriter(tmp_path / "off.h5", [ColumnSpec("q", np.float32, (256,))])
    for _ in range(7):
        w.append("q", row)
    w.end_episode()
    w.close()
    assert len(synced) == 2  # the default, 0: no syncs before close
    for bad in (-1, 1.5, True, "32M"):
        with pytest.raises(SchemaError, match="sync_every_bytes must be a whole number"):
            TrajectoryStoreWriter(tmp_path / "x.h5", [ColumnSpec("q", np.float32)],
                                  sync_every_bytes=bad)
    assert sorted(os.listdir(tmp_path)) == ["off.h5", "s.h5"]
