"""Round-trip a store through a catalog: write -> push -> pull to a fresh path -> verify.

By default everything runs on 127.0.0.1 inside this script: a catalog service with SQLite
metadata and the embedded file object store under a temporary directory.  Options:

  --moto               use moto's S3 server (ThreadedMotoServer on 127.0.0.1) as the object
                       store; needs ``pip install "moto[server]"``
  --objects URL        embedded service, your object store (s3://bucket?endpoint=...; the
                       usual AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are read)
  --remote             no embedded service: use the running catalog named by
                       NUMBATRAJ_CATALOG_URL / NUMBATRAJ_CATALOG_API_KEY (env or .env)
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
import time
from contextlib import ExitStack

import numpy as np

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter, validate_store
from numbatraj.catalog import CatalogService
from numbatraj.errors import NumbatrajError
from numbatraj.remote import RemoteCatalog


def write_store(path: str, n_rows: int, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = {
        "state": rng.standard_normal((n_rows, 26), dtype=np.float32),
        "action": rng.uniform(-1, 1, (n_rows, 6)).astype(np.float32),
        "reward": rng.random(n_rows, dtype=np.float32),
    }
    specs = [ColumnSpec("state", np.float32, (26,)), ColumnSpec("action", np.float32, (6,)),
             ColumnSpec("reward", np.float32)]
    cuts = np.linspace(0, n_rows, 5).astype(int)
    with TrajectoryStoreWriter(path, specs, env_id="walker-walk", seed=seed) as w:
        for a, b in zip(cuts[:-1], cuts[1:]):
            w.append_rows({k: v[a:b] for k, v in cols.items()})
            w.end_episode()
    return cols


def _moto_objects(stack: ExitStack) -> str:
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ModuleNotFoundError:
        sys.exit("--moto needs moto's server mode: pip install 'moto[server]'")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    stack.callback(server.stop)
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="lab")
    return f"s3://lab?endpoint={endpoint}&region=us-east-1"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--moto", action="store_true")
    ap.add_argument("--objects", default=None)
    ap.add_argument("--remote", action="store_true")
    args = ap.parse_args()

    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="numbatraj-remote-"))
        if args.remote:
            try:
                cat = RemoteCatalog.from_env()
            except NumbatrajError as exc:
                print(f"--remote needs a running catalog service: {exc}", file=sys.stderr)
                return 2
        else:
            objects = args.objects or (_moto_objects(stack) if args.moto
                                       else f"file://{tmp}/objects")
            svc = stack.enter_context(CatalogService(f"sqlite:///{tmp}/catalog.db", objects))
            print(f"catalog service on {svc.url} (objects: {svc.objects.description})")
            cat = RemoteCatalog(svc.url, svc.db.add_key("write", "example"))
        stack.enter_context(cat)

        src = os.path.join(tmp, "walker.h5")
        cols = write_store(src, args.rows)
        version = f"v{int(time.time())}" if args.remote else "v1"
        row = cat.push(src, "walker-random", version, env_id="walker-walk", n_rows=args.rows,
                       seed=7)
        print(f"pushed walker-random {version}: {row['bytes']} bytes, sha256 {row['sha256'][:16]}…")

        dest = os.path.join(tmp, "fresh", "walker.h5")
        first = cat.pull("walker-random", dest, version=version)
        print(f"pulled to {dest}: {first.bytes_downloaded} bytes moved")
        report = validate_store(dest)
        if not report.ok:
            print(report, file=sys.stderr)
            return 1
        with TrajectoryStore(dest) as store:
            for name, arr in cols.items():
                np.testing.assert_array_equal(store.load_column(name), arr)
        print(f"reopened and verified {len(cols)} columns, {args.rows} rows")
        second = cat.pull("walker-random", dest, version=version)
        assert second.cached and second.bytes_downloaded == 0
        print("second pull: destination already matches, 0 bytes moved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
