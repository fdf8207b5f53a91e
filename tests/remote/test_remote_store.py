"""RemoteStore over a loopback HTTP server that honours Range, counts requests and bytes,
and expires its presigned-style tokens on demand."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter, WindowedColumn
from numbatraj.errors import DownloadError, IntegrityError, RowIndexError, SchemaError
from numbatraj.remote.store import RemoteStore
from numbatraj.samplers.episode_pool import EpisodePoolSampler

COLS = [
    ColumnSpec("obs", np.float32, (17,)),
    ColumnSpec("action", np.float32, (6,)),
    ColumnSpec("reward", np.float32, ()),
    ColumnSpec("pixels", np.uint8, (3, 16, 16)),
]


class RangeServer:
    """Serves one file at /obj?token=<t> on 127.0.0.1; tokens can be expired (403)."""

    def __init__(self, path):
        self.data = open(path, "rb").read()
        self.requests: list[tuple[int, int]] = []
        self.bytes = 0
        self.valid = {"t0"}
        self._n = 0
        self._lock = threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                q = parse_qs(urlsplit(self.path).query)
                if q.get("token", [""])[0] not in srv.valid:
                    body = b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
                    self.send_response(403)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                m = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                size = len(srv.data)
                a, b = (int(m.group(1)), min(int(m.group(2)), size - 1)) if m else (0, size - 1)
                body = srv.data[a : b + 1]
                with srv._lock:
                    srv.requests.append((a, b + 1))
                    srv.bytes += len(body)
                self.send_response(206 if m else 200)
                if m:
                    self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, token="t0"):
        return f"http://127.0.0.1:{self.httpd.server_port}/obj?token={token}"

    def presign(self):
        """A fresh token, as the catalog would hand out a new presigned URL."""
        with self._lock:
            self._n += 1
            t = f"t{self._n}"
            self.valid.add(t)
        return self.url(t)

    def expire_all(self):
        self.valid.clear()

    def reset(self):
        self.requests, self.bytes = [], 0

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _write(path, rng, n_eps=60, **kw):
    """A store written by TrajectoryStoreWriter (whose metadata sits at the front of the
    file, META_BLOCK_BYTES), appends of a few hundred rows."""
    expected = {c.name: [] for c in COLS}
    with TrajectoryStoreWriter(path, COLS, **kw) as w:
        for _ in range(n_eps):
            n = int(rng.integers(50, 600))
            rows = {c.name: (rng.standard_normal((n, *c.shape)).astype(c.dtype)
                             if c.dtype.kind == "f" else
                             rng.integers(0, 255, (n, *c.shape), dtype=c.dtype))
                    for c in COLS}
            w.append_rows(rows)
            w.end_episode()
            for k, v in rows.items():
                expected[k].append(v)
    return {k: np.concatenate(v) for k, v in expected.items()}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("remote") / "store.h5"
    expected = _write(path, rng, chunk_rows={"obs": 1024, "action": 1024, "reward": 2048,
                                             "pixels": 256})
    srv = RangeServer(path)
    yield srv, path, expected
    srv.close()


def test_open_is_two_requests_under_4_mib(served):
    srv, path, _ = served
    srv.reset()
    with RemoteStore(srv.url()) as rs, TrajectoryStore(path) as local:
        assert rs.open_requests <= 3 and len(srv.requests) <= 3
        assert rs.open_bytes <= 4 << 20
        assert rs.n_rows == local.n_rows and rs.columns == local.columns
        np.testing.assert_array_equal(rs.episode_lengths, local.episode_lengths)
        assert rs.manifest == local.manifest


def test_every_read_equals_the_local_store(served, rng):
    srv, path, expected = served
    with RemoteStore(srv.url()) as rs, TrajectoryStore(path) as local:
        for name in rs.columns:
            for _ in range(10):
                a = int(rng.integers(0, rs.n_rows))
                b = int(rng.integers(a, min(rs.n_rows, a + 3000) + 1))
                np.testing.assert_array_equal(rs.read_range(name, a, b),
                                              local.read_range(name, a, b))
            np.testing.assert_array_equal(rs.load_column(name), expected[name])
        for i in (0, 7, -1):
            ep, lep = rs.episode(i), local.episode(i)
            assert all(np.array_equal(ep[k], lep[k]) for k in lep)
        win = WindowedColumn.make(rs, "obs", 700)
        lwin = WindowedColumn.make(local, "obs", 700)
        while True:
            np.testing.assert_array_equal(win.rows, lwin.rows)
            if not (win.advance() and lwin.advance()):
                break
        with pytest.raises(RowIndexError, match="outside"):
            rs.read_range("obs", 0, rs.n_rows + 1)
        with pytest.raises(SchemaError, match="no column 'nope'"):
            rs.read_range("nope", 0, 1)


def test_window_sweep_bytes_and_requests(served):
    srv, path, _ = served
    with RemoteStore(srv.url()) as rs:
        meta = rs.open_bytes
        srv.reset()
        win = 1024
        payload, worst = 0, 0
        for start in range(0, rs.n_rows, win):
            before = len(srv.requests)
            stop = min(start + win, rs.n_rows)
            for name, spec in rs.columns.items():
                n0 = len(srv.requests)
                rs.read_range(name, start, stop)
                worst = max(worst, len(srv.requests) - n0)
                payload += (stop - start) * spec.row_bytes
            assert len(srv.requests) - before <= 2 * len(rs.columns)
        assert worst <= 2  # a window read: at most 2 requests per column
        assert srv.bytes <= 1.2 * payload + meta, (srv.bytes, payload, meta)


def test_expired_url_is_refreshed_without_losing_the_place(served):
    srv, path, expected = served
    srv.valid.add("t0")
    rs = RemoteStore(srv.presign)
    sampler = EpisodePoolSampler(rs, batch_size=500, window_rows=512, pool_windows=4, seed=1)
    seen = []
    for k, (data, rows) in enumerate(sampler.epoch_batches()):
        np.testing.assert_array_equal(data["obs"], expected["obs"][rows])
        seen.append(rows)
        if k in (3, 9):
            srv.expire_all()  # every URL handed out so far now answers 403
    assert rs.url_refreshes >= 2
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(rs.n_rows))
    rs.close()
    srv.expire_all()
    with pytest.raises(DownloadError, match="HTTP 403"):
        RemoteStore(srv.url("stale"))  # a plain URL cannot be refreshed
    srv.valid.add("t0")


def test_disk_cache_serves_a_second_open(served, tmp_path):
    srv, path, expected = served
    with RemoteStore(srv.url(), cache=tmp_path / "cache") as rs:
        rs.read_range("pixels", 100, 3000)
    srv.reset()
    with RemoteStore(srv.url(), cache=tmp_path / "cache") as rs:
        n_open = len(srv.requests)
        np.testing.assert_array_equal(rs.read_range("pixels", 100, 3000),
                                      expected["pixels"][100:3000])
        assert len(srv.requests) == n_open


def test_compressed_columns_are_decoded(tmp_path, rng):
    cols = [ColumnSpec("obs", np.float32, (5,), compression="gzip"),
            ColumnSpec("act", np.int64, (), compression="zstd")]
    with TrajectoryStoreWriter(tmp_path / "c.h5", cols, chunk_rows={"obs": 256, "act": 256}) as w:
        for _ in range(5):
            w.append_rows({"obs": rng.standard_normal((300, 5)).astype(np.float32),
                           "act": rng.integers(0, 9, 300)})
            w.end_episode()
    srv = RangeServer(tmp_path / "c.h5")
    try:
        with RemoteStore(srv.url()) as rs, TrajectoryStore(tmp_path / "c.h5") as local:
            assert rs.storage("obs")["filtered"]
            for name in ("obs", "act"):
                np.testing.assert_array_equal(rs.read_range(name, 10, 1400),
                                              local.read_range(name, 10, 1400))
    finally:
        srv.close()


def _flip_in_chunk(path, column, k):
    """Flip one byte in the middle of chunk ``k`` of ``column`` (in place)."""
    import h5py

    with h5py.File(path, "r") as f:
        ds = f[column]
        info = ds.id.get_chunk_info_by_coord((k * ds.chunks[0],) + (0,) * (ds.ndim - 1))
        at = info.byte_offset + info.size // 2
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 0x01]))


def test_a_flipped_byte_in_a_chunk_is_an_integrity_error(tmp_path, rng):
    path = tmp_path / "bad.h5"
    expected = _write(path, rng, n_eps=12, chunk_rows={"obs": 512, "action": 512,
                                                       "reward": 512, "pixels": 128})
    _flip_in_chunk(path, "obs", 2)  # rows 1024..1535
    srv = RangeServer(path)
    try:
        with RemoteStore(srv.url(), cache=tmp_path / "cache") as rs:
            assert rs.open_requests <= 3
            np.testing.assert_array_equal(rs.read_range("obs", 0, 1024), expected["obs"][:1024])
            np.testing.assert_array_equal(rs.read_range("action", 1000, 1600),
                                          expected["action"][1000:1600])
            with pytest.raises(IntegrityError, match=r"column 'obs' rows 1024\.\.1535 "
                                                     r"\(chunk 2.*fail their checksum"):
                rs.read_range("obs", 1100, 1101)
            with pytest.raises(IntegrityError, match="'obs' rows 1024"):
                rs.read_rows(1500, 1600)
            with pytest.raises(IntegrityError):
                rs.episode(int(np.searchsorted(rs.episode_offsets, 1200, side="right")) - 1)
        assert not (tmp_path / "cache").exists() or not any(
            p.name == "2.bin" and p.parent.name == "obs" for p in (tmp_path / "cache").rglob("*"))
    finally:
        srv.close()


def test_a_corrupt_disk_cache_chunk_is_fetched_again(served, tmp_path):
    srv, _, expected = served
    cache = tmp_path / "cache"
    with RemoteStore(srv.url(), cache=cache) as rs:
        rs.read_range("reward", 0, 10)
    (cached,) = [p for p in cache.rglob("0.bin") if p.parent.name == "reward"]
    raw = bytearray(cached.read_bytes())
    raw[5] ^= 0xFF
    cached.write_bytes(bytes(raw))
    srv.reset()
    with RemoteStore(srv.url(), cache=cache) as rs:
        n_open = len(srv.requests)
        np.testing.assert_array_equal(rs.read_range("reward", 0, 10), expected["reward"][:10])
        assert len(srv.requests) == n_open + 1  # the bad cached chunk, fetched again


_MOTO_SCRIPT = """
import os, socket, sys
import numpy as np
import boto3
from moto.server import ThreadedMotoServer
from numbatraj import TrajectoryStore
from numbatraj.remote.store import RemoteStore

