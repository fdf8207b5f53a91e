"""What a LeRobot v3.0 ``meta/`` names: the video and data files a reader will open.

Shared by the pusher (which orders and checks its pass with it) and the service (which
refuses a snapshot whose ``meta/info.json`` names a video it does not hold).  Reads
``info.json`` (``video_path`` / ``data_path`` templates, video features) and the episode
table's ``videos/<camera>/{chunk,file}_index`` and ``data/{chunk,file}_index`` columns.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any

from numbatraj.errors import IntegrityError

__all__ = [
    "EPISODES_PREFIX",
    "INFO_PATH",
    "named_files",
    "order_key",
    "parse_info",
]

INFO_PATH = "meta/info.json"
EPISODES_PREFIX = "meta/episodes/"
_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


def parse_info(raw: bytes, where: str = INFO_PATH) -> dict[str, Any]:
    """``info.json`` as a dict (raises :class:`IntegrityError` naming ``where``)."""
    try:
        info = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IntegrityError(f"{where} is not JSON: {exc}") from None
    if not isinstance(info, dict):
        raise IntegrityError(f"{where} is not a JSON object")
    return info


def _int_column(table: Any, name: str, where: str) -> list[int]:
    if name not in table.column_names:
        raise IntegrityError(f"{where} has no column {name!r}")
    values = table.column(name).to_pylist()
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise IntegrityError(
                f"{where} column {name!r} row {i} is {v!r}, not a non-negative integer"
            )
    return values


_INDEX_FIELDS = ("chunk_index", "file_index")
_INDEX_SPEC = re.compile(r"(0?[1-9])?d?")


def _check_template(tpl: Any, key: str, fields: tuple[str, ...]) -> str:
    """``info.json``'s ``key`` template, refused unless it only names ``fields`` with an
    integer spec of at most 9 digits (``{chunk_index:03d}``) and no conversion."""
    allowed = ", ".join("{" + f + "}" for f in fields)

    def bad(why: str) -> IntegrityError:
        return IntegrityError(
            f"{INFO_PATH} {key} {tpl!r} is not a path template this catalog accepts ({why}); "
            f"it may name only {allowed}, an index with a spec like :03d"
        )

    if not isinstance(tpl, str) or not tpl or len(tpl) > 512:
        raise bad("not a non-empty string of at most 512 chars")
    try:
        parsed = list(string.Formatter().parse(tpl))
    except ValueError as exc:
        raise bad(str(exc)) from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in fields:
            raise bad(f"unknown field {{{field}}}")
        if conversion is not None:
            raise bad(f"conversion !{conversion} on {{{field}}}")
        if field in _INDEX_FIELDS:
            if not _INDEX_SPEC.fullmatch(spec or ""):
                raise bad(f"format spec {spec!r} on {{{field}}}")
        elif spec:
            raise bad(f"format spec {spec!r} on {{{field}}}")
    return tpl


def named_files(info_raw: bytes, episode_tables: Mapping[str, bytes]) -> set[str]:
    """Every video and data file that ``info.json`` + the episode tables point a reader at.

    Parameters
    ----------
    info_raw : bytes
        Content of ``meta/info.json``.
    episode_tables : mapping
        ``meta/episodes/...parquet`` path -> content, for every episode-table file.

    Raises
    ------
    IntegrityError
        Unreadable JSON or Parquet, or a column the format requires is absent (named).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    info = parse_info(info_raw)
    features = info.get("features") or {}
    if not isinstance(features, dict):
        raise IntegrityError(f"{INFO_PATH} features is not a JSON object")
    cameras = sorted(
        k for k, v in features.items() if isinstance(v, dict) and v.get("dtype") == "video"
    )
    video_tpl = info.get("video_path")
    if video_tpl is not None:
        video_tpl = _check_template(video_tpl, "video_path", ("video_key", *_INDEX_FIELDS))
    data_tpl = info.get("data_path")
    data_tpl = _DATA_PATH if data_tpl is None else _check_template(
        data_tpl, "data_path", _INDEX_FIELDS)
    out: set[str] = set()
    for path, raw in sorted(episode_tables.items()):
        try:
            table = pq.read_table(pa.BufferReader(raw))
        except (pa.ArrowException, OSError) as exc:
            raise IntegrityError(f"{path} is not a readable Parquet file: {exc}") from None
        for c, f in zip(_int_column(table, "data/chunk_index", path),
                        _int_column(table, "data/file_index", path)):
            out.add(data_tpl.format(chunk_index=c, file_index=f))
        for cam in cameras:
            if not video_tpl:
                raise IntegrityError(f"{INFO_PATH} has video feature {cam!r} but no video_path")
            chunks = _int_column(table, f"videos/{cam}/chunk_index", path)
            files = _int_column(table, f"videos/{cam}/file_index", path)
            for c, f in zip(chunks, files):
                out.add(video_tpl.format(video_key=cam, chunk_index=c, file_index=f))
    return out


def order_key(path: str) -> tuple[int, str]:
    """Push order: videos, then data, then other files, then ``meta/`` with ``info.json``
    last, so the service holds what the metadata names before the metadata itself."""
    if path == INFO_PATH:
        rank = 4
    elif path.startswith("meta/"):
        rank = 3
    elif path.startswith("videos/"):
        rank = 0
    elif path.startswith("data/"):
        rank = 1
    else:
        rank = 2
    return rank, path
