"""The one decorator preset for host kernels, and the threading layer they run on.

``cache=True`` keeps compiled kernels on disk (``NUMBA_CACHE_DIR``) so a fresh process does
not recompile; ``nogil=True`` lets callers overlap kernels with I/O threads.  No
``fastmath``: it breaks NaN handling.  Kernels are compiled lazily on first call, never at
import (eager signatures make ``import numbatraj`` slow).

Threading layer: Numba's default on Linux is GNU OpenMP, which kills a child forked after
the parent ran one parallel kernel ("fork() called from a process already using GNU
OpenMP"), so DataLoader workers die.  Unless ``NUMBA_THREADING_LAYER`` is set, numbatraj
asks for ``"forksafe"``: TBB when it loads (pip's ``tbb``, whose library lives in the
environment's ``lib/`` where the loader does not look, so it is preloaded here), else
Numba's workqueue.  Measured on 2 cores (docs/training.md): TBB 1.5 us for a 16-row gather
where GNU OpenMP took 125 us and workqueue 33 us.  Workqueue cannot take two parallel
launches at once (it aborts the process); :data:`PARALLEL_LOCK` serialises them when
:data:`CONCURRENT_PARALLEL_OK` is False.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import numba

__all__ = [
    "CONCURRENT_PARALLEL_OK",
    "PARALLEL_LOCK",
    "device_twin",
    "auto_verdicts",
    "explicit_threads",
    "calibrating",
    "free_cores",
    "note_time",
    "njit_kernel",
    "njit_parallel",
    "parallel_call",
    "numba_threads",
    "parallel_region",
    "parallel_threads",
    "set_num_threads",
]


def _preload_pip_tbb() -> bool:
    """Load the environment's ``libtbb.so.12`` by path so Numba's TBB layer finds it by soname."""
    if not sys.platform.startswith("linux"):
        return False
    path = os.path.join(sys.prefix, "lib", "libtbb.so.12")
    if not os.path.exists(path):
        return False
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    return True


if os.environ.get("NUMBA_THREADING_LAYER"):
    _layer = str(getattr(numba.config, "THREADING_LAYER", ""))
    CONCURRENT_PARALLEL_OK = _layer in ("tbb", "omp", "threadsafe", "safe")
else:
    CONCURRENT_PARALLEL_OK = _preload_pip_tbb()
    numba.config.THREADING_LAYER = "forksafe"  # type: ignore[attr-defined]

#: Take this around a parallel kernel launch when :data:`CONCURRENT_PARALLEL_OK` is False.
PARALLEL_LOCK = threading.Lock()

njit_kernel = numba.njit(cache=True, nogil=True)

njit_parallel = numba.njit(cache=True, nogil=True, parallel=True)

#: x86-64 (the streaming stores and the ``prefetcht2`` hint exist there)
X86_64 = platform.machine().lower() in ("x86_64", "amd64")

#: LLVM's locality hint for the software prefetches of the memory-bound gathers (the
#: column gather's rows, a replay's records and its wide rows): 1 (``prefetcht2`` on
#: x86-64, into L2, which holds none of the L1's few fill buffers until the line arrives),
#: 3 (every level) elsewhere.  Measured in-process, each kernel compiled with each hint,
#: interleaved rounds: on an Intel Xeon VM (Emerald Rapids) 512 random 3x84x84 ``next_of``
#: pairs 1,307-1,337 us with ``prefetcht2`` against 1,407-1,439 us with ``prefetcht0``, and
#: 4096 random 168-byte records 170-175 against 195-199 us; on an AMD EPYC VM (Zen 4) the
#: records 130-168 against 222-252 us (three runs), the pixel pairs 1,038-1,219 against
#: 1,190-1,358 us (three runs), 4096 / 65,536 random rows of a 10 M x 26 float32 column
#: 178-186 / 2,614-2,694 us against 191-198 / 2,916-2,966 us (two runs).  ``prefetcht1``
#: measured as ``t2`` on both.  The sum-tree's prefetches keep every level (the hint made
#: no difference there: 702 vs 724 us a prioritized step at 2^24 on the AMD VM).
STREAM_PREFETCH_LOCALITY = 1 if X86_64 else 3


def device_twin(fn: Callable[..., Any], **names: Any) -> Callable[..., Any]:
    """A copy of the ``_py`` body ``fn`` (the same code object) whose globals map ``names`` to
    other callables: compiled as a CUDA device function (``device=True``) it is the device
    twin of a host kernel, with the functions it calls rebound to their device compiles, so host and
    device run one body and agree bit for bit by construction."""
    g = dict(fn.__globals__)
    g.update(names)
    out = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__qualname__ = fn.__qualname__
    return out


# ---------------------------------------------------------------------- when kernels go parallel
#: Batches moving fewer bytes than this never start a parallel region, even after
#: ``set_num_threads(n > 1)``: below it one thread with prefetching finishes before a
#: fork/join would pay for itself.
PARALLEL_MIN_BYTES = 4 << 20
#: Auto kinds that pay for a parallel region from fewer bytes than
#: :data:`PARALLEL_MIN_BYTES` (the smaller of the two holds): a replay's record gather reads
#: 3-4 scattered cache lines per 168-byte row, each of them a miss (and, in a virtual
#: machine, a TLB walk), so it is bound by the misses one core keeps in flight, not by the
#: bytes.  Measured on a 2-core Intel Xeon VM, idle, 168-byte records of a 168 MB ring,
#: fresh random rows each call, medians of three rounds, serial / two threads: 512 rows
#: 34-41 / 36-44 us, 1024 rows 69-71 / 55-60 us, 2048 rows 109-137 / 87-94 us, 4096 rows
#: 223-233 / 166-167 us.
#: A kept n-step draw (``StoreReplay(n_step=)``) reads one record span per row the same way.
#: A prioritized draw (``PrioritizedSampler``'s descent, sized as the cache lines it reads:
#: ``64 * B * (bands + 1)`` bytes) is bound by its dependent loads and, past the caches, by
#: the misses one core keeps in flight; its draws are independent.  Measured on the same VM,
#: idle, one process, interleaved rounds, serial / two threads: at 2^16 rows (5 bands) 512
#: draws 21 / 28 us, 1024 draws 41 / 32 us, 4096 draws 136 / 85 us; at 2^24 rows (8 bands)
#: 512 draws 53 / 48 us, 1024 draws 104 / 62 us, 4096 draws 335 / 183 us.  The floor, 384
#: KiB, is 1024 draws at 2^16 rows and 683 at 2^24.
AUTO_MIN_BYTES: dict[str, int] = {"replay record gather": 256 << 10,
                                  "replay kept n-step gather": 256 << 10,
                                  "prioritized draw": 384 << 10}


#: variant -> the auto kind whose floor it takes (:func:`auto_variant`)
_AUTO_BASE: dict[str, str] = {}


def auto_variant(kind: str, variant: str) -> str:
    """The name of auto kind ``kind`` calibrated apart for ``variant``: the same floor
    (:data:`AUTO_MIN_BYTES` of ``kind``), its own verdict.

    For a kernel whose gain from threads depends on more than its bytes.  A prioritized
    draw reads the same lines per draw at 2^16 rows as at 2^24, but the small tree stays
    in the caches and the large one misses: with other work between draws (Intel Xeon VM,
    4096 draws, stop 40) two threads took 279 against 284 us at 2^16 rows and 411 against
    508 us at 2^24.  One verdict for both, calibrated on calls of either, keeps whichever
    the mix of calls favours; each tree depth is a variant of its own.
    """
    name = f"{kind} ({variant})"
    _AUTO_BASE[name] = kind
    return name


def min_bytes(auto: str | None) -> int:
    """Bytes from which kernel kind ``auto`` (None: a kernel that is not an auto kind) may
    start a parallel region: :data:`PARALLEL_MIN_BYTES`, or the kind's own smaller floor
    (:data:`AUTO_MIN_BYTES`; a variant's is its kind's)."""
    if auto is None:
        return PARALLEL_MIN_BYTES
    return min(PARALLEL_MIN_BYTES,
               AUTO_MIN_BYTES.get(_AUTO_BASE.get(auto, auto), PARALLEL_MIN_BYTES))


def below_floor(nbytes: int, auto: str) -> bool:
    """``nbytes < min_bytes(auto)`` for an auto kind, as one expression: the small gathers
    test it on every call and then skip :func:`parallel_threads` and :func:`calibrating`
    (together 1.1 us of a 32-row column gather's 1.8 us over ``np.take``, Intel Xeon VM).
    ``auto`` is a kind, not a variant (:func:`auto_variant`: it has its kind's floor)."""
    return nbytes < PARALLEL_MIN_BYTES and nbytes < AUTO_MIN_BYTES.get(auto, PARALLEL_MIN_BYTES)


_explicit: int | None = None  # the n of the last set_num_threads(n), None until called


def set_num_threads(n: int | None) -> None:
    """Threads numbatraj's host kernels may use (and ``numba.set_num_threads(n)``).

    By default (and after ``set_num_threads(None)``) the host kernels run on the calling
    thread, except the memory-bound gathers (``ResidentColumn.gather``, the gathers of a
    ``StoreReplay``'s columns stored apart, such as pixel observations) of at least
    :data:`PARALLEL_MIN_BYTES`, a ``StoreReplay``'s record gather (its low-dim columns)
    of at least 256 KiB, and a ``PrioritizedSampler`` draw of at least 1,024 draws (683 at
    2^24 rows; :data:`AUTO_MIN_BYTES`): those also take every core that is free
    at the moment of the call (:func:`free_cores`, read from the run queue each time), so
    on a busy machine they stay serial.  Measured on a 2-core Intel VM: 256 3x84x84
    ``next_of`` pairs 1.0-1.06 ms with both cores free against 1.6 ms serial; with a busy
    loop per core plus one, never parallel.  A parallel region started while a core is
    busy waits for it: 4096 pixel rows ran 1.5-1.8x slower than the serial kernel that way
    (docs/residency.md, "Threads").  A store read into a new array of 32 MiB or more has its
    pages prefaulted by a helper thread when a core is free (:mod:`numbatraj._pages`).
    ``set_num_threads(1)`` keeps every kernel serial, with no helper thread.
    ``set_num_threads(n)`` with ``n > 1`` says the cores are yours: batches of at least
    those sizes then run on ``n`` threads whatever the load (the store digests too).  ``n``
    is at most ``NUMBA_NUM_THREADS``; like Numba's, the count is per calling thread.
    Under Numba's TBB layer (pip's ``tbb``, in the ``torch`` extra) a core another task
    takes mid-call costs what the serial kernel costs; under its workqueue layer the call
    waits for that core's block (3.1x the serial time measured behind two busy loops,
    docs/residency.md "Threads"), so install ``tbb`` before passing ``n > 1``.

    Raises
    ------
    ValueError
        ``n`` is not None or an integer in ``[1, NUMBA_NUM_THREADS]``.
    """
    global _explicit
    top = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    if n is None:
        numba.set_num_threads(top)
        _explicit = None
        return
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= top:
        raise ValueError(
            f"set_num_threads: n = {n!r}, expected an int in [1, {top}] (NUMBA_NUM_THREADS)"
        )
    numba.set_num_threads(n)
    _explicit = n


def explicit_threads() -> int | None:
    """The ``n`` of the last ``set_num_threads(n)``, or None under the default policy."""
    return _explicit


def parallel_threads(nbytes: int, *, auto: str | None = None) -> int:
    """Threads a host kernel moving ``nbytes`` should use; 1 means the serial kernel.

    After ``set_num_threads(n > 1)``: ``n`` (at most Numba's count) from
    :func:`min_bytes` up.  By default: 1, except for a caller naming its kernel in
    ``auto`` (the memory-bound gathers): from :func:`min_bytes` up, one thread per
    core that is free right now (:func:`free_cores`), once this process has measured that
    kernel faster on threads than alone (:func:`note_time`); a busy machine, or one where
    the threads did not win, keeps the serial kernel (a lost verdict is measured again
    after :data:`AUTO_RETRY_S`).
    """
    if nbytes < min_bytes(auto):
        return 1
    top = numba_threads()
    if _explicit is None:
        if auto is None or top <= 1:
            return 1
        verdict = _verdict.get(auto)
        if verdict is False:
            if _clock() < _retry_at.get(auto, 0.0):
                return 1
            _reopen(auto)  # long enough serial: measure again (the machine may have changed)
            verdict = None
        threads = max(min(top, 1 + free_cores()), 1)
        if verdict is None and threads > 1:
            t = _trials.setdefault(auto, ([], []))
            if len(t[1]) > len(t[0]):  # calibrating: serial and threaded calls in turn
                return 1
        return threads
    if _explicit <= 1:
        return 1
    return max(min(_explicit, top), 1)


#: Calls of each kind timed per side before an auto kernel's verdict, of which the first
#: :data:`AUTO_WARMUP` of each side are dropped, and how much faster per byte the threads
#: must be.  Why four dropped: right after a replay is filled its first draws run slow for
#: a few calls on both sides (pages, TLB, the thread pool's start; the threaded side for
#: longer), and a verdict from them is noise.  Measured (256 3x84x84 rows, one column, AMD
#: EPYC VM, fresh processes): serial 3,345 / 1,147 / 873 / 723 / 907 us, threaded 11,698 /
#: 1,536 / 972 / 640 / 522 us, so the first rule (5 a side, one dropped, medians) kept the
#: serial kernel, which then ran 1,029-1,086 us per draw against 826 us on both cores; with
#: 9 a side, two dropped, one fresh process in six still lost (threaded 596 / 514 / 571 us
#: before settling at 410-460).  The sides are compared by their lower quartile, not the
#: median: another task or the hypervisor only ever adds time to a call, and with gains
#: near :data:`AUTO_MIN_GAIN` the medians of a few calls decide by noise.  With this rule
#: six fresh processes all kept the threads (lower quartiles 1.32-1.60x apart).
AUTO_TRIALS = 12
AUTO_WARMUP = 4
AUTO_MIN_GAIN = 1.15
#: After the threads lose a calibration, the kind stays serial for this long, then measures
#: again; each further loss doubles the wait, up to :data:`AUTO_RETRY_MAX_S`.  A verdict
#: from one moment (a host busy with another virtual machine, say) does not bind the
#: process for good, and a machine where the threads never win pays one calibration (about
#: 2 x AUTO_TRIALS calls, half of them threaded) per wait.  The first wait is short: on
#: the Intel Xeon VM one benchmark run's pixel calibration lost to a moment of the host
#: (threaded draws then took 1.04-1.17 ms against 1.85-1.98 ms serial), and with a 10 s
#: wait every default draw of the next 10 s ran serial; a loss on a machine where the
#: threads really lose costs a few threaded calls at 2, 6, 14, 30 s ... after it.
AUTO_RETRY_S = 2.0
AUTO_RETRY_MAX_S = 960.0
_verdict: dict[str, bool] = {}  # kind -> the threaded kernel won on this machine
_trials: dict[str, tuple[list[float], list[float]]] = {}  # kind -> (serial, threaded) s/byte
_clock = time.monotonic  # the retry waits' clock (a test sets its own)
_retry_at: dict[str, float] = {}  # kind -> _clock() time its lost verdict reopens
_retry_wait: dict[str, float] = {}  # kind -> the wait after its next loss


def _reopen(kind: str) -> None:
    """Forget ``kind``'s lost verdict and its trials: the next calls calibrate again."""
    _verdict.pop(kind, None)
    _trials.pop(kind, None)


def note_time(kind: str, threads: int, seconds: float, nbytes: int) -> None:
    """Report an auto kernel's call (``threads`` as :func:`parallel_threads` gave it) while
    its verdict is open: after :data:`AUTO_TRIALS` calls of each side (the first
    :data:`AUTO_WARMUP` of each dropped), the threaded kernel is kept for the process if its
    lower-quartile time per byte beat the serial one's by :data:`AUTO_MIN_GAIN`; else the kind
    stays serial for :data:`AUTO_RETRY_S` (doubling at each further loss, at most
    :data:`AUTO_RETRY_MAX_S`) and then calibrates again."""
    if not calibrating(kind, nbytes):
        return
    t = _trials.setdefault(kind, ([], []))
    if threads > 1:
        if len(t[1]) <= len(t[0]):
            t[1].append(seconds / nbytes)
    elif len(t[1]) > len(t[0]):  # a serial turn of the calibration
        t[0].append(seconds / nbytes)
    if len(t[0]) >= AUTO_TRIALS and len(t[1]) >= AUTO_TRIALS:
        kept_s, kept_p = sorted(t[0][AUTO_WARMUP:]), sorted(t[1][AUTO_WARMUP:])
        q = len(kept_s) // 4  # the lower quartile: interference only ever adds time
        won = kept_p[q] * AUTO_MIN_GAIN <= kept_s[q]
        _verdict[kind] = won
        if not won:
            wait = _retry_wait.get(kind, AUTO_RETRY_S)
            _retry_at[kind] = _clock() + wait
            _retry_wait[kind] = min(2.0 * wait, AUTO_RETRY_MAX_S)


def calibrating(kind: str, nbytes: int) -> bool:
    """Whether a call of auto kernel ``kind`` moving ``nbytes`` is one :func:`note_time`
    wants timed (its verdict open, the batch large enough, no explicit thread count): the
    callers skip the clock otherwise, so a small gather pays nothing for the policy."""
    return nbytes >= min_bytes(kind) and _explicit is None and kind not in _verdict


def auto_call(kind: str, nbytes: int, items: int, serial: Callable[..., Any],
              parallel: Callable[..., Any], *args: Any) -> Any:
    """``serial(*args)``, or ``parallel(*args, threads)`` on the threads
    :func:`parallel_threads` gives auto kind ``kind`` for ``nbytes`` (at least two of the
    ``items`` a thread, else serial), timed for the kind's calibration while it is open."""
    threads = parallel_threads(nbytes, auto=kind)
    if threads > 1 and items < 2 * threads:
        threads = 1
    timed = calibrating(kind, nbytes)
    t0 = time.perf_counter() if timed else 0.0
    if threads > 1:
        got = parallel_call(parallel, threads, *args, threads)
    else:
        got = serial(*args)
    if timed:
        note_time(kind, threads, time.perf_counter() - t0, nbytes)
    return got


def auto_verdicts() -> dict[str, bool]:
    """The verdicts reached so far, kind -> threads kept (for reports and tests)."""
    return dict(_verdict)


_LOADAVG_FD: int | None = None
#: How long Numba's worker threads stay runnable after a parallel region ends (TBB's workers
#: spin before they sleep): measured 954-956 us on this 2-core VM, three trials; twice that.
_WORKER_SPIN_S = 0.002
#: when the last :func:`parallel_call` ended, and on how many threads
_last_region: list[float] = [float("-inf"), 1.0]
_CORES = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
          else (os.cpu_count() or 1))


def _running_now() -> int | None:
    """Runnable tasks on the machine now (``/proc/loadavg``'s fourth field), or None."""
    global _LOADAVG_FD
    try:
        if _LOADAVG_FD is None:
            _LOADAVG_FD = os.open("/proc/loadavg", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return int(os.pread(_LOADAVG_FD, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def free_cores() -> int:
    """Cores of this process's affinity set that no runnable task holds right now, besides
    the caller's: ``cores - running`` from ``/proc/loadavg`` (its fourth field counts every
    runnable task of the machine at the moment of the read, the caller included), read
    each call (about 1.7 us).  0 where there is no ``/proc/loadavg``.

    The same idea as GNU OpenMP's dynamic teams (``OMP_DYNAMIC``), which size a team by the
    load average; the instantaneous count follows a busy loop started a moment ago, the
    one-minute average does not.  Tasks of other virtual machines on the same host are not
    counted (the guest cannot see them).
    """
    running = _running_now()
    if running is None:
        return 0
    if time.monotonic() - _last_region[0] < _WORKER_SPIN_S:
        running -= int(_last_region[1]) - 1  # our own workers, still spinning after it
    return max(_CORES - running, 0)


_NO_LOCK = contextlib.nullcontext()


def parallel_region() -> contextlib.AbstractContextManager[Any]:
    """Hold around every parallel kernel launch: launches from several threads at once are
    serialised when the threading layer cannot take them (workqueue, without TBB).  The
    lock itself, or a reusable null context (no generator per launch)."""
    return _NO_LOCK if CONCURRENT_PARALLEL_OK else PARALLEL_LOCK


_numba_get_threads: Callable[[], int] | None = None


def numba_threads() -> int:
    """``numba.get_num_threads()`` (the calling thread's count), for the per-call paths.

    Numba's function takes two locks on every call to make sure its threading layer is
    up (one of them a multiprocessing lock: 2.0 us a call on the 2-core Intel Xeon VM, a
    quarter of the Python time of a 4096-row replay draw). Once the layer is up, the
    layer's own getter it wraps (``numba.np.ufunc.parallel._get_num_threads``, a ctypes
    function) answers the same, per thread as well; it is used when it exists and agreed
    with the public function at the first call, else the public function is.
    """
    global _numba_get_threads
    get = _numba_get_threads
    if get is not None:
        return int(get())
    n = int(numba.get_num_threads())  # launches the threading layer
    from numba.np.ufunc import parallel as _par

    raw = getattr(_par, "_get_num_threads", None)
    try:
        ok = callable(raw) and int(raw()) == n
    except Exception:  # noqa: BLE001 - a Numba without the private getter: the public one
        ok = False
    _numba_get_threads = raw if ok else numba.get_num_threads
    return n


def parallel_call(kernel: Callable[..., Any], threads: int, *args: Any) -> Any:
    """``kernel(*args)`` (a parallel kernel) on exactly ``threads`` of Numba's threads, the
    count restored afterwards, inside :func:`parallel_region`."""
    before = numba_threads()
    if threads != before:
        numba.set_num_threads(threads)
    try:
        with parallel_region():
            return kernel(*args)
    finally:
        _last_region[0] = time.monotonic()
        _last_region[1] = threads
        if threads != before:
            numba.set_num_threads(before)
