"""Nothing in a source is dropped unlisted: for every importer, a fixture with extra and odd
content (string and nested infos, large attributes, policy weights, keys only some episodes
hold, attributes on datasets, unknown datasets, non-clip files) is imported, and every key
of the source -- each dataset and each attribute, read here independently with h5py / os --
must be a column source (``columns_from``), a recorded manifest attribute, a key the
importer checks (``num_samples``), or listed in the manifest's ``skipped``.  Nothing listed
may be something the source lacks, and the extra columns read back equal to the source."""

from __future__ import annotations

import json
import os
import re

import h5py
import numpy as np
import pytest

from numbatraj import TrajectoryStore
from numbatraj.importers.d4rl import import_d4rl
from numbatraj.importers.lafan import import_lafan_g1
from numbatraj.importers.libero import import_libero
from numbatraj.importers.minari import import_minari
from numbatraj.importers.robomimic import import_robomimic
from tests.importers.format_fixtures import (
    make_d4rl,
    make_lafan_csv,
    make_libero_suite,
    make_minari,
    make_robomimic,
)


def source_keys(path, episode=None):
    """``(name, kind)`` for every dataset (kind ``ds``) and attribute (``attr``) of ``path``;
    inside an episode group (``episode`` regex) names are relative to it, outside it they
    start with ``/`` (the manifest's naming, docs/importers.md)."""
    rx = re.compile(f"({episode})(/|$)") if episode else None

    def rel(p):
        if rx is None:
            return p
        m = rx.match(p)
        return p[m.end():] if m else "/" + p

    out = set()
    with h5py.File(path, "r") as f:
        out |= {(rel("") + "@" + a, "attr") for a in f.attrs}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out.add((rel(name), "ds"))
            out.update((rel(name) + "@" + a, "attr") for a in obj.attrs)

        f.visititems(visit)
    return out


def manifest_of(out):
    with TrajectoryStore(out) as s:
        m = {k[len("attr."):]: v for k, v in s.manifest.items() if k.startswith("attr.")}
        return m, list(s.columns)


def column_sources(m):
    srcs = {}
    for pair in m.get("columns_from", "").split(","):
        col, _, src = pair.partition("=")
        for s in src.split("+"):
            srcs[s] = col
    return srcs


def check_accounted(keys, m, columns, *, recorded_attr, checked=()):
    """Every source key accounted for; returns the skipped list."""
    skipped = [s for s in m.get("skipped", "").split(",") if s]
    srcs = column_sources(m)
    assert set(srcs.values()) <= set(columns)
    names = {k for k, _ in keys}
    for s in skipped:  # nothing listed that the source lacks
        assert s.removesuffix("[reset row]") in names, (s, sorted(names))
    unaccounted = []
    for name, kind in sorted(keys):
        if name in skipped or name in checked:
            continue
        if kind == "ds" and (name in srcs or recorded_attr(name, m)):
            continue
        if kind == "attr" and recorded_attr(name, m):
            continue
        unaccounted.append(name)
    assert not unaccounted, f"dropped without being listed in skipped: {unaccounted}"
    return skipped


def _recorded_under(prefixes):
    """A key is recorded when a manifest attribute ``<prefix><leaf name>`` exists."""
    def rec(name, m):
        leaf = name.rsplit("@", 1)[-1] if "@" in name else name.rsplit("/", 1)[-1]
        return any(p + leaf in m for p in prefixes)
    return rec


# ------------------------------------------------------------------ D4RL
def test_d4rl_every_key_imported_or_listed(tmp_path, rng):
    src = tmp_path / "walker.hdf5"
    make_d4rl(src, rng, n=10)
    with h5py.File(src, "a") as f:
        f["infos/goal_name"] = np.array([b"g"] * 10)  # strings: not a column
        f["infos/nested/contact"] = rng.normal(size=(10, 2)).astype(np.float32)
        f["infos/scalar"] = np.float64(3.0)  # 0-d: not per-step
        f["metadata/policy/fc0/weight"] = rng.normal(size=(8, 8))
        f["metadata/big"] = np.arange(100)
        f["qpos_extra"] = rng.normal(size=(10, 2))  # a per-step dataset with no fixed meaning
        f.attrs["env_name"] = "walker2d"
        f.attrs["huge"] = np.arange(100)
        f["observations"].attrs["units"] = "m"
    out = import_d4rl(src, tmp_path / "o.h5")
    m, cols = manifest_of(out)
    skipped = check_accounted(source_keys(src), m, cols,
                              recorded_attr=_recorded_under(["source.metadata.", "source.attrs."]))
    assert set(skipped) == {"infos/goal_name", "infos/scalar", "metadata/policy/fc0/weight",
                            "metadata/big", "qpos_extra", "@huge", "observations@units"}
    with TrajectoryStore(out) as s, h5py.File(src, "r") as f:
        np.testing.assert_array_equal(s.load_column("info.nested.contact"),
                                      f["infos/nested/contact"][:])
        assert m["source.attrs.env_name"] == "walker2d"


