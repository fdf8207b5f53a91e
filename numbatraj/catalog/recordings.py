"""The catalog service's recording routes: file-by-file mirroring of a dataset directory.

::

    GET  /v1/recordings/<project>                                read   datasets, summaries
    GET  /v1/recordings/<project>/<dataset>                      read   snapshot + presigned GETs
    POST /v1/recordings/<project>/<dataset>/offer                write  {path, sha256, bytes}
    POST /v1/recordings/<project>/<dataset>/blobs/<sha>/complete write  check the upload
    POST /v1/recordings/<project>/<dataset>/commit               write  {files: {path: {..}}}

An offer is answered ``unchanged`` (the snapshot already holds that path with that digest),
``held`` (the bytes are here under another path or from an earlier pass) or ``upload`` with
a presigned PUT.  A commit replaces the snapshot in one transaction, and only when every
file is held and, if it holds ``meta/info.json``, every video and data file that metadata
names is in it: the service never holds an ``info.json`` naming a video it does not have.
"""

from __future__ import annotations

from numbatraj.catalog._http import HTTPError, Request, body_sha256, body_size
from numbatraj.catalog.db import Blob, CatalogDB
from numbatraj.catalog.objects import ObjectBackend, new_object_key
from numbatraj.catalog.protocol import (
    STATE_HELD,
    STATE_UNCHANGED,
    STATE_UPLOAD,
    check_dataset,
    check_project,
    check_rel_path,
)
from numbatraj.errors import IntegrityError
from numbatraj.lerobot.schema import EPISODES_PREFIX, INFO_PATH, named_files, parse_info

__all__ = ["RecordingRoutes"]

_MAX_META_BYTES = 256 << 20
_MAX_FILES = 100_000


