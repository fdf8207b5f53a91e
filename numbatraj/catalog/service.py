"""The catalog service a lab runs itself: the ASGI app (:mod:`.app`) on uvicorn.

:class:`CatalogService` binds its socket when made (so ``.url`` is known at once), serves
in a background thread (``start``, for tests and embedding) or in this one
(``serve_forever``, for ``numbatraj catalog serve``), with ``workers`` uvicorn processes
sharing the socket when asked.  Idle and slow connections cost no thread: the event loop
holds them, :class:`~.guard.GuardedH11Protocol` closes one that has not sent a complete
request head within ``header_timeout`` seconds, and the soft open-file limit is raised to
the hard one at start.  Routes: :mod:`.artifacts` and :mod:`.recordings`.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

from numbatraj.catalog.app import ENV_SERVE, CatalogApp
from numbatraj.catalog.artifacts import MIN_PART_BYTES, ArtifactRoutes, DatasetRoutes
from numbatraj.catalog.db import CatalogDB, open_db
from numbatraj.catalog.guard import GuardedH11Protocol, raise_open_file_limit
from numbatraj.catalog.objects import FileObjects, ObjectBackend, open_objects
from numbatraj.errors import CatalogRequestError

__all__ = ["ArtifactRoutes", "CatalogService", "DatasetRoutes"]


class CatalogService:
    """A running catalog: metadata DB + object backend behind one uvicorn server.

    Parameters
    ----------
    db : str or CatalogDB
        ``sqlite:///catalog.db``, ``postgresql://...``, or an open :class:`CatalogDB`.
    objects : str or ObjectBackend
        ``file:///srv/objects`` or ``s3://bucket?endpoint=...&region=auto``, or an open
        backend (:class:`~numbatraj.catalog.objects.FileObjects`, ``S3Objects``).
    host, port : str, int
        Where to listen; port 0 picks a free one.
    public_url : str, optional
        Base URL clients reach this service at (behind a proxy, say); it is also the base of
        the embedded object endpoint's URLs.  Defaults to ``http://host:port``.
    get_expiry_s, put_expiry_s : int
        Lifetime of presigned download / upload URLs, capped at 7 days.
    verbose : bool
        Log each request to stderr.
    workers : int
        uvicorn worker processes for :meth:`serve_forever` (``db`` and ``objects`` must
        then be URLs: each process opens its own pool).
    header_timeout : float
        Seconds a connection may take to send a complete request head.
    min_part_bytes : int
        Smallest part of a multipart push (5 MiB, S3's minimum; tests lower it).

    Examples
    --------
    >>> with CatalogService("sqlite:///cat.db", "file:///tmp/objects") as svc:
    ...     key = svc.db.add_key("write")
    ...     print(svc.url)
    """

    def __init__(
        self,
        db: str | CatalogDB,
        objects: str | ObjectBackend,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        public_url: str | None = None,
        get_expiry_s: int = 3600,
        put_expiry_s: int = 6 * 3600,
        verbose: bool = False,
        workers: int = 1,
        header_timeout: float = 5.0,
        min_part_bytes: int = MIN_PART_BYTES,
    ) -> None:
        if workers < 1:
            raise CatalogRequestError(f"workers must be at least 1, got {workers}")
        if workers > 1 and not (isinstance(db, str) and isinstance(objects, str)):
            raise CatalogRequestError("workers > 1 needs db and objects as URLs")
        self._urls = (db, objects) if isinstance(db, str) and isinstance(objects, str) else None
        self.db = open_db(db) if isinstance(db, str) else db
        self.objects: ObjectBackend = (
            open_objects(objects) if isinstance(objects, str) else objects
        )
        self.workers = workers
        self.verbose = verbose
        self.header_timeout = header_timeout
        self._settings = {"get_expiry_s": get_expiry_s, "put_expiry_s": put_expiry_s,
                          "min_part_bytes": min_part_bytes}
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
            self._sock.listen(4096)  # connections queue from now on, before uvicorn starts
        except OSError:
            self._sock.close()
            self.db.close()
            raise
        self._sock.set_inheritable(True)
        bound_host, bound_port = self._sock.getsockname()[:2]
        self.url = (public_url or f"http://{bound_host!s}:{bound_port}").rstrip("/")
        if isinstance(self.objects, FileObjects):
            self.objects.base_url = self.url
        self.app = CatalogApp(self.db, self.objects, **self._settings)
        self.open_files = (0, 0)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def object_bytes_served(self) -> int:
        """Body bytes the embedded object endpoint has sent (0 for S3)."""
        return self.app.object_bytes_served

    def _config(self, app: Any, **kw: Any) -> Any:
        import uvicorn

        GuardedH11Protocol.head_timeout = self.header_timeout
        return uvicorn.Config(
            app, http=GuardedH11Protocol, lifespan="off", access_log=self.verbose,
            log_level="info" if self.verbose else "warning", timeout_keep_alive=5,
            timeout_graceful_shutdown=2, backlog=4096, **kw,
        )

    def start(self) -> CatalogService:
        """Serve in a background thread (one process); returns self once listening."""
        import uvicorn

        self.open_files = raise_open_file_limit()
        self._server = uvicorn.Server(self._config(self.app.asgi))
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"catalog server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (SIGINT/SIGTERM end it cleanly)."""
        import uvicorn

        self.open_files = raise_open_file_limit()
        if self.workers == 1:
            self._server = uvicorn.Server(self._config(self.app.asgi))
            self._server.run(sockets=[self._sock])
            return
        from uvicorn.supervisors import Multiprocess

        assert self._urls is not None
        os.environ[ENV_SERVE] = json.dumps({
            "db": self._urls[0], "objects": self._urls[1], "url": self.url,
            "header_timeout": self.header_timeout, **self._settings,
        })
        config = self._config("numbatraj.catalog.app:app_from_env", factory=True,
                              workers=self.workers)
        Multiprocess(config, sockets=[self._sock]).run()

    def stop(self) -> None:
        """Stop serving and close the database."""
        if self._thread is not None and self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._thread = None
        self._sock.close()
        self.db.close()

    def __enter__(self) -> CatalogService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
