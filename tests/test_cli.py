"""The `numbatraj` command: info and validate, through main() and as a real subprocess; exit
codes, the missing-extra hint, --json, and the extras declared in setup.cfg."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import numbatraj.cli.remote as cli_remote
import numbatraj.cli.store as cli_store
from numbatraj.cli import cli_words, main
from numbatraj.cli._common import EXTRA_MODULES, extra_for
from tests.data.store_helpers import WALKER, write_store


def test_info(tmp_path, rng, capsys):
    path = tmp_path / "w.h5"
    write_store(path, WALKER, [10, 30, 20], rng, env_id="walker-walk", seed=3, attrs={"src": "t"})
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rows: 60" in out
    assert "3 episodes, length min 10 / median 20 / max 30" in out
    assert "env_id: walker-walk" in out and "seed: 3" in out
    assert "size on disk:" in out and "attrs: src=t" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("state"))
    assert "float32" in line and "(26,)" in line and "none" in line and "KiB" in line


def test_validate_exit_codes(tmp_path, rng, capsys):
    path = tmp_path / "w.h5"
    write_store(path, WALKER, [10, 30], rng)
    assert main(["validate", str(path)]) == 0
    assert ": ok" in capsys.readouterr().out
    with h5py.File(path, "r+") as f:
        f["ep_offset"][1] = 7
        f["done"].resize(39, axis=0)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    # the index disagreement, the short column, and the edited ep_offset's checksum
    assert "3 error(s)" in out and "'ep_offset' fails its checksum" in out
    assert "ep_offset[1] = 7, expected 10" in out and "column 'done' has 39 rows" in out


def test_errors_are_one_line_and_exit_1(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nope.h5")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("numbatraj info: error:") and "no such file" in err
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.zeros(3)
    assert main(["info", str(plain)]) == 1
    assert "no episode index" in capsys.readouterr().err


def test_python_dash_m(tmp_path, rng):
    path = tmp_path / "w.h5"
    write_store(path, WALKER, [5], rng)
    out = subprocess.run(
        [sys.executable, "-m", "numbatraj", "info", str(path)],
        capture_output=True, text=True, check=True,
    )
    assert "rows: 5" in out.stdout
    v = subprocess.run([sys.executable, "-m", "numbatraj", "--version"], capture_output=True, text=True)
    assert v.stdout.startswith("numbatraj ")


# -- issue 18: one command style, exit codes, extras ---------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def _extras() -> dict[str, list[str]]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    out = {}
    for name, block in cfg["options.extras_require"].items():
        out[name] = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
    return out


def _dist(req: str) -> str:
    return re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower().replace("_", "-")


_IMPORT_OF = {"pillow": "PIL", "python-dotenv": "dotenv", "numba-cuda": "numba_cuda",
              "psycopg": "psycopg", "huggingface-hub": "huggingface_hub", "tbb": None}


def test_exit_codes_help_version_and_usage(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit codes: 0 ok, 1 failed" in out and "2 usage" in out
    assert main(["--version"]) == 0
    assert main([]) == 2
    assert main(["info"]) == 2  # missing argument
    assert main(["nope"]) == 2
    assert main(["import", "d4rl", "x.hdf5", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err


def test_every_command_has_help(capsys):
    for argv in (["info"], ["validate"], ["import", "lerobot"], ["import", "d4rl"],
                 ["import", "libero"], ["import", "lafan"], ["import", "minari"],
                 ["import", "robomimic"], ["import", "diffusion-policy"], ["catalog", "serve"],
                 ["remote", "list"], ["remote", "describe"], ["lerobot", "push"],
                 ["assets", "status"], ["dataset", "list"]):
        assert main([*argv, "--help"]) == 0, argv
    assert "Traceback" not in capsys.readouterr().err


def test_missing_extra_exits_2_with_one_line(monkeypatch, capsys):
    def absent(args):
        raise ModuleNotFoundError("No module named 'requests'", name="requests")

    monkeypatch.setattr(cli_remote, "_catalog", absent)
    assert main(["remote", "list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["numbatraj remote list: needs requests, which is not installed: "
                   "pip install 'numbatraj[remote]'"]


def test_ctrl_c_exits_130_and_bug_is_one_line(monkeypatch, capsys, tmp_path):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_store, "_cmd_info", interrupted)
    assert main(["info", str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip() == "numbatraj info: interrupted"

    def bug(args):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(cli_store, "_cmd_info", bug)
    assert main(["info", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError: boom" in err and "Traceback" not in err
    assert main(["-v", "info", str(tmp_path)]) == 1
    assert "Traceback" in capsys.readouterr().err  # -v shows it


def test_extra_hint_table_matches_setup_cfg():
    extras = _extras()
    for name, modules in EXTRA_MODULES.items():
        dists = {_dist(r) for r in extras[name]}
        declared = {_IMPORT_OF.get(d, d.replace("-", "_")) for d in dists} - {None}
        assert declared <= modules, (name, declared - modules)
    assert extra_for("pyarrow") == "lerobot"
    assert extra_for("PIL.Image", ("importers",)) == "importers"
    assert extra_for("dotenv", ("lerobot", "hub")) == "lerobot,hub"
    assert extra_for("numbatraj.something") is None


def test_all_holds_every_runtime_extra_and_core_is_small():
    extras = _extras()
    runtime = ["cuda", "lerobot", "remote", "hub", "importers", "torch", "gym", "ray",
               "postgres"]
    for name in runtime + ["test", "lint", "docs", "bench"]:
        assert name in extras, name
    everything = {_dist(r) for r in extras["all"]}
    for name in runtime:
        assert {_dist(r) for r in extras[name]} <= everything, name
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    core = {_dist(r) for r in cfg["options"]["install_requires"].split() if r}
    assert core == {"numpy", "numba", "h5py", "hdf5plugin"}


def test_cli_rewords_library_arguments():
    assert cli_words("'x.h5' already exists; pass overwrite=True to replace it") == (
        "'x.h5' already exists; pass --overwrite to replace it")


def test_info_and_validate_json(tmp_path, rng, capsys):
    path = tmp_path / "w.h5"
    write_store(path, WALKER, [10, 30], rng, env_id="walker-walk")
    assert main(["info", "--json", str(path)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "store" and d["n_rows"] == 40 and d["n_episodes"] == 2
    assert d["episode_length"] == {"min": 10, "median": 20.0, "max": 30}
    assert {c["name"] for c in d["columns"]} >= {"state", "reward"}
    assert main(["validate", "--json", str(path)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["ok"] is True and r["errors"] == [] and r["n_rows"] == 40


def test_info_describes_checkpoints_and_demo_files(tmp_path, capsys):
    from numbatraj import ColumnSpec, DemoWriter, StoreReplay

    cols = [ColumnSpec("obs", np.float32, (3,)), ColumnSpec("action", np.float32, (2,)),
            ColumnSpec("reward", np.float32, ())]
    rep = StoreReplay(cols, 64, prioritized=True, seed=5)
    rep.add(obs=np.zeros((10, 3), np.float32), action=np.zeros((10, 2), np.float32),
            reward=np.zeros(10, np.float32))
    ck = tmp_path / "replay.ckpt"
    rep.save(ck)
    assert main(["info", str(ck)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"replay checkpoint: {ck}") and "StoreReplay, prioritized" in out
    assert "capacity: 64" in out and "held: 10 online" in out and "seed: 5" in out
    assert main(["info", "--json", str(ck)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "checkpoint" and d["size"] == 10 and d["capacity"] == 64

    demo = tmp_path / "t.demo"
    with DemoWriter(demo, cols) as w:
        w.append(obs=np.ones((4, 3), np.float32), action=np.ones((4, 2), np.float32),
                 reward=np.ones(4, np.float32), intervention=np.array([1, 0, 1, 0], bool))
    assert main(["info", str(demo)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f".demo file: {demo}") and "rows: 4   interventions: 2" in out
    assert main(["info", "--json", str(demo)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "demo" and d["n_rows"] == 4
    assert [c["name"] for c in d["columns"]][-1] == "intervention"


def test_import_lerobot_source_is_positional(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    from tests.lerobot.lerobot_fixtures import adversarial_spec, write_dataset

    root = write_dataset(tmp_path / "ds", adversarial_spec())
    out = tmp_path / "a.h5"
    argv = ["import", "lerobot", str(root), "--out", str(out), "--height", "24", "--width", "32"]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert main(argv + ["--overwrite"]) == 0
    assert main(["import", "lerobot", str(root)]) == 2
    assert "a directory SOURCE needs --out" in capsys.readouterr().err
    assert main(["import", "lerobot", "not a repo"]) == 2
    assert main(["import", "lerobot", str(root), "--root", str(root), "--out", "x.h5"]) == 2


def test_info_shows_the_stored_statistics(tmp_path, capsys):
    from numbatraj import ColumnSpec, TrajectoryStoreWriter
    from numbatraj.data.stats import compute_stats, stats_datasets

    q = np.arange(40, dtype=np.float32).reshape(20, 2)
    path = tmp_path / "s.h5"
    with TrajectoryStoreWriter(path, [ColumnSpec("qpos", np.float32, (2,)),
                                      ColumnSpec("reward", np.float32, ())]) as w:
        w.append_rows({"qpos": q, "reward": np.ones(20, np.float32)})
        w.end_episode()
        w.close(datasets=stats_datasets({"qpos": compute_stats(q)}))
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("qpos") and "[" in ln)
    assert "20" in line and "[19, 20]" in line  # count, then the per-element means
    assert main(["info", "--json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stats"]["qpos"]["mean"] == [19.0, 20.0] and "reward" not in doc["stats"]
