"""A small loopback stand-in for the Hugging Face Hub, for offline push and download tests.

Write API: what ``huggingface_hub``'s commit path uses when Xet is disabled
(``HF_HUB_DISABLE_XET=1``): repo creation, README validation, ``preupload`` (upload mode and
the stored object id of each path), the Git LFS batch API with single-part ``PUT`` uploads,
the NDJSON ``commit`` endpoint, and tags.

Read API: what ``snapshot_download`` and ``hf_hub_download`` use (huggingface_hub 1.x and
2.x): ``revision/<rev>`` (the commit sha and the file list, ``siblings``), ``tree/<rev>``
(recursive listing with git and LFS object ids and sizes), and ``resolve/<rev>/<path>``
(``HEAD`` and ``GET``, with the ``X-Repo-Commit`` and ``ETag`` headers the client files a
blob under).  A revision is ``main``, a tag, or a commit sha; every commit keeps its own
tree, so ``v3.0`` and ``main`` can differ.  Errors carry the Hub's ``X-Error-Code``:
``RepoNotFound`` (an unknown repo, or a private one asked for without the token),
``RevisionNotFound``, ``EntryNotFound``; a wrong token is a 401.

It keeps every repo in memory and logs every request (method, path, ``Authorization``
header), so a test can say exactly what reached it.  It listens on 127.0.0.1 on a free
port, checks the bearer token (every write needs it; reads of a public repo do not), and
stops when its context exits or, failing that, after ``lifetime`` seconds on its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HubStub", "StubRepo", "no_public_hub"]

_LFS_SUFFIXES = (".mp4", ".parquet")


def no_public_hub(monkeypatch: Any) -> None:
    """Stop what huggingface_hub 2.x sends on its own to the ``ENDPOINT`` it read at import
    (the public Hub, whatever ``HF_ENDPOINT`` says now): its daily fetch of an "agent
    harness" registry for the User-Agent.  Older releases have no such request."""
    try:
        from huggingface_hub.utils import _detect_agent
    except ImportError:
        return
    monkeypatch.setattr(_detect_agent, "_fetch_registry", lambda: None, raising=False)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class StubRepo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[list[str]] = field(default_factory=list)  # paths carried by each commit
    tags: dict[str, str] = field(default_factory=dict)
    trees: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> its files

    @property
    def head(self) -> str:
        return hashlib.sha1(json.dumps(self.commits).encode()).hexdigest()

    def record(self, carried: list[str]) -> str:
        """Close a commit carrying ``carried`` over the current ``files``; its sha."""
        self.commits.append(carried)
        self.trees[self.head] = dict(self.files)
        return self.head

    def resolve(self, rev: str) -> str | None:
        """The commit a branch (``main``), tag or commit sha names, else ``None``."""
        if rev == "main":
            return self.head if self.commits else None
        if rev in self.tags:
            return self.tags[rev]
        return rev if rev in self.trees else None


