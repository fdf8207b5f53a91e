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

from typing import Any

from numbatraj.errors import IntegrityError
from numbatraj.io.hashing import check_sha256_hex
from numbatraj.lerobot.schema import EPISODES_PREFIX, INFO_PATH, named_files, parse_info
from numbatraj.remote import _recording_db as R
from numbatraj.remote.objects import FileObjects, new_object_key
from numbatraj.remote.service import _HTTPError

__all__ = ["route_recording"]

_MAX_META_BYTES = 256 << 20
_MAX_FILES = 100_000


def _sha(value: Any, what: str) -> str:
    try:
        return check_sha256_hex(value, what=what)
    except ValueError as exc:
        raise _HTTPError(400, str(exc)) from None


def _size(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _HTTPError(400, f"{what} must be a non-negative integer, got {value!r}")
    return value


def _read_object(objects: Any, key: str, size: int, path: str) -> bytes:
    if size > _MAX_META_BYTES:
        raise _HTTPError(413, f"{path} has {size} bytes; metadata over {_MAX_META_BYTES} is "
                         "not read")
    if isinstance(objects, FileObjects):
        with open(objects.path_of(key), "rb") as f:
            return f.read()
    full = f"{objects.prefix}/{key}" if objects.prefix else key
    body = objects.client.get_object(Bucket=objects.bucket, Key=full)["Body"]
    return bytes(body.read())


def _list(h: Any, project: str) -> None:
    h._json(200, {"project": project, "datasets": R.list_recordings(h.server.db, project)})


def _describe(h: Any, project: str, dataset: str) -> None:
    srv = h.server
    snap = R.snapshot(srv.db, project, dataset)
    if not snap:
        raise _HTTPError(404, f"no recording {project}/{dataset} was committed")
    files = []
    for path, (sha, n, key) in snap.items():
        url = srv.objects.presign_get(key, srv.get_expiry_s)
        files.append({"path": path, "sha256": sha, "bytes": n, "download": url.public()})
    h._json(200, {"project": project, "dataset": dataset, "files": files})


def _offer(h: Any, project: str, dataset: str) -> None:
    srv = h.server
    body = h._read_json()
    path = R.check_rel_path(body.get("path"))  # type: ignore[arg-type]
    sha = _sha(body.get("sha256"), "sha256")
    size = _size(body.get("bytes"), "bytes")
    n_files = R.committed_count(srv.db, project, dataset)
    if R.committed_sha(srv.db, project, dataset, path) == sha:
        h._json(200, {"state": "unchanged", "committed_files": n_files})
        return
    b = R.blob(srv.db, project, dataset, sha)
    if b is not None and b.status == "ready":
        if b.bytes != size:
            raise _HTTPError(409, f"{path}: sha256 {sha} is held with {b.bytes} bytes, "
                             f"offered with {size}")
        h._json(200, {"state": "held", "committed_files": n_files})
        return
    key = new_object_key(f"rec.{project}", dataset)
    R.put_pending_blob(srv.db, project, dataset, sha, size, key)
    put = srv.objects.presign_put(key, srv.put_expiry_s, sha, size)
    h._json(201, {"state": "upload", "upload": put.public(), "committed_files": n_files})


def _complete(h: Any, project: str, dataset: str, sha: str) -> None:
    srv = h.server
    sha = _sha(sha, "blob")
    b = R.blob(srv.db, project, dataset, sha)
    if b is None:
        raise _HTTPError(404, f"blob {sha} of {project}/{dataset} was never offered")
    if b.status != "ready":
        problem = srv.objects.check(b.object_key, b.sha256, b.bytes)
        if problem is not None:
            raise _HTTPError(409, f"blob {sha} of {project}/{dataset} stays pending: {problem}")
        if not R.mark_blob_ready(srv.db, project, dataset, b):
            raise _HTTPError(409, f"blob {sha} of {project}/{dataset} was offered again while "
                             "its upload was being checked; complete the new offer's upload")
    h._json(200, {"sha256": sha, "bytes": b.bytes, "status": "ready"})


def _commit(h: Any, project: str, dataset: str) -> None:
    srv = h.server
    body = h._read_json()
    raw = body.get("files")
    if not isinstance(raw, dict) or not raw or len(raw) > _MAX_FILES:
        raise _HTTPError(400, f"files must be a non-empty object of at most {_MAX_FILES} "
                         "path -> {sha256, bytes}")
    files: dict[str, tuple[str, int]] = {}
    blobs: dict[str, R.Blob] = {}
    missing: list[str] = []
    for path, entry in raw.items():
        R.check_rel_path(path)
        if not isinstance(entry, dict):
            raise _HTTPError(400, f"files[{path!r}] must be an object with sha256 and bytes")
        sha = _sha(entry.get("sha256"), f"files[{path!r}].sha256")
        size = _size(entry.get("bytes"), f"files[{path!r}].bytes")
        b = R.blob(srv.db, project, dataset, sha)
        if b is None or b.status != "ready" or b.bytes != size:
            missing.append(path)
            continue
        files[path] = (sha, size)
        blobs[path] = b
    if missing:
        raise _HTTPError(409, f"commit of {project}/{dataset} refused: the service does not "
                         f"hold {len(missing)} file(s): {', '.join(sorted(missing)[:10])}")
    episodes = frames = None
    if INFO_PATH in files:
        def read(p: str) -> bytes:
            return _read_object(srv.objects, blobs[p].object_key, blobs[p].bytes, p)

        info_raw = read(INFO_PATH)
        tables = {p: read(p) for p in files
                  if p.startswith(EPISODES_PREFIX) and p.endswith(".parquet")}
        try:
            named = named_files(info_raw, tables)
            info = parse_info(info_raw)
        except IntegrityError as exc:
            raise _HTTPError(409, f"commit of {project}/{dataset} refused: {exc}") from None
        absent = sorted(named - files.keys())
        if absent:
            raise _HTTPError(409, f"commit of {project}/{dataset} refused: {INFO_PATH} names "
                             f"{len(absent)} file(s) the commit does not hold: "
                             f"{', '.join(absent[:10])}")
        episodes = info.get("total_episodes") if isinstance(info.get("total_episodes"),
                                                            int) else None
        frames = info.get("total_frames") if isinstance(info.get("total_frames"), int) else None
    R.replace_snapshot(srv.db, project, dataset, files, episodes, frames)
    h._json(200, {"project": project, "dataset": dataset, "files": len(files),
                  "bytes": sum(n for _, n in files.values()), "episodes": episodes})


def route_recording(h: Any, segs: list[str]) -> None:
    """Answer a ``/v1/recordings/...`` request; ``segs`` are the path parts after it."""
    cmd = h.command
    h._auth("read" if cmd in ("GET", "HEAD") else "write")
    if not segs:
        raise _HTTPError(404, "no route: /v1/recordings needs a project")
    project = R.check_project(segs[0])
    if cmd == "GET" and len(segs) == 1:
        return _list(h, project)
    if len(segs) < 2:
        raise _HTTPError(404, f"no route {cmd} /v1/recordings/{project}")
    dataset = R.check_dataset(segs[1])
    rest = segs[2:]
    if cmd == "GET" and not rest:
        return _describe(h, project, dataset)
    if cmd == "POST" and rest == ["offer"]:
        return _offer(h, project, dataset)
    if cmd == "POST" and len(rest) == 3 and rest[0] == "blobs" and rest[2] == "complete":
        return _complete(h, project, dataset, rest[1])
    if cmd == "POST" and rest == ["commit"]:
        return _commit(h, project, dataset)
    raise _HTTPError(404, f"no route {cmd} /v1/recordings/{'/'.join(segs)}")
