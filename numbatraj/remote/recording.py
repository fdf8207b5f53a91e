"""Recording sync: mirror ``projects/<project>/datasets/<dataset>/`` through the catalog.

:class:`RecordingSync` pushes a LeRobot v3.0 directory file by file, also while a
checkpointing :class:`~numbatraj.lerobot.LeRobotWriter` is still recording
into it.  Each pass:

1. lists the files, skipping hidden ones and ``*.part`` (the video being encoded); if a data
   or metadata file is newer than ``meta/info.json``, a checkpoint is half applied, so it
   waits briefly and lists again;
2. freezes a checkpoint: opens and hashes the data and metadata files, lists again and
   starts over if an episode ended meanwhile; the open descriptors keep those bytes
   whatever the writer renames over them later;
3. offers every file with its SHA-256, videos first, then data, then ``meta/`` with
   ``info.json`` last; the service answers ``unchanged`` for what it already holds, so a
   quiet ``--watch`` cycle costs one small request per file; new bytes go straight to the
   object store through a presigned PUT;
4. commits the snapshot (once ``meta/info.json`` exists: before the first checkpoint there
   is no dataset to commit, though the files already offered stay on the service).  The
   service replaces it atomically and refuses one whose ``info.json`` names a video or data
   file it does not hold.

Only reading the dataset, a watch can be stopped at any moment (Ctrl-C) without harm.
:meth:`RecordingSync.pull` fetches the committed snapshot, metadata last.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from numbatraj.catalog.protocol import (
    STATE_UNCHANGED,
    STATE_UPLOAD,
    blob_complete_route,
    check_dataset,
    check_project,
    check_rel_path,
    commit_route,
    offer_route,
    project_route,
    recording_route,
)
from numbatraj.errors import NumbatrajError
from numbatraj.io.dotenv import read_dotenv
from numbatraj.io.download import redact_text
from numbatraj.io.hashing import sha256_file
from numbatraj.lerobot.schema import INFO_PATH, named_files, order_key
from numbatraj.remote._recording_scan import (
    FileStat,
    HashCache,
    checkpoint_in_progress,
    scan_dataset,
)
from numbatraj.remote.client import RemoteCatalog

_log = logging.getLogger(__name__)

__all__ = [
    "ENV_PROJECTS",
    "PassResult",
    "RecordingSync",
    "WatchSummary",
    "list_recordings",
    "projects_root",
]

ENV_PROJECTS = "NUMBATRAJ_PROJECTS"


def projects_root(env_file: str | os.PathLike[str] | None = ".env") -> str:
    """``$NUMBATRAJ_PROJECTS`` (environment, then ``env_file``), else ``projects``."""
    v = os.environ.get(ENV_PROJECTS) or (
        read_dotenv(env_file).get(ENV_PROJECTS) if env_file is not None else None
    )
    return v.strip() if v and v.strip() else "projects"


@dataclass
class PassResult:
    """One push pass: what was offered, sent, held back, and whether it was committed."""

    committed: bool = False
    offered: int = 0
    unchanged: int = 0
    uploaded: int = 0
    uploaded_bytes: int = 0
    held_back: list[str] = field(default_factory=list)
    repeats: int = 0
    episodes: int | None = None
    note: str = ""


@dataclass
class WatchSummary:
    """What :meth:`RecordingSync.watch` did before it stopped."""

    cycles: int = 0
    commits: int = 0
    uploaded: int = 0
    uploaded_bytes: int = 0
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False
    last: PassResult | None = None

    def __str__(self) -> str:
        how = "stopped by Ctrl-C" if self.interrupted else "done"
        eps = "" if self.last is None or self.last.episodes is None else (
            f", {self.last.episodes} episodes on the service")
        return (f"{how}: {self.cycles} cycles, {self.commits} commits, {self.uploaded} files "
                f"({self.uploaded_bytes} bytes) uploaded, {len(self.errors)} errors{eps}")


class RecordingSync:
    """Push / pull one recording through a catalog service.

    Parameters
    ----------
    catalog : RemoteCatalog
        A client with a write key (push) or any key (pull).
    project, dataset : str
        The recording's names; its directory is ``<projects root>/<project>/datasets/<dataset>``
        unless ``root`` is given.
    root : path-like, optional
        The dataset directory.
    settle_s : float
        Pause before listing again when a checkpoint is half applied.
    max_repeats : int
        Passes repeated at most, in one :meth:`push_pass`, because the dataset moved.
    """

    def __init__(
        self,
        catalog: RemoteCatalog,
        project: str,
        dataset: str,
        root: str | os.PathLike[str] | None = None,
        *,
        settle_s: float = 0.2,
        max_repeats: int = 10,
    ) -> None:
        self.catalog = catalog
        self.project = check_project(project)
        self.dataset = check_dataset(dataset)
        base = os.path.join(projects_root(), self.project, "datasets", self.dataset)
        self.root = os.fspath(root) if root is not None else base
        self.settle_s = float(settle_s)
        self.max_repeats = int(max_repeats)
        self._hashes = HashCache()
        self._committed_files = 0

    # -- push ------------------------------------------------------------------------------

    def _put(self, rel: str, f: Any, st: FileStat, upload: dict[str, Any]) -> bool:
        """PUT the frozen version of ``rel`` from the open file ``f``; False when it was
        modified in place since it was hashed."""
        if FileStat.of(os.fstat(f.fileno())) != st:
            return False
        path = os.path.join(self.root, *rel.split("/"))
        self.catalog.upload(path, upload, file=f, size=st.size)
        return True

    def _send(self, rel: str, sha: str, st: FileStat, f: Any, res: PassResult) -> int | None:
        """Offer one file (upload it if asked); the service's committed-file count, or None
        when the file changed before it could be sent."""
        ans = self.catalog.request("POST", offer_route(self.project, self.dataset),
                                   json={"path": rel, "sha256": sha, "bytes": st.size})
        res.offered += 1
        if ans["state"] == STATE_UNCHANGED:
            res.unchanged += 1
        elif ans["state"] == STATE_UPLOAD:
            if f is None:
                try:
                    f = open(os.path.join(self.root, *rel.split("/")), "rb")  # noqa: SIM115
                except FileNotFoundError:
                    return None
                with f:
                    ok = self._put(rel, f, st, ans["upload"])
            else:
                ok = self._put(rel, f, st, ans["upload"])
            if not ok:
                return None
            self.catalog.request("POST", blob_complete_route(self.project, self.dataset, sha))
            res.uploaded += 1
            res.uploaded_bytes += st.size
        return int(ans.get("committed_files", -1))

    def _freeze(
        self, res: PassResult, handles: dict[str, Any]
    ) -> dict[str, tuple[str, FileStat]] | None:
        """The local half of a pass: a consistent set of files and their digests.

        Data and metadata files are opened and kept open: a writer replaces them by rename,
        so the open descriptors keep this checkpoint's bytes whatever happens next.  Videos
        are written once (under ``.part``, then renamed) and are read by name.  None when a
        checkpoint landed meanwhile (the caller repeats the pass).
        """
        files = scan_dataset(self.root)
        if checkpoint_in_progress(files):
            res.note = "a checkpoint was being written"
            return None
        frozen: dict[str, tuple[str, FileStat]] = {}
        res.held_back = []
        for rel in sorted(files, key=order_key):
            st = files[rel]
            if rel.startswith("videos/"):
                sha = self._hashes.digest(self.root, rel, st)
                if sha is None:
                    res.held_back.append(rel)  # still being written
                    continue
            else:
                try:
                    f = open(os.path.join(self.root, *rel.split("/")), "rb")  # noqa: SIM115
                except FileNotFoundError:
                    res.note = f"{rel} was replaced while it was read"
                    return None
                handles[rel] = f
                got = self._hashes.digest_open(rel, f, st)
                if got is None:
                    res.note = f"{rel} changed while it was read"
                    return None
                sha = got
            frozen[rel] = (sha, st)
        after = scan_dataset(self.root)
        moved = [p for p in frozen if after.get(p) != files[p]]
        if moved or checkpoint_in_progress(after):
            res.note = f"an episode ended during the pass ({', '.join(moved[:3]) or 'meta'})"
            return None
        if INFO_PATH in frozen:
            def content(rel: str) -> bytes:
                handles[rel].seek(0)
                return bytes(handles[rel].read())

            tables = {p: content(p) for p in handles if p.startswith("meta/episodes/")
                      and p.endswith(".parquet")}
            named = named_files(content(INFO_PATH), tables)
            absent = sorted(named - frozen.keys())
            if absent:
                res.note = f"{INFO_PATH} names files not yet readable: {', '.join(absent[:3])}"
                return None
        return frozen

    def _one_pass(self, res: PassResult) -> dict[str, tuple[str, int]] | None:
        """Freeze, then offer everything once; the files offered, or None to repeat."""
        handles: dict[str, Any] = {}
        try:
            frozen = self._freeze(res, handles)
            if frozen is None:
                return None
            offered: dict[str, tuple[str, int]] = {}
            committed = 0
            for rel, (sha, st) in frozen.items():
                answer = self._send(check_rel_path(rel), sha, st, handles.get(rel), res)
                if answer is None:
                    res.note = f"{rel} changed before it was sent"
                    return None
                committed = answer
                offered[rel] = (sha, st.size)
            self._committed_files = committed
            return offered
        finally:
            for f in handles.values():
                f.close()

    def push_pass(self) -> PassResult:
        """One pass (repeated while the dataset moves under it), then a commit if needed.

        Raises
        ------
        CatalogError, DownloadError
            The service refused or could not be reached.
        """
        res = PassResult()
        for attempt in range(self.max_repeats + 1):
            res.repeats = attempt
            before = (res.offered, res.unchanged)
            offered = self._one_pass(res)
            if offered is None:
                time.sleep(self.settle_s)
                continue
            if INFO_PATH not in offered:
                res.note = f"no {INFO_PATH} yet: files offered, nothing committed"
                return res
            quiet = res.unchanged - before[1] == res.offered - before[0]
            if quiet and self._committed_files == len(offered):
                res.note = "unchanged"
                return res
            body = {"files": {p: {"sha256": s, "bytes": n} for p, (s, n) in offered.items()}}
            ans = self.catalog.request("POST", commit_route(self.project, self.dataset),
                                       json=body)
            res.committed = True
            res.episodes = ans.get("episodes")
            res.note = f"committed {ans['files']} files"
            return res
        res.note = f"not committed: the dataset kept moving ({res.note})"
        return res

    def watch(
        self,
        every: float = 60.0,
        *,
        stop: threading.Event | None = None,
        max_cycles: int | None = None,
        on_pass: Any = None,
    ) -> WatchSummary:
        """Push a pass every ``every`` seconds until ``stop`` is set, ``max_cycles`` passes
        ran, or Ctrl-C; a failed pass (any error but Ctrl-C) is logged and recorded in
        ``errors``, its URLs redacted, and the next cycle tries again."""
        summary = WatchSummary()
        stop = stop if stop is not None else threading.Event()
        try:
            while True:
                try:
                    res = self.push_pass()
                except Exception as exc:  # noqa: BLE001 - one bad pass must not end a watch
                    what = exc if isinstance(exc, NumbatrajError) else (
                        f"{type(exc).__name__}: {exc}")
                    text = redact_text(what)
                    _log.warning("push pass %d failed: %s", summary.cycles + 1, text)
                    summary.errors.append(text)
                    res = PassResult(note=f"error: {text}")
                summary.cycles += 1
                summary.commits += res.committed
                summary.uploaded += res.uploaded
                summary.uploaded_bytes += res.uploaded_bytes
                summary.last = res
                if on_pass is not None:
                    on_pass(res)
                if max_cycles is not None and summary.cycles >= max_cycles:
                    break
                if stop.wait(every):
                    break
        except KeyboardInterrupt:
            summary.interrupted = True
        return summary

    # -- pull ------------------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]]:
        """The service's committed files (path, sha256, bytes, download)."""
        return list(self.catalog.request("GET", recording_route(self.project,
                                                                 self.dataset))["files"])

    def pull(self, dest: str | os.PathLike[str] | None = None) -> tuple[int, int]:
        """Fetch the committed snapshot into ``dest`` (default: the dataset directory).

        Files already matching are kept; ``meta/info.json`` is removed first when it differs
        and fetched last, so an interrupted pull never leaves new data beside old metadata
        that would claim it is complete.  Returns ``(files fetched, bytes fetched)``.
        """
        dest = os.fspath(dest) if dest is not None else self.root
        files = sorted(self.snapshot(), key=lambda f: order_key(f["path"]))
        for f in files:
            check_rel_path(f["path"])  # a path from the service is not trusted either
        info = os.path.join(dest, "meta", "info.json")
        want = {f["path"]: f for f in files}
        if os.path.isfile(info) and (
            INFO_PATH not in want or sha256_file(info) != want[INFO_PATH]["sha256"]
        ):
            os.unlink(info)
        todo: list[tuple[dict[str, Any], str]] = []
        for f in files:
            local = os.path.join(dest, *f["path"].split("/"))
            if os.path.isfile(local) and os.path.getsize(local) == f["bytes"]:
                if sha256_file(local) == f["sha256"]:
                    continue
            todo.append((f, local))
        # data and videos in parallel over one session; meta/info.json alone, last
        last = [j for j in todo if j[0]["path"] == INFO_PATH]
        results = self.catalog.fetch_many([j for j in todo if j[0]["path"] != INFO_PATH])
        results += self.catalog.fetch_many(last)
        return len(results), sum(r.bytes_downloaded for r in results)


def list_recordings(catalog: RemoteCatalog, project: str) -> list[dict[str, Any]]:
    """Committed datasets of ``project``: files, bytes, episodes, frames, updated_at."""
    ans = catalog.request("GET", project_route(check_project(project)))
    return list(ans["datasets"])
