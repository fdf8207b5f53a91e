"""Two processes racing on one destination: store writes, imports, dumps, checkpoint saves,
fetch, assets pull and extraction.  The destination is always one writer's complete output;
the loser either waited (and then replaced or reused it) or failed at once with a
numbatraj error naming the holder, by the rule of each operation (docs/store.md).

5 trials each in the suite; ``make soak`` runs 20 (NUMBATRAJ_RACE_TRIALS=20).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tests.integrity import racechild

TRIALS = int(os.environ.get("NUMBATRAJ_RACE_TRIALS", "5"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def race(tmp: Path, op: str, args_a: list[str], args_b: list[str]) -> list[int]:
    go = tmp / "go"
    if go.exists():
        go.unlink()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.integrity.racechild", op, str(go),
                               *a], env=_env(), stderr=subprocess.PIPE, text=True)
             for a in (args_a, args_b)]
    time.sleep(1.0)  # both have imported everything and spin on the go file
    go.write_text("go")
    codes = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        codes.append(p.returncode)
        assert p.returncode in (0, 3), err[-1500:]
        if p.returncode == 3:
            assert "pid" in err or "exists" in err, err[-500:]
    assert 0 in codes
    return codes


def _leftovers(d: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name not in keep)


def test_store_writes_race(tmp_path):
    from numbatraj import TrajectoryStore, validate_store

    outcomes = []
    for t in range(TRIALS):
        dest = tmp_path / f"s{t}.h5"
        outcomes.append(race(tmp_path, "store", [str(dest), "1"], [str(dest), "2"]))
        assert validate_store(dest).ok
        with TrajectoryStore(dest) as s:
            x = s.load_column("x")
        assert any(np.array_equal(x, racechild.rows(seed)) for seed in (1, 2))
    assert _leftovers(tmp_path, {f"s{t}.h5" for t in range(TRIALS)} | {"go"}) == []
    print("store write races:", outcomes)


def test_dumps_and_checkpoint_saves_race(tmp_path):
    from numbatraj import StoreReplay, TrajectoryStore, validate_store

    for t in range(TRIALS):
        dest = tmp_path / f"d{t}.h5"
        race(tmp_path, "dump", [str(dest), "1"], [str(dest), "2"])
        assert validate_store(dest).ok
        with TrajectoryStore(dest) as s:
            x = s.load_column("x")
        assert any(np.array_equal(x, racechild.rows(seed)[:5000]) for seed in (1, 2))
        ck = tmp_path / f"c{t}.ckpt"
        codes = race(tmp_path, "checkpoint", [str(ck), "1"], [str(ck), "2"])
        assert codes == [0, 0]  # saves wait for each other
        rep = StoreReplay.load(ck)
        assert len(rep) == 5000
    keep = {f"d{t}.h5" for t in range(TRIALS)} | {f"c{t}.ckpt" for t in range(TRIALS)} | {"go"}
    assert _leftovers(tmp_path, keep) == []


def test_imports_race(tmp_path, rng):
    from numbatraj import TrajectoryStore, validate_store
    from tests.importers.format_fixtures import make_d4rl

    src = tmp_path / "src.hdf5"
    make_d4rl(src, rng, n=30000, ends=(9999, 19999), timeouts_at=None)
    for t in range(TRIALS):
        dest = tmp_path / f"i{t}.h5"
        codes = race(tmp_path, "import", [str(src), str(dest)], [str(src), str(dest)])
        assert codes == [0, 0]  # imports wait for each other
        assert validate_store(dest).ok
        with TrajectoryStore(dest) as s:
            assert s.n_rows == 30000


class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # noqa: D401
        pass

    def do_GET(self):  # noqa: N802
        body = self.server.files.get(self.path)  # type: ignore[attr-defined]
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.hits[self.path] = self.server.hits.get(self.path, 0) + 1  # type: ignore[attr-defined]
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        step = max(1, len(body) // 20)
        for i in range(0, len(body), step):  # slow enough for the two fetches to overlap
            self.wfile.write(body[i : i + step])
            self.wfile.flush()
            time.sleep(0.01)


@pytest.fixture
def slow_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    srv.daemon_threads = True
    srv.files, srv.hits, srv.lock = {}, {}, threading.Lock()  # type: ignore[attr-defined]
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_fetches_race_and_the_second_verifies_instead_of_fetching(tmp_path, slow_server):
    body = np.random.default_rng(0).bytes(2 << 20)
    sha = hashlib.sha256(body).hexdigest()
    port = slow_server.server_address[1]
    for t in range(TRIALS):
        slow_server.files[f"/f{t}"] = body
        dest = tmp_path / f"f{t}.bin"
        url = f"http://127.0.0.1:{port}/f{t}"
        codes = race(tmp_path, "fetch", [url, str(dest), sha], [url, str(dest), sha])
        assert codes == [0, 0]
        assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
        assert slow_server.hits[f"/f{t}"] == 1  # the second found the verified file
    assert _leftovers(tmp_path, {f"f{t}.bin" for t in range(TRIALS)} | {"go"}) == []


def test_extractions_and_assets_pulls_race(tmp_path, slow_server, monkeypatch):
    from tests.io.test_archive import write_archive

    members = [("meshes/a.obj", None, b"v 0 0 0\n" * 5000),
               ("tex/b.png", None, bytes(range(256)) * 4000)]
    arc = write_archive(tmp_path / "pack.tar.gz", members)
    for t in range(TRIALS):
        dest = tmp_path / f"x{t}"
        race(tmp_path, "extract", [str(arc), str(dest)], [str(arc), str(dest)])
        assert (dest / "meshes" / "a.obj").read_bytes() == members[0][2]
        assert (dest / "tex" / "b.png").read_bytes() == members[1][2]
    data = arc.read_bytes()
    port = slow_server.server_address[1]
    slow_server.files["/pack.tar.gz"] = data
    monkeypatch.setenv("NUMBATRAJ_CACHE", str(tmp_path / "cache"))
    for t in range(TRIALS):
        kv = tmp_path / f"assets{t}.kv"
        kv.write_text(
            f"pack=p{t}@1\nprovider=https\nurl=http://127.0.0.1:{port}/pack.tar.gz\n"
            f"sha256={hashlib.sha256(data).hexdigest()}\nbytes={len(data)}\n"
            f"dest=placed{t}\n"
        )
        codes = race(tmp_path, "assets", [str(kv)], [str(kv)])
        assert codes == [0, 0]
        placed = tmp_path / f"placed{t}"
        assert (placed / "meshes" / "a.obj").read_bytes() == members[0][2]
    assert slow_server.hits["/pack.tar.gz"] == 1  # one download for every pull of the pack
