"""Preflight a fresh machine: make every asset pack declared under a tree present, or fail.

Run it before training starts, so a missing mesh stops the job in seconds instead of forty
minutes in::

    python examples/assets_preflight.py --root path/to/project     # the real preflight

Without ``--root`` it demonstrates itself on 127.0.0.1: it generates two small packs
(``.tar.zst`` and ``.tar.gz``), serves them from a loopback HTTP server, declares them in two
``assets.kv`` files under a temporary project, then pulls twice (the second pull moves
nothing) and prints each pack's status.  Exit status: 0 when every pack is present, 1 when
any failed (each failure is listed), as ``numbatraj assets pull`` does.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tarfile
import tempfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import zstandard

from numbatraj.remote.assets import PackResult, declared_packs, pack_status, pull_packs


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def make_pack(members: dict[str, bytes], compress: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    if compress == "zst":
        return zstandard.ZstdCompressor(level=10).compress(raw)
    import gzip

    return gzip.compress(raw)


def preflight(root: str) -> int:
    packs, bad = declared_packs(root)
    for _, err in bad:
        print(f"FAILED   {err}", file=sys.stderr)

    def show(r: PackResult) -> None:
        if r.state == "failed":
            print(f"FAILED   {r.decl.label}: {r.error}", file=sys.stderr)
        else:
            moved = f", {r.downloaded} bytes fetched" if r.state == "pulled" else ""
            print(f"{r.state:8s} {r.decl.label} -> {os.path.relpath(r.decl.dest, root)}"
                  f"{moved}")

    results = pull_packs(packs, on_result=show)
    failed = [r.decl.label for r in results if r.state == "failed"] + [kv for kv, _ in bad]
    if failed:
        print(f"preflight FAILED: {len(failed)} pack(s): {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"preflight ok: {len(results)} pack(s) present")
    return 0


def demo() -> int:
    with tempfile.TemporaryDirectory(prefix="numbatraj-assets-") as tmp:
        os.environ["NUMBATRAJ_CACHE"] = os.path.join(tmp, "cache")
        served = os.path.join(tmp, "served")
        os.makedirs(served)
        packs = {
            "table_v1.tar.zst": make_pack(
                {"meshes/table.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n" * 50,
                 "textures/wood.png": bytes(range(256)) * 64}, "zst"),
            "robot_v2.tar.gz": make_pack({"robot.urdf": b"<robot name='arm'/>\n"}, "gz"),
        }
        for name, data in packs.items():
            with open(os.path.join(served, name), "wb") as f:
                f.write(data)
        srv = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=served))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        project = os.path.join(tmp, "project")
        for env, (name, pack) in zip(("tabletop", "arm"), packs.items()):
            os.makedirs(os.path.join(project, "envs", env))
            with open(os.path.join(project, "envs", env, "assets.kv"), "w") as f:
                f.write(f"pack={env}@v1\nprovider=https\nurl={base}/{name}\n"
                        f"sha256={hashlib.sha256(pack).hexdigest()}\nbytes={len(pack)}\n"
                        "dest=assets\n")
        try:
            print("-- first pull")
            code = preflight(project)
            print("-- second pull (nothing moves)")
            code = code or preflight(project)
            for d in declared_packs(project)[0]:
                print(f"status   {d.label}: {pack_status(d).state}")
        finally:
            srv.shutdown()
            srv.server_close()
    return code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=None, help="preflight this tree (default: a demo)")
    args = ap.parse_args()
    return preflight(args.root) if args.root else demo()


if __name__ == "__main__":
    sys.exit(main())
