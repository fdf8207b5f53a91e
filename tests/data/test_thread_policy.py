"""The thread policy seen from the environment: a process started with
``NUMBA_NUM_THREADS=1`` (what ``make bench``'s second run is) never takes a parallel kernel,
and the store digests follow the same policy as the gathers."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import numbatraj
from numbatraj.data import checksums

_CHILD = r"""
import numpy as np
import numbatraj
from numbatraj import _jit
from numbatraj.data import checksums
import numba
assert numba.config.NUMBA_NUM_THREADS == 1, numba.config.NUMBA_NUM_THREADS
try:
    numbatraj.set_num_threads(2)
except ValueError as exc:
    assert "NUMBA_NUM_THREADS" in str(exc), exc
else:
    raise AssertionError("set_num_threads(2) accepted under NUMBA_NUM_THREADS=1")
def boom(*a):
    raise AssertionError("the parallel digest ran")
checksums._digest_chunks_par = boom
buf = np.arange(40 << 20, dtype=np.uint8)
for n in (None, 1):
    numbatraj.set_num_threads(n)
    assert _jit.parallel_threads(1 << 30) == 1
    checksums.digest_chunks(buf, 1 << 20)
print("serial")
"""


def test_numba_num_threads_1_never_takes_the_parallel_path():
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "serial"


def test_digests_are_serial_by_default_and_parallel_only_when_asked(monkeypatch, rng):
    buf = rng.integers(0, 256, 40 << 20, dtype=np.uint8)
    want = checksums.digest_chunks(buf, 1 << 20)
    calls: list[int] = []
    par = checksums._digest_chunks_par

    def spy(b, cb, out):  # type: ignore[no-untyped-def]
        calls.append(b.size)
        par(b, cb, out)

    monkeypatch.setattr(checksums, "_digest_chunks_par", spy)
    numbatraj.set_num_threads(None)
    np.testing.assert_array_equal(checksums.digest_chunks(buf, 1 << 20), want)
    assert calls == []  # the default: the calling thread only
    import numba

    if numba.config.NUMBA_NUM_THREADS > 1:
        numbatraj.set_num_threads(2)
        try:
            np.testing.assert_array_equal(checksums.digest_chunks(buf, 1 << 20), want)
        finally:
            numbatraj.set_num_threads(None)
        assert calls == [buf.size]


def test_numba_threads_follows_numba_per_thread():
    """``_jit.numba_threads`` (the per-call query the policy uses) answers what
    ``numba.get_num_threads`` does, after a change through Numba itself and on another
    thread (the count is per thread)."""
    import threading

    import numba

    from numbatraj import _jit

    top = int(numba.config.NUMBA_NUM_THREADS)
    assert _jit.numba_threads() == numba.get_num_threads() == top
    try:
        numba.set_num_threads(1)
        assert _jit.numba_threads() == 1
        seen = []
        t = threading.Thread(target=lambda: seen.append(_jit.numba_threads()))
        t.start()
        t.join()
        assert seen == [top]  # a new thread starts with every thread
        if top > 1:
            numba.set_num_threads(2)
            assert _jit.numba_threads() == 2
    finally:
        numba.set_num_threads(top)
    assert _jit.numba_threads() == top
