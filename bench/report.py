"""The disk-versus-resident table: the read patterns, a timer, and the report writers.

``bench/test_disk_vs_resident.py`` times these patterns with pytest-benchmark and, at the
end of its module, writes ``bench/results/disk_vs_resident.{json,md}`` (and a log-scale bar
chart ``.png`` when matplotlib is installed).  ``examples/demo.py`` times the same patterns
with :func:`time_rounds` on a smaller store.  Run this file to re-render the markdown and the
chart from the JSON::

    python bench/report.py [bench/results/disk_vs_resident.json]

``python bench/report.py --merge [DIR ...]`` (what ``make bench`` runs last) merges the runs
of ``bench/results/default`` and ``bench/results/threads1`` (or the DIRs) into one ratio
table ``bench/results/ratios.md`` and the ratio plots, a line per thread setting.

Every disk pattern reads through h5py on the store file, as the reference measurement did.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results"
BATCH = 4096
GROUP = 64

#: pattern key -> (label, reference per-minibatch seconds, reference ratio to resident).
PATTERNS: dict[str, tuple[str, float, float]] = {
    "per_row": ("scattered rows, one read per row, from disk", 272e-3, 4500.0),
    "groups": (f"scattered rows in {GROUP}-row groups, from disk", 2.16e-3, 36.0),
    "slab": ("one contiguous slab, from disk", 0.072e-3, 1.2),
    "resident": ("scattered rows from the resident host column", 0.060e-3, 1.0),
}


# ---------------------------------------------------------------------- the patterns
def read_per_row(ds: Any, idx: np.ndarray, out: np.ndarray) -> None:
    """One h5py read per row: ``out[k] = ds[idx[k]]``."""
    for k, i in enumerate(idx.tolist()):
        ds.read_direct(out, np.s_[i : i + 1], np.s_[k : k + 1])


def read_groups(ds: Any, starts: np.ndarray, out: np.ndarray, group: int = GROUP) -> None:
    """One h5py read per ``group``-row run starting at each of ``starts``."""
    for g, s in enumerate(starts.tolist()):
        ds.read_direct(out, np.s_[s : s + group], np.s_[g * group : (g + 1) * group])


def read_slab(ds: Any, start: int, out: np.ndarray) -> None:
    """One contiguous read of ``len(out)`` rows."""
    ds.read_direct(out, np.s_[start : start + out.shape[0]])


def drop_page_cache(path: str | os.PathLike[str]) -> bool:
    """Evict the file's pages (``POSIX_FADV_DONTNEED``); False where the platform cannot."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def warm_page_cache(path: str | os.PathLike[str], block: int = 16 << 20) -> None:
    """Read the whole file once so its pages are resident (undoes :func:`drop_page_cache`)."""
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(block)
        while f.readinto(buf):
            pass


