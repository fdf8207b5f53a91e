"""Injected ENOSPC/EIO at every write, fsync and rename of a store write and a checkpoint
save (strace's syscall fault injection on a subprocess): a numbatraj error, no published
file, the previous file intact, no temporary left, a normal exit, never a segfault.

``.ci/run`` installs strace when missing; without it these tests skip.  The suite runs 32
injection points per operation; ``make soak`` (NUMBATRAJ_FAULT_POINTS=all) every one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.integrity import faultchild

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(STRACE is None, reason="strace is not installed (.ci/run installs it)")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL = os.environ.get("NUMBATRAJ_FAULT_POINTS") == "all"


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _child(kind: str, dest: str, seed: int, inject: str | None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-X", "faulthandler", "-m", "tests.integrity.faultchild", kind,
           dest, str(seed)]
    if inject is not None:
        syscalls, err, n = inject.split(":")
        cmd = [STRACE, "-f", "-qq", "-o", os.devnull, "-e", f"trace={syscalls}", "-e",
               f"inject={syscalls}:error={err}:when={n}", *cmd]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)


def _points() -> list[str]:
    writes = range(1, 46) if ALL else range(2, 29)
    pts = [f"pwrite64:{'ENOSPC' if n % 2 else 'EIO'}:{n}" for n in writes]
    pts += [f"fsync,fdatasync:EIO:{n}" for n in range(1, 4)]
    pts += ["rename,renameat,renameat2:EIO:1", "link,linkat:EIO:1"]
    if ALL:
        pts += ["ftruncate:EIO:1", "fsync,fdatasync:ENOSPC:4"]
    return pts


def _loads_as(kind: str, path: str, seed: int) -> bool:
    want = faultchild.data(kind, seed)
    if kind == "store":
        from numbatraj import TrajectoryStore, validate_store

        if not validate_store(path).ok:
            return False
        with TrajectoryStore(path) as s:
            return bool(np.array_equal(s.load_column("x"), want)
                        and np.array_equal(s.load_column("z"), want))
    from numbatraj import StoreReplay

    rep = StoreReplay.load(path)
    got = rep.sample_indices(8) if False else None  # noqa: F841 - loading is the check
    return len(rep) == want.shape[0]


@pytest.mark.parametrize("kind", ["store", "checkpoint"])
def test_injected_io_errors_never_publish(tmp_path, kind):
    results = []

    def one(i_point):
        i, point = i_point
        d = tmp_path / f"p{i}"
        d.mkdir()
        dest = str(d / ("out.h5" if kind == "store" else "out.ckpt"))
        first = _child(kind, dest, 0, None)
        assert first.returncode == 0, first.stderr
        before = open(dest, "rb").read()
        proc = _child(kind, dest, 1, point)
        left = sorted(os.listdir(d))
        if proc.returncode == 3:
            ok = open(dest, "rb").read() == before and left == [os.path.basename(dest)]
            outcome = "clean error" if ok else "damaged"
        elif proc.returncode == 0:
            ok = _loads_as(kind, dest, 1) and left == [os.path.basename(dest)]
            outcome = "not hit" if ok else "damaged"
        else:
            outcome, ok = f"rc={proc.returncode}", False
        results.append((point, outcome, ok, proc.stderr[-600:], left))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, enumerate(_points())))
    bad = [r for r in results if not r[2]]
    clean = sum(r[1] == "clean error" for r in results)
    print(f"{kind}: {len(results)} injections, {clean} clean errors, "
          f"{sum(r[1] == 'not hit' for r in results)} not hit, {len(bad)} bad")
    assert not bad, bad[:3]
    assert clean >= 30
