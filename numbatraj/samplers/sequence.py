"""SequenceWindowSampler: fixed-length windows of consecutive rows, with ``is_first`` flags.

Windows span episode boundaries by default (``within_episode=False``).  DreamerV3 trains on
such windows and resets its recurrent state at the seam, reading the per-row ``is_first``
flags; keeping a window inside one episode would change its training distribution, so that
is an opt-in (:meth:`SequenceWindowSampler.draw_starts_in_episodes`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj._checks import (
    check_count,
    check_seed,
    generator_state,
    new_generator,
    set_generator_state,
)
from numbatraj.data.episode_index import index_problems, offsets_from_lengths
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import EpisodeError, RowIndexError, SamplerError
from numbatraj.samplers import _window_kernels as K
from numbatraj.samplers.uniform import uniform_rows

__all__ = ["SequenceWindowSampler"]


def _episode_lengths(source: Any) -> np.ndarray:
    """Episode lengths from a store-like object (``episode_lengths``) or a 1-D int array."""
    if hasattr(source, "episode_lengths"):
        lengths = np.asarray(source.episode_lengths)
        offsets = np.asarray(getattr(source, "episode_offsets", offsets_from_lengths(lengths)))
        n_rows = getattr(source, "n_rows", None)
    else:
        lengths = np.asarray(source)
        if lengths.ndim != 1 or (lengths.size and lengths.dtype.kind not in "iu"):
            raise EpisodeError(
                f"episode index must be a store or 1-D integer episode lengths, got "
                f"{lengths.dtype} array of shape {lengths.shape}"
            )
        lengths = lengths.astype(np.int64)
        offsets = offsets_from_lengths(lengths)
        n_rows = None
    problems = index_problems(lengths, offsets, n_rows)
    if problems:
        raise EpisodeError("invalid episode index: " + "; ".join(problems))
    if lengths.size == 0:
        raise EpisodeError("the episode index is empty: there is nothing to sample from")
    return lengths.astype(np.int64)


class SequenceWindowSampler:
    """Windows of ``window`` consecutive rows over an episode index.

    Parameters
    ----------
    episodes : TrajectoryStore, store-like or int array (E,)
        Anything with ``episode_lengths`` (and optionally ``episode_offsets``, ``n_rows``),
        or the episode lengths themselves.
    window : int
        Rows per window (>= 1).
    seed : int
        Seed of the sampler's own generator.
    within_episode : bool
        False (default): :meth:`draw_starts` is uniform over every start in
        ``[0, n_rows - window]`` and windows may span episodes.  True: :meth:`draw_starts`
        keeps each window inside one episode, like :meth:`draw_starts_in_episodes`.
    """

    def __init__(
        self, episodes: Any, window: int, seed: int = 0, within_episode: bool = False
    ) -> None:
        self._lengths = _episode_lengths(episodes)
        self._window = check_count("window", window)
        self._seed = check_seed(seed)
        self._within = bool(within_episode)
        self._gen = new_generator(self._seed)
        offsets = offsets_from_lengths(self._lengths)
        self._n_rows = int(self._lengths.sum())
        self._bounds = np.append(offsets, self._n_rows).astype(np.int64)
        valid = np.maximum(self._lengths - self._window + 1, 0)
        self._first_valid = np.zeros(valid.shape[0] + 1, dtype=np.int64)
        np.cumsum(valid, out=self._first_valid[1:])
        if self._within and self._first_valid[-1] == 0:
            self._no_episode_fits()

    # ------------------------------------------------------------------ properties
    @property
    def window(self) -> int:
        return self._window

    @property
    def n_rows(self) -> int:
        return self._n_rows

    @property
    def within_episode(self) -> bool:
        return self._within

    @property
    def n_starts(self) -> int:
        """How many starts :meth:`draw_starts` chooses among."""
        return (
            int(self._first_valid[-1]) if self._within else max(self._n_rows - self._window + 1, 0)
        )

    # ------------------------------------------------------------------ draws
    def draw_starts(self, batch_size: int) -> np.ndarray:
        """Window starts, int64 ``(batch_size,)``.

        Uniform over all of ``[0, n_rows - window]`` (spanning episodes) unless the sampler
        was built with ``within_episode=True``.
        """
        if self._within:
            return self.draw_starts_in_episodes(batch_size)
        b = check_count("batch_size", batch_size)
        n = self._n_rows - self._window + 1
        if n < 1:
            raise SamplerError(
                f"window {self._window} is longer than the {self._n_rows} rows in the store"
            )
        return uniform_rows(self._gen, 0, n, b)

    def draw_starts_in_episodes(self, batch_size: int) -> np.ndarray:
        """Starts of windows that stay inside one episode, int64 ``(batch_size,)``.

        Uniform over every in-episode start; episodes shorter than the window are never
        chosen.  Raises :class:`EpisodeError` when no episode is long enough.
        """
        b = check_count("batch_size", batch_size)
        total = int(self._first_valid[-1])
        if total == 0:
            self._no_episode_fits()
        ranks = uniform_rows(self._gen, 0, total, b)
        out = np.empty(b, dtype=np.int64)
        K._starts_from_ranks_cpu(self._bounds, self._first_valid, ranks, out)
        return out

    def expand_window(self, starts: Any) -> IndexBatch:
        """Rows of each window and where episodes start.

        Parameters
        ----------
        starts : int array (B,)
            Window starts in ``[0, n_rows - window]``.

        Returns
        -------
        IndexBatch
            ``indices`` int64 ``(B, window)`` with ``indices[b, t] = starts[b] + t``;
            ``is_first`` bool ``(B, window)``, true at each row that begins an episode.
        """
        s = np.asarray(starts)
        if s.ndim != 1 or (s.size and s.dtype.kind not in "iu"):
            raise SamplerError(
                f"starts must be 1-D integers, got {s.dtype} array of shape {s.shape}"
            )
        s = np.ascontiguousarray(s, dtype=np.int64)
        last = self._n_rows - self._window
        bad = np.flatnonzero((s < 0) | (s > last))
        if bad.size:
            j = int(bad[0])
            raise RowIndexError(
                f"starts[{j}] = {s[j]}: a window of {self._window} rows must start in "
                f"[0, {last}] (the store has {self._n_rows} rows)"
            )
        idx = np.empty((s.shape[0], self._window), dtype=np.int64)
        first = np.empty((s.shape[0], self._window), dtype=np.bool_)
        K._expand_windows_cpu(self._bounds, s, self._window, idx, first)
        return IndexBatch(idx, is_first=first)

    def sample(self, batch_size: int) -> IndexBatch:
        """``expand_window(draw_starts(batch_size))``."""
        return self.expand_window(self.draw_starts(batch_size))

    def _no_episode_fits(self) -> None:
        raise EpisodeError(
            f"no episode holds a window of {self._window} rows: the longest of the "
            f"{self._lengths.shape[0]} episodes has {int(self._lengths.max())} rows"
        )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Window, mode, seed and generator state (the episode index is not included)."""
        return {
            "kind": "SequenceWindowSampler",
            "window": self._window,
            "within_episode": self._within,
            "n_rows": self._n_rows,
            "seed": self._seed,
            "generator": generator_state(self._gen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; window and episode rows must match this sampler."""
        if state.get("kind") != "SequenceWindowSampler":
            raise SamplerError(
                f"state is for {state.get('kind')!r}, expected 'SequenceWindowSampler'"
            )
        for key, mine in (("window", self._window), ("n_rows", self._n_rows)):
            if int(state[key]) != mine:
                raise SamplerError(f"state has {key} {state[key]}, this sampler has {mine}")
        self._within = bool(state["within_episode"])
        self._seed = check_seed(state["seed"])
        set_generator_state(self._gen, state["generator"])

    def __repr__(self) -> str:
        return (
            f"SequenceWindowSampler(rows={self._n_rows}, episodes={self._lengths.shape[0]}, "
            f"window={self._window}, within_episode={self._within})"
        )
