"""Bit-flip sweep over a replay checkpoint (``StoreReplay.save``) and a ``.demo`` file.

The same method as :mod:`tests.integrity.flipsweep` (one byte XORed with a random non-zero
value per mutation, each classified in a worker process so that a crash is recorded and the
sweep goes on), over the regions of each file:

- checkpoint: the superblock, object headers (``OHDR``/``OCHK``/heaps: the ``config`` and
  ``state`` attributes, the digests), the ``config``/``state`` JSON text itself, the ring
  rows, the demo rows, the sampler arrays (leaves, stamps, present), anywhere;
- ``.demo``: the fixed 64-byte header, its JSON, the JSON padding, the records, anywhere.

A mutated checkpoint is loaded (``StoreReplay.load``) and compared with the original whole:
counters, every column's storage, ``state_dict()`` (ring, streams, tree) and a run of
sampling, priority updates and adds.  A ``.demo`` file is opened (``DemoFile``, verifying)
and every column compared.  Classes: ``caught`` (a numbatraj error on load), ``harmless``
(everything equal), ``silent`` (loaded, something differs: must be 0), ``wrong_error``
(another exception: must be 0), ``crash`` (the worker died: must be 0).

Run as ``python -m tests.integrity.ckptsweep KIND N SEED OUT.jsonl [SKIP]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from typing import Any

import h5py
import numpy as np

from tests.integrity.flipsweep import run_in_workers

KINDS = ("checkpoint", "demo")
REGIONS = {
    "checkpoint": ("superblock", "object_header", "json", "ring_rows", "demo_rows",
                   "sampler", "anywhere"),
    "demo": ("fixed_header", "json", "padding", "records", "anywhere"),
}
_SIGS = (b"OHDR", b"OCHK", b"FRHP", b"FHDB", b"FHIB", b"BTHD", b"BTIN", b"BTLF", b"GCOL")


# ------------------------------------------------------------------ the files
def _columns() -> list[Any]:
    from numbatraj.data import ColumnSpec

    return [ColumnSpec("obs", np.float32, (3,)), ColumnSpec("action", np.float32, (2,)),
            ColumnSpec("reward", np.float32, ()), ColumnSpec("next_obs", np.float32, (3,)),
            ColumnSpec("done", np.bool_, ())]


def _rows(start: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(start, start + n, dtype=np.float32)
    return {"obs": np.repeat(t[:, None], 3, 1) + np.arange(3, dtype=np.float32) / 10,
            "action": np.repeat(-t[:, None], 2, 1), "reward": t * 0.5,
            "next_obs": np.repeat(t[:, None] + 1, 3, 1),
            "done": (np.arange(start, start + n) % 7) == 6}


def _replay() -> Any:
    from numbatraj.replay import StoreReplay

    rep = StoreReplay(_columns(), 40, prioritized=True, seed=5, demo_capacity=6,
                      quantize={"next_obs": (-1.0, 400.0)}, demo_fraction=0.25)
    rep.add_demos(**_rows(900, 5))
    rep.add(**_rows(0, 51))  # wrapped
    _, idx = rep.sample(16)
    rep.update_priorities(idx, np.linspace(0.1, 3, 16))
    return rep


def _run(rep: Any, steps: int = 3) -> list[Any]:
    out = []
    for s in range(steps):
        batch, idx = rep.sample(12)
        out.append((idx.indices.copy(), {k: v.copy() for k, v in batch.items()},
                    idx.weights.copy()))
        rep.update_priorities(idx, np.abs(batch["reward"]) + s)
        rep.add(**_rows(100 + 3 * s, 3))
    return out


def _same(a: Any, b: Any) -> bool:
    """Deep equality of nested dicts/lists/arrays/scalars (NaN equal to NaN, dtypes too)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            _same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return type(a) is type(b) and a == b


def build(kind: str, path: str) -> Any:
    """Write the file of ``kind`` at ``path``; return what a correct load must equal."""
    if kind == "checkpoint":
        from numbatraj.replay import StoreReplay

        rep = _replay()
        rep.save(path)
        ref = StoreReplay.load(path)
        return {"counters": (ref.size, ref.cursor, ref.n_demo, ref.n_added),
                "storage": {k: ref.storage(k).copy() for k in ref.columns},
                "state": ref.state_dict(), "run": _run(ref)}
    from numbatraj.data import ColumnSpec
    from numbatraj.replay.demo_file import DemoWriter

    rng = np.random.default_rng(3)
    data = {"obs": rng.standard_normal((300, 4)).astype(np.float32),
            "action": rng.integers(-5, 5, (300, 2)).astype(np.int16),
            "reward": rng.standard_normal(300),
            "intervention": rng.random(300) < 0.3}
    with DemoWriter(path, [ColumnSpec("obs", np.float32, (4,)),
                           ColumnSpec("action", np.int16, (2,)),
                           ColumnSpec("reward", np.float64, ())], overwrite=True) as w:
        for a in range(0, 300, 50):
            w.append(**{k: v[a : a + 50] for k, v in data.items()})
    return data


