"""Child process of the race tests: one publishing operation, started on a signal.

``python -m tests.integrity.racechild OP GO_FILE ARGS...``: imports everything, waits until
``GO_FILE`` exists (so two children start together), runs ``OP``.  Exit 0: done; 3: a
numbatraj error or FileExistsError (the documented outcome for the loser of some races).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

ROWS = 20_000


def rows(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((ROWS, 32)).astype(np.float32)


def op_store(dest: str, seed: str) -> None:
    from numbatraj import ColumnSpec, TrajectoryStoreWriter

    x = rows(int(seed))
    with TrajectoryStoreWriter(dest, [ColumnSpec("x", np.float32, (32,))], overwrite=True) as w:
        for s in range(0, ROWS, 1000):
            w.append("x", x[s : s + 1000])
        w.end_episode()


def _replay(seed: int):
    from numbatraj import ColumnSpec, StoreReplay

    x = rows(seed)[:5000]
    rep = StoreReplay([ColumnSpec("x", np.float32, (32,)), ColumnSpec("done", np.bool_)], 6000,
                      seed=seed)
    done = np.zeros(5000, np.bool_)
    done[999::1000] = True
    rep.add(x=x, done=done)
    return rep


def op_dump(dest: str, seed: str) -> None:
    _replay(int(seed)).dump(dest, overwrite=True)


def op_checkpoint(dest: str, seed: str) -> None:
    _replay(int(seed)).save(dest)


def op_import(src: str, dest: str) -> None:
    from numbatraj.importers import import_d4rl

    import_d4rl(src, dest, overwrite=True, show_progress=False)


def op_fetch(url: str, dest: str, sha: str) -> None:
    from numbatraj.io.download import fetch

    fetch(url, dest, sha256=sha, retries=0, progress=False)


def op_extract(archive: str, dest: str) -> None:
    from numbatraj.io.archive import safe_extract

    safe_extract(archive, dest)


def op_assets(kv: str) -> None:
    from numbatraj.remote._assets_kv import parse_assets_kv
    from numbatraj.remote.assets import pull_packs

    res = pull_packs(parse_assets_kv(kv), env_file=None)
    bad = [r.error for r in res if r.state == "failed"]
    if bad:
        raise RuntimeError(bad)


def main() -> int:
    op, go, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    from numbatraj.errors import NumbatrajError

    fn = globals()[f"op_{op}"]
    while not os.path.exists(go):
        time.sleep(0.002)
    try:
        fn(*args)
    except (NumbatrajError, FileExistsError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
