"""Recording sync against the loopback catalog, on hand-made LeRobot-shaped directories."""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from numbatraj.cli import dataset as _cli_dataset
from numbatraj.errors import (
    CatalogAuthError,
    CatalogError,
    CatalogRequestError,
    DownloadError,
    IntegrityError,
)
from numbatraj.io.hashing import sha256_file
from numbatraj.remote import ENV_KEY, ENV_URL
from numbatraj.remote._recording_scan import FileStat
from numbatraj.remote.recording import (
    PassResult,
    RecordingSync,
    list_recordings,
    projects_root,
)
from tests.catalog.conftest import Catalog
from tests.remote.test_client_cli import dead_url

CAM = "observation.images.front"


def write_fake(root: Path, n_episodes: int, *, stamp: int = 0) -> None:
    """A directory shaped like a checkpointed v3.0 recording: one mp4 per episode, the data
    and episode table naming them, info.json written last."""
    for e in range(n_episodes):
        v = root / f"videos/{CAM}/chunk-000/file-{e:03d}.mp4"
        v.parent.mkdir(parents=True, exist_ok=True)
        if not v.exists():
            v.write_bytes(bytes([e % 256]) * (1000 + e))
    data = root / "data/chunk-000/file-000.parquet"
    data.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"index": list(range(n_episodes * 3)),
                             "stamp": [stamp] * (n_episodes * 3)}), data)
    eps = root / "meta/episodes/chunk-000/file-000.parquet"
    eps.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "episode_index": list(range(n_episodes)),
        "data/chunk_index": [0] * n_episodes, "data/file_index": [0] * n_episodes,
        f"videos/{CAM}/chunk_index": [0] * n_episodes,
        f"videos/{CAM}/file_index": list(range(n_episodes)),
    }), eps)
    (root / "meta/stats.json").write_text(json.dumps({"n": n_episodes}))
    info = {
        "codebase_version": "v3.0", "total_episodes": n_episodes, "total_frames": 3 * n_episodes,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {CAM: {"dtype": "video"}, "action": {"dtype": "float32"}},
    }
    time.sleep(0.002)  # info.json is the newest file, as after a writer's checkpoint
    (root / "meta/info.json").write_text(json.dumps(info))


class Counting:
    """Wraps a RemoteCatalog's request() to count requests per route."""

    def __init__(self, cat: Any) -> None:
        self.calls: list[str] = []
        real = cat.request

        def call(method: str, path: str, **kw: Any) -> Any:
            self.calls.append(f"{method} {path.rsplit('/', 1)[-1]}")
            return real(method, path, **kw)

        cat.request = call


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_push_pull_unchanged_and_list(tmp_path: Path, catalog: Catalog) -> None:
    src = tmp_path / "rec"
    write_fake(src, 2)
    (src / "videos" / CAM / "chunk-000" / "file-002.mp4.part").write_bytes(b"in progress")
    (src / "meta" / ".info.json.123.tmp").write_bytes(b"half written")
    cat = catalog.client()
    sync = RecordingSync(cat, "so101-tower", "cube-in-bowl", src, settle_s=0.01)
    res = sync.push_pass()
    assert res.committed and res.episodes == 2 and res.uploaded == 6 and res.offered == 6
    assert res.uploaded_bytes == sum(len(b) for p, b in tree(src).items()
                                     if not p.endswith((".part", ".tmp")))
    # a quiet cycle: one small request per file, nothing uploaded, no commit
    count = Counting(cat)
    res = sync.push_pass()
    assert (res.committed, res.unchanged, res.uploaded, res.note) == (False, 6, 0, "unchanged")
    assert count.calls == ["POST offer"] * 6

    out = tmp_path / "pulled"
    reader = RecordingSync(catalog.client(write=False), "so101-tower", "cube-in-bowl")
    assert reader.pull(out)[0] == 6
    want = {p: b for p, b in tree(src).items() if not p.endswith((".part", ".tmp"))}
    assert tree(out) == want
    assert reader.pull(out) == (0, 0)  # nothing moves the second time

    write_fake(src, 3, stamp=1)  # one more episode: a new video, new data and metadata
    count.calls.clear()
    res = sync.push_pass()
    assert res.committed and res.episodes == 3 and res.uploaded == 5  # video, data, 3 meta
    assert count.calls[-1] == "POST commit" and count.calls.count("POST complete") == 5
    assert reader.pull(out)[0] == 5
    assert tree(out) == {p: b for p, b in tree(src).items() if not p.endswith((".part", ".tmp"))}
    rows = list_recordings(catalog.client(write=False), "so101-tower")
    assert [(r["dataset"], r["files"], r["episodes"], r["frames"]) for r in rows] == [
        ("cube-in-bowl", 7, 3, 9)
    ]


def _post(catalog: Catalog, path: str, body: dict[str, Any], key: str | None = None) -> Any:
    return requests.post(f"{catalog.url}/v1/recordings/p/d/{path}", json=body,
                         headers={"Authorization": f"Bearer {key or catalog.write_key}"},
                         timeout=10)


