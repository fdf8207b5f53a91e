"""Feature statistics as LeRobot v3.0 records them: per episode, and aggregated per dataset.

Every feature gets ``min``, ``max``, ``mean``, ``std`` (population), ``count`` and the
quantiles ``q01``, ``q10``, ``q50``, ``q90``, ``q99``.

- Numeric features (``action``, ``observation.state`` and the bookkeeping columns) are exact
  over the episode's rows: a feature of shape ``(d,)`` gets ``(d,)`` statistics, a scalar
  column ``(1,)``.  Quantiles are NumPy's default (linear) ones.  ``count`` is the row count.
- Cameras are reduced per channel from a 256-bin histogram of every frame sampled at every 4th
  pixel in each axis (``frame[::4, ::4]``).  Values are divided by 255 and shaped ``(3, 1, 1)``
  as LeRobot shapes image statistics; ``count`` is the number of frames.  The quantiles are
  read exactly from the histogram (NumPy's linear definition over the sampled pixels).
- Dataset statistics (``meta/stats.json``) aggregate the episodes the way LeRobot's
  ``aggregate_stats`` does: count-weighted mean, pooled variance, min of minima, max of
  maxima, summed count; a quantile cannot be recovered from per-episode quantiles, so lower
  quantiles (``q <= 50``) take the minimum over episodes and upper ones the maximum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "IMAGE_STRIDE",
    "QUANTILES",
    "QUANTILE_KEYS",
    "STAT_KEYS",
    "ImageStats",
    "aggregate_feature_stats",
    "aggregate_stats",
    "episode_stats",
    "flatten_episode_stats",
    "stats_from_json",
    "stats_to_json",
    "vector_stats",
]

QUANTILES: tuple[float, ...] = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS: tuple[str, ...] = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
STAT_KEYS: tuple[str, ...] = ("min", "max", "mean", "std", "count", *QUANTILE_KEYS)
#: Pixel stride in each axis when sampling a frame for image statistics.
IMAGE_STRIDE = 4

FeatureStats = dict[str, np.ndarray]


def vector_stats(values: np.ndarray) -> FeatureStats:
    """Statistics of ``(n,)`` or ``(n, d)`` rows; scalars give shape ``(1,)`` statistics."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"statistics need (n,) or (n, d) rows with n >= 1, got {x.shape}")
    out: FeatureStats = {
        "min": x.min(axis=0),
        "max": x.max(axis=0),
        "mean": x.mean(axis=0),
        "std": x.std(axis=0),
        "count": np.array([x.shape[0]], dtype=np.int64),
    }
    qs = np.quantile(x, QUANTILES, axis=0)
    for key, row in zip(QUANTILE_KEYS, qs):
        out[key] = row
    return out


class ImageStats:
    """Per-channel 256-bin histogram of rgb24 frames sampled every :data:`IMAGE_STRIDE` pixels."""

    _OFFSETS = np.array([0, 256, 512], dtype=np.intp)

    def __init__(self) -> None:
        self.hist = np.zeros((3, 256), dtype=np.int64)
        self.frames = 0

    def add(self, rgb: np.ndarray) -> None:
        """Count one ``(H, W, 3)`` uint8 frame."""
        sub = rgb[::IMAGE_STRIDE, ::IMAGE_STRIDE].reshape(-1, 3)
        idx = sub.astype(np.intp) + self._OFFSETS
        self.hist += np.bincount(idx.ravel(), minlength=768).reshape(3, 256)
        self.frames += 1

    def result(self) -> FeatureStats:
        """The statistics, divided by 255 and shaped ``(3, 1, 1)``; ``count`` is frames."""
        if self.frames == 0:
            raise ValueError("image statistics of an episode with no frame")
        v = np.arange(256, dtype=np.float64)
        n = self.hist.sum(axis=1).astype(np.float64)
        cum = np.cumsum(self.hist, axis=1)
        mean = (self.hist * v).sum(axis=1) / n
        var = (self.hist * (v[None, :] - mean[:, None]) ** 2).sum(axis=1) / n
        nz = self.hist > 0
        lo = nz.argmax(axis=1).astype(np.float64)
        hi = 255.0 - nz[:, ::-1].argmax(axis=1)
        out: FeatureStats = {"min": lo, "max": hi, "mean": mean, "std": np.sqrt(var)}
        quants = {}
        for key, q in zip(QUANTILE_KEYS, QUANTILES):
            h = (n - 1.0) * q
            r0 = np.floor(h)
            r1 = np.minimum(r0 + 1.0, n - 1.0)
            v0 = np.array([np.searchsorted(cum[c], r0[c], side="right") for c in range(3)])
            v1 = np.array([np.searchsorted(cum[c], r1[c], side="right") for c in range(3)])
            quants[key] = v0 + (h - r0) * (v1 - v0)
        shaped = {k: (val / 255.0).reshape(3, 1, 1) for k, val in {**out, **quants}.items()}
        return {
            "min": shaped["min"],
            "max": shaped["max"],
            "mean": shaped["mean"],
            "std": shaped["std"],
            "count": np.array([self.frames], dtype=np.int64),
            **{k: shaped[k] for k in QUANTILE_KEYS},
        }


