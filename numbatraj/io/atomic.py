"""The one publish primitive: a file is built under a temporary name, fsynced, renamed.

Everything numbatraj writes that a later run trusts (a store, a checkpoint, a ``.demo``
file, an import, LeRobot metadata and videos, a download, an extracted pack, a signing key)
lands through this module:

- :func:`temp_path` gives a name unique to one writer, ``<name>.<16 hex>.tmp`` beside the
  destination (:func:`is_temp_name` recognises it, so recovery code can clean up after a
  killed run without guessing);
- :func:`publish` fsyncs the temporary file, renames it over the destination (or, with
  ``overwrite=False``, links it there so an existing file is never clobbered) and fsyncs
  the directory; :func:`discard` removes a temporary file that will not be published;
- :func:`publishing` is the context-manager form (discard on error, publish on success),
  :func:`write_bytes` the one-call form, :func:`replace_dir` the directory swap;
- :class:`FileBatch` publishes several files back to back, with an optional journal so an
  interrupted multi-file commit can be finished by :func:`replay_journal`;
- :func:`publish_lock` makes one writer own a destination: an advisory ``fcntl.flock`` on
  ``<dest>.lock`` held while the temporary file is written and published.  Whoever holds it
  knows no other numbatraj writer of ``dest`` is alive, so :func:`remove_stale_temps` may
  delete the temporaries of killed runs (the liveness rule).  The holder unlinks the lock
  file before letting go and a new holder checks that the file it locked is still the one
  at that name, so no lock file is left behind and two writers are never both in.

Kill windows: ``overwrite=False`` links the temporary file to ``dest`` and then unlinks the
temporary name; a kill between the two leaves a second name of the finished file, which is
harmless because no writer ever opens an existing temporary name (each makes a fresh one,
``O_EXCL``) and the next holder of the lock only unlinks it.  :func:`replace_dir` swaps two
trees with one atomic ``renameat2(RENAME_EXCHANGE)`` where the kernel has it, so the
destination is always the old tree or the new one.

One error policy: a failed fsync of a file raises; a directory fsync that the filesystem
does not support (``EINVAL``/``ENOTSUP``) is skipped, every other error raises.

:class:`PartFile` is the write side of a download: bytes are appended to ``<dest>.part``
while a running SHA-256 follows them, so the digest of the finished file is known without
reading it back.  Every ``sync_every`` bytes the new data is flushed to disk (on a helper
thread, so the writer does not wait for the disk) and, on Linux, dropped from the page
cache (``posix_fadvise(DONTNEED)``), so a multi-GB write does not evict every other file
the machine has cached.  :meth:`PartFile.commit` fsyncs and renames; nothing is ever
visible under the final name before that.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import json
import os
import queue
import re
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Self

from numbatraj.errors import LockedError, WriteFailedError
from numbatraj.io.hashing import sha256_prefix

__all__ = [
    "SYNC_EVERY_BYTES",
    "FileBatch",
    "PartFile",
    "PublishLock",
    "discard",
    "fsync_dir",
    "fsync_file",
    "is_temp_name",
    "part_path",
    "lock_path",
    "publish",
    "publish_lock",
    "publishing",
    "remove_stale_temps",
    "replace_dir",
    "replay_journal",
    "temp_path",
    "write_bytes",
]

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


_TEMP_RE = re.compile(r"^.+\.[0-9a-f]{16}\.tmp$")
#: fsync errors that mean "this filesystem cannot fsync a directory", not "data lost"
_DIR_SYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def temp_path(dest: str | os.PathLike[str]) -> str:
    """A temporary name beside ``dest``, unique to this call: ``<dest>.<16 hex>.tmp``.

    Two writers of one destination never share a temporary file; :func:`is_temp_name`
    recognises the scheme.
    """
    return f"{os.fspath(dest)}.{secrets.token_hex(8)}.tmp"


def is_temp_name(name: str | os.PathLike[str]) -> bool:
    """True for a name made by :func:`temp_path` (only its last component is looked at)."""
    return bool(_TEMP_RE.match(os.path.basename(os.fspath(name))))


def fsync_file(path: str | os.PathLike[str]) -> None:
    """fsync the file at ``path``; an error raises (the data may not be on disk)."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync the directory ``path`` (its entries: renames, creations, removals).

    A filesystem that cannot fsync a directory (``EINVAL``/``ENOTSUP``) is skipped; any
    other error raises.
    """
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY)
    except OSError as exc:
        if exc.errno in _DIR_SYNC_UNSUPPORTED:  # pragma: no cover - exotic filesystems
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _DIR_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def discard(path: str | os.PathLike[str]) -> None:
    """Remove a temporary file (or directory tree) that will not be published; missing is fine."""
    p = os.fspath(path)
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
    except FileNotFoundError:
        pass


def publish(
    tmp: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    overwrite: bool = True,
    sync: bool = True,
) -> str:
    """Move the finished temporary file ``tmp`` to ``dest``; returns ``dest``.

    With ``sync`` the file is fsynced first, and the directory after the rename.  With
    ``overwrite=False`` an existing ``dest`` is never clobbered, even one that appears
    while this runs (a hard link refuses it atomically): :class:`FileExistsError` names it
    and the finished file stays at ``tmp``.
    """
    tmp, dest = os.fspath(tmp), os.fspath(dest)
    try:
        return _publish(tmp, dest, overwrite=overwrite, sync=sync)
    except FileExistsError:
        raise
    except OSError as exc:
        if isinstance(exc, WriteFailedError):
            raise
        raise WriteFailedError(
            exc.errno, f"publishing {dest!r} failed: {exc.strerror or exc}; "
            f"{dest!r} was not replaced"
        ) from exc


def _publish(tmp: str, dest: str, *, overwrite: bool, sync: bool) -> str:
    """The rename; a failure after it (the directory fsync) puts the previous state back."""
    if sync:
        fsync_file(tmp)
    if overwrite:
        backup = None
        if sync and os.path.isfile(dest) and not os.path.islink(dest):
            backup = temp_path(dest)
            try:
                os.link(dest, backup)  # a second name of the previous file, for an undo
            except OSError:
                backup = None
        try:
            os.replace(tmp, dest)
            if sync:
                try:
                    fsync_dir(_parent(dest))
                except OSError:
                    if backup is not None:
                        os.replace(backup, dest)
                        backup = None
                    else:
                        with contextlib.suppress(OSError):
                            os.remove(dest)
                    raise
        finally:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.remove(backup)
        return dest
    try:
        os.link(tmp, dest)
    except FileExistsError:
        raise FileExistsError(
            f"{dest!r} appeared while writing; the finished file is left at {tmp!r}"
        ) from None
    except OSError as exc:  # a filesystem without hard links
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
            raise
        if os.path.exists(dest):
            raise FileExistsError(
                f"{dest!r} appeared while writing; the finished file is left at {tmp!r}"
            ) from None
        os.replace(tmp, dest)
    else:
        try:
            os.remove(tmp)
            if sync:
                fsync_dir(_parent(dest))
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(dest)  # ours: linked just now
            raise
        return dest
    if sync:
        fsync_dir(_parent(dest))
    return dest


@contextlib.contextmanager
def publishing(
    dest: str | os.PathLike[str], *, overwrite: bool = True, sync: bool = True
) -> Iterator[str]:
    """Yield a :func:`temp_path` for ``dest``; publish it when the block ends normally,
    discard it when the block (or the publish) raises."""
    dest = os.fspath(dest)
    os.makedirs(_parent(dest), exist_ok=True)
    tmp = temp_path(dest)
    try:
        yield tmp
        publish(tmp, dest, overwrite=overwrite, sync=sync)
    except FileExistsError:
        raise  # publish left the finished file at tmp, as its message says
    except BaseException:
        discard(tmp)
        raise


def write_bytes(
    dest: str | os.PathLike[str], data: bytes, *, overwrite: bool = True, mode: int | None = None
) -> str:
    """Publish ``data`` as the whole content of ``dest`` (``mode``: its permission bits).

    With ``overwrite=False`` an existing ``dest`` raises :class:`FileExistsError` and
    nothing is left behind."""
    dest = os.fspath(dest)
    os.makedirs(_parent(dest), exist_ok=True)
    tmp = temp_path(dest)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644 if mode is None else mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return publish(tmp, dest, overwrite=overwrite)
    except BaseException:
        discard(tmp)
        raise


_RENAME_EXCHANGE = 2
_libc: Any = None


def _exchange(a: str, b: str) -> bool:
    """Atomically swap the entries ``a`` and ``b`` (Linux ``renameat2``); False when the
    kernel or filesystem cannot."""
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _libc.renameat2  # noqa: B018 - probe: glibc >= 2.28
        except (OSError, AttributeError):
            _libc = False
    if _libc is False:
        return False
    at_fdcwd = -100
    rc = _libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot swap {a!r} and {b!r}: {os.strerror(err)}")


def replace_dir(tmp_dir: str | os.PathLike[str], dest: str | os.PathLike[str]) -> str:
    """Put the finished directory ``tmp_dir`` at ``dest``, replacing any tree there.

    An existing ``dest`` is swapped with ``tmp_dir`` in one atomic ``renameat2`` exchange
    (the old tree is then removed), so ``dest`` always holds the old tree or the new one,
    killed or not.  Where the exchange is unavailable the old tree is renamed aside first
    (a kill between the two renames then leaves ``dest`` missing and the old tree under a
    temporary name).
    """
    tmp_dir, dest = os.fspath(tmp_dir), os.fspath(dest)
    if os.path.lexists(dest) and _exchange(tmp_dir, dest):
        fsync_dir(_parent(dest))
        aside = temp_path(dest)
        os.rename(tmp_dir, aside)  # the old tree, now under tmp_dir: out of the way first
        discard(aside)
        return dest
    old: str | None = None
    if os.path.lexists(dest):
        old = temp_path(dest)
        os.rename(dest, old)
    try:
        os.rename(tmp_dir, dest)
    except BaseException:
        if old is not None:
            os.rename(old, dest)
        raise
    fsync_dir(_parent(dest))
    if old is not None:
        discard(old)
    return dest


def lock_path(dest: str | os.PathLike[str]) -> str:
    """The lock file of ``dest``: ``<dest>.lock`` beside it."""
    return os.fspath(dest).rstrip("/" + os.sep) + ".lock"


# this process's held locks: lock path -> [fd, depth, owning thread]
_HELD: dict[str, list[Any]] = {}
_HELD_GUARD = threading.Lock()


def _holder(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(200).strip().splitlines()
    except OSError:
        text = []
    pid = text[0] if text else "?"
    what = text[1] if len(text) > 1 else "a write"
    return f"pid {pid} ({what})"


class PublishLock:
    """The advisory lock that makes one writer own ``dest`` (see :func:`publish_lock`).

    Re-entrant within one thread (an import holding the lock may run a writer that takes
    it again); another thread or process waits or fails, by ``wait``.
    """

    def __init__(
        self, dest: str | os.PathLike[str], *, wait: bool | float = True, what: str = "a write"
    ) -> None:
        self.dest = os.fspath(dest)
        self.path = os.path.abspath(lock_path(self.dest))
        self.wait = wait
        self.what = what
        self._held = False

    def acquire(self) -> PublishLock:
        if self._held:
            return self
        me = threading.get_ident()
        deadline = None
        if self.wait is not True and self.wait is not False:
            deadline = time.monotonic() + float(self.wait)
        while True:
            with _HELD_GUARD:
                entry = _HELD.get(self.path)
                if entry is not None and entry[2] == me:
                    entry[1] += 1
                    self._held = True
                    return self
                if entry is None:
                    fd = self._try_flock()
                    if fd >= 0:
                        _HELD[self.path] = [fd, 1, me]
                        self._held = True
                        return self
            if self.wait is False or (deadline is not None and time.monotonic() > deadline):
                waited = "" if self.wait is False else f" after waiting {float(self.wait):g} s"
                raise LockedError(
                    errno.EWOULDBLOCK,
                    f"{self.dest!r} is being written by {_holder(self.path)}{waited}; "
                    f"{self.what} does not wait for another writer of the same path "
                    f"(lock file {self.path})",
                )
            time.sleep(0.02)

    def _try_flock(self) -> int:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # the holder before us may have unlinked the file as it let go: a lock on a
            # name no longer in the directory protects nothing, so look again
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                return self._try_flock()
        except BlockingIOError:
            os.close(fd)
            return -1
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{self.what}\n".encode(), 0)
        except OSError:
            pass  # the pid is informative only; the flock is what counts
        return fd

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        with _HELD_GUARD:
            entry = _HELD.get(self.path)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                del _HELD[self.path]
                fd = entry[0]
                try:
                    # unlinked while still held, so whoever waits re-checks (see _try_flock)
                    # and no lock file is left beside the destination
                    with contextlib.suppress(OSError):
                        os.remove(self.path)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                finally:
                    os.close(fd)

    @property
    def held(self) -> bool:
        return self._held

    def __enter__(self) -> PublishLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def publish_lock(
    dest: str | os.PathLike[str], *, wait: bool | float = True, what: str = "a write"
) -> PublishLock:
    """The lock that makes one writer own ``dest``: ``with publish_lock(dest): ...``.

    An ``fcntl.flock`` on ``<dest>.lock`` (which records the holder's pid and ``what``).
    ``wait=True`` blocks until the holder finishes, ``False`` raises :class:`LockedError`
    at once naming the holder, a number waits that many seconds first.  Re-entrant within
    a thread.  The rule per operation is in docs/store.md ("One writer per path").
    """
    return PublishLock(dest, wait=wait, what=what)


def remove_stale_temps(dest: str | os.PathLike[str]) -> list[str]:
    """Delete the temporaries of ``dest`` (``<dest>.<16 hex>.tmp``) that killed runs left.

    Call it only while holding :func:`publish_lock` of ``dest``: then no live numbatraj
    writer of ``dest`` exists, so every such name is stale.  Returns the names removed.
    """
    dest = os.fspath(dest).rstrip("/" + os.sep)
    parent, base = os.path.split(os.path.abspath(dest))
    pattern = re.compile(re.escape(base) + r"\.[0-9a-f]{16}\.tmp$")
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return removed
    for name in names:
        if pattern.match(name):
            path = os.path.join(parent, name)
            discard(path)
            removed.append(path)
    return removed


class FileBatch:
    """Files written completely under temporary names, then published back to back by
    :meth:`apply` in the order they were added.

    With a journal (``apply(journal=path, root=dir)``, more than one file), the renames are
    first recorded in that JSON file (paths relative to ``root``), which is removed once they
    are all durable: a crash between two renames leaves it, and :func:`replay_journal`
    completes them.
    """

    JOURNAL_VERSION = 1

    def __init__(self) -> None:
        self._pending: list[tuple[str, str]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, path: str, fill: Callable[[str], None]) -> int:
        """Write ``path``'s temporary file now with ``fill(tmp)``, fsync it; returns its size."""
        os.makedirs(_parent(path), exist_ok=True)
        tmp = temp_path(path)
        try:
            fill(tmp)
            fsync_file(tmp)
        except BaseException:
            discard(tmp)
            raise
        self._pending.append((tmp, path))
        return os.path.getsize(tmp)

    def apply(self, journal: str | None = None, *, root: str | None = None) -> None:
        """Rename every temporary file over its destination, then fsync the directories."""
        use_journal = journal is not None and len(self._pending) > 1
        if use_journal:
            assert journal is not None
            base = root if root is not None else _parent(journal)
            doc = {
                "version": self.JOURNAL_VERSION,
                "renames": [
                    [os.path.relpath(t, base), os.path.relpath(p, base)]
                    for t, p in self._pending
                ],
            }
            write_bytes(journal, (json.dumps(doc, indent=1) + "\n").encode())
        dirs: list[str] = []
        for tmp, path in self._pending:
            os.replace(tmp, path)
            if _parent(path) not in dirs:
                dirs.append(_parent(path))
        self._pending.clear()
        for d in dirs:
            fsync_dir(d)
        if use_journal:
            assert journal is not None
            os.remove(journal)
            fsync_dir(_parent(journal))

    def discard(self) -> None:
        """Delete the temporary files not yet renamed."""
        for tmp, _ in self._pending:
            discard(tmp)
        self._pending.clear()


def _journal_member(base: str, rel: Any, journal: str) -> str:
    name = os.path.basename(journal)
    if not isinstance(rel, str) or not rel or os.path.isabs(rel):
        raise ValueError(f"{name} names {rel!r}, not a path inside {base!r}")
    norm = os.path.normpath(rel)
    if norm == ".." or norm.startswith(".." + os.sep):
        raise ValueError(f"{name} names {rel!r}, outside {base!r}")
    return os.path.join(base, norm)


def replay_journal(journal: str, root: str | None = None) -> list[str]:
    """Finish the :class:`FileBatch` commit a crash interrupted between its renames.

    Reads ``journal`` (absent: nothing to do; member paths are relative to ``root``,
    default the journal's directory), renames every temporary file it lists that is
    still there over its destination (the ones already renamed are gone), fsyncs the
    directories and deletes the journal.  Returns the destinations renamed now.  Raises
    ``ValueError`` for a journal that does not read back, a member outside the journal's
    tree or not a temporary name, or a rename whose temporary file and destination are both
    missing.
    """
    if not os.path.isfile(journal):
        return []
    name = os.path.basename(journal)
    base = root if root is not None else _parent(journal)
    with open(journal, encoding="utf-8") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict) or doc.get("version") != FileBatch.JOURNAL_VERSION:
        raise ValueError(f"{name} is not a version-{FileBatch.JOURNAL_VERSION} journal")
    renames = doc.get("renames")
    if not isinstance(renames, list) or not all(
        isinstance(r, list) and len(r) == 2 for r in renames
    ):
        raise ValueError(f"{name} has no list of renames")
    pairs = [(_journal_member(base, t, journal), _journal_member(base, p, journal))
             for t, p in renames]
    for tmp, path in pairs:
        if not is_temp_name(tmp):
            raise ValueError(f"{name} renames {tmp!r}, not a temporary file")
        if not os.path.exists(tmp) and not os.path.exists(path):
            raise ValueError(f"{name}: neither {tmp!r} nor its destination {path!r} exists")
    done: list[str] = []
    dirs: list[str] = []
    for tmp, path in pairs:
        if os.path.exists(tmp):
            os.replace(tmp, path)
            done.append(path)
        if _parent(path) not in dirs:
            dirs.append(_parent(path))
    for d in dirs:
        fsync_dir(d)
    os.remove(journal)
    fsync_dir(_parent(journal))
    return done


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
        publish(self.path, self.dest, sync=False)  # fsynced above, before the page-cache drop
        fsync_dir(_parent(self.dest))
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