def test_service_never_commits_info_naming_an_absent_video(
    tmp_path: Path, catalog: Catalog
) -> None:
    src = tmp_path / "rec"
    write_fake(src, 2)
    sync = RecordingSync(catalog.client(), "p", "d", src)
    assert sync.push_pass().committed
    write_fake(src, 3)
    files = {}
    for rel, data in tree(src).items():
        files[rel] = {"sha256": sha256_file(src / rel), "bytes": len(data)}
    # upload everything but the new video, then try to commit a snapshot without it
    new_video = f"videos/{CAM}/chunk-000/file-002.mp4"
    for rel, f in files.items():
        if rel == new_video:
            continue
        ans = _post(catalog, "offer", {"path": rel, **f}).json()
        if ans["state"] == "upload":
            sync.catalog.upload(str(src / rel), ans["upload"])
            assert _post(catalog, f"blobs/{f['sha256']}/complete", {}).status_code == 200
    without = {k: v for k, v in files.items() if k != new_video}
    r = _post(catalog, "commit", {"files": without})
    assert r.status_code == 409 and f"names 1 file(s) the commit does not hold: {new_video}" in \
        r.json()["error"]
    # naming a file it never received is refused too
    r = _post(catalog, "commit", {"files": files})
    assert r.status_code == 409 and f"does not hold 1 file(s): {new_video}" in r.json()["error"]
    # the committed snapshot is still the 2-episode one
    rows = list_recordings(catalog.client(write=False), "p")
    assert rows[0]["episodes"] == 2 and rows[0]["files"] == 6


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../b", ".hidden", "a//b", ""])
def test_service_refuses_bad_paths(catalog: Catalog, path: str) -> None:
    r = _post(catalog, "offer", {"path": path, "sha256": "0" * 64, "bytes": 1})
    assert r.status_code == 400 and "is not allowed" in r.json()["error"]


def test_auth_and_names(tmp_path: Path, catalog: Catalog) -> None:
    r = _post(catalog, "offer", {"path": "a", "sha256": "0" * 64, "bytes": 1},
              key=catalog.read_key)
    assert r.status_code == 403
    r = requests.get(f"{catalog.url}/v1/recordings/p", timeout=10)
    assert r.status_code == 401
    write_fake(tmp_path / "rec", 1)
    with pytest.raises(CatalogAuthError):
        RecordingSync(catalog.client(write=False), "p", "d", tmp_path / "rec").push_pass()
    with pytest.raises(CatalogRequestError, match="project 'Bad Project'"):
        RecordingSync(catalog.client(), "Bad Project", "d")
    with pytest.raises(CatalogError, match="HTTP 404.*no recording p/none"):
        RecordingSync(catalog.client(), "p", "none").pull(tmp_path / "x")


def test_half_applied_checkpoint_is_not_committed(tmp_path: Path, catalog: Catalog) -> None:
    src = tmp_path / "rec"
    write_fake(src, 2)
    data = src / "data/chunk-000/file-000.parquet"
    later = (src / "meta/info.json").stat().st_mtime_ns + 10**9
    os.utime(data, ns=(later, later))  # data newer than info.json: a checkpoint in progress
    sync = RecordingSync(catalog.client(), "p", "d", src, settle_s=0.01, max_repeats=2)
    res = sync.push_pass()
    assert not res.committed and res.repeats == 2 and res.offered == 0
    assert "kept moving" in res.note and "checkpoint" in res.note
    (src / "meta/info.json").touch()  # the writer finished: info.json renamed last
    os.utime(src / "meta/info.json", ns=(later + 1, later + 1))
    assert sync.push_pass().committed


def test_pull_removes_stale_info_first(tmp_path: Path, catalog: Catalog) -> None:
    src = tmp_path / "rec"
    write_fake(src, 1)
    RecordingSync(catalog.client(), "p", "d", src).push_pass()
    out = tmp_path / "out"
    (out / "meta").mkdir(parents=True)
    (out / "meta/info.json").write_text('{"total_episodes": 99}')
    reader = RecordingSync(catalog.client(write=False), "p", "d")
    calls: list[bool] = []
    real = reader.catalog.fetch_options
    assert real == {}

    import numbatraj.remote.client as rec_mod  # pulls go through RemoteCatalog.fetch_many

    fetch = rec_mod.fetch

    def spy(url: str, dest: str, **kw: Any) -> Any:
        calls.append(os.path.exists(out / "meta/info.json"))
        return fetch(url, dest, **kw)

    rec_mod.fetch = spy  # type: ignore[assignment]
    try:
        reader.pull(out)
    finally:
        rec_mod.fetch = fetch
    assert calls[0] is False  # the stale info.json was gone before the first transfer
    assert json.loads((out / "meta/info.json").read_text())["total_episodes"] == 1


def run_cli(*argv: str) -> int:
    p = argparse.ArgumentParser()
    _cli_dataset.register(p.add_subparsers(dest="command"))
    args = p.parse_args(["dataset", *argv])
    return int(args.func(args))


