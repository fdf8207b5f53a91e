"""Gymnasium wrappers that record every episode into a trajectory store.

One row per ``env.step``: the observation the action was taken in (``obs``, or
``obs.<key>`` for Dict / Tuple spaces, see :mod:`numbatraj.data.spaces`), ``action``,
``reward`` (float32), ``done`` (= ``terminated``) and ``truncated``.  An episode ends in the
store where ``terminated or truncated``; an episode abandoned by an early ``reset()`` or by
``close()`` is kept as it stands, its last row carrying neither flag.

Streaming: rows are buffered for the current episode only (per sub-env for a vector env)
and written when it ends.  The store is built under a temporary name and published by
``close()`` (through :class:`~numbatraj.data.TrajectoryStoreWriter`): a crash leaves no file
that looks finished.

::

    env = StoreRecorder(gymnasium.make("CartPole-v1"), "cartpole.h5", env_id="CartPole-v1")
    obs, _ = env.reset(seed=0)
    ...
    env.close()                   # publishes cartpole.h5
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper

from numbatraj.data.column import ColumnSpec
from numbatraj.data.spaces import columns_from_spaces, flatten
from numbatraj.data.writer import TrajectoryStoreWriter
from numbatraj.errors import SchemaError

__all__ = ["StoreRecorder", "VectorStoreRecorder"]


class _Episodes:
    """Row buffers of ``n`` concurrent episodes over one writer."""

    def __init__(self, path: str | os.PathLike[str], obs_space: Any, act_space: Any,
                 columns: Iterable[ColumnSpec] | None, n: int, writer_kwargs: dict[str, Any]):
        self.obs_space, self.act_space = obs_space, act_space
        derived = columns_from_spaces(obs_space, act_space)
        self.columns = list(columns) if columns is not None else derived
        names = {c.name for c in self.columns}
        missing = [c.name for c in derived if c.name not in names]
        if missing:
            raise SchemaError(f"columns must declare every recorded column; missing {missing}")
        self.writer = TrajectoryStoreWriter(path, self.columns, **writer_kwargs)
        self.rows: list[dict[str, list[np.ndarray]]] = [{} for _ in range(n)]
        self.obs: list[dict[str, np.ndarray] | None] = [None] * n

    def set_obs(self, i: int, obs: dict[str, np.ndarray]) -> None:
        self.obs[i] = obs

    def add(self, i: int, action: dict[str, np.ndarray], reward: float, terminated: bool,
            truncated: bool) -> None:
        obs = self.obs[i]
        if obs is None:
            raise RuntimeError("step() before reset(): call reset() first")
        row = {**obs, **action,
               "reward": np.array([reward], np.float32),
               "done": np.array([terminated], np.bool_),
               "truncated": np.array([truncated], np.bool_)}
        buf = self.rows[i]
        for k, v in row.items():
            buf.setdefault(k, []).append(v)
        if terminated or truncated:
            self.end(i)

    def end(self, i: int) -> None:
        buf = self.rows[i]
        if not buf:
            return
        self.writer.append_rows({k: np.concatenate(v) for k, v in buf.items()})
        self.writer.end_episode()
        self.rows[i] = {}

    def close(self) -> None:
        if self.writer.closed:
            return
        for i in range(len(self.rows)):
            self.end(i)
        self.writer.close()

    def abort(self) -> None:
        if not self.writer.closed:
            self.writer.abort()


class StoreRecorder(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Record every episode of ``env`` into the trajectory store at ``path``.

    Parameters
    ----------
    env : gymnasium.Env
        A single env (a vector env goes to :class:`VectorStoreRecorder`).
    path : path-like
        The store to write; published on :meth:`close`.
    columns : iterable of ColumnSpec, optional
        Override the columns derived from the spaces (same names; e.g. another float
        dtype is refused by the writer, so only use it to add chunking-relevant columns).
    env_id : str, optional
        Recorded in the manifest (default ``env.spec.id`` when the env has a spec).
    seed : int, optional
        Recorded in the manifest.
    attrs : mapping, optional
        Manifest attributes.
    overwrite : bool
        Replace an existing store at ``path`` on close.
    """

    def __init__(self, env: gymnasium.Env[Any, Any], path: str | os.PathLike[str], *,
                 columns: Iterable[ColumnSpec] | None = None, env_id: str | None = None,
                 seed: int | None = None, attrs: dict[str, Any] | None = None,
                 overwrite: bool = False) -> None:
        if isinstance(env, VectorEnv):
            raise TypeError("StoreRecorder wraps one env; use VectorStoreRecorder for a "
                            "vector env")
        super().__init__(env)
        spec_id = env.spec.id if env.spec is not None else None
        self._eps = _Episodes(path, env.observation_space, env.action_space, columns, 1,
                              dict(env_id=env_id or spec_id, seed=seed, attrs=attrs,
                                   overwrite=overwrite))
        self.path = os.fspath(path)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._eps.end(0)  # an episode left unfinished is kept as it stands
        self._eps.set_obs(0, flatten(self._eps.obs_space, obs, "obs"))
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._eps.add(0, flatten(self._eps.act_space, action, "action"), float(reward),
                      bool(terminated), bool(truncated))
        self._eps.set_obs(0, flatten(self._eps.obs_space, obs, "obs"))
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Write the episode in progress, publish the store, close the env."""
        try:
            self._eps.close()
        except BaseException:
            self._eps.abort()
            raise
        finally:
            super().close()


class VectorStoreRecorder(VectorWrapper):
    """Record a vector env: each sub-env's episodes become episodes of the store, written
    in the order they end.

    Works with the ``NEXT_STEP`` autoreset mode (gymnasium's default: the step after an
    episode ends is a reset, not a transition, and is not recorded) and ``SAME_STEP`` (the
    returned observation is already the next episode's first).  Parameters as
    :class:`StoreRecorder`.
    """

    def __init__(self, env: VectorEnv[Any, Any, Any], path: str | os.PathLike[str], *,
                 columns: Iterable[ColumnSpec] | None = None, env_id: str | None = None,
                 seed: int | None = None, attrs: dict[str, Any] | None = None,
                 overwrite: bool = False) -> None:
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode")
        self._same_step = getattr(mode, "value", mode) == "SameStep"
        if getattr(mode, "value", mode) == "Disabled":
            raise ValueError("VectorStoreRecorder needs autoreset (NEXT_STEP or SAME_STEP)")
        spec_id = env.spec.id if env.spec is not None else None
        self._n = env.num_envs
        self._eps = _Episodes(path, env.single_observation_space, env.single_action_space,
                              columns, self._n, dict(env_id=env_id or spec_id, seed=seed,
                                                     attrs=attrs, overwrite=overwrite))
        self._resetting = np.zeros(self._n, bool)
        self.path = os.fspath(path)

    def _set_all_obs(self, obs: Any, which: np.ndarray) -> None:
        flat = flatten(self._eps.obs_space, obs, "obs", batch=True)
        for i in np.flatnonzero(which):
            self._eps.set_obs(int(i), {k: v[i : i + 1] for k, v in flat.items()})

    def reset(self, *, seed: int | list[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        for i in range(self._n):
            self._eps.end(i)
        self._resetting[:] = False
        self._set_all_obs(obs, np.ones(self._n, bool))
        return obs, info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        acts = flatten(self._eps.act_space, actions, "action", batch=True)
        for i in range(self._n):
            if self._resetting[i]:  # NEXT_STEP: this step reset sub-env i
                continue
            self._eps.add(i, {k: v[i : i + 1] for k, v in acts.items()}, float(rewards[i]),
                          bool(terminated[i]), bool(truncated[i]))
        ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        self._set_all_obs(obs, np.ones(self._n, bool))
        self._resetting = np.zeros(self._n, bool) if self._same_step else ended
        return obs, rewards, terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        """Write the episodes in progress, publish the store, close the env."""
        try:
            self._eps.close()
        except BaseException:
            self._eps.abort()
            raise
        finally:
            super().close(**kwargs)
