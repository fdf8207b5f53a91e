"""The main job, end to end on generated data: `make demo`.

Writes a walker-shaped store (26 float32 per row, a few hundred thousand rows in a few
episodes) under build/demo/, reopens it, validates it, and prints what `numbatraj info`
prints.  Then builds a 1 M-row store and prints the disk-versus-resident table: one
4096-row minibatch assembled from disk (a read per row, 64-row groups, one slab; page cache
warm and cold) and gathered from the resident column, with ratios.  ``--small`` runs the same
on fewer rows and rounds (CI runs it that way).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter, validate_store
from numbatraj.cli import format_info
from numbatraj.data import ResidentColumn
from numbatraj.io.hdf5 import open_h5_read

# The read patterns and the table live in bench/report.py, shared with the benchmark.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.report import (  # noqa: E402
    BATCH,
    GROUP,
    PATTERNS,
    drop_page_cache,
    machine,
    markdown_table,
    read_groups,
    read_per_row,
    read_slab,
    time_rounds,
    warm_page_cache,
)


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
    print()
    residency_table(args.out, small=args.small)


def residency_table(out_dir: str, small: bool) -> None:
    """Write a 1 M-row walker store (100 k with ``small``) and print the disk-vs-resident table."""
    n_rows = 100_000 if small else 1_000_000
    path = os.path.join(out_dir, "walker_1m.h5")
    secs = write_walker_store(path, n_rows, 10)
    print(f"wrote {path}: {n_rows:,} rows ({n_rows * 104 / 1e6:.0f} MB of state) in {secs:.2f} s")
    t0 = time.perf_counter()
    with TrajectoryStore(path) as store:
        col = ResidentColumn.load(store, "state")
        storage = store.storage("state")
    print(f"loaded 'state' resident in {(time.perf_counter() - t0) * 1e3:.0f} ms")
    rng = np.random.default_rng(1)
    out = np.empty((BATCH, 26), np.float32)
    cache = 16 << 20
    f = [open_h5_read(path, chunk_cache_bytes=cache)]
    can_cold = hasattr(os, "posix_fadvise")

    def reopen(cold: bool) -> None:
        f[0].close()
        if cold:
            drop_page_cache(path)
        f[0] = open_h5_read(path, chunk_cache_bytes=cache)

    state: dict[str, Any] = {}

    def setup(pattern: str, cold: bool):  # type: ignore[no-untyped-def]
        def run() -> None:
            if cold:
                reopen(True)
            if pattern == "per_row":
                state["arg"] = rng.integers(0, n_rows, BATCH)
            elif pattern == "groups":
                state["arg"] = rng.integers(0, n_rows - GROUP, BATCH // GROUP)
            else:
                state["arg"] = int(rng.integers(0, n_rows - BATCH))
        return run

    fns = {
        "per_row": lambda: read_per_row(f[0]["state"], state["arg"], out),
        "groups": lambda: read_groups(f[0]["state"], state["arg"], out),
        "slab": lambda: read_slab(f[0]["state"], state["arg"], out),
    }
    rounds = {"per_row": 3, "groups": 20, "slab": 50}
    if small:
        rounds = {"per_row": 1, "groups": 5, "slab": 20}
    seconds: dict[str, dict[str, float]] = {k: {} for k in PATTERNS}
    for pattern, fn in fns.items():
        for cold in (False, True) if can_cold and not small else (False,):
            if not cold:
                warm_page_cache(path)  # the previous pattern's cold rounds evicted it
            seconds[pattern]["cold" if cold else "warm"] = time_rounds(
                fn, setup(pattern, cold), max(1, rounds[pattern] // (2 if cold else 1))
            )
        if can_cold and not small:
            reopen(False)
    warm_page_cache(path)
    col.gather(rng.integers(0, n_rows, BATCH), out)  # compile or load the cached kernel
    seconds["resident"]["warm"] = time_rounds(
        lambda: col.gather(state["arg"], out),
        lambda: state.__setitem__("arg", rng.integers(0, n_rows, BATCH)),
        50 if small else 300,
    )
    f[0].close()
    res = {
        "meta": {
            "rows": n_rows, "row": "26 float32", "nbytes": n_rows * 104,
            "chunk_rows": storage["chunks"][0], "chunk_bytes": storage["chunks"][0] * 104,
            "chunk_cache_bytes": cache, "compression": storage["compression"],
            "machine": machine(),
            "cold_note": "" if can_cold and not small else "Cold page cache not measured here.",
        },
        "seconds": seconds,
    }
    print(markdown_table(res))


if __name__ == "__main__":
    main()