def time_rounds(fn: Callable[[], Any], setup: Callable[[], Any] | None, rounds: int) -> float:
    """Median seconds of ``fn()`` over ``rounds``, ``setup()`` untimed before each."""
    times = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def interleaved(fns: dict[str, Any], setup: Callable[[], Any] | None,
                rounds: int, cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Median seconds of each ``fns[name]()`` over ``rounds`` interleaved rounds.

    Every round calls each function once, in an order shuffled from round to round (a
    fixed seed), with ``setup()`` (fresh indices, say) untimed before each call: drifting
    machine load then hits every contender alike, which is why the ratios are trusted over
    single figures.  Shuffled, not rotated: a rotation keeps every contender behind the same
    neighbour, and on a loaded machine the call after a long one (cpprb's 30 ms prioritized
    update) is the one the scheduler preempts, so one contender took that hit every round.
    A value may also be ``(fn, before, after)``: ``before()`` and ``after()`` run untimed
    around that call (``numbatraj.set_num_threads(1)`` and back, say).

    With ``cpu`` (a dict) given, ``cpu[name]`` receives the median CPU time of the calls
    too (``time.process_time``: every thread of this process, none of the others'): on a
    loaded machine a call's wall time minus its CPU time is the time the scheduler gave
    other processes while the call was under way.
    """
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    clock = time.process_time
    order = np.random.default_rng(0)
    for _ in range(rounds):
        for j in order.permutation(len(names)):
            n = names[j]
            f = fns[n]
            fn, before, after = f if isinstance(f, tuple) else (f, None, None)
            if setup is not None:
                setup()
            if before is not None:
                before()
            c0 = clock() if cpu is not None else 0.0  # outside the wall-time window
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            if cpu is not None:
                cpus[n].append(clock() - c0)
            times[n].append(t1 - t0)
            if after is not None:
                after()
    if cpu is not None:
        cpu.update({n: float(np.median(v)) for n, v in cpus.items()})
    return {n: float(np.median(v)) for n, v in times.items()}


_BUSY = "import time\nt = time.monotonic() + {s}\nwhile time.monotonic() < t:\n    pass\n"


@contextlib.contextmanager
def busy_machine(on: bool = True, seconds: float = 600.0) -> Iterator[int]:
    """Load the machine: one busy-loop process per core plus one, each stopping by itself
    after ``seconds`` and killed when the block ends.  Yields how many were started (0 when
    ``on`` is false), as a training process with torch threads and env workers would."""
    procs: list[subprocess.Popen[bytes]] = []
    if on:
        n = (os.cpu_count() or 1) + 1
        procs = [subprocess.Popen([sys.executable, "-c", _BUSY.format(s=float(seconds))])
                 for _ in range(n)]
        time.sleep(0.5)
    try:
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def load_line() -> str:
    """The load averages and the instantaneous runnable count, for the notes of a figure."""
    try:
        with open("/proc/loadavg") as f:
            a, b, c, run = f.read().split()[:4]
        return f"load {a} {b} {c}, runnable {run.split('/')[0]}, {os.cpu_count()} cores"
    except (OSError, ValueError):
        return "load unknown"


def ratio_chart(series: dict[str, dict[str, list[tuple[float, float]]]], xlabel: str,
                path: str | os.PathLike[str]) -> bool:
    """Plot ratios (numbatraj time / baseline time) against ``x`` on log axes: ``series`` maps
    a panel title to ``{line label: [(x, ratio), ...]}``; a dashed line marks 1.  False (and
    nothing written) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = list(series)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, title in zip(axes[0], panels):
        for label, pts in series[title].items():
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, marker="o", label=label)
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("time ratio (below 1: numbatraj faster)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = f"{os.fspath(path)}.tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return True


# ---------------------------------------------------------------------- reporting
def machine() -> str:
    """One line describing where the figures were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal")))
        mem = f", {kb / (1 << 20):.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def _fmt(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.2f} s"


def markdown_table(res: dict[str, Any]) -> str:
    """The four-row table (warm and, where measured, cold page cache) as markdown.

    ``res`` holds ``meta`` (rows, chunking, ...) and ``seconds``: ``{"per_row": {"warm":
    s, "cold": s}, ..., "resident": {"warm": s}}``.
    """
    meta, secs = res["meta"], res["seconds"]
    base = secs["resident"]["warm"]
    lines = [
        f"Store: {meta['rows']:,} rows x {meta['row']} ({meta['nbytes'] / 1e9:.2f} GB), "
        f"HDF5 chunks of {meta['chunk_rows']:,} rows ({meta['chunk_bytes'] / 1024:.0f} KiB), "
        f"chunk cache {meta['chunk_cache_bytes'] >> 20} MiB, compression {meta['compression']}; "
        f"one {BATCH}-row minibatch per round, fresh random indices.",
        f"Machine: {meta['machine']}.",
        "",
        "| pattern | page cache | per minibatch | vs resident | reference | reference ratio |",
        "|---|---|---|---|---|---|",
    ]
    for key, (label, ref_s, ref_ratio) in PATTERNS.items():
        for cache in ("warm", "cold"):
            s = secs.get(key, {}).get(cache)
            if s is None:
                continue
            ref = f"{ref_s * 1e3:.3f} ms" if cache == "warm" else ""
            rr = f"{ref_ratio:g}x" if cache == "warm" else ""
            where = "in memory" if key == "resident" else cache
            lines.append(f"| {label} | {where} | {_fmt(s)} | {s / base:,.1f}x | {ref} | {rr} |")
    if meta.get("cold_note"):
        lines += ["", meta["cold_note"]]
    return "\n".join(lines) + "\n"


def bar_chart(res: dict[str, Any], path: str | os.PathLike[str]) -> bool:
    """Log-scale bar chart of the table; False (and nothing written) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels, values, colors = [], [], []
    for key, (label, _, _) in PATTERNS.items():
        for cache, color in (("warm", "tab:blue"), ("cold", "tab:gray")):
            s = res["seconds"].get(key, {}).get(cache)
            if s is not None:
                labels.append(label.replace(", from disk", "") + ("" if key == "resident" else f" ({cache})"))
                values.append(s * 1e3)
                colors.append("tab:green" if key == "resident" else color)
    base = res["seconds"]["resident"]["warm"] * 1e3
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(values) + 1.4))
    bars = ax.barh(labels[::-1], values[::-1], color=colors[::-1])
    for bar, v in zip(bars, values[::-1]):
        ax.text(v * 1.1, bar.get_y() + bar.get_height() / 2, f"{v / base:,.1f}x", va="center")
    ax.set_xscale("log")
    ax.set_xlim(min(values) / 3, max(values) * 8)
    ax.set_xlabel(f"ms per {BATCH}-row minibatch (log scale); labels: time vs resident")
    ax.set_title(f"Disk versus resident, {res['meta']['rows']:,}-row walker store")
    fig.tight_layout()
    tmp = f"{os.fspath(path)}.tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_report(res: dict[str, Any], out_dir: Path = RESULTS) -> list[Path]:
    """Write ``disk_vs_resident.{json,md}`` (and ``.png``) under ``out_dir``; returns paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "disk_vs_resident.json", out_dir / "disk_vs_resident.md"]
    _write_text(paths[0], json.dumps(res, indent=2))
    _write_text(paths[1], "# Disk versus resident\n\n" + markdown_table(res))
    png = out_dir / "disk_vs_resident.png"
    if bar_chart(res, png):
        paths.append(png)
    return paths


def plot_ratio_files(out_dir: Path = RESULTS) -> list[Path]:
    """Re-plot ``gather.json`` (ratio against batch size) and ``growth.json`` (ratio
    against capacity) where the benchmarks wrote them."""
    done = []
    for stem, xlabel in (("gather", "batch rows"), ("growth", "capacity (rows)")):
        src = out_dir / f"{stem}.json"
        if src.exists() and ratio_chart(json.loads(src.read_text())["series"], xlabel,
                                        out_dir / f"{stem}.png"):
            done.append(out_dir / f"{stem}.png")
    return done


# ---------------------------------------------------------------------- merging runs
def _load_run(d: Path) -> dict[str, Any] | None:
    src = d / "ratios.json"
    return json.loads(src.read_text()) if src.exists() else None


def merged_ratio_table(runs: list[dict[str, Any]]) -> str:
    """One markdown table of every group of every run (``ratios.json`` of each): a row per
    contender, a column per run's thread setting, each cell the time ratio against that
    run's own baseline (below 1: faster than the baseline)."""
    labels = [r["threads"] for r in runs]
    groups: list[str] = []
    for r in runs:
        groups += [g for g in r["groups"] if g not in groups]
    lines = ["| group | contender | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for g in groups:
        names: list[str] = []
        for r in runs:
            names += [row["name"] for row in r["groups"].get(g, []) if row["name"] not in names]
        for name in names:
            cells = []
            for r in runs:
                rows = r["groups"].get(g, [])
                base = next((x for x in rows if x["baseline"]), None)
                me = next((x for x in rows if x["name"] == name), None)
                if me is None:
                    cells.append("")
                elif base is None or me is base:
                    cells.append("baseline" if me is base else _fmt(me["seconds"]))
                else:
                    cells.append(f"{me['seconds'] / base['seconds']:.3g}x time")
            lines.append(f"| {g} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def merge_runs(dirs: list[Path], out_dir: Path = RESULTS) -> list[Path]:
    """Merge the runs in ``dirs`` (``make bench``: default threads, then
    ``NUMBA_NUM_THREADS=1``) into ``out_dir/ratios.md`` and the ratio plots
    ``gather.png`` (against batch size) and ``growth.png`` (against capacity), every line
    labelled with its run's thread setting."""
    runs = [(d, r) for d in dirs if (r := _load_run(d)) is not None]
    if not runs:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    done = [out_dir / "ratios.md"]
    _write_text(done[0], "# Benchmark ratios, one run per thread setting\n\n"
                f"Machine: {machine()}.\n\n" + merged_ratio_table([r for _, r in runs]))
    for stem, xlabel in (("gather", "batch rows"), ("growth", "capacity (rows)")):
        series: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for d, r in runs:
            src = d / f"{stem}.json"
            if not src.exists():
                continue
            for panel, lines in json.loads(src.read_text())["series"].items():
                for label, pts in lines.items():
                    series.setdefault(panel, {})[f"{label} [{r['threads']}]"] = [
                        (float(x), float(y)) for x, y in pts]
        if not series:
            continue
        # the merged series, whether or not matplotlib is here to draw them
        _write_text(out_dir / f"{stem}.json", json.dumps({"series": series}, indent=1))
        done.append(out_dir / f"{stem}.json")
        if ratio_chart(series, xlabel, out_dir / f"{stem}.png"):
            done.append(out_dir / f"{stem}.png")
    return done


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--merge":
        dirs = [Path(a) for a in argv[1:]] or [RESULTS / "default", RESULTS / "threads1"]
        paths = merge_runs(dirs)
        if not paths:
            print(f"no ratios.json under {', '.join(map(str, dirs))}; run `make bench`")
            return 1
        for p in paths:
            print(f"wrote {p}")
        print(paths[0].read_text())
        return 0
    for p in plot_ratio_files():
        print(f"wrote {p}")
    src = Path(argv[0]) if argv else RESULTS / "disk_vs_resident.json"
    if not src.exists():
        print(f"{src} does not exist; run `make bench` (or pytest bench/test_disk_vs_resident.py)")
        return 1
    res = json.loads(src.read_text())
    for p in write_report(res, src.parent):
        print(f"wrote {p}")
    print(markdown_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
