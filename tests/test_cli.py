"""The `numbatraj` command: info and validate, through main() and as a real subprocess."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np

from numbatraj.cli import main
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
