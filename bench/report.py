"""The disk-versus-resident table: the read patterns, a timer, and the report writers.

``bench/test_disk_vs_resident.py`` times these patterns with pytest-benchmark and, at the
end of its module, writes ``bench/results/disk_vs_resident.{json,md}`` (and a log-scale bar
chart ``.png`` when matplotlib is installed).  ``examples/demo.py`` times the same patterns
with :func:`time_rounds` on a smaller store.  Run this file to re-render the markdown and the
chart from the JSON::

    python bench/report.py [bench/results/disk_vs_resident.json]

Every disk pattern reads through h5py on the store file, as the reference measurement did.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
