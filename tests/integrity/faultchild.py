"""Child process of the fault-injection tests: one store write or checkpoint save.

``python -m tests.integrity.faultchild store|checkpoint DEST``.  Exit 0: written; 3: a
numbatraj error (the message on stderr); 4: any other exception.  Run under
``strace -e inject=...`` by tests/integrity/test_faults.py.
"""

from __future__ import annotations

import sys
import traceback

import numpy as np


def data(kind: str, seed: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3000, 16)).astype(np.float32)


def write_store(dest: str, seed: int) -> None:
    from numbatraj import ColumnSpec, TrajectoryStoreWriter

    x = data("store", seed)
    cols = [ColumnSpec("x", np.float32, (16,)), ColumnSpec("z", np.float32, (16,),
                                                             compression="blosc")]
    with TrajectoryStoreWriter(dest, cols, overwrite=True, chunk_rows={"x": 256, "z": 256}) as w:
        for s in range(0, 3000, 500):
            w.append("x", x[s : s + 500])
            w.append("z", x[s : s + 500])
            w.end_episode()


def make_replay(seed: int):
    from numbatraj import ColumnSpec, StoreReplay

    x = data("ckpt", seed)
    cols = [ColumnSpec("x", np.float32, (16,)), ColumnSpec("reward", np.float32),
            ColumnSpec("done", np.bool_)] + [ColumnSpec(f"c{i}", np.float32, (4,)) for i in range(8)]
    rep = StoreReplay(cols, 4000, seed=seed, prioritized=True)
    extra = {f"c{i}": x[:, i : i + 4].copy() for i in range(8)}
    rep.add(x=x, reward=x[:, 0].copy(), done=x[:, 1] > 1, **extra)
    return rep


def save_checkpoint(dest: str, seed: int) -> None:
    make_replay(seed).save(dest)


def main() -> int:
    kind, dest = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    from numbatraj.errors import NumbatrajError

    try:
        (write_store if kind == "store" else save_checkpoint)(dest, seed)
    except NumbatrajError as exc:
        try:
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        except OSError:
            pass
        return 3
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
