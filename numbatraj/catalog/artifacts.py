"""The artifact routes (datasets, policies, projects): metadata and presigned URLs.

Served by the ASGI app (:mod:`numbatraj.catalog.app`)::

    GET  /v1/health                                   no key  database + object store check
    GET  /v1/datasets[?name=N]                        read    every row (pending included)
    GET  /v1/datasets/<name>[?version=V|alias=A]      read    a ready row + presigned GET
    POST /v1/datasets                                 write   register: pending + token +
                                                              presigned PUT (or multipart)
    POST /v1/datasets/<name>/<version>/parts          write   {token, parts}: part URLs
    POST /v1/datasets/<name>/<version>/complete       write   {token, sha256}: check, then
                                                              ready (first complete wins)
    POST /v1/datasets/<name>/<version>/abort          write   {token}: drop a multipart
    POST /v1/datasets/<name>/aliases/<alias>          write   {version}: promote
    ... /v1/artifacts/<kind>/...                      the same for kind policy / project
    ... /v1/recordings/<project>[/<dataset>[/...]]    recordings mirrored file by file
                                                      (see :mod:`.recordings`)

Keys travel as ``Authorization: Bearer <key>``: none, an unknown or a revoked one is ``401``,
a read key on a write route ``403``.  With the embedded ``file://`` object backend the same
app also serves ``GET|HEAD|PUT /objects/<key>?expires=..&sig=..``, which answers only URLs it
signed; that endpoint is the object store, not the catalog, and it is the only place bytes
pass through this process.
"""

from __future__ import annotations

import math
import time
from typing import Any

from numbatraj.catalog._http import HTTPError, Request, body_int, body_sha256, body_text
from numbatraj.catalog.db import CatalogDB, DatasetRecord, Upload, new_token
from numbatraj.catalog.objects import MAX_PARTS, ObjectBackend, new_object_key
from numbatraj.catalog.protocol import check_alias, check_name, check_version

__all__ = ["MIN_PART_BYTES", "ArtifactRoutes", "DatasetRoutes"]

#: S3's smallest part (all but the last); the service refuses a smaller ``part_size``.
MIN_PART_BYTES = 5 << 20


