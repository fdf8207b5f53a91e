"""RateLimiter: Reverb-style sample-to-insert control for one replay shard, counted in rows.

The limiter keeps two lifetime counters, ``inserted`` rows and ``sampled`` rows, and their
weighted difference::

    diff = samples_per_insert * inserted - sampled

With ``offset = samples_per_insert * min_size_to_sample`` it keeps ``diff`` inside
``[offset - error_buffer, offset + error_buffer]``:

- an insert of ``n`` rows may proceed while the shard is still filling
  (``inserted + n <= min_size_to_sample``), or when afterwards
  ``samples_per_insert * (inserted + n) - sampled <= offset + error_buffer``; otherwise the
  writers are ahead and the insert waits for samples;
- a sample of ``b`` rows may proceed when the shard holds at least ``min_size_to_sample``
  rows and afterwards ``diff - b >= offset - error_buffer``; otherwise the learner is ahead
  and the sample waits for inserts.

These are the conditions of Reverb's ``SampleToInsertRatio`` (``CanInsert``/``CanSample``),
applied to whole batches instead of single items, so ``diff`` never leaves the band after any
completed call.  A batched pair of calls can only both wait when the band is narrower than
``samples_per_insert * n + b``; :meth:`RateLimiter.check_insert` and
:meth:`RateLimiter.check_sample` refuse a batch that could never fit, and the docs advise
``2 * error_buffer >= samples_per_insert * insert_batch + sample_batch``.

``samples_per_insert=None`` keeps only the minimum size (Reverb's ``MinSize``): inserts never
wait and samples wait until ``min_size_to_sample`` rows are held.  :meth:`RateLimiter.off`
(the default of :class:`~numbatraj.ray.ShardedReplay`) never waits at all.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from numbatraj.errors import RateLimitTimeoutError, SamplerError

__all__ = ["RateLimiter", "RateLimiterState"]


@dataclass(frozen=True)
class RateLimiter:
    """The settings of a per-shard rate limiter (a frozen, picklable value).

    Parameters
    ----------
    min_size_to_sample : int
        Rows a shard must hold before any sample proceeds (>= 0; 0 with no ratio: never wait).
    samples_per_insert : float, optional
        Target sampled rows per inserted row (> 0); ``None``: no ratio, only the minimum size.
    error_buffer : float
        Half-width of the band around the target, in sampled rows (>= 0).
    """

    min_size_to_sample: int = 0
    samples_per_insert: float | None = None
    error_buffer: float = 0.0

    def __post_init__(self) -> None:
        m = self.min_size_to_sample
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise SamplerError(f"min_size_to_sample must be an int >= 0, got {m!r}")
        spi = self.samples_per_insert
        if spi is not None and not (isinstance(spi, (int, float)) and math.isfinite(spi)
                                    and spi > 0):
            raise SamplerError(f"samples_per_insert must be a finite number > 0 or None, "
                               f"got {spi!r}")
        e = self.error_buffer
        if not (isinstance(e, (int, float)) and math.isfinite(e) and e >= 0):
            raise SamplerError(f"error_buffer must be a finite number >= 0, got {e!r}")
        if spi is not None and e < 1:
            raise SamplerError(
                f"error_buffer = {e!r} rows admits no batch; with samples_per_insert set, "
                f"expected error_buffer >= (samples_per_insert * insert_batch + "
                f"sample_batch) / 2"
            )

    @classmethod
    def off(cls) -> RateLimiter:
        """A limiter that never waits (the default)."""
        return cls()

    @classmethod
    def min_size(cls, n: int) -> RateLimiter:
        """Samples wait until ``n`` rows are held; inserts never wait."""
        return cls(min_size_to_sample=n)

    @classmethod
    def ratio(cls, samples_per_insert: float, min_size_to_sample: int,
              error_buffer: float) -> RateLimiter:
        """Reverb's ``SampleToInsertRatio``: keep ``samples_per_insert`` within
        ``error_buffer`` sampled rows, after ``min_size_to_sample`` rows."""
        return cls(min_size_to_sample, float(samples_per_insert), float(error_buffer))

    @property
    def enabled(self) -> bool:
        return self.samples_per_insert is not None or self.min_size_to_sample > 0

    @property
    def band(self) -> tuple[float, float]:
        """``(min_diff, max_diff)``; infinite when there is no ratio."""
        if self.samples_per_insert is None:
            return (-math.inf, math.inf)
        offset = self.samples_per_insert * self.min_size_to_sample
        return (offset - self.error_buffer, offset + self.error_buffer)


class RateLimiterState:
    """The counters of one shard's limiter and the condition its callers wait on.

    Every method must be called with :attr:`lock` held (``with state.lock:``); the waits
    release it.  ``wait_insert``/``wait_sample`` return the seconds they waited, or raise
    :class:`RateLimitTimeoutError` after ``timeout`` seconds (``None``: wait forever).
    """

    def __init__(self, config: RateLimiter, inserted: int = 0, sampled: int = 0) -> None:
        self.config = config
        self.lock = threading.Condition()
        self.inserted = int(inserted)
        self.sampled = int(sampled)
        self.size = 0
        self.insert_wait_s = 0.0
        self.sample_wait_s = 0.0
        self.diff_min = math.inf  # extremes of diff after each call once filled
        self.diff_max = -math.inf

    @property
    def diff(self) -> float:
        spi = self.config.samples_per_insert
        return (spi or 0.0) * self.inserted - self.sampled

    def check_insert(self, n: int) -> None:
        """Refuse an insert that has to wait and can never pass: wider than the band, or
        crossing ``min_size_to_sample`` past the band while no sample may run yet."""
        c = self.config
        if c.samples_per_insert is None or self.can_insert(n):
            return
        lo, hi = c.band
        if c.samples_per_insert * n > hi - lo:
            raise SamplerError(
                f"an insert of {n} rows can never pass the rate limiter: samples_per_insert "
                f"* {n} = {c.samples_per_insert * n:g} exceeds the band 2 * error_buffer = "
                f"{hi - lo:g}; insert smaller batches or raise error_buffer"
            )
        if self.inserted < c.min_size_to_sample:
            raise SamplerError(
                f"an insert of {n} rows after {self.inserted} can never pass the rate "
                f"limiter: it overshoots min_size_to_sample={c.min_size_to_sample} past the "
                f"band (max diff {hi:g}) before any sample may run; insert smaller batches"
            )

    def check_sample(self, b: int) -> None:
        c = self.config
        lo, hi = c.band
        if b > hi - lo:
            raise SamplerError(
                f"a sample of {b} rows can never pass the rate limiter: it exceeds the band "
                f"2 * error_buffer = {hi - lo:g}; sample smaller batches or raise error_buffer"
            )

    def can_insert(self, n: int) -> bool:
        c = self.config
        if c.samples_per_insert is None or self.inserted + n <= c.min_size_to_sample:
            return True
        return c.samples_per_insert * (self.inserted + n) - self.sampled <= c.band[1]

    def can_sample(self, b: int) -> bool:
        c = self.config
        if self.size < max(c.min_size_to_sample, 1 if c.enabled else 0):
            return False
        if c.samples_per_insert is None:
            return True
        return self.diff - b >= c.band[0]

    def budget(self) -> float:
        """Rows a sample could take now without waiting (``inf`` without a ratio)."""
        c = self.config
        if self.size < max(c.min_size_to_sample, 1 if c.enabled else 0):
            return 0.0
        if c.samples_per_insert is None:
            return math.inf
        return max(0.0, math.floor(self.diff - c.band[0]))

    def _wait(self, ready: Any, timeout: float | None, what: str) -> float:
        if ready():
            return 0.0
        t0 = time.monotonic()
        deadline = None if timeout is None else t0 + timeout
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                c = self.config
                raise RateLimitTimeoutError(
                    f"{what} waited {timeout:g} s for the rate limiter (inserted "
                    f"{self.inserted} rows, sampled {self.sampled}, held {self.size}; "
                    f"samples_per_insert={c.samples_per_insert}, min_size_to_sample="
                    f"{c.min_size_to_sample}, error_buffer={c.error_buffer:g})"
                )
            self.lock.wait(left)
        return time.monotonic() - t0

    def wait_insert(self, n: int, timeout: float | None) -> float:
        self.check_insert(n)
        waited = self._wait(lambda: self.can_insert(n), timeout, f"an insert of {n} rows")
        self.insert_wait_s += waited
        return waited

    def wait_sample(self, b: int, timeout: float | None) -> float:
        if self.config.samples_per_insert is not None:
            self.check_sample(b)
        waited = self._wait(lambda: self.can_sample(b), timeout, f"a sample of {b} rows")
        self.sample_wait_s += waited
        return waited

    def _note(self) -> None:
        if self.inserted >= self.config.min_size_to_sample:  # the band holds from here on
            d = self.diff
            self.diff_min = min(self.diff_min, d)
            self.diff_max = max(self.diff_max, d)
        self.lock.notify_all()

    def inserted_rows(self, n: int, size: int) -> None:
        self.inserted += n
        self.size = size
        self._note()

    def sampled_rows(self, b: int) -> None:
        self.sampled += b
        self._note()

    def stats(self) -> dict[str, Any]:
        return {
            "inserted": self.inserted,
            "sampled": self.sampled,
            "diff": self.diff,
            "diff_min": self.diff_min,
            "diff_max": self.diff_max,
            "insert_wait_s": self.insert_wait_s,
            "sample_wait_s": self.sample_wait_s,
        }
