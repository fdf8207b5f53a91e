"""The parameters of a :class:`~numbatraj.lerobot.write.LeRobotWriter`: :class:`WriterSettings`.

One frozen dataclass, checked and normalised when it is made, so that the constructor and
:meth:`~numbatraj.lerobot.write.LeRobotWriter.resume` (which fills the codec, CRF and file
sizes from the directory) build a writer from the same checked values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from numbatraj.errors import SchemaError

__all__ = ["WriterSettings"]


@dataclass(frozen=True)
class WriterSettings:
    """The parameters of a :class:`LeRobotWriter`, checked and normalised (see the class for
    their meaning).  :meth:`LeRobotWriter.resume` fills the ones it leaves open from the
    directory."""

    root: str
    fps: int
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    cameras: tuple[str, ...]
    height: int
    width: int
    checkpoint: bool = True
    codec: str = "libsvtav1"
    video_mb: float = 100
    data_mb: float = 100
    robot_type: str | None = None
    crf: int | None = None

    def __post_init__(self) -> None:
        fps, height, width = self.fps, self.height, self.width
        if isinstance(fps, bool) or int(fps) != fps or fps <= 0:
            raise SchemaError(f"fps must be a positive whole number, got {fps!r}")
        if height < 1 or width < 1:
            raise SchemaError(f"height and width must be positive, got {height}x{width}")
        for what, names in (("state_names", self.state_names), ("action_names", self.action_names)):
            if len(names) == 0 or len(set(names)) != len(names):
                raise SchemaError(f"{what} must be non-empty and unique, got {list(names)}")
        if len(self.cameras) == 0 or len(set(self.cameras)) != len(self.cameras):
            # At least one: numbatraj's importer stores an images column (no zero extent).
            raise SchemaError(
                f"camera names must be non-empty and unique, got {list(self.cameras)}"
            )
        if not self.video_mb > 0 or not self.data_mb > 0:
            raise SchemaError(
                f"video_mb and data_mb must be positive, got {self.video_mb}, {self.data_mb}"
            )
        normal = {
            "root": os.path.abspath(os.fspath(self.root)),
            "fps": int(fps),
            "state_names": tuple(str(n) for n in self.state_names),
            "action_names": tuple(str(n) for n in self.action_names),
            "cameras": tuple(str(c) for c in self.cameras),
            "height": int(height),
            "width": int(width),
            "checkpoint": bool(self.checkpoint),
        }
        for name, value in normal.items():  # a frozen dataclass normalises through this door
            object.__setattr__(self, name, value)