def test_cli_push_pull_list_with_projects_root(
    tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NUMBATRAJ_PROJECTS", raising=False)
    (tmp_path / ".env").write_text(
        f"{ENV_URL}={catalog.url}\n{ENV_KEY}={catalog.write_key}\nNUMBATRAJ_PROJECTS=elsewhere\n"
    )
    assert projects_root() == "elsewhere"
    write_fake(tmp_path / "elsewhere/so101/datasets/cube", 2)
    assert run_cli("push", "--project", "so101", "--dataset", "cube") == 0
    assert "committed 6 files" in capsys.readouterr().out
    monkeypatch.setenv("NUMBATRAJ_PROJECTS", str(tmp_path / "box2"))
    assert run_cli("pull", "--project", "so101", "--dataset", "cube") == 0
    assert tree(tmp_path / "box2/so101/datasets/cube") == tree(
        tmp_path / "elsewhere/so101/datasets/cube")
    capsys.readouterr()
    assert run_cli("list", "--project", "so101") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["dataset", "files", "bytes", "episodes", "frames"]
    assert out[1].split()[:2] == ["cube", "6"] and out[1].split()[3:] == ["2", "6"]
    assert run_cli("push", "--project", "so101", "--dataset", "nope") == 1


def test_episode_ending_mid_pass_repeats_the_pass(tmp_path: Path, catalog: Catalog) -> None:
    src = tmp_path / "rec"
    write_fake(src, 2)
    sync = RecordingSync(catalog.client(), "p", "d", src, settle_s=0.01)
    real = sync._hashes.digest_open
    hits: list[str] = []

    def digest_open(rel: str, f: Any, st: Any) -> Any:
        hits.append(rel)
        if len(hits) == 1:  # the writer checkpoints episode 3 while the pass reads
            write_fake(src, 3, stamp=7)
        return real(rel, f, st)

    sync._hashes.digest_open = digest_open  # type: ignore[method-assign]
    res = sync.push_pass()
    assert res.committed and res.repeats == 1 and res.episodes == 3
    out = tmp_path / "out"
    RecordingSync(catalog.client(write=False), "p", "d").pull(out)
    assert tree(out) == {p: b for p, b in tree(src).items()}
    assert pq.read_table(out / "data/chunk-000/file-000.parquet").column("stamp")[0].as_py() == 7


# -- watch: any failed pass is logged, redacted, and the next one runs ----------------


def test_watch_logs_a_malformed_template_and_goes_on(
    tmp_path: Path, catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "projects/lab/datasets/bad"
    write_fake(root, 2)
    info = json.loads((root / "meta/info.json").read_text())
    info["video_path"] = "videos/{video_key}/{os.environ}.mp4"
    (root / "meta/info.json").write_text(json.dumps(info))
    sync = RecordingSync(catalog.client(), "lab", "bad", root, settle_s=0.01)
    seen: list[PassResult] = []
    with caplog.at_level(logging.WARNING, logger="numbatraj.remote.recording"):
        summary = sync.watch(0.01, max_cycles=2, on_pass=seen.append)
    assert summary.cycles == 2 and len(summary.errors) == 2 and not summary.interrupted
    assert all(r.note.startswith("error: ") for r in seen)
    assert "video_path" in summary.errors[0]
    assert sum("push pass" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("exc", [
    IntegrityError("meta/info.json video_path is bad"),
    KeyError("state"),
    ValueError("boom"),
    requests.ConnectionError("url: /up?X-Amz-Signature=SECRET"),
])
def test_watch_survives_any_error_and_redacts(tmp_path: Path, catalog: Catalog, exc,
                                              monkeypatch) -> None:
    root = tmp_path / "projects/lab/datasets/ok"
    write_fake(root, 1)
    sync = RecordingSync(catalog.client(), "lab", "ok", root, settle_s=0.01)
    real = sync.push_pass
    calls = []

    def flaky() -> PassResult:
        calls.append(1)
        if len(calls) == 1:
            raise exc
        return real()

    monkeypatch.setattr(sync, "push_pass", flaky)
    summary = sync.watch(0.01, max_cycles=2)
    assert summary.cycles == 2 and len(summary.errors) == 1 and summary.commits == 1
    assert "SECRET" not in summary.errors[0]


def test_watch_still_stops_on_ctrl_c(tmp_path: Path, catalog: Catalog, monkeypatch) -> None:
    sync = RecordingSync(catalog.client(), "lab", "x", tmp_path / "x", settle_s=0.01)

    def interrupt() -> PassResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(sync, "push_pass", interrupt)
    assert sync.watch(0.01, max_cycles=3).interrupted


def test_recording_upload_error_has_no_signature(tmp_path: Path, catalog: Catalog) -> None:
    root = tmp_path / "r"
    root.mkdir()
    f = root / "blob"
    f.write_bytes(b"x" * 100)
    sync = RecordingSync(catalog.client(), "lab", "r", root)
    with open(f, "rb") as fh:
        st = FileStat.of(os.fstat(fh.fileno()))
        with pytest.raises(DownloadError) as ei:
            sync._put("blob", fh, st, {"url": dead_url()})
    assert "SECRET" not in str(ei.value) and "AKIAQ" not in str(ei.value)