class RecordingRoutes:
    """The ``/v1/recordings/...`` routes over one database and object backend.

    Parameters
    ----------
    db : CatalogDB
        Holds the blobs, snapshots and summaries.
    objects : ObjectBackend
        Where the bytes go; presigns the transfers and checks uploads.
    get_expiry_s, put_expiry_s : int
        Lifetime of presigned download / upload URLs.
    """

    def __init__(
        self, db: CatalogDB, objects: ObjectBackend, *, get_expiry_s: int, put_expiry_s: int
    ) -> None:
        self.db = db
        self.objects = objects
        self.get_expiry_s = get_expiry_s
        self.put_expiry_s = put_expiry_s

    def route(self, req: Request, segs: list[str]) -> None:
        """Answer a ``/v1/recordings/...`` request; ``segs`` are the path parts after it."""
        cmd = req.method
        req.auth("read" if cmd in ("GET", "HEAD") else "write")
        if not segs:
            raise HTTPError(404, "no route: /v1/recordings needs a project")
        project = check_project(segs[0])
        if cmd == "GET" and len(segs) == 1:
            return self._list(req, project)
        if len(segs) < 2:
            raise HTTPError(404, f"no route {cmd} /v1/recordings/{project}")
        dataset = check_dataset(segs[1])
        rest = segs[2:]
        if cmd == "GET" and not rest:
            return self._describe(req, project, dataset)
        if cmd == "POST" and rest == ["offer"]:
            return self._offer(req, project, dataset)
        if cmd == "POST" and len(rest) == 3 and rest[0] == "blobs" and rest[2] == "complete":
            return self._complete(req, project, dataset, rest[1])
        if cmd == "POST" and rest == ["commit"]:
            return self._commit(req, project, dataset)
        raise HTTPError(404, f"no route {cmd} /v1/recordings/{'/'.join(segs)}")

    # -- routes ----------------------------------------------------------------------------

    def _list(self, req: Request, project: str) -> None:
        req.respond(200, {"project": project, "datasets": self.db.list_recordings(project)})

    def _describe(self, req: Request, project: str, dataset: str) -> None:
        snap = self.db.snapshot(project, dataset)
        if not snap:
            raise HTTPError(404, f"no recording {project}/{dataset} was committed")
        files = []
        for path, (sha, n, key) in snap.items():
            url = self.objects.presign_get(key, self.get_expiry_s)
            files.append({"path": path, "sha256": sha, "bytes": n, "download": url.public()})
        req.respond(200, {"project": project, "dataset": dataset, "files": files})

    def _offer(self, req: Request, project: str, dataset: str) -> None:
        db = self.db
        body = req.read_json()
        path = check_rel_path(body.get("path"))
        sha = body_sha256(body.get("sha256"), "sha256")
        size = body_size(body.get("bytes"), "bytes")
        n_files = db.committed_count(project, dataset)
        if db.committed_sha(project, dataset, path) == sha:
            req.respond(200, {"state": STATE_UNCHANGED, "committed_files": n_files})
            return
        b = db.blob(project, dataset, sha)
        if b is not None and b.status == "ready":
            if b.bytes != size:
                raise HTTPError(409, f"{path}: sha256 {sha} is held with {b.bytes} bytes, "
                                f"offered with {size}")
            req.respond(200, {"state": STATE_HELD, "committed_files": n_files})
            return
        key = new_object_key(f"rec.{project}", dataset)
        db.put_pending_blob(project, dataset, sha, size, key)
        put = self.objects.presign_put(key, self.put_expiry_s, sha, size)
        req.respond(201, {"state": STATE_UPLOAD, "upload": put.public(),
                          "committed_files": n_files})

    def _complete(self, req: Request, project: str, dataset: str, sha: str) -> None:
        sha = body_sha256(sha, "blob")
        b = self.db.blob(project, dataset, sha)
        if b is None:
            raise HTTPError(404, f"blob {sha} of {project}/{dataset} was never offered")
        if b.status != "ready":
            problem = self.objects.check(b.object_key, b.sha256, b.bytes)
            if problem is not None:
                raise HTTPError(409, f"blob {sha} of {project}/{dataset} stays pending: "
                                f"{problem}")
            if not self.db.mark_blob_ready(project, dataset, b):
                raise HTTPError(409, f"blob {sha} of {project}/{dataset} was offered again "
                                "while its upload was being checked; complete the new "
                                "offer's upload")
        req.respond(200, {"sha256": sha, "bytes": b.bytes, "status": "ready"})

    def _read_meta(self, b: Blob, path: str) -> bytes:
        if b.bytes > _MAX_META_BYTES:
            raise HTTPError(413, f"{path} has {b.bytes} bytes; metadata over "
                            f"{_MAX_META_BYTES} is not read")
        return self.objects.read(b.object_key)

    def _commit(self, req: Request, project: str, dataset: str) -> None:
        body = req.read_json()
        raw = body.get("files")
        if not isinstance(raw, dict) or not raw or len(raw) > _MAX_FILES:
            raise HTTPError(400, f"files must be a non-empty object of at most {_MAX_FILES} "
                            "path -> {sha256, bytes}")
        files: dict[str, tuple[str, int]] = {}
        blobs: dict[str, Blob] = {}
        missing: list[str] = []
        for path, entry in raw.items():
            check_rel_path(path)
            if not isinstance(entry, dict):
                raise HTTPError(400, f"files[{path!r}] must be an object with sha256 and bytes")
            sha = body_sha256(entry.get("sha256"), f"files[{path!r}].sha256")
            size = body_size(entry.get("bytes"), f"files[{path!r}].bytes")
            b = self.db.blob(project, dataset, sha)
            if b is None or b.status != "ready" or b.bytes != size:
                missing.append(path)
                continue
            files[path] = (sha, size)
            blobs[path] = b
        if missing:
            raise HTTPError(409, f"commit of {project}/{dataset} refused: the service does not "
                            f"hold {len(missing)} file(s): {', '.join(sorted(missing)[:10])}")
        episodes = frames = None
        if INFO_PATH in files:
            info_raw = self._read_meta(blobs[INFO_PATH], INFO_PATH)
            tables = {p: self._read_meta(blobs[p], p) for p in files
                      if p.startswith(EPISODES_PREFIX) and p.endswith(".parquet")}
            try:
                named = named_files(info_raw, tables)
                info = parse_info(info_raw)
            except IntegrityError as exc:
                raise HTTPError(409, f"commit of {project}/{dataset} refused: {exc}") from None
            absent = sorted(named - files.keys())
            if absent:
                raise HTTPError(409, f"commit of {project}/{dataset} refused: {INFO_PATH} "
                                f"names {len(absent)} file(s) the commit does not hold: "
                                f"{', '.join(absent[:10])}")
            n_eps, n_frames = info.get("total_episodes"), info.get("total_frames")
            episodes = n_eps if isinstance(n_eps, int) else None
            frames = n_frames if isinstance(n_frames, int) else None
        self.db.replace_snapshot(project, dataset, files, episodes, frames)
        req.respond(200, {"project": project, "dataset": dataset, "files": len(files),
                          "bytes": sum(n for _, n in files.values()), "episodes": episodes})
