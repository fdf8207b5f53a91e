"""One short check on a machine with a GPU: the device tests, then the device replay figures.

    python bench/gpu_check.py                 # full sizes (capacity 1,000,000)
    python bench/gpu_check.py --scale 0.1     # smaller buffers

1. StoreReplayGpu against StoreReplay (host) and cpprb (when installed) in the same run, on
   the issue's layout (obs 17, action 6, reward, next_obs 17, done): add of 1 and of 1,000
   transitions, uniform ``sample_into(4096)``, prioritized ``sample_into(4096)`` +
   ``update_priorities(4096)``.  Device timings synchronise once per timed loop, not per
   call, so they measure launch throughput as a training loop sees it.
2. the PTX compile test, then ``pytest -m cuda`` on the real device (no simulator), one
   process per file of ``tests/cuda``, so that each file that finished within the budget
   reports its counts and failures.  On a fresh machine the device tests compile every
   kernel (an H200 machine ran 77 of the 107 in 240 s), so the figures come first.

Writes ``bench/results/gpu_check.md``.  Each stage has a time budget; the whole run stays
under ten minutes (``--budget`` seconds in all, default 540).

A numba-cuda that still registers ``np.row_stack`` (0.30.4 does) fails its first kernel
compile beside numpy 2.5, which removed it (``AttributeError: module 'numpy' has no
attribute 'row_stack'``): run it with a numpy below 2.5 on such an image.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OBS, ACT, BATCH = 17, 6, 4096


def run_tests(budget: float) -> tuple[bool, str]:
    """The PTX compile test, then each file of ``tests/cuda`` in a pytest process of its
    own, while ``budget`` seconds last; the counts and failed tests of each."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / "build" / "numba-cache"))
    base = [sys.executable, "-m", "pytest", "-q", "-rf", "--tb=line", "-p", "no:cacheprovider"]
    runs = [["tests/test_ptx_compile.py"]] + [
        ["-m", "cuda", str(f.relative_to(ROOT))]
        for f in sorted((ROOT / "tests" / "cuda").glob("test_*.py"))]
    ok, tails = True, []
    t_end = time.perf_counter() + budget
    for args in runs:
        left = t_end - time.perf_counter()
        if left < 10.0:
            ok = False
            tails.append(f"$ pytest {' '.join(args)}: not run (the {budget:.0f} s budget ran out)")
            continue
        try:
            out = subprocess.run(base + args, cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=left)
        except subprocess.TimeoutExpired:
            ok = False
            tails.append(f"$ pytest {' '.join(args)}: did not finish within the budget")
            continue
        ok &= out.returncode == 0
        lines = (out.stdout + out.stderr).strip().splitlines()
        keep = [ln for ln in lines if ln.startswith("FAILED") or ln.startswith("ERROR")]
        tails.append(f"$ pytest {' '.join(args)}\n" + "\n".join(keep + lines[-1:]))
    return ok, "\n".join(tails)


def _columns():  # type: ignore[no-untyped-def]
    from numbatraj.data import ColumnSpec

    return [ColumnSpec("obs", np.float32, (OBS,)), ColumnSpec("action", np.float32, (ACT,)),
            ColumnSpec("reward", np.float32, ()), ColumnSpec("next_obs", np.float32, (OBS,)),
            ColumnSpec("done", np.bool_, ())]


def _batch(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, OBS), dtype=np.float32),
            "action": rng.standard_normal((n, ACT), dtype=np.float32),
            "reward": rng.standard_normal(n, dtype=np.float32),
            "next_obs": rng.standard_normal((n, OBS), dtype=np.float32),
            "done": rng.random(n) < 0.01}


def timed(fn: Callable[[], object], calls: int, sync: Callable[[], None], deadline: float) -> float:
    """Seconds per call: untimed calls first, then ``calls`` calls, one sync.

    The untimed calls are the first (it compiles) and enough more for a host kernel's
    threads verdict to settle (``numbatraj._jit.AUTO_TRIALS`` calls of each side, the
    threaded kernel compiled at its first trial): with one untimed call, the host
    ``sample_into(4096)`` of the stop-35 and stop-36 runs on an H200 machine averaged 4.9
    and 5.9 ms over its 200 calls, a median of 124 us in a probe, because the threaded
    kernel's compile (2.3 s with a cold Numba cache on the 2-core VM) fell inside the
    timed loop."""
    from numbatraj._jit import AUTO_TRIALS

    for _ in range(min(calls, 2 * AUTO_TRIALS + 2)):
        fn()
        if time.perf_counter() > deadline:
            break
    sync()
    t0 = time.perf_counter()
    done = 0
    for _ in range(calls):
        fn()
        done += 1
        if time.perf_counter() > deadline:
            break
    sync()
    return (time.perf_counter() - t0) / done


