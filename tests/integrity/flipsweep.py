"""Bit-flip sweep: flip one byte in every region of stores of every compression and check
that no read ever returns a wrong value without an error.

Regions (found from the file itself): the superblock, object headers (``OHDR``/``OCHK``),
chunk indexes (``EA**``/``FA**``/``BT**`` structures), column chunks (``get_chunk_info``),
the manifest, the episode index, the chunk digests, and anywhere in the file (most of
which is unused space in the 1 MiB metadata block: flips there are harmless).  Each mutation XORs one byte with a
random non-zero value; the store is then validated (``validate_store``) and read back
whole (``TrajectoryStore``, every column, index and manifest), and classified:

- ``caught:validate+read`` / ``caught:read`` / ``caught:validate``: validate_store reported
  it and/or a read raised a numbatraj error;
- ``harmless``: everything read back equal and validate_store said ok;
- ``silent``: some read returned a wrong value without an error (must be 0);
- ``wrong_error``: something other than a numbatraj error left a reader (must be 0).

Run as ``python -m tests.integrity.flipsweep N SEED OUT.jsonl``; a crash of the worker
process is recorded as ``crash`` and the sweep continues after it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

COMPRESSIONS = (None, "gzip", "lz4", "zstd", "blosc")
REGIONS = ("superblock", "object_header", "chunk_index", "column_chunk", "manifest",
           "episode_index", "digests", "anywhere")
_SIGS = {b"OHDR": "object_header", b"OCHK": "object_header", b"EAHD": "chunk_index",
         b"EAIB": "chunk_index", b"EASB": "chunk_index", b"EADB": "chunk_index",
         b"FAHD": "chunk_index", b"FADB": "chunk_index", b"BTHD": "chunk_index",
         b"BTIN": "chunk_index", b"BTLF": "chunk_index", b"FRHP": "object_header",
         b"FHDB": "object_header", b"FHIB": "object_header"}


def build_store(path: str, compression: str | None, seed: int = 0) -> dict:
    """A small 3-column store (smooth state, pixels, reward) and what it must read back as."""
    from numbatraj import ColumnSpec, TrajectoryStoreWriter

    rng = np.random.default_rng(seed)
    lengths = [70, 90, 60]
    n = sum(lengths)
    data = {
        "state": np.cumsum(rng.standard_normal((n, 6)), axis=0).astype(np.float32),
        "pixels": (rng.integers(0, 4, (n, 3, 8, 8)) * 60).astype(np.uint8),
        "reward": rng.standard_normal(n).astype(np.float32),
    }
    cols = [ColumnSpec("state", np.float32, (6,), compression=compression),
            ColumnSpec("pixels", np.uint8, (3, 8, 8), compression=compression),
            ColumnSpec("reward", np.float32, compression=compression)]
    with TrajectoryStoreWriter(path, cols, overwrite=True, env_id="flip",
                               chunk_rows={"state": 32, "pixels": 16, "reward": 64}) as w:
        row = 0
        for ln in lengths:
            for k, v in data.items():
                w.append(k, v[row : row + ln])
            w.end_episode()
            row += ln
    return {"columns": data, "lengths": np.asarray(lengths, np.int64)}


def regions(path: str) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges of each region of the store at ``path``."""
    raw = open(path, "rb").read()
    out: dict[str, list[tuple[int, int]]] = {r: [] for r in REGIONS}
    out["superblock"].append((0, 48))
    out["anywhere"].append((0, len(raw)))
    with h5py.File(path, "r") as f:
        data_start = min(
            f[n].id.get_chunk_info(0).byte_offset for n in ("state", "pixels", "reward")
        )
        for name in ("state", "pixels", "reward"):
            ds = f[name]
            for i in range(ds.id.get_num_chunks()):
                info = ds.id.get_chunk_info(i)
                out["column_chunk"].append((info.byte_offset, info.byte_offset + info.size))
        small = {"manifest": ["__manifest__"], "episode_index": ["ep_len", "ep_offset"],
                 "digests": [f"__checksums__/{n}" for n in ("state", "pixels", "reward")]}
        for region, names in small.items():
            for name in names:
                ds = f[name]
                off = ds.id.get_offset()
                if off is not None:
                    out[region].append((off, off + ds.id.get_storage_size()))
    meta = raw[: min(data_start, 1 << 20)]
    hits = sorted((m.start(), _SIGS[sig]) for sig in _SIGS
                  for m in re.finditer(re.escape(sig), meta))
    used_end = len(meta.rstrip(b"\0"))
    for i, (start, region) in enumerate(hits):
        end = hits[i + 1][0] if i + 1 < len(hits) else used_end
        out[region].append((start, max(start + 4, end)))
    return out


