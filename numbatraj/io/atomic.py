"""A file built under a temporary name, hashed as it grows, renamed only when complete.

:class:`PartFile` is the write side of a download: bytes are appended to ``<dest>.part``
while a running SHA-256 follows them, so the digest of the finished file is known without
reading it back.  Every ``sync_every`` bytes the new data is flushed to disk (on a helper
thread, so the writer does not wait for the disk) and, on Linux, dropped from the page
cache (``posix_fadvise(DONTNEED)``), so a multi-GB write does not evict every other file
the machine has cached.  :meth:`PartFile.commit` fsyncs and renames; nothing is ever
visible under the final name before that.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from types import TracebackType
from typing import Self

from numbatraj.io.hashing import sha256_prefix

__all__ = ["SYNC_EVERY_BYTES", "PartFile", "part_path"]

#: Default bytes between an ``fdatasync`` + ``DONTNEED`` of freshly written data.
SYNC_EVERY_BYTES = 32 << 20

#: Chunks waiting for the writer (and, separately, the hasher) in background mode.
_QUEUE_ITEMS = 16

#: Background mode hands chunks over in batches of about this many bytes (or items), so the
#: threads meet once per batch rather than once per socket read.
_BATCH_BYTES = 1 << 20
_BATCH_ITEMS = 64

_HAS_FADVISE = hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")


def part_path(dest: str | os.PathLike[str]) -> str:
    """The temporary name a file is built under: ``<dest>.part``."""
    return os.fspath(dest) + ".part"


def _datasync(fd: int) -> None:
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS, Windows
        os.fsync(fd)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _Syncer:
    """Flushes written data to disk and drops it from the page cache, on its own thread.

    The writer asks for "everything up to byte n" and carries on; ``fdatasync`` and
    ``fadvise`` release the GIL, so the disk catches up while the next bytes arrive.
    """

    def __init__(self, fd: int, start: int) -> None:
        self.fd = fd
        self.done = start
        self.want = start
        self.error: OSError | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def request(self, upto: int) -> None:
        with self._cond:
            self.want = max(self.want, upto)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self.want <= self.done and not self._stop:
                    self._cond.wait()
                if self.want <= self.done:
                    return
                start, upto = self.done, self.want
            try:
                _datasync(self.fd)
                if _HAS_FADVISE:
                    os.posix_fadvise(self.fd, start, upto - start, os.POSIX_FADV_DONTNEED)
            except OSError as exc:
                self.error = exc
            with self._cond:
                self.done = upto

    def close(self) -> None:
        """Finish the requested syncs and stop; re-raise a sync error."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()
        if self.error is not None:
            raise self.error


