"""Benchmark helpers: every figure is reported as a ratio against a baseline measured in the
same run.

Use the ``ratios`` fixture::

    def test_x(benchmark, ratios):
        benchmark(fn)
        ratios.record("gather f32", "numbatraj", benchmark, nbytes=..., baseline=False)

and, for the baseline test, ``ratios.record("gather f32", "np.take", benchmark, baseline=True)``.
At the end of the session a table per group is printed and written to
``bench/results/summary.md``, and every group's figures to ``bench/results/ratios.json``.

Every group is labelled with the run's thread setting (:func:`thread_setting`): ``make
bench`` runs the suite twice, with the default and with ``NUMBA_NUM_THREADS=1`` (a process
of its own, not ``set_num_threads(1)`` in-process), into ``bench/results/default`` and
``bench/results/threads1`` (``NUMBATRAJ_BENCH_RESULTS``), and ``python bench/report.py
--merge`` puts both runs' ratios side by side in one table and in the ratio plots.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: Where a run writes its figures: ``NUMBATRAJ_BENCH_RESULTS`` or ``bench/results``.
RESULTS = Path(os.environ.get("NUMBATRAJ_BENCH_RESULTS") or Path(__file__).parent / "results")


def thread_setting() -> str:
    """How many threads this process's kernels may use, as every group's label says it:
    ``NUMBA_NUM_THREADS=1`` (set in the environment) or ``default threads (n)``."""
    import numba

    n = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    if os.environ.get("NUMBA_NUM_THREADS"):
        return f"NUMBA_NUM_THREADS={n}"
    return f"default threads ({n})"


def bench_scale() -> float:
    """``NUMBATRAJ_BENCH_SCALE`` (default 1.0): multiply the issue's full sizes by this."""
    return float(os.environ.get("NUMBATRAJ_BENCH_SCALE", "1.0"))


@dataclass
class _Row:
    name: str
    seconds: float
    nbytes: int | None
    items: int | None
    baseline: bool
    note: str = ""


@dataclass
class Ratios:
    groups: dict[str, list[_Row]] = field(default_factory=dict)

    def record(
        self,
        group: str,
        name: str,
        seconds: Any,
        *,
        baseline: bool = False,
        nbytes: int | None = None,
        items: int | None = None,
        note: str = "",
    ) -> None:
        """Record a figure; ``seconds`` is a float or a pytest-benchmark fixture (its median)."""
        if hasattr(seconds, "stats"):
            seconds = seconds.stats.stats.median
        self.groups.setdefault(group, []).append(
            _Row(name, float(seconds), nbytes, items, baseline, note)
        )

    def table(self, group: str) -> str:
        rows = self.groups[group]
        base = next((r for r in rows if r.baseline), None)
        out = [f"### {group} [{thread_setting()}]", "", "| what | median | throughput | vs baseline | note |", "|---|---|---|---|---|"]
        for r in rows:
            if r.nbytes:
                thr = f"{r.nbytes / r.seconds / (1 << 20):,.0f} MiB/s"
            elif r.items:
                thr = f"{r.items / r.seconds:,.0f} /s"
            else:
                thr = ""
            if base is None:
                ratio = ""
            elif r is base:
                ratio = "baseline"
            else:
                ratio = f"{base.seconds / r.seconds:.3g}x speed ({r.seconds / base.seconds:.3g}x time)"
            out.append(f"| {r.name} | {_fmt_s(r.seconds)} | {thr} | {ratio} | {r.note} |")
        return "\n".join(out) + "\n"


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


_RATIOS = Ratios()


#: The untimed warm-up before every pytest-benchmark measurement (:func:`settle`): at least
#: this many calls and this many seconds, at most :data:`SETTLE_MAX_S`.
SETTLE_CALLS = 48
SETTLE_MIN_S = 0.25
SETTLE_MAX_S = 5.0


def settle(fn: Any) -> int:
    """Call ``fn()`` untimed until it has run :data:`SETTLE_CALLS` times and for
    :data:`SETTLE_MIN_S` (or for :data:`SETTLE_MAX_S`); returns the number of calls.

    Why: pytest-benchmark sizes its rounds from its first calls.  With a cold Numba cache
    the first call that takes a parallel kernel compiles it (2.4 s for the record gather),
    pytest-benchmark then ran its minimum of five rounds, and those rounds were the thread
    policy's calibration (``numbatraj._jit``, 2 x 12 calls) and the first slow draws after
    the compile: ``StoreReplay.sample(4096)`` measured 258 and 572 us in two such runs
    (the verdict still open when they ended) against 125-141 us warm, on the AMD EPYC VM.
    Every contender gets the same warm-up."""
    import time

    t0 = time.perf_counter()
    calls = 0
    while True:
        fn()
        calls += 1
        spent = time.perf_counter() - t0
        if (calls >= SETTLE_CALLS and spent >= SETTLE_MIN_S) or spent >= SETTLE_MAX_S:
            return calls


_SETTLED: dict[type, type] = {}


def _settled(cls: type) -> type:
    """A subclass of pytest-benchmark's fixture class whose ``__call__`` runs
    :func:`settle` first (the plugin accepts only instances of its own class)."""
    if cls not in _SETTLED:
        def __call__(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            settle(lambda: fn(*args, **kwargs))
            return cls.__call__(self, fn, *args, **kwargs)

        _SETTLED[cls] = type("SettledBenchmarkFixture", (cls,), {"__call__": __call__})
    return _SETTLED[cls]


@pytest.fixture
def benchmark(benchmark: Any) -> Any:
    """pytest-benchmark's ``benchmark``, each measurement preceded by :func:`settle`."""
    benchmark.__class__ = _settled(type(benchmark))
    return benchmark


@pytest.fixture
def ratios(benchmark: Any) -> Ratios:
    """The session's :class:`Ratios` (one object for every test).  It requests
    ``benchmark`` so that a test timing its contenders itself (interleaved rounds: the slab,
    gather and replay comparisons) counts as a benchmark: ``--benchmark-only`` (and so
    ``make bench``) used to skip every such test."""
    return _RATIOS


def pytest_configure(config: Any) -> None:
    # tests that time their contenders in interleaved rounds request ``benchmark`` only
    # through ``ratios`` (so --benchmark-only runs them) and never call it
    config.addinivalue_line(
        "filterwarnings", "ignore:Benchmark fixture was not used at all in this test")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _RATIOS.groups:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = "\n".join(_RATIOS.table(g) for g in _RATIOS.groups)
    terminalreporter.write_sep("=", "numbatraj figures (ratios against the same-run baseline)")
    terminalreporter.write_line(text)
    (RESULTS / "summary.md").write_text(
        f"# Benchmark results (NUMBATRAJ_BENCH_SCALE={bench_scale()}, {thread_setting()})"
        f"\n\n" + text
    )
    (RESULTS / "ratios.json").write_text(json.dumps({
        "threads": thread_setting(),
        "scale": bench_scale(),
        "groups": {g: [r.__dict__ for r in rows] for g, rows in _RATIOS.groups.items()},
    }, indent=1))
