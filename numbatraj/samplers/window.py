"""WindowSampler: uniform rows inside the resident window of a windowed column.

A :class:`~numbatraj.data.windowed.WindowedColumn` holds one contiguous slab of a column too
big for memory; gathers must stay inside it.  This sampler reads the window at every draw,
so it follows the column through ``seek`` / ``advance``::

    col = WindowedColumn.make(store, "pixels", window_rows=100_000)
    sampler = WindowSampler(col, seed=0)
    while True:
        for _ in range(updates_per_window):
            batch = col.gather(sampler.sample(256).indices)
        if not col.advance():
            break
"""

from __future__ import annotations

from typing import Any

from numbatraj._checks import (
    check_count,
    check_seed,
    generator_state,
    new_generator,
    set_generator_state,
)
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import SamplerError
from numbatraj.samplers.uniform import uniform_rows

__all__ = ["WindowSampler"]


class WindowSampler:
    """Uniform absolute row numbers in ``[start, stop)`` of ``windowed.window``.

    Parameters
    ----------
    windowed : WindowedColumn or any object with ``window -> (start, stop)``
        The column whose resident rows are drawn from.
    seed : int
        Seed of the sampler's own generator.
    """

    def __init__(self, windowed: Any, seed: int = 0) -> None:
        if not hasattr(windowed, "window"):
            raise SamplerError(
                f"WindowSampler needs an object with a 'window' -> (start, stop) property, "
                f"got {type(windowed).__name__}"
            )
        self._col = windowed
        self._seed = check_seed(seed)
        self._gen = new_generator(self._seed)

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def windowed(self) -> Any:
        return self._col

    def _window(self) -> tuple[int, int]:
        w = self._col.window
        try:
            start, stop = (int(w[0]), int(w[1]))
        except (TypeError, ValueError, IndexError):
            raise SamplerError(f"window must be a (start, stop) pair of ints, got {w!r}") from None
        if start < 0 or stop <= start:
            raise SamplerError(
                f"cannot sample: the resident window is [{start}, {stop}), expected "
                f"0 <= start < stop (seek or advance the column first)"
            )
        return start, stop

    def sample(self, batch_size: int) -> IndexBatch:
        """Draw ``batch_size`` absolute rows (with replacement) inside the current window.

        Returns
        -------
        IndexBatch
            ``indices`` int64 ``(batch_size,)`` in ``[start, stop)``.
        """
        b = check_count("batch_size", batch_size)
        start, stop = self._window()
        return IndexBatch(uniform_rows(self._gen, start, stop - start, b))

    def state_dict(self) -> dict[str, Any]:
        """Seed and generator state (the column's position is the column's own state)."""
        return {
            "kind": "WindowSampler",
            "seed": self._seed,
            "generator": generator_state(self._gen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`."""
        if state.get("kind") != "WindowSampler":
            raise SamplerError(f"state is for {state.get('kind')!r}, expected 'WindowSampler'")
        self._seed = check_seed(state["seed"])
        set_generator_state(self._gen, state["generator"])

    def __repr__(self) -> str:
        return f"WindowSampler(window={self._col.window}, seed={self._seed})"