def plan(n: int, seed: int) -> list[tuple[str | None, str, int, int]]:
    """``n`` mutations spread evenly over compressions and regions: (comp, region, byte, xor)."""
    rng = np.random.default_rng(seed)
    work = tempfile.mkdtemp(prefix="flipplan")
    out = []
    per = -(-n // (len(COMPRESSIONS) * len(REGIONS)))
    for comp in COMPRESSIONS:
        p = os.path.join(work, f"{comp}.h5")
        build_store(p, comp)
        regs = regions(p)
        for region in REGIONS:
            spans = regs[region]
            sizes = np.array([b - a for a, b in spans], np.int64)
            for _ in range(per):
                j = int(rng.choice(len(spans), p=sizes / sizes.sum()))
                a, b = spans[j]
                out.append((comp, region, int(rng.integers(a, b)), int(rng.integers(1, 256))))
    return out[: max(n, 0)] if n % (len(COMPRESSIONS) * len(REGIONS)) == 0 else out


def classify(path: str, expect: dict) -> str:
    """Validate and read the (mutated) store at ``path``: one of the classes above."""
    from numbatraj import TrajectoryStore, validate_store
    from numbatraj.errors import NumbatrajError

    try:
        flagged = not validate_store(path).ok
    except Exception as exc:  # noqa: BLE001
        return f"wrong_error:validate:{type(exc).__name__}:{exc}"
    try:
        with TrajectoryStore(path) as s:
            if not np.array_equal(s.episode_lengths, expect["lengths"]):
                return "silent:ep_len"
            for name, want in expect["columns"].items():
                got = s.load_column(name)
                if got.dtype != want.dtype or not np.array_equal(got, want):
                    return f"silent:{name}"
                if not np.array_equal(s.read_range(name, 5, 100), want[5:100]):
                    return f"silent:{name}:range"
            if s.manifest.get("env_id") != "flip":
                return "silent:manifest"
    except NumbatrajError:
        return "caught:validate+read" if flagged else "caught:read"
    except Exception as exc:  # noqa: BLE001
        return f"wrong_error:read:{type(exc).__name__}:{exc}"
    return "caught:validate" if flagged else "harmless"


def _worker(n: int, seed: int, out_path: str, skip: int) -> None:
    mutations = plan(n, seed)
    work = tempfile.mkdtemp(prefix="flips", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    bases: dict = {}
    with open(out_path, "a") as out:
        for i, (comp, region, pos, xor) in enumerate(mutations):
            if i < skip:
                continue
            if comp not in bases:
                p = os.path.join(work, f"base-{comp}.h5")
                expect = build_store(p, comp)
                bases[comp] = (open(p, "rb").read(), expect)
            raw, expect = bases[comp]
            buf = bytearray(raw)
            buf[pos] ^= xor
            p = os.path.join(work, "m.h5")
            with open(p, "wb") as fh:
                fh.write(buf)
            out.write(json.dumps({"i": i, "state": "start"}) + "\n")
            out.flush()
            result = classify(p, expect)
            out.write(json.dumps({"i": i, "compression": comp or "none", "region": region,
                                  "byte": pos, "result": result}) + "\n")
            out.flush()


def run_in_workers(module: str, args: list[str], out_path: str, env: dict | None = None,
                   crash_fields: dict | None = None) -> list[dict]:
    """Run ``python -m module *args out_path skip`` until it finishes: a worker that dies
    (a crash) has the mutation it had started recorded as ``crash:<rc>`` (with
    ``crash_fields``) and the next worker starts after it.  The results, one dict each."""
    open(out_path, "w").close()
    skip = 0
    while True:
        proc = subprocess.run([sys.executable, "-m", module, *args, out_path, str(skip)],
                              env=env, capture_output=True, text=True)
        lines = [json.loads(x) for x in open(out_path)]
        done = [x for x in lines if "result" in x]
        if proc.returncode == 0:
            return done
        started = [x["i"] for x in lines if x.get("state") == "start"]
        last = started[-1] if started else skip
        if any(x["i"] == last for x in done):
            raise RuntimeError(f"flip worker failed: {proc.stderr[-2000:]}")
        with open(out_path, "a") as fh:
            fh.write(json.dumps({"i": last, **(crash_fields or {}),
                                 "result": f"crash:{proc.returncode}"}) + "\n")
        skip = last + 1


def sweep(n: int, seed: int, out_path: str, env: dict | None = None) -> list[dict]:
    """Run the sweep in worker processes (a crash is recorded and skipped); the results."""
    return run_in_workers("tests.integrity.flipsweep", [str(n), str(seed)], out_path, env)


def summary(results: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {"caught_by_validate": 0, "caught_on_read": 0}
    for r in results:
        key = r["result"].split(":")[0]
        counts[key] = counts.get(key, 0) + 1
        if key == "caught":
            how = r["result"].split(":")[1]
            counts["caught_by_validate"] += "validate" in how
            counts["caught_on_read"] += "read" in how
    counts["tried"] = len(results)
    return counts


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
            int(sys.argv[4]) if len(sys.argv) > 4 else 0)
