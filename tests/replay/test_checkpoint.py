"""Checkpoints resume exactly; dumps and from_store round-trip through a trajectory store."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from numbatraj.data import TrajectoryStore
from numbatraj.errors import IntegrityError, SchemaError
from numbatraj.io.atomic import is_temp_name
from numbatraj.replay import StoreReplay
from tests.replay.helpers import row_ids, rows, sac_columns


def _build(prioritized, **kw):
    rep = StoreReplay(sac_columns(), 12, prioritized=prioritized, seed=5, demo_capacity=3,
                      quantize={"next_obs": (-1.0, 400.0)}, **kw)
    rep.add_demos(**rows(900, 2))
    rep.add(**rows(0, 23))
    if prioritized:
        _, idx = rep.sample(8)
        rep.update_priorities(idx, np.linspace(0.1, 3, 8))
    return rep


def _run(rep, steps=4):
    out = []
    for s in range(steps):
        batch, idx = rep.sample(16, k=s, K=4) if rep.ere else rep.sample(16)
        out.append((idx.indices.copy(), {k: v.copy() for k, v in batch.items()},
                    None if idx.weights is None else idx.weights.copy()))
        if rep.prioritized:
            rep.update_priorities(idx, np.abs(batch["reward"]) + s)
        rep.add(**rows(100 + 3 * s, 3))
    return out


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("ere", [False, True])
@pytest.mark.parametrize("fraction", [None, 0.25])
def test_resumed_run_samples_what_an_uninterrupted_one_would(tmp_path, prioritized, ere, fraction):
    a = _build(prioritized, demo_fraction=fraction)
    if ere:
        a.configure_ere(True, eta=0.9, c_min=3)
    path = tmp_path / "replay.ckpt"
    a.save(path)
    assert not any(is_temp_name(p) for p in os.listdir(tmp_path))
    b = StoreReplay.load(path)
    assert (b.size, b.cursor, b.n_demo, b.n_added) == (a.size, a.cursor, a.n_demo, a.n_added)
    for k in a.columns:
        np.testing.assert_array_equal(b.storage(k), a.storage(k))
    ra, rb = _run(a), _run(b)
    for (ia, ba, wa), (ib, bb, wb) in zip(ra, rb):
        np.testing.assert_array_equal(ia, ib)
        for k in ba:
            np.testing.assert_array_equal(ba[k], bb[k])
        if wa is not None:
            np.testing.assert_array_equal(wa, wb)


def test_save_is_atomic_and_load_refuses_foreign_files(tmp_path, monkeypatch):
    rep = _build(False)
    path = tmp_path / "r.ckpt"
    rep.save(path)
    good = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(h5py.Group, "create_dataset", boom)
    with pytest.raises(OSError, match="simulated"):
        rep.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == good and not any(is_temp_name(p) for p in os.listdir(tmp_path))
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(IntegrityError, match="not a replay checkpoint"):
        StoreReplay.load(foreign)
    text = tmp_path / "t.ckpt"
    text.write_text("hello")
    with pytest.raises(IntegrityError, match="not a readable replay checkpoint"):
        StoreReplay.load(text)
    with h5py.File(path, "a") as f:
        del f["ring/obs"]
        f["ring/obs"] = np.zeros((2, 3), np.float32)
    with pytest.raises(IntegrityError, match="'ring/obs' is float32 \\(2, 3\\), expected float32 \\(9, 3\\)"):
        StoreReplay.load(path)


def test_dump_cuts_episodes_and_from_store_refills(tmp_path):
    rep = StoreReplay(sac_columns(), 10, demo_capacity=2)
    rep.add_demos(**rows(500, 2))
    rep.add(**rows(0, 19))  # ring holds 11..18; done at rows with id % 7 == 6 -> 13
    path = tmp_path / "dump.h5"
    n_ep = rep.dump(path, env_id="toy-v0")
    held = rep.rows()
    with TrajectoryStore(path) as st:
        assert st.n_rows == 10 and n_ep == st.n_episodes
        assert st.manifest["env_id"] == "toy-v0"
        np.testing.assert_array_equal(st.load_column("reward"), held["reward"])
        done = st.load_column("done")
        ends = np.cumsum(st.episode_lengths) - 1
        # the episode ends are exactly the done rows, the demo boundary and the last row
        assert ends.tolist() == sorted(set(np.flatnonzero(done)) | {rep.n_demo - 1, 9})
        assert ends.tolist() == [1, 4, 9]
    back = StoreReplay.from_store(path, 6)
    assert row_ids(back.rows()).tolist() == row_ids(held).tolist()[-6:]
    with pytest.raises(SchemaError, match="holds no rows"):
        StoreReplay(sac_columns(), 4).dump(tmp_path / "empty.h5")
    with pytest.raises(FileExistsError):
        rep.dump(path)


def test_load_needs_the_buffer_memory_once(tmp_path):
    import tracemalloc

    from numbatraj.data import ColumnSpec

    cols = [ColumnSpec("obs", np.float32, (64,)), ColumnSpec("done", np.bool_, ())]
    rep = StoreReplay(cols, 40_000, prioritized=False)
    rep.add(obs=np.ones((40_000, 64), np.float32), done=np.zeros(40_000, bool))
    path = tmp_path / "big.ckpt"
    rep.save(path)
    buffer_bytes = sum(rep.storage(c).nbytes for c in rep.columns)
    tracemalloc.start()
    back = StoreReplay.load(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert back.size == 40_000 and back.storage("obs")[-1, 0] == 1.0
    assert buffer_bytes <= peak < 1.25 * buffer_bytes  # the columns, not a second copy


def test_dump_cuts_after_the_demo_prefix(tmp_path):
    rep = StoreReplay(sac_columns(), 8, demo_capacity=4)
    demo = rows(0, 3)
    demo["done"][:] = False
    rep.add_demos(**demo)
    online = rows(100, 4)
    online["done"][:] = [False, False, False, True]
    rep.add(**online)
    path = tmp_path / "d.h5"
    assert rep.dump(path) == 2
    with TrajectoryStore(path) as st:
        assert st.episode_lengths.tolist() == [3, 4]
    # demo rows only, no done: one open episode, as before
    only = StoreReplay(sac_columns(), 8, demo_capacity=4)
    only.add_demos(**demo)
    assert only.dump(tmp_path / "o.h5") == 1


def _edited_checkpoint(tmp_path, edit):
    import json

    import h5py

    rep = StoreReplay(sac_columns(), 12, demo_capacity=3, prioritized=True, seed=3)
    rep.add_demos(**rows(0, 2))
    rep.add(**rows(10, 4))  # ring of 9, not wrapped: size 4, cursor 4
    path = tmp_path / "r.ckpt"
    rep.save(path)
    StoreReplay.load(path)  # the untouched file loads
    with h5py.File(path, "r+") as f:
        state = json.loads(f.attrs["state"])
        edit(f, state)
        f.attrs["state"] = json.dumps(state)
        # a consistent edit (the checks below are about content, not corruption)
        for obj in [f, *(f[k] for k in ("sampler/leaves", "sampler/present") if k in f)]:
            for attr in ("digests", "nbh64"):
                if attr in obj.attrs:
                    del obj.attrs[attr]
    return path


def test_load_refuses_a_cursor_that_does_not_match_an_unwrapped_ring(tmp_path):
    def edit(f, state):
        state["cursor"] = 2

    path = _edited_checkpoint(tmp_path, edit)
    with pytest.raises(IntegrityError, match=r"r\.ckpt.*size=4, cursor=2"):
        StoreReplay.load(path)


@pytest.mark.parametrize("what", ["present", "leaves", "nan"])
def test_load_refuses_sampler_rows_that_disagree_with_the_ring(tmp_path, what):
    def edit(f, state):
        if what == "present":
            f["sampler/present"][7] = True  # an unfilled ring slot
        elif what == "leaves":
            f["sampler/leaves"][8] = 1.0  # a leaf where no row is held
        else:
            f["sampler/leaves"][0] = np.nan

    path = _edited_checkpoint(tmp_path, edit)
    match = {"present": r"r\.ckpt.*present marks 7 rows \(row 7 is present\).*2 demo rows "
                        r"and 4 ring rows",
             "leaves": r"r\.ckpt.*row 8: leaf 1\.0, present=False",
             "nan": r"r\.ckpt.*row 0: leaf nan, present=True"}[what]
    with pytest.raises(IntegrityError, match=match):
        StoreReplay.load(path)


@pytest.mark.parametrize("prioritized", [False, True])
def test_state_dict_resumes_like_a_checkpoint(prioritized):
    rep = _build(prioritized, demo_fraction=0.25)
    state = rep.state_dict()
    back = StoreReplay(sac_columns(), 12, prioritized=prioritized, seed=5, demo_capacity=3,
                       quantize={"next_obs": (-1.0, 400.0)}, demo_fraction=0.25)
    back.load_state_dict(state)
    assert (back.cursor, back.size, back.n_demo, back.n_added) == (
        rep.cursor, rep.size, rep.n_demo, rep.n_added)
    for a, b in zip(_run(rep), _run(back)):
        np.testing.assert_array_equal(a[0], b[0])
        for name in a[1]:
            np.testing.assert_array_equal(a[1][name], b[1][name])
    other = StoreReplay(sac_columns(), 13, prioritized=prioritized)
    with pytest.raises(SchemaError, match="another replay configuration"):
        other.load_state_dict(state)
    if prioritized:
        state["tree"]["leaves"][2] = 1.0  # the unfilled demo row
        bad = StoreReplay(sac_columns(), 12, prioritized=True, seed=5, demo_capacity=3,
                          quantize={"next_obs": (-1.0, 400.0)}, demo_fraction=0.25)
        with pytest.raises(IntegrityError, match="leaf 1.0, present=False"):
            bad.load_state_dict(state)


def _flip_ring_byte(path, key="ring/obs"):
    with h5py.File(path, "r") as f:
        ds = f[key]
        off = ds.id.get_offset()
        assert off is not None  # contiguous: one byte in the file is one byte of a row
        size = ds.id.get_storage_size()
    with open(path, "r+b") as fh:
        fh.seek(off + size // 2)
        b = fh.read(1)
        fh.seek(off + size // 2)
        fh.write(bytes([b[0] ^ 0x10]))


def test_save_checksums_default_detects_a_flipped_byte_and_false_writes_none(tmp_path):
    rep = _build(True)
    plain = tmp_path / "plain.ckpt"
    rep.save(plain, checksums=False)
    with h5py.File(plain, "r") as f:
        assert "digests" not in f.attrs
        seen = []
        f.visititems(lambda k, o: seen.append(k) if isinstance(o, h5py.Dataset)
                     and "nbh64" in o.attrs else None)
        assert seen == []
    back = StoreReplay.load(plain)
    for k in rep.columns:
        np.testing.assert_array_equal(back.storage(k), rep.storage(k))
    checked = tmp_path / "checked.ckpt"
    rep.save(checked)
    with h5py.File(checked, "r") as f:
        assert "digests" in f.attrs and "nbh64" in f["ring/obs"].attrs
    StoreReplay.load(checked)
    _flip_ring_byte(checked)
    with pytest.raises(IntegrityError, match="'ring/obs' fails its checksum"):
        StoreReplay.load(checked)
    _flip_ring_byte(plain)  # no digests: the flipped byte loads (unchecked)
    StoreReplay.load(plain)


@pytest.mark.cuda
def test_gpu_save_passes_checksums_through(tmp_path):
    from numbatraj._cuda import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA device and NUMBA_ENABLE_CUDASIM is not 1")
    from numbatraj.replay import StoreReplayGpu

    rep = StoreReplayGpu(sac_columns(), 12, seed=7)
    rep.add(**rows(0, 9))
    plain, checked = tmp_path / "plain.ckpt", tmp_path / "checked.ckpt"
    rep.save(plain, checksums=False)
    rep.save(checked)
    with h5py.File(plain, "r") as f:
        assert "digests" not in f.attrs and "nbh64" not in f["ring/obs"].attrs
    np.testing.assert_array_equal(StoreReplayGpu.load(plain).storage("obs"), rep.storage("obs"))
    _flip_ring_byte(checked)
    with pytest.raises(IntegrityError, match="'ring/obs' fails its checksum"):
        StoreReplayGpu.load(checked)


def test_dump_records_the_stats_of_the_numeric_non_image_columns(tmp_path):
    from numbatraj.data import ColumnSpec
    from numbatraj.data.stats import STAT_NAMES, compute_stats

    cols = [*sac_columns(), ColumnSpec("pixels", np.uint8, (4, 4, 3)),
            ColumnSpec("step", np.int32, ())]
    rep = StoreReplay(cols, 10, demo_capacity=2, quantize={"next_obs": (-1.0, 400.0)})
    img = lambda n: np.arange(n * 48, dtype=np.uint8).reshape(n, 4, 4, 3)  # noqa: E731
    rep.add_demos(**rows(500, 2), pixels=img(2), step=np.arange(2, dtype=np.int32))
    rep.add(**rows(0, 19), pixels=img(19), step=np.arange(19, dtype=np.int32))
    path = tmp_path / "dump.h5"
    rep.dump(path)
    with TrajectoryStore(path) as st:
        for name in ("obs", "action", "reward", "next_obs", "done", "step"):
            col = st.load_column(name)
            want = compute_stats(col.astype(np.uint8) if col.dtype == np.bool_ else col)
            got = st.stats(name)
            assert set(got) == set(STAT_NAMES)
            for k in STAT_NAMES:
                np.testing.assert_array_equal(got[k], want[k])
            assert int(got["count"]) == st.n_rows == 10
        with pytest.raises(SchemaError, match="no statistics"):
            st.stats("pixels")
    rep.dump(tmp_path / "bare.h5", stats=False)
    with TrajectoryStore(tmp_path / "bare.h5") as st, \
            pytest.raises(SchemaError, match="no statistics"):
        st.stats("obs")