class HubStub:
    """``with HubStub(token="t") as hub: push(..., endpoint=hub.url, token="t")``."""

    def __init__(self, token: str = "hf_test_token", lifetime: float = 120.0) -> None:
        self.token = token
        self.repos: dict[str, StubRepo] = {}
        self.lfs: dict[str, bytes] = {}
        self.puts: list[str] = []  # LFS object ids uploaded, in order
        self.requests: list[tuple[str, str]] = []
        self.auth: list[str | None] = []  # the Authorization header of each request
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

            def _send_bytes(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

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
                auth = self.headers.get("Authorization")
                with stub._lock:
                    stub.requests.append((method, self.path))
                    stub.auth.append(auth)
                    read = stub._read(method, urllib.parse.unquote(self.path.split("?")[0]),
                                      auth)
                if read is not None:
                    status, headers, data = read
                    self._send_bytes(status, headers, data)
                    return
                with stub._lock:
                    if not self.path.startswith("/lfs-put/") and self.headers.get(
                        "Authorization"
                    ) != f"Bearer {stub.token}":
                        self._send(401, {"error": "Invalid credentials"})
                        return
                    status, doc = stub._handle(method, self.path.split("?")[0], body, self)
                self._send(status, doc)

            def do_GET(self) -> None:
                self._route("GET")

            def do_HEAD(self) -> None:
                self._route("HEAD")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PUT(self) -> None:
                self._route("PUT")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
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

    # -- seeding --------------------------------------------------------------------------

    def add_repo(self, repo_id: str, files: dict[str, bytes], *, tags: tuple[str, ...] = (),
                 private: bool = False) -> str:
        """A dataset repo holding ``files`` in one commit on ``main``, tagged with ``tags``;
        returns the commit sha.  Call again to add a commit (and move the given tags)."""
        with self._lock:
            repo = self.repos.setdefault(repo_id, StubRepo(private=private))
            repo.files.update(files)
            sha = repo.record(sorted(files))
            for tag in tags:
                repo.tags[tag] = sha
            return sha

    def reads(self) -> list[tuple[str, str]]:
        """The requests of the read API so far (repo info, trees, file downloads)."""
        return [(m, p) for m, p in self.requests
                if re.match(r"/api/datasets/[^/]+/[^/]+/(revision|tree)/|/datasets/[^/]+/[^/]+/"
                            r"resolve/", p)]

    # -- the read API -----------------------------------------------------------------------

    @staticmethod
    def _error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
        return status, {"X-Error-Code": code, "X-Error-Message": message,
                        "Content-Type": "application/json"}, json.dumps(
                            {"error": message}).encode()

    @staticmethod
    def _etag(path: str, data: bytes) -> str:
        return hashlib.sha256(data).hexdigest() if path.endswith(_LFS_SUFFIXES) else \
            git_blob_sha1(data)

    def _read(self, method: str, path: str,
              auth: str | None) -> tuple[int, dict[str, str], bytes] | None:
        """Serve a read-API request, or ``None`` when ``path`` is not one (write API)."""
        api = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/(revision|tree)/([^/]+)(/.*)?", path)
        res = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if method not in ("GET", "HEAD") or not (api or res):
            return None
        m = api or res
        assert m is not None
        rid = m.group(1)
        if auth is not None and auth != f"Bearer {self.token}":
            return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        repo = self.repos.get(rid)
        if repo is None or (repo.private and auth is None):
            return self._error(401 if auth is None else 404, "RepoNotFound",
                               f"Repository not found: {rid}")
        rev = m.group(3) if api else m.group(2)
        sha = repo.resolve(rev)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        tree = repo.trees[sha]
        if res:
            name = m.group(3)
            if name not in tree:
                return self._error(404, "EntryNotFound", f"{name} does not exist at {rev}")
            data = tree[name]
            headers = {"X-Repo-Commit": sha, "ETag": f'"{self._etag(name, data)}"',
                       "Content-Type": "application/octet-stream"}
            return 200, headers, data
        if m.group(2) == "revision":
            doc: Any = {"id": rid, "sha": sha, "private": repo.private,
                        "siblings": [{"rfilename": p} for p in sorted(tree)]}
        else:
            sub = (m.group(4) or "").strip("/")
            doc, dirs = [], set()
            for p in sorted(tree):
                if sub and not p.startswith(sub + "/"):
                    continue
                parts = p.split("/")
                for i in range(1, len(parts)):
                    d = "/".join(parts[:i])
                    if d not in dirs and (not sub or d.startswith(sub + "/")):
                        dirs.add(d)
                        doc.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(),
                                    "size": 0, "path": d})
                entry = {"type": "file", "oid": git_blob_sha1(tree[p]), "size": len(tree[p]),
                         "path": p}
                if p.endswith(_LFS_SUFFIXES):
                    entry["lfs"] = {"oid": hashlib.sha256(tree[p]).hexdigest(),
                                    "size": len(tree[p]), "pointerSize": 134}
                doc.append(entry)
        return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()

    # -- the write API ----------------------------------------------------------------------

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
            # huggingface_hub 2.x sends "visibility"; 1.x sent "private": the Hub takes both
            private = (doc["visibility"] == "private" if "visibility" in doc
                       else bool(doc.get("private")))
            self.repos[rid] = StubRepo(private=private)
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
            repo.record(carried)
            return 200, {"commitUrl": f"{self.url}/datasets/{rid}/commit/{repo.head}",
                         "commitOid": repo.head, "pullRequestUrl": None}
        if what == "tag" and method == "POST":
            repo.tags[doc["tag"]] = repo.head
            return 200, {}
        if what == "tag" and method == "DELETE":
            if arg not in repo.tags:
                return 404, {"error": f"Invalid rev id: {arg}", "_code": "RevisionNotFound"}
            del repo.tags[arg]
            return 200, {}
        return 404, {"error": f"no route {method} {what}"}