# ------------------------------------------------------------------ robomimic
def test_robomimic_every_key_imported_or_listed(tmp_path, rng):
    src = tmp_path / "lift.hdf5"
    make_robomimic(src, rng)
    with h5py.File(src, "a") as f:
        for name in ("demo_1", "demo_2", "demo_10"):
            g = f["data"][name]
            T = g["actions"].shape[0]
            g["datagen_info/eef_pose"] = rng.normal(size=(T, 4, 4))  # another group
            g.attrs["ep_meta"] = json.dumps({"lang": "lift the cube"})
        f["data/demo_10/obs/only_here"] = np.zeros((4, 2))  # one demo only
        f["data"].attrs["big"] = np.arange(100)
        f["mask"].attrs["note"] = "v1"
        f.attrs["date"] = "2024-01-01"
        f["data/demo_1/actions"].attrs["scale"] = 1.0
    out = import_robomimic(src, tmp_path / "o.h5")
    m, cols = manifest_of(out)
    keys = source_keys(src, r"data/demo_\d+")
    skipped = check_accounted(
        keys, m, cols, recorded_attr=_recorded_under(["source.data.", "source.mask."]),
        checked={"@num_samples"})
    assert set(skipped) == {"@model_file", "@ep_meta", "datagen_info/eef_pose",
                            "obs/only_here", "/data@big", "/mask@note", "/@date",
                            "actions@scale"}
    assert m["source.mask.train"] == "demo_1,demo_10"


# ------------------------------------------------------------------ Minari
def test_minari_every_key_imported_or_listed(tmp_path, rng):
    d = make_minari(tmp_path, rng, kind="box")
    h5 = d / "data" / "main_data.hdf5"
    with h5py.File(h5, "a") as f:
        for e in ("episode_0", "episode_1"):
            g = f[e]
            n = g["actions"].shape[0]
            g["infos/text"] = np.array([b"ok"] * (n + 1))  # non-numeric info
            g["infos/step_only"] = np.arange(n, dtype=np.int64)  # n rows: no reset row
            g["infos/nested/dist"] = rng.normal(size=(n + 1, 2))
            g.attrs["options"] = "{}"
        f["episode_1/infos/late"] = np.zeros(4)  # only the second episode: refused below
        f.attrs["author"] = "x"
        f["episode_0/rewards"].attrs["scale"] = 2.0
    meta = json.loads((d / "data" / "metadata.json").read_text())
    meta["description"] = "a test\nset"
    (d / "data" / "metadata.json").write_text(json.dumps(meta))
    from numbatraj.importers._common import SourceFormatError

    with pytest.raises(SourceFormatError, match="infos/late"):  # an error, never a drop
        import_minari(d, tmp_path / "o.h5")
    with h5py.File(h5, "a") as f:
        del f["episode_1/infos/late"]
    out = import_minari(d, tmp_path / "o.h5")
    m, cols = manifest_of(out)
    keys = source_keys(h5, r"episode_\d+")
    recorded = _recorded_under(["source.attrs."])
    skipped = check_accounted(
        keys, m, cols, recorded_attr=lambda k, m: recorded(k, m) or (
            k == "@seed" and "episode_seeds" in m) or k in ("@id", "@total_steps"))
    assert set(skipped) == {"infos/text", "infos/success[reset row]",
                            "infos/nested/dist[reset row]", "@options", "rewards@scale"}
    for key in meta:  # every key of metadata.json is recorded
        assert f"source.{key}" in m, key
    with TrajectoryStore(out) as s, h5py.File(h5, "r") as f:
        np.testing.assert_array_equal(
            s.load_column("info.nested.dist"),
            np.concatenate([f[e]["infos/nested/dist"][1:] for e in ("episode_0", "episode_1")]))
        np.testing.assert_array_equal(
            s.load_column("info.step_only"),
            np.concatenate([f[e]["infos/step_only"][:] for e in ("episode_0", "episode_1")]))


def test_minari_total_steps_must_match(tmp_path, rng):
    d = make_minari(tmp_path, rng, kind="box")
    with h5py.File(d / "data" / "main_data.hdf5", "a") as f:
        f["episode_1"].attrs["total_steps"] = 99
    from numbatraj.importers._common import SourceFormatError

    with pytest.raises(SourceFormatError, match="episode_1 has attribute total_steps = 99"):
        import_minari(d, tmp_path / "o.h5")


