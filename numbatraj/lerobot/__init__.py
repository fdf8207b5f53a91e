"""LeRobot v3.0 datasets: read (import into a store), write (record with checkpoints and
resume), reject episodes, push to the Hugging Face Hub, and find datasets in the caches.

- :func:`import_lerobot_v3` (:mod:`numbatraj.lerobot.read`): a dataset directory into a
  trajectory store;
- :class:`LeRobotWriter` and :func:`reject_episode` (:mod:`numbatraj.lerobot.write`): record
  episodes as a dataset, continue a checkpointed one, reject an episode after the fact;
- :func:`push_lerobot_dataset` and :func:`resolve_dataset_root` (:mod:`numbatraj.lerobot.hub`):
  the Hugging Face Hub, both ways.

These names are imported on first use, so ``import numbatraj.lerobot`` loads neither pyarrow
nor PyAV.  ``numbatraj.lerobot.schema`` is the format's layout (paths, templates, feature
dicts); it needs no optional dependency.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "LeRobotWriter",
    "import_lerobot_v3",
    "push_lerobot_dataset",
    "reject_episode",
    "resolve_dataset_root",
]


def __getattr__(name: str) -> Any:
    # explicit imports (no table of module-name strings): each public name, from its module
    if name == "import_lerobot_v3":
        from numbatraj.lerobot.read import import_lerobot_v3

        return import_lerobot_v3
    if name == "LeRobotWriter":
        from numbatraj.lerobot.write import LeRobotWriter

        return LeRobotWriter
    if name == "reject_episode":
        from numbatraj.lerobot.write import reject_episode

        return reject_episode
    if name == "push_lerobot_dataset":
        from numbatraj.lerobot.hub import push_lerobot_dataset

        return push_lerobot_dataset
    if name == "resolve_dataset_root":
        from numbatraj.lerobot.hub import resolve_dataset_root

        return resolve_dataset_root
    raise AttributeError(f"module 'numbatraj.lerobot' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
