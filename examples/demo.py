"""The main job, end to end on generated data: `make demo`.

Writes a walker-shaped store (26 float32 per row, a few hundred thousand rows in a few
episodes) under build/demo/, reopens it, validates it, and prints what `numbatraj info`
prints.  ``--small`` runs the same on fewer rows (CI runs it that way).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter, validate_store
from numbatraj.cli import format_info


def write_walker_store(path: str, n_rows: int, n_episodes: int, seed: int = 0) -> float:
    """Write a walker-shaped store; returns seconds taken."""
    rng = np.random.default_rng(seed)
    cols = [
        ColumnSpec("state", np.float32, (26,)),
        ColumnSpec("action", np.float32, (6,)),
        ColumnSpec("reward", np.float32),
        ColumnSpec("done", np.bool_),
    ]
    cuts = np.sort(rng.choice(np.arange(1, n_rows), n_episodes - 1, replace=False))
    lengths = np.diff(np.concatenate([[0], cuts, [n_rows]]))
    t0 = time.perf_counter()
    with TrajectoryStoreWriter(path, cols, env_id="walker-walk", seed=seed, overwrite=True) as w:
        for length in lengths:
            for start in range(0, int(length), 65536):
                n = min(65536, int(length) - start)
                w.append("state", rng.standard_normal((n, 26), dtype=np.float32))
                w.append("action", rng.uniform(-1, 1, (n, 6)).astype(np.float32))
                w.append("reward", rng.random(n, dtype=np.float32))
                done = np.zeros(n, dtype=np.bool_)
                if start + n == length:
                    done[-1] = True
                w.append("done", done)
            w.end_episode()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--small", action="store_true", help="a quick run on 20,000 rows")
    ap.add_argument("--out", default=os.path.join("build", "demo"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    n_rows, n_eps = (20_000, 4) if args.small else (400_000, 8)
    path = os.path.join(args.out, "walker.h5")

    secs = write_walker_store(path, n_rows, n_eps)
    mib = os.path.getsize(path) / (1 << 20)
    print(f"wrote {path}: {n_rows} rows in {n_eps} episodes, {mib:.1f} MiB in {secs:.2f} s")
    with TrajectoryStore(path) as store:
        t0 = time.perf_counter()
        state = store.load_column("state")
        dt = time.perf_counter() - t0
        print(f"loaded column 'state' {state.shape} {state.dtype} in {dt * 1e3:.1f} ms")
    report = validate_store(path)
    print(report)
    if not report.ok:
        raise SystemExit(1)
    print()
    print(format_info(path))


if __name__ == "__main__":
    main()