class PartFile:
    """Append-only ``<dest>.part`` with a running SHA-256 of its whole content.

    Opening an existing part file keeps its bytes and hashes them once, so a transfer can
    resume where an earlier run stopped.

    Parameters
    ----------
    dest : path-like
        The final name.  Only :meth:`commit` writes it.
    sync_every : int
        Bytes between flushes to disk (and page-cache drops on Linux), done on a helper
        thread so writing continues meanwhile; 0 disables them (commit still fsyncs).
    keep_existing : bool
        Resume an existing part file (True) or start from empty (False).
    background : bool
        Hash and write on two helper threads, one each (both release the GIL), fed with
        batches of about 1 MiB, so a caller receiving from a socket overlaps with them.
        :attr:`size` then counts accepted bytes; every other method first waits until they
        are hashed and on disk, and re-raises a write error.
    """

    def __init__(
        self,
        dest: str | os.PathLike[str],
        *,
        sync_every: int = SYNC_EVERY_BYTES,
        keep_existing: bool = True,
        background: bool = False,
    ) -> None:
        self.dest = os.fspath(dest)
        self.path = part_path(self.dest)
        self.sync_every = int(sync_every)
        parent = os.path.dirname(os.path.abspath(self.dest))
        os.makedirs(parent, exist_ok=True)
        if not keep_existing and os.path.exists(self.path):
            os.unlink(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._hasher, self._size = sha256_prefix(self.path)
        self._synced = self._size  # bytes handed to the syncer
        self._syncer = _Syncer(self._fd, self._size) if self.sync_every > 0 else None
        self._accepted = self._size
        self._queue: queue.Queue[list[bytes] | None] | None = None  # to the writer thread
        self._hash_queue: queue.Queue[list[bytes] | None] | None = None  # to the hasher
        self._batch: list[bytes] = []  # accepted chunks not yet handed to the threads
        self._batch_bytes = 0
        self._error: BaseException | None = None
        self._worker: threading.Thread | None = None
        self._hash_worker: threading.Thread | None = None
        if background:
            # hashing and writing run on two threads of their own: both release the GIL,
            # so with the receiving thread three cores' worth of work can overlap
            self._queue = queue.Queue(maxsize=_QUEUE_ITEMS)
            self._hash_queue = queue.Queue(maxsize=_QUEUE_ITEMS)
            self._worker = threading.Thread(target=self._write_loop, daemon=True)
            self._hash_worker = threading.Thread(target=self._hash_loop, daemon=True)
            self._worker.start()
            self._hash_worker.start()

    def _write_loop(self) -> None:
        assert self._queue is not None
        q = self._queue
        while True:
            item = q.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    self._append_many(item)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = exc
            finally:
                q.task_done()

    def _hash_loop(self) -> None:
        assert self._hash_queue is not None
        q = self._hash_queue
        while True:
            item = q.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    for chunk in item:
                        self._hasher.update(chunk)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = exc
            finally:
                q.task_done()

    def _wait(self) -> None:
        """Block until every accepted byte is written; re-raise a helper-thread error."""
        self._hand_over()
        if self._queue is not None:
            self._queue.join()
        if self._hash_queue is not None:
            self._hash_queue.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    @property
    def size(self) -> int:
        """Bytes in the part file (with ``background``, including those still queued)."""
        return self._accepted

    @property
    def closed(self) -> bool:
        """True once committed, discarded or closed."""
        return self._fd < 0

    def hexdigest(self) -> str:
        """SHA-256 of the bytes written so far (the whole part file)."""
        self._wait()
        return self._hasher.hexdigest()

    def _require_open(self) -> int:
        if self._fd < 0:
            raise ValueError(f"part file {self.path} is already closed")
        return self._fd

    def write(self, data: bytes) -> None:
        """Append ``data`` and feed it to the running digest."""
        self._require_open()
        if self._queue is not None and self._hash_queue is not None:
            if self._error is not None:
                self._wait()
            if not isinstance(data, bytes):
                data = bytes(data)  # the caller may reuse its buffer
            self._batch.append(data)
            self._batch_bytes += len(data)
            self._accepted += len(data)
            if self._batch_bytes >= _BATCH_BYTES or len(self._batch) >= _BATCH_ITEMS:
                self._hand_over()
            return
        self._accepted += len(data)
        self._write_now(data)

    def _write_now(self, data: bytes) -> None:
        self._hasher.update(data)
        self._append(data)

    def _hand_over(self) -> None:
        """Queue the pending chunks for the hasher and the writer (one item each)."""
        if self._batch and self._queue is not None and self._hash_queue is not None:
            batch, self._batch, self._batch_bytes = self._batch, [], 0
            self._hash_queue.put(batch)
            self._queue.put(batch)

    def _append_many(self, chunks: list[bytes]) -> None:
        """Append ``chunks`` (not hashed here)."""
        for chunk in chunks:
            self._append(chunk)

    def _append(self, data: bytes) -> None:
        fd = self._fd
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        self._size += len(data)
        if self._syncer is not None and self._size - self._synced >= self.sync_every:
            self._syncer.request(self._size)
            self._synced = self._size

    def _stop_syncer(self) -> None:
        if self._syncer is not None:
            syncer, self._syncer = self._syncer, None
            syncer.close()

    def truncate(self) -> None:
        """Drop every byte (a transfer restarting from zero)."""
        fd = self._require_open()
        self._wait()
        self._stop_syncer()
        self._accepted = 0
        os.ftruncate(fd, 0)
        self._hasher = hashlib.sha256()
        self._size = 0
        self._synced = 0
        if self.sync_every > 0:
            self._syncer = _Syncer(fd, 0)

    def commit(self) -> str:
        """Flush, fsync and rename the part file to ``dest``; returns ``dest``."""
        fd = self._require_open()
        self._wait()
        self._stop_worker()
        self._stop_syncer()
        os.fsync(fd)
        if _HAS_FADVISE and self.sync_every > 0:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        self._fd = -1
        os.replace(self.path, self.dest)
        _fsync_dir(self.dest)
        return self.dest

    def discard(self) -> None:
        """Close and delete the part file."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _stop_worker(self) -> None:
        if self._worker is not None and self._queue is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None
        if self._hash_worker is not None and self._hash_queue is not None:
            self._hash_queue.put(None)
            self._hash_worker.join()
            self._hash_worker = None

    def close(self) -> None:
        """Close, keeping the part file for a later resume."""
        if self._fd >= 0:
            try:
                self._wait()
            finally:
                self._stop_worker()
                try:
                    self._stop_syncer()
                finally:
                    os.close(self._fd)
                    self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"PartFile({self.path!r}, {self._accepted} bytes, {state})"
