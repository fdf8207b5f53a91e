"""The LeRobot v3.0 layout names (numbatraj.lerobot.schema), checked against known answers
from LeRobot's own writer."""

from __future__ import annotations

import pytest

from numbatraj.lerobot import schema as S


def test_schema_names_match_lerobot_v3_writer():
    # Known answers transcribed from a dataset written by LeRobot v3.0.
    assert S.data_file(S.DEFAULT_DATA_PATH, 0, 12) == "data/chunk-000/file-012.parquet"
    assert (
        S.video_file(S.DEFAULT_VIDEO_PATH, "observation.images.front", 1, 2)
        == "videos/observation.images.front/chunk-001/file-002.mp4"
    )
    assert S.episodes_file(0, 0) == "meta/episodes/chunk-000/file-000.parquet"
    assert (
        S.video_column("observation.images.wrist", "from_timestamp")
        == "videos/observation.images.wrist/from_timestamp"
    )
    info = S.build_info(
        fps=30,
        features={"action": S.vector_feature(["a"])},
        total_episodes=2,
        total_frames=10,
        total_tasks=1,
    )
    assert info["codebase_version"] == "v3.0" and info["video_path"] is None
    assert info["features"]["index"] == {"dtype": "int64", "shape": [1], "names": None}
    assert info["splits"] == {"train": "0:2"}
    cam = S.video_feature(480, 640, codec="av1", fps=30)
    assert cam["shape"] == [480, 640, 3] and cam["info"]["video.pix_fmt"] == "yuv420p"
    with pytest.raises(ValueError):
        S.video_column("cam", "duration")