class ArtifactRoutes:
    """The routes of one artifact kind (``/v1/datasets`` or ``/v1/artifacts/<kind>``).

    Parameters
    ----------
    db : CatalogDB
        Holds the rows.
    objects : ObjectBackend
        Where the bytes go; presigns the transfers and checks uploads.
    get_expiry_s, put_expiry_s : int
        Lifetime of presigned download / upload URLs.
    kind : str
        ``dataset``, ``policy`` or ``project``.
    min_part_bytes : int
        Smallest ``part_size`` a multipart registration may ask for.
    """

    def __init__(
        self, db: CatalogDB, objects: ObjectBackend, *, get_expiry_s: int, put_expiry_s: int,
        kind: str = "dataset", min_part_bytes: int = MIN_PART_BYTES,
    ) -> None:
        self.db = db
        self.objects = objects
        self.get_expiry_s = get_expiry_s
        self.put_expiry_s = put_expiry_s
        self.kind = kind
        self.min_part_bytes = min_part_bytes
        self.what = "dataset" if kind == "dataset" else f"{kind} artifact"

    def route(self, req: Request, segs: list[str]) -> None:
        """Answer a request; ``segs`` are the path parts after the kind's base route."""
        cmd = req.method
        if cmd == "GET" and not segs:
            req.auth("read")
            name = req.query.get("name")
            rows = self.db.list_rows(check_name(name) if name else None, self.kind)
            aliases = self.db.aliases(self.kind, check_name(name) if name else None)
            key = "datasets" if self.kind == "dataset" else "artifacts"
            req.respond(200, {key: [self._public(r, aliases) for r in rows]})
        elif cmd == "GET" and len(segs) == 1:
            req.auth("read")
            req.respond(200, self._describe(check_name(segs[0]), req.query.get("version"),
                                            req.query.get("alias")))
        elif cmd == "POST" and not segs:
            req.auth("write")
            status, out = self._register(req.read_json())
            req.respond(status, out)
        elif cmd == "POST" and len(segs) == 3 and segs[1] == "aliases":
            req.auth("write")
            req.respond(200, self._promote(check_name(segs[0]), check_alias(segs[2]),
                                           req.read_json()))
        elif cmd == "POST" and len(segs) == 3 and segs[2] in ("complete", "parts", "abort"):
            req.auth("write")
            name, version = check_name(segs[0]), check_version(segs[1])
            body = req.read_json()
            if segs[2] == "complete":
                req.respond(200, self._complete(name, version, body))
            elif segs[2] == "parts":
                req.respond(200, self._parts(name, version, body))
            else:
                req.respond(200, self._abort(name, version, body))
        else:
            raise HTTPError(404, f"no route {cmd} {req.path}")

    # -- reading ---------------------------------------------------------------------------

    def _public(self, rec: DatasetRecord,
                aliases: dict[tuple[str, str], list[str]] | None = None) -> dict[str, Any]:
        out = rec.public()
        if aliases is None:
            aliases = self.db.aliases(self.kind, rec.name)
        out["aliases"] = aliases.get((rec.name, rec.version), [])
        return out

    def _describe(self, name: str, version: str | None, alias: str | None) -> dict[str, Any]:
        db, what = self.db, self.what
        if version is not None and alias is not None:
            raise HTTPError(400, "give version or alias, not both")
        if alias is not None:
            version = db.alias_version(self.kind, name, check_alias(alias))
            if version is None:
                raise HTTPError(404, f"{what} {name!r} has no alias {alias!r}")
        if version is None:
            rec = db.latest_ready(name, self.kind)
            if rec is None:
                pending = db.list_rows(name, self.kind)
                if pending:
                    raise HTTPError(
                        409, f"{what} {name!r} has no ready version (pending: "
                        + ", ".join(r.version for r in pending) + ")",
                    )
                raise HTTPError(404, f"no {what} named {name!r}")
        else:
            rec = db.get(name, check_version(version), self.kind)
            if rec is None:
                raise HTTPError(404, f"no {what} {name!r} version {version!r}")
            if rec.status != "ready":
                raise HTTPError(
                    409, f"{what} {name!r} version {version!r} is {rec.status}: its upload "
                    "was never completed, so it cannot be downloaded",
                )
        url = self.objects.presign_get(rec.object_key, self.get_expiry_s)
        return {**self._public(rec), "download": url.public()}

    # -- the three-step push ---------------------------------------------------------------

    def _immutable(self, rec: DatasetRecord) -> HTTPError:
        return HTTPError(
            409, f"{self.what} {rec.name!r} version {rec.version!r} is ready and immutable "
            f"(sha256 {rec.sha256}, {rec.bytes} bytes); push a new version",
        )

    def _register(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = check_name(body.get("name"))
        version = check_version(body.get("version"))
        digest = body_sha256(body.get("sha256"), "sha256")
        size = body_int(body, "bytes")
        if size is None or size < 0:
            raise HTTPError(400, f"bytes must be a non-negative integer, got {size!r}")
        part_size = body_int(body, "part_size")
        n_parts = 0
        if part_size is not None:
            if part_size < self.min_part_bytes:
                raise HTTPError(400, f"part_size must be at least {self.min_part_bytes}, "
                                f"got {part_size}")
            n_parts = max(1, math.ceil(size / part_size))
            if n_parts > MAX_PARTS:
                raise HTTPError(400, f"part_size {part_size} makes {n_parts} parts of "
                                f"{size} bytes; at most {MAX_PARTS} (use larger parts)")
        existing = self.db.get(name, version, self.kind)
        if existing is not None and existing.status == "ready":
            if existing.sha256 == digest and existing.bytes == size:
                return 200, {**self._public(existing), "upload": None, "token": None}
            raise self._immutable(existing)
        key = new_object_key(name, version, self.kind)
        multipart_id = self.objects.create_multipart(key) if n_parts else None
        up = Upload(
            token=new_token(), kind=self.kind, name=name, version=version, sha256=digest,
            bytes=size, env_id=body_text(body, "env_id"), n_rows=body_int(body, "n_rows"),
            seed=body_int(body, "seed"), source_commit=body_text(body, "source_commit"),
            run=body_text(body, "run"), filename=body_text(body, "filename"),
            object_key=key, multipart_id=multipart_id, part_size=part_size,
            created_at=time.time(),
        )
        ready = self.db.register(up)
        if ready is not None:  # another push completed between the check and the insert
            if multipart_id is not None:
                self.objects.abort_multipart(key, multipart_id)
            if ready.sha256 == digest and ready.bytes == size:
                return 200, {**self._public(ready), "upload": None, "token": None}
            raise self._immutable(ready)
        rec = self.db.get(name, version, self.kind)
        assert rec is not None
        if n_parts:
            upload: dict[str, Any] = {"multipart": True, "part_size": part_size,
                                      "parts": n_parts}
        else:
            upload = self.objects.presign_put(key, self.put_expiry_s, digest, size).public()
        return 201, {**self._public(rec), "token": up.token, "upload": upload}

    def _own_upload(self, name: str, version: str,
                    body: dict[str, Any]) -> Upload | DatasetRecord:
        """The registration ``body["token"]`` names, or the ready row when that is gone
        and the row holds ``body["sha256"]``; 409 when another digest won, else 404."""
        token = body.get("token")
        if not isinstance(token, str):
            raise HTTPError(400, f"token must be the string register returned, got {token!r}")
        up = self.db.upload(token)
        if up is None or (up.kind, up.name, up.version) != (self.kind, name, version):
            rec = self.db.get(name, version, self.kind)
            if rec is not None and rec.status == "ready":
                mine = body.get("sha256")
                if mine == rec.sha256:
                    return rec
                raise self._lost(rec, mine if isinstance(mine, str) else None)
            raise HTTPError(404, f"no open registration of {self.what} {name!r} "
                            f"version {version!r} has that token")
        return up

    def _lost(self, winner: DatasetRecord, mine: str | None) -> HTTPError:
        yours = f"; your bytes (sha256 {mine}) were not kept" if mine else ""
        return HTTPError(
            409, f"{self.what} {winner.name!r} version {winner.version!r} is ready with "
            f"sha256 {winner.sha256} ({winner.bytes} bytes): another push completed "
            f"first{yours}; push a new version",
        )

    def _parts(self, name: str, version: str, body: dict[str, Any]) -> dict[str, Any]:
        up = self._own_upload(name, version, body)
        if isinstance(up, DatasetRecord):
            raise HTTPError(409, f"{self.what} {name!r} version {version!r} is already ready "
                            "with these bytes")
        if up.multipart_id is None or up.part_size is None:
            raise HTTPError(400, "this registration is a single PUT, not a multipart upload")
        n_parts = max(1, math.ceil(up.bytes / up.part_size))
        wanted = body.get("parts", list(range(1, n_parts + 1)))
        if (not isinstance(wanted, list) or len(wanted) > MAX_PARTS
                or not all(isinstance(p, int) and not isinstance(p, bool)
                           and 1 <= p <= n_parts for p in wanted)):
            raise HTTPError(400, f"parts must be a list of part numbers 1..{n_parts}")
        urls = []
        for p in wanted:
            pre = self.objects.presign_part(up.object_key, up.multipart_id, p,
                                            self.put_expiry_s)
            size = min(up.part_size, up.bytes - (p - 1) * up.part_size)
            urls.append({"part": p, "bytes": size, **pre.public()})
        return {"part_size": up.part_size, "count": n_parts, "parts": urls}

    def _abort(self, name: str, version: str, body: dict[str, Any]) -> dict[str, Any]:
        up = self._own_upload(name, version, body)
        if isinstance(up, DatasetRecord):
            return {"aborted": False}
        if up.multipart_id is not None:
            self.objects.abort_multipart(up.object_key, up.multipart_id)
        self.db.drop_upload(up.token)
        return {"aborted": True}

    def _complete(self, name: str, version: str, body: dict[str, Any]) -> dict[str, Any]:
        db, what = self.db, self.what
        rec = db.get(name, version, self.kind)
        if rec is None:
            raise HTTPError(404, f"no {what} {name!r} version {version!r} was registered")
        claimed = body.get("sha256")
        if claimed is not None:
            claimed = body_sha256(claimed, "sha256")
        legacy = body.get("token") is None
        if legacy:  # the first release's client: complete whatever registration is current
            if rec.status == "ready":
                if claimed is None or claimed == rec.sha256:
                    return self._public(rec)
                raise self._lost(rec, claimed)
            up = db.upload(rec.upload_token or "")
            if up is None:
                raise HTTPError(409, f"{name} {version} stays pending: no open registration")
        else:
            found = self._own_upload(name, version, body)
            if isinstance(found, DatasetRecord):
                return self._public(found)  # the same bytes won; this registration is gone
            up = found
            if claimed is not None and claimed != up.sha256:
                raise HTTPError(400, f"sha256 {claimed} is not the registered {up.sha256}")
            if rec.status == "ready":
                return self._settle(rec, up)
        if up.multipart_id is not None and up.part_size is not None:
            n_parts = max(1, math.ceil(up.bytes / up.part_size))
            sizes = [min(up.part_size, up.bytes - i * up.part_size) for i in range(n_parts)]
            problem = self.objects.complete_multipart(up.object_key, up.multipart_id, sizes)
            if problem is not None:
                raise HTTPError(409, f"{name} {version} stays pending: {problem}")
        problem = self.objects.check(up.object_key, up.sha256, up.bytes)
        if problem is not None:
            raise HTTPError(409, f"{name} {version} stays pending: {problem}")
        won, losers = db.complete(up, current_only=legacy)
        if won:
            for other in losers:
                if other.multipart_id is not None:
                    self.objects.abort_multipart(other.object_key, other.multipart_id)
            rec = db.get(name, version, self.kind)
            assert rec is not None
            return self._public(rec)
        rec = db.get(name, version, self.kind)
        assert rec is not None
        if rec.status == "ready":
            return self._settle(rec, up)
        raise HTTPError(
            409, f"{what} {name!r} version {version!r} was registered again while its "
            "upload was being checked; complete the new registration's upload",
        )

    def _settle(self, ready: DatasetRecord, up: Upload) -> dict[str, Any]:
        """``up`` completes after ``ready`` won: a no-op for the same bytes, else 409."""
        self.db.drop_upload(up.token)
        if ready.sha256 == up.sha256 and ready.bytes == up.bytes:
            return self._public(ready)
        raise self._lost(ready, up.sha256)

    def _promote(self, name: str, alias: str, body: dict[str, Any]) -> dict[str, Any]:
        version = check_version(body.get("version"))
        rec = self.db.get(name, version, self.kind)
        if rec is None or rec.status != "ready":
            state = "does not exist" if rec is None else f"is {rec.status}"
            raise HTTPError(409, f"cannot point alias {alias!r} at {self.what} {name!r} "
                            f"version {version!r}: it {state}")
        self.db.set_alias(self.kind, name, alias, version)
        return {"kind": self.kind, "name": name, "alias": alias, "version": version}


#: The first release's name for the dataset routes.
DatasetRoutes = ArtifactRoutes

