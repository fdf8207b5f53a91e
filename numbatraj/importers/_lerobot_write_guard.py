"""Guards a recorder needs around a LeRobot v3.0 directory: refusing to write over an
existing dataset, and the rejection list ``meta/rejected_episodes.json``.

An operator can reject an episode after recording it.  The writer is append-only, so the
episode stays on disk; :func:`reject_episode` lists it in ``meta/rejected_episodes.json``
(``{"rejected_episodes": [1, 4], "note": "..."}``) at once, atomically.  The importer skips
the listed episodes; LeRobot's own loader ignores the file.  The file lives in ``meta/``, so it
travels with every push.
"""

from __future__ import annotations

import json
import os
from typing import Any

from numbatraj.errors import DatasetExistsError, EpisodeError, SchemaError
from numbatraj.importers._lerobot_write_meta import atomic_write_json
from numbatraj.lerobot import schema as S

__all__ = ["DatasetExistsError", "refuse_existing_dataset", "reject_episode"]


def refuse_existing_dataset(root: str | os.PathLike[str]) -> None:
    """Raise :class:`DatasetExistsError` if ``root`` holds ``meta/info.json`` or a rejection
    list: a recorder must not write over a dataset unless it asked to resume it."""
    root = os.fspath(root)
    for rel in (S.INFO_PATH, S.REJECTED_PATH):
        if os.path.exists(os.path.join(root, rel)):
            raise DatasetExistsError(
                f"{root!r} already holds a dataset ({rel} exists); continue it with "
                f"LeRobotWriter.resume({root!r}, ...) or record into another directory"
            )


def reject_episode(root: str | os.PathLike[str], index: int, note: str | None = None) -> list[int]:
    """List episode ``index`` in ``meta/rejected_episodes.json`` now (atomically).

    The episode stays on disk; the importer skips it.  ``note`` is appended to the file's note.
    Returns the sorted rejected episodes.

    Raises
    ------
    FileNotFoundError
        ``root`` has no ``meta/info.json``.
    EpisodeError
        ``index`` is not a recorded episode.
    """
    root = os.fspath(root)
    info_path = os.path.join(root, S.INFO_PATH)
    if not os.path.isfile(info_path):
        raise FileNotFoundError(f"{root!r} is not a LeRobot dataset: {S.INFO_PATH} does not exist")
    with open(info_path, encoding="utf-8") as fh:
        total = int(json.load(fh).get("total_episodes", 0))
    if isinstance(index, bool) or int(index) != index or not 0 <= int(index) < total:
        raise EpisodeError(
            f"cannot reject episode {index!r} of {root!r}: it has episodes 0..{total - 1}"
            if total
            else f"cannot reject episode {index!r} of {root!r}: it has no episode yet"
        )
    path = os.path.join(root, S.REJECTED_PATH)
    doc: dict[str, Any] = {"rejected_episodes": [], "note": ""}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            old = json.load(fh)
        if not isinstance(old, dict) or not isinstance(old.get("rejected_episodes"), list):
            raise SchemaError(
                f'{path!r} should be {{"rejected_episodes": [episode, ...]}}, got {old!r}'
            )
        doc = {"rejected_episodes": list(old["rejected_episodes"]), "note": old.get("note", "")}
    rejected = sorted({int(e) for e in doc["rejected_episodes"]} | {int(index)})
    notes = [n for n in (doc.get("note") or "", note or "") if n]
    atomic_write_json(path, {"rejected_episodes": rejected, "note": "; ".join(notes)})
    return rejected