def regions(kind: str, path: str) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges of each region of the file at ``path``."""
    raw = open(path, "rb").read()
    out: dict[str, list[tuple[int, int]]] = {r: [] for r in REGIONS[kind]}
    out["anywhere"].append((0, len(raw)))
    if kind == "demo":
        jlen = int.from_bytes(raw[12:16], "little")
        offset = int(json.loads(raw[64 : 64 + jlen].decode())["data_offset"])
        out["fixed_header"].append((0, 64))
        out["json"].append((64, 64 + jlen))
        if offset > 64 + jlen:
            out["padding"].append((64 + jlen, offset))
        else:
            del out["padding"]
        out["records"].append((offset, len(raw)))
        return out
    out["superblock"].append((0, 48))
    with h5py.File(path, "r") as f:
        groups = {"ring_rows": "ring", "demo_rows": "demo", "sampler": "sampler"}
        for region, group in groups.items():
            for ds in f[group].values():
                off = ds.id.get_offset()
                if off is not None and ds.id.get_storage_size():
                    out[region].append((off, off + ds.id.get_storage_size()))
                elif ds.chunks:
                    for i in range(ds.id.get_num_chunks()):
                        info = ds.id.get_chunk_info(i)
                        out[region].append((info.byte_offset, info.byte_offset + info.size))
        for key in ("config", "state"):
            text = f.attrs[key]
            blob = text.encode() if isinstance(text, str) else bytes(text)
            at = raw.find(blob)
            if at >= 0:
                out["json"].append((at, at + len(blob)))
    hits = sorted(m.start() for sig in _SIGS for m in re.finditer(re.escape(sig), raw))
    data_starts = sorted(a for r in ("ring_rows", "demo_rows", "sampler") for a, _ in out[r])
    for start in hits:
        end = next((b for b in [*hits, *data_starts, len(raw)] if b > start), len(raw))
        out["object_header"].append((start, max(start + 4, end)))
    return {r: spans for r, spans in out.items() if spans}


def plan(kind: str, n: int, seed: int) -> list[tuple[str, int, int]]:
    """``n`` mutations spread evenly over the regions: ``(region, byte, xor)``."""
    rng = np.random.default_rng(seed)
    work = tempfile.mkdtemp(prefix="ckplan")
    p = os.path.join(work, "base")
    build(kind, p)
    regs = regions(kind, p)
    out = []
    names = list(regs)
    for i in range(n):
        region = names[i % len(names)]
        spans = regs[region]
        sizes = np.array([b - a for a, b in spans], np.int64)
        j = int(rng.choice(len(spans), p=sizes / sizes.sum()))
        a, b = spans[j]
        out.append((region, int(rng.integers(a, b)), int(rng.integers(1, 256))))
    return out


def classify(kind: str, path: str, expect: Any) -> str:
    """Load the (mutated) file at ``path``: one of the classes of the module docstring."""
    from numbatraj.errors import NumbatrajError

    try:
        if kind == "checkpoint":
            from numbatraj.replay import StoreReplay

            rep = StoreReplay.load(path)
            got = (rep.size, rep.cursor, rep.n_demo, rep.n_added)
            if got != expect["counters"]:
                return f"silent:counters:{got}"
            for k, want in expect["storage"].items():
                if not _same(rep.storage(k), want):
                    return f"silent:storage:{k}"
            if not _same(rep.state_dict(), expect["state"]):
                return "silent:state_dict"
            if not _same(_run(rep), expect["run"]):
                return "silent:sampling"
        else:
            from numbatraj.replay.demo_file import DemoFile

            d = DemoFile(path)
            if len(d) != len(expect["obs"]):
                return "silent:n_rows"
            for k, want in expect.items():
                col = np.asarray(d.column(k))
                if col.dtype != want.dtype or not np.array_equal(col, want):
                    return f"silent:{k}"
            del d
    except NumbatrajError:
        return "caught"
    except Exception as exc:  # noqa: BLE001 - the class being measured
        return f"wrong_error:{type(exc).__name__}:{exc}"
    return "harmless"


def _worker(kind: str, n: int, seed: int, out_path: str, skip: int) -> None:
    mutations = plan(kind, n, seed)
    work = tempfile.mkdtemp(prefix="ckflips", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    base = os.path.join(work, "base")
    expect = build(kind, base)
    raw = open(base, "rb").read()
    with open(out_path, "a") as out:
        for i, (region, pos, xor) in enumerate(mutations):
            if i < skip:
                continue
            buf = bytearray(raw)
            buf[pos] ^= xor
            p = os.path.join(work, f"m{i}")
            with open(p, "wb") as fh:
                fh.write(buf)
            out.write(json.dumps({"i": i, "state": "start"}) + "\n")
            out.flush()
            result = classify(kind, p, expect)
            os.remove(p)
            out.write(json.dumps({"i": i, "kind": kind, "region": region, "byte": pos,
                                  "xor": xor, "result": result}) + "\n")
            out.flush()


def sweep(kind: str, n: int, seed: int, out_path: str, env: dict | None = None) -> list[dict]:
    """Run the sweep in worker processes (a crash is recorded and skipped); the results."""
    return run_in_workers("tests.integrity.ckptsweep", [kind, str(n), str(seed)], out_path,
                          env, {"kind": kind})


def summary(results: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {"tried": len(results), "caught": 0, "harmless": 0, "silent": 0}
    for r in results:
        key = r["result"].split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    return counts


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
            int(sys.argv[5]) if len(sys.argv) > 5 else 0)
