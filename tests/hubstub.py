"""A small loopback stand-in for the Hugging Face Hub's write API, for offline push tests.

It speaks what ``huggingface_hub``'s commit path uses when Xet is disabled
(``HF_HUB_DISABLE_XET=1``): repo creation, README validation, ``preupload`` (upload mode and
the stored object id of each path), the Git LFS batch API with single-part ``PUT`` uploads,
the NDJSON ``commit`` endpoint, ``revision`` info, and tags.  It keeps every repo in memory
and logs what reached it, so a test can say exactly which files a push sent.

It listens on 127.0.0.1 on a free port, checks the bearer token, and stops when its context
exits or, failing that, after ``lifetime`` seconds on its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HubStub", "StubRepo"]

_LFS_SUFFIXES = (".mp4", ".parquet")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class StubRepo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[list[str]] = field(default_factory=list)  # paths carried by each commit
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def head(self) -> str:
        return hashlib.sha1(json.dumps(self.commits).encode()).hexdigest()


class HubStub:
    """``with HubStub(token="t") as hub: push(..., endpoint=hub.url, token="t")``."""

    def __init__(self, token: str = "hf_test_token", lifetime: float = 120.0) -> None:
        self.token = token
        self.repos: dict[str, StubRepo] = {}
        self.lfs: dict[str, bytes] = {}
        self.puts: list[str] = []  # LFS object ids uploaded, in order
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _send(self, status: int, doc: Any = None) -> None:
                doc = dict(doc or {})
                code = doc.pop("_code", None)
                data = json.dumps(doc).encode()
                self.send_response(status)
                if code:
                    self.send_header("X-Error-Code", code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method: str) -> None:
                body = self._body()
                with stub._lock:
                    stub.requests.append((method, self.path))
                    if not self.path.startswith("/lfs-put/") and self.headers.get(
                        "Authorization"
                    ) != f"Bearer {stub.token}":
                        self._send(401, {"error": "Invalid credentials"})
                        return
                    status, doc = stub._handle(method, self.path.split("?")[0], body, self)
                self._send(status, doc)

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PUT(self) -> None:
                self._route("PUT")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True

    # -- server life ------------------------------------------------------------------------

    def __enter__(self) -> HubStub:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._timer.cancel()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    # -- the API ----------------------------------------------------------------------------

    def _repo(self, rid: str) -> StubRepo | None:
        return self.repos.get(rid)

    def _handle(self, method: str, path: str, body: bytes, h: Any) -> tuple[int, Any]:
        doc = None
        if body and "/commit/" not in path and not path.startswith("/lfs-put/"):
            doc = json.loads(body)
        if method == "POST" and path == "/api/repos/create":
            rid = f"{doc['organization']}/{doc['name']}"
            if rid in self.repos:
                return 409, {"error": "You already created this dataset repo",
                             "url": f"{self.url}/datasets/{rid}"}
            self.repos[rid] = StubRepo(private=doc.get("visibility", "public") == "private")
            return 200, {"url": f"{self.url}/datasets/{rid}"}
        if method == "POST" and path == "/api/validate-yaml":
            return 200, {"errors": [], "warnings": []}
        m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/(preupload|commit|revision|tag)/(.+)", path)
        if m:
            rid, what, arg = m.groups()
            repo = self._repo(rid)
            if repo is None:
                return 404, {"error": "Repository not found", "_code": "RepoNotFound"}
            return self._repo_call(repo, rid, method, what, arg, doc, body)
        m = re.fullmatch(r"/datasets/([^/]+/[^/]+)\.git/info/lfs/objects/batch", path)
        if m and method == "POST":
            objects = []
            for o in doc["objects"]:
                entry: dict[str, Any] = {"oid": o["oid"], "size": o["size"]}
                if o["oid"] not in self.lfs:
                    entry["actions"] = {"upload": {"href": f"{self.url}/lfs-put/{o['oid']}"}}
                objects.append(entry)
            return 200, {"transfer": "basic", "objects": objects}
        m = re.fullmatch(r"/lfs-put/([0-9a-f]{64})", path)
        if m and method == "PUT":
            if hashlib.sha256(body).hexdigest() != m.group(1):
                return 400, {"error": "sha256 mismatch"}
            self.lfs[m.group(1)] = body
            self.puts.append(m.group(1))
            return 200, {}
        return 404, {"error": f"no route {method} {path}"}

    def _repo_call(
        self, repo: StubRepo, rid: str, method: str, what: str, arg: str, doc: Any, body: bytes
    ) -> tuple[int, Any]:
        if what == "preupload":
            files = []
            for f in doc["files"]:
                lfs = f["path"].endswith(_LFS_SUFFIXES)
                old = repo.files.get(f["path"])
                oid = None
                if old is not None:
                    oid = hashlib.sha256(old).hexdigest() if lfs else git_blob_sha1(old)
                files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                              "shouldIgnore": False, "oid": oid})
            return 200, {"files": files}
        if what == "commit" and method == "POST":
            carried = []
            for line in body.splitlines():
                item = json.loads(line)
                value = item["value"]
                if item["key"] == "file":
                    repo.files[value["path"]] = base64.b64decode(value["content"])
                elif item["key"] == "lfsFile":
                    if value["oid"] not in self.lfs:
                        return 400, {"error": f"LFS object {value['oid']} was never uploaded"}
                    repo.files[value["path"]] = self.lfs[value["oid"]]
                else:
                    continue
                carried.append(value["path"])
            repo.commits.append(carried)
            return 200, {"commitUrl": f"{self.url}/datasets/{rid}/commit/{repo.head}",
                         "commitOid": repo.head, "pullRequestUrl": None}
        if what == "revision" and method == "GET":
            return 200, {"id": rid, "sha": repo.head, "private": repo.private,
                         "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
        if what == "tag" and method == "POST":
            repo.tags[doc["tag"]] = repo.head
            return 200, {}
        if what == "tag" and method == "DELETE":
            if arg not in repo.tags:
                return 404, {"error": f"Invalid rev id: {arg}", "_code": "RevisionNotFound"}
            del repo.tags[arg]
            return 200, {}
        return 404, {"error": f"no route {method} {what}"}