def benchmarks(scale: float, budget: float, batch: int = BATCH,
               min_cap: int = 10_000) -> list[tuple[str, str, float, float | None]]:
    from numba import cuda

    from numbatraj.replay import StoreReplay, StoreReplayGpu

    BATCH = batch  # noqa: N806 - the module constant, overridable for a simulator smoke run
    cap = max(min_cap, int(1_000_000 * scale))
    deadline = time.perf_counter() + budget
    sync = cuda.synchronize
    nosync = lambda: None  # noqa: E731
    rows: list[tuple[str, str, float, float | None]] = []
    one = {k: v[0] for k, v in _batch(1).items()}
    chunk = _batch(1000)
    d_chunk = {k: cuda.to_device(v) for k, v in chunk.items()}
    try:
        import cpprb
    except ImportError:
        cpprb = None

    def cp(prioritized: bool = False):  # type: ignore[no-untyped-def]
        env = {"obs": {"shape": OBS}, "act": {"shape": ACT}, "rew": {},
               "next_obs": {"shape": OBS}, "done": {}}
        rb = (cpprb.PrioritizedReplayBuffer if prioritized else cpprb.ReplayBuffer)(cap, env)
        return rb

    def cp_rows(b):  # type: ignore[no-untyped-def]
        return {"obs": b["obs"], "act": b["action"], "rew": b["reward"],
                "next_obs": b["next_obs"], "done": b["done"].astype(np.float32)}

    group = "add 1 transition"
    gpu, host = StoreReplayGpu(_columns(), cap), StoreReplay(_columns(), cap)
    rows.append((group, "StoreReplayGpu", timed(lambda: gpu.add(**one), 300, sync, deadline), 1))
    rows.append((group, "StoreReplay", timed(lambda: host.add(**one), 3000, nosync, deadline), 1))
    if cpprb:
        rb, o = cp(), {k: v[0] for k, v in cp_rows(_batch(1)).items()}
        rows.append((group, "cpprb", timed(lambda: rb.add(**o), 3000, nosync, deadline), 1))

    group = "add 1,000 transitions"
    rows.append((group, "StoreReplayGpu (device rows)",
                 timed(lambda: gpu.add(**d_chunk), 300, sync, deadline), 1000))
    rows.append((group, "StoreReplayGpu (host rows)",
                 timed(lambda: gpu.add(**chunk), 100, sync, deadline), 1000))
    rows.append((group, "StoreReplay",
                 timed(lambda: host.add(**chunk), 1000, nosync, deadline), 1000))
    if cpprb:
        rc = cp_rows(chunk)
        rows.append((group, "cpprb", timed(lambda: rb.add(**rc), 1000, nosync, deadline), 1000))

    full = _batch(cap, 1)
    group = "uniform sample(4096), all columns"
    gpu.add(**{k: cuda.to_device(v) for k, v in full.items()})
    host.add(**full)
    outs = {n: cuda.device_array((BATCH, *s.shape), s.dtype) for n, s in gpu.columns.items()}
    rows.append((group, "StoreReplayGpu.sample_into",
                 timed(lambda: gpu.sample_into(outs, BATCH), 1000, sync, deadline), BATCH))
    h_outs = {n: np.empty((BATCH, *s.shape), s.dtype) for n, s in host.columns.items()}
    rows.append((group, "StoreReplay.sample_into",
                 timed(lambda: host.sample_into(h_outs, BATCH), 200, nosync, deadline), BATCH))
    if cpprb:
        rb = cp()
        rb.add(**cp_rows(full))
        rows.append((group, "cpprb",
                     timed(lambda: rb.sample(BATCH), 200, nosync, deadline), BATCH))

    group = "prioritized sample(4096) + update_priorities(4096)"
    pg = StoreReplayGpu(_columns(), cap, prioritized=True)
    pg.add(**{k: cuda.to_device(v) for k, v in full.items()})
    pr_dev = cuda.to_device(np.random.default_rng(2).random(BATCH) + 0.01)
    outs = {n: cuda.device_array((BATCH, *s.shape), s.dtype) for n, s in pg.columns.items()}

    def gpu_per() -> None:
        batch = pg.sample_into(outs, BATCH)
        pg.update_priorities(batch, pr_dev, sync=False)

    rows.append((group, "StoreReplayGpu", timed(gpu_per, 300, sync, deadline), BATCH))
    ph = StoreReplay(_columns(), cap, prioritized=True)
    ph.add(**full)
    pr = np.random.default_rng(2).random(BATCH) + 0.01

    def host_per() -> None:
        _, idx = ph.sample(BATCH)
        ph.update_priorities(idx, pr)

    rows.append((group, "StoreReplay", timed(host_per, 100, nosync, deadline), BATCH))
    if cpprb:
        prb = cp(True)
        prb.add(**cp_rows(full))

        def cp_per() -> None:
            s = prb.sample(BATCH, beta=0.4)
            prb.update_priorities(s["indexes"], pr)

        rows.append((group, "cpprb", timed(cp_per, 100, nosync, deadline), BATCH))
    return rows


def table(rows: list[tuple[str, str, float, float | None]]) -> str:
    out = []
    for group in dict.fromkeys(r[0] for r in rows):
        rs = [r for r in rows if r[0] == group]
        base = next((r for r in rs if r[1] == "cpprb"), rs[-1])
        out += [f"### {group}", "", "| what | per call | rows/s | vs " + base[1] + " |",
                "|---|---|---|---|"]
        for _, name, sec, items in rs:
            out.append(f"| {name} | {sec * 1e6:,.1f} us | {(items or 1) / sec:,.0f} | "
                       f"{base[2] / sec:.3g}x |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--simulator-smoke", action="store_true",
                    help="tiny sizes under NUMBA_ENABLE_CUDASIM=1: checks this script runs")
    args = ap.parse_args()
    if args.simulator_smoke:
        sys.path.insert(0, str(ROOT))
        print(table(benchmarks(0.0, 60.0, batch=64, min_cap=1200)))
        return 0
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        print("gpu_check needs a real GPU: unset NUMBA_ENABLE_CUDASIM", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from numbatraj._cuda import get_cuda

    get_cuda()  # DeviceUnavailableError with the reason when there is no GPU
    start = time.perf_counter()
    rows = benchmarks(args.scale, args.budget * 0.35)
    text = table(rows)
    print(text, flush=True)
    ok, report = True, "skipped"
    if not args.skip_tests:
        ok, report = run_tests(args.budget - (time.perf_counter() - start) - 10)
        print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gpu_check.md").write_text(
        f"# GPU check (scale {args.scale})\n\n## device tests\n\n```\n{report}\n```\n\n"
        f"## figures\n\n{text}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