def episode_stats(
    state: np.ndarray,
    action: np.ndarray,
    images: Mapping[str, ImageStats],
    *,
    fps: int,
    episode_index: int,
    start: int,
    task_index: int,
    extras: Mapping[str, np.ndarray] | None = None,
) -> dict[str, FeatureStats]:
    """Every feature's statistics for one episode, in ``meta/info.json``'s feature order:
    ``action``, ``observation.state``, the cameras, the extra features (``(n, *shape)``
    rows; statistics of the feature's shape), then the bookkeeping columns."""
    n = state.shape[0]
    frame = np.arange(n)
    stats: dict[str, FeatureStats] = {"action": vector_stats(action)}
    stats["observation.state"] = vector_stats(state)
    for key, img in images.items():
        stats[key] = img.result()
    for key, rows in (extras or {}).items():
        shape = rows.shape[1:] or (1,)
        fs = vector_stats(rows.reshape(n, -1))
        stats[key] = {k: v if k == "count" else v.reshape(shape) for k, v in fs.items()}
    stats["timestamp"] = vector_stats((frame / fps).astype(np.float32))
    stats["frame_index"] = vector_stats(frame)
    stats["episode_index"] = vector_stats(np.full(n, episode_index))
    stats["index"] = vector_stats(np.arange(start, start + n))
    stats["task_index"] = vector_stats(np.full(n, task_index))
    return stats


def aggregate_feature_stats(per_episode: Sequence[Mapping[str, np.ndarray]]) -> FeatureStats:
    """One feature's statistics over several episodes (LeRobot's aggregation rule)."""
    if not per_episode:
        raise ValueError("no statistics to aggregate")
    means = np.stack([np.asarray(s["mean"], np.float64) for s in per_episode])
    var = np.stack([np.asarray(s["std"], np.float64) ** 2 for s in per_episode])
    counts = np.array([int(np.asarray(s["count"]).reshape(-1)[0]) for s in per_episode])
    total = int(counts.sum())
    w = counts.astype(np.float64).reshape(-1, *([1] * (means.ndim - 1)))
    mean = (means * w).sum(axis=0) / total
    pooled = ((var + (means - mean) ** 2) * w).sum(axis=0) / total
    out: FeatureStats = {
        "min": np.min(np.stack([np.asarray(s["min"], np.float64) for s in per_episode]), axis=0),
        "max": np.max(np.stack([np.asarray(s["max"], np.float64) for s in per_episode]), axis=0),
        "mean": mean,
        "std": np.sqrt(pooled),
        "count": np.array([total], dtype=np.int64),
    }
    for key in QUANTILE_KEYS:
        qv = np.stack([np.asarray(s[key], np.float64) for s in per_episode])
        out[key] = qv.min(axis=0) if int(key[1:]) <= 50 else qv.max(axis=0)
    return out


def aggregate_stats(episodes: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> dict[str, Any]:
    """Dataset statistics from per-episode ``{feature: {stat: array}}`` dicts."""
    keys: list[str] = []
    for ep in episodes:
        keys += [k for k in ep if k not in keys]
    return {k: aggregate_feature_stats([ep[k] for ep in episodes if k in ep]) for k in keys}


def stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """``{feature: {stat: nested lists}}`` for ``json.dump`` (counts as integers)."""
    return {
        feat: {k: np.asarray(v).tolist() for k, v in fs.items()} for feat, fs in stats.items()
    }


def stats_from_json(doc: Mapping[str, Mapping[str, Any]]) -> dict[str, FeatureStats]:
    """Inverse of :func:`stats_to_json`: arrays, ``count`` as int64."""
    out: dict[str, FeatureStats] = {}
    for feat, fs in doc.items():
        out[feat] = {
            k: np.asarray(v, dtype=np.int64 if k == "count" else np.float64) for k, v in fs.items()
        }
    return out


def flatten_episode_stats(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Any]:
    """``{"stats/<feature>/<stat>": nested list}`` columns of the episode table."""
    flat: dict[str, Any] = {}
    for feat, fs in stats.items():
        for k in STAT_KEYS:
            flat[f"stats/{feat}/{k}"] = np.asarray(fs[k]).tolist()
    return flat