# ------------------------------------------------------------------ LIBERO
def test_libero_every_key_imported_or_listed(tmp_path, rng):
    suite = make_libero_suite(tmp_path, rng, demos=("demo_0", "demo_1"), lengths=(5, 6))
    files = sorted(p for p in os.listdir(suite) if p.endswith(".hdf5"))
    with h5py.File(suite / files[0], "a") as f:
        f["data"].attrs["date"] = "2023"
        for name in ("demo_0", "demo_1"):
            T = f["data"][name]["actions"].shape[0]
            f["data"][name]["obs/object_states"] = rng.normal(size=(T, 5))  # this task only
            f["data"][name]["obs/label"] = np.array([b"x"] * T)
    with h5py.File(suite / files[1], "a") as f:
        f.attrs["creator"] = "robosuite"
    out = import_libero(suite, tmp_path / "o.h5")
    m, cols = manifest_of(out)
    recorded = _recorded_under([f"task.{i}.source." for i in range(len(files))])
    named = {"@problem_info", "/data@problem_info", "/data@env_name", "/data@bddl_file_name",
             "/data@tag", "/data@macros_image_convention"}
    all_skipped = set()
    for i, name in enumerate(files):
        keys = source_keys(suite / name, r"data/demo_\d+")
        per_task = [s for s in m.get(f"task.{i}.skipped", "").split(",") if s]
        sub = {**m, "skipped": ",".join(per_task)}
        check_accounted(keys, sub, cols, recorded_attr=lambda k, m: recorded(k, m) or k in named,
                        checked={"@num_samples"})
        all_skipped |= set(per_task)
    assert set(m["skipped"].split(",")) == all_skipped == {
        "@model_file", "@init_state", "obs/object_states", "obs/label", "/@creator"}
    with TrajectoryStore(out) as s:
        assert {"robot_states", "obs.ee_pos", "obs.ee_ori", "obs.ee_states"} <= set(s.columns)
    assert json.loads(m["task.0.source.problem_info"])["domain_name"] == "robosuite"


# ------------------------------------------------------------------ LAFAN1
def test_lafan_every_value_imported_and_other_entries_listed(tmp_path, rng):
    d = tmp_path / "lafan"
    (d / "h1").mkdir(parents=True)
    make_lafan_csv(d / "walk1_subject1.csv", rng)
    make_lafan_csv(d / "run1_subject2.csv", rng, T=7)
    (d / "README.md").write_text("clips")
    (d / "h1" / "walk1_subject1.csv").write_text("")
    out = import_lafan_g1(d, tmp_path / "o.h5")
    m, _ = manifest_of(out)
    assert set(m["skipped"].split(",")) == {"README.md", "h1/"}
    # the 36 values of every CSV row are in root_pos | root_quat | joint_pos, exactly
    ranges = {}
    for pair in m["columns_from"].split(","):
        col, _, src = pair.partition("=")
        got = re.fullmatch(r"csv\[(\d+):(\d+)\]", src)
        if got:
            ranges[col] = (int(got[1]), int(got[2]))
    assert sorted(i for lo, hi in ranges.values() for i in range(lo, hi)) == list(range(36))
    with TrajectoryStore(out) as s:
        rows = np.concatenate([np.loadtxt(d / f, delimiter=",", ndmin=2)  # read here, plainly
                               for f in ("run1_subject2.csv", "walk1_subject1.csv")])
        for col, (lo, hi) in ranges.items():
            np.testing.assert_array_equal(s.load_column(col), rows[:, lo:hi])
    # the g1/ layout: the other robots' folders are listed
    e = tmp_path / "release"
    (e / "g1").mkdir(parents=True)
    (e / "h1_2").mkdir()
    make_lafan_csv(e / "g1" / "dance1_subject1.csv", rng)
    (e / "g1" / "notes.txt").write_text("x")
    m2, _ = manifest_of(import_lafan_g1(e, tmp_path / "o2.h5"))
    assert set(m2["skipped"].split(",")) == {"h1_2/", "g1/notes.txt"}


# ------------------------------------------------------------------ Diffusion Policy
def test_diffusion_policy_every_array_and_attribute_imported_or_listed(tmp_path, rng):
    from numbatraj.importers.diffusion_policy import import_diffusion_policy
    from tests.importers.format_fixtures import _zjson, make_dp_zarr_raw

    src = tmp_path / "pusht.zarr"
    make_dp_zarr_raw(src, rng)
    _zjson(src / ".zattrs", {"source": "pusht"})
    _zjson(src / "data" / ".zattrs", {"fps": 10})
    _zjson(src / "data" / "state" / ".zattrs", {"units": "px"})
    _zjson(src / "meta" / ".zattrs", {"note": "x"})
    _zjson(src / "meta" / "episode_ends" / ".zattrs", {"kind": "cumulative"})
    lens = np.array([3, 4], np.int64)
    _zjson(src / "meta" / "episode_lens" / ".zarray", {
        "zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "<i8", "compressor": None,
        "fill_value": 0, "order": "C", "filters": None})
    (src / "meta" / "episode_lens" / "0").write_bytes(lens.tobytes())
    out = import_diffusion_policy(src, tmp_path / "o.h5", keys=["state", "action", "img",
                                                                "keypoint"])
    m, cols = manifest_of(out)
    srcs = column_sources(m)
    skipped = m["skipped"].split(",")
    arrays, attr_files = [], []
    for d, _, files in os.walk(src):
        rel = os.path.relpath(d, src).replace(os.sep, "/")
        if ".zarray" in files:
            arrays.append(rel)
        if ".zattrs" in files:
            attr_files.append(rel)
    for a in arrays:
        assert a in srcs or a in skipped or a == "meta/episode_ends", a
    for a in attr_files:
        if a == ".":
            assert "source.attrs" in m
        else:
            assert f"source.attrs.{a}" in m or a in skipped, a
    assert set(skipped) == {"data/n_contacts", "meta/episode_lens"}
    assert json.loads(m["source.attrs.data/state"]) == {"units": "px"}