path = sys.argv[1]
os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
server.start()
try:
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
    s3.create_bucket(Bucket="lab")
    s3.upload_file(path, "lab", "stores/store.h5")
    signed = []

    def presign():
        signed.append(1)
        return s3.generate_presigned_url(
            "get_object", Params={"Bucket": "lab", "Key": "stores/store.h5"}, ExpiresIn=600)

    rng = np.random.default_rng(3)
    with RemoteStore(presign) as rs, TrajectoryStore(path) as local:
        assert rs.open_requests <= 3 and rs.open_bytes <= 4 << 20, rs.open_requests
        assert rs.n_rows == local.n_rows and rs.columns == local.columns
        for name in rs.columns:
            a = int(rng.integers(0, rs.n_rows - 600))
            np.testing.assert_array_equal(rs.read_range(name, a, a + 600),
                                          local.read_range(name, a, a + 600))
        ep = int(rng.integers(0, rs.n_episodes))
        for name, rows in rs.episode(ep).items():
            np.testing.assert_array_equal(rows, local.episode(ep)[name])
    assert signed
    print("moto ok")
finally:
    server.stop()
"""


def test_presigned_urls_of_moto_s3_server(served):
    """The same store behind an S3 API (moto's server mode on loopback) through presigned
    GET URLs from a callable: every read equals the file.  In its own process, so moto's
    in-process state never reaches the other S3 tests."""
    pytest.importorskip("boto3")
    pytest.importorskip("moto.server", reason="moto[server] missing")
    import os
    import subprocess
    import sys

    _, path, _ = served
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _MOTO_SCRIPT, str(path)], capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0 and "moto ok" in out.stdout, out.stderr[-3000:]
