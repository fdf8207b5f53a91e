"""Acceptance: sync while a LeRobotWriter in another process records with checkpoints.

After every push pass the service's copy is pulled into a fresh directory and imported with
``import_lerobot_v3``: it must always import, with exactly the episodes completed so far, and
the service must never hold an ``info.json`` naming a video it does not have.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

pytest.importorskip("av")

from numbatraj.io.video_encode import available_encoders  # noqa: E402
from numbatraj.lerobot.read import import_lerobot_v3  # noqa: E402
from numbatraj.remote import ENV_KEY, ENV_URL  # noqa: E402
from numbatraj.remote.recording import RecordingSync  # noqa: E402
from tests.catalog.conftest import Catalog  # noqa: E402
from tests.lerobot.test_lerobot_writer_support import H, W, action_of, state_of  # noqa: E402

REPO = str(Path(__file__).resolve().parents[2])
LENGTHS = [12, 7, 15, 9, 11, 8]

WRITER = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {repo!r})
    from numbatraj.lerobot.write import LeRobotWriter
    from tests.lerobot.test_lerobot_writer_support import (
        action_of, frame_of, state_of, writer_args)
    root, lengths = sys.argv[1], json.loads(sys.argv[2])
    with LeRobotWriter(root, **writer_args(checkpoint=True, codec="libx264")) as w:
        for ep, n in enumerate(lengths):
            w.begin_episode("pick the cube")
            for j in range(n):
                frames = {{c: frame_of(i, ep, j) for i, c in enumerate(w.cameras)}}
                w.add_frame(state_of(ep, j), action_of(ep, j), frames)
                time.sleep(0.02)
            w.end_episode()
            print("ended", ep, flush=True)
            time.sleep(0.4)  # the operator resets the scene
""")

needs_x264 = pytest.mark.skipif("libx264" not in available_encoders(), reason="no libx264")


@needs_x264
def test_sync_while_recording_always_imports(tmp_path: Path, catalog: Catalog) -> None:
    root = tmp_path / "projects/lab/datasets/live"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(repo=REPO))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(root), str(LENGTHS)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    sync = RecordingSync(catalog.client(), "lab", "live", root, settle_s=0.02)
    reader = RecordingSync(catalog.client(write=False), "lab", "live")
    seen: list[int] = []
    cycle = 0
    try:
        while True:
            finished = proc.poll() is not None
            res = sync.push_pass()
            cycle += 1
            if res.episodes is not None or seen:
                out = tmp_path / f"pull-{cycle}"
                reader.pull(out)  # a fresh directory every cycle
                h5 = tmp_path / f"pull-{cycle}.h5"
                import_lerobot_v3(out, h5, height=H, width=W, show_progress=False)
                with h5py.File(h5, "r") as f:
                    ep_len = f["ep_len"][:]
                    qpos, action = f["qpos"][:], f["action"][:]
                k = len(ep_len)
                assert k >= 1 and (not seen or k >= seen[-1])
                if res.committed:
                    assert res.episodes == k
                np.testing.assert_array_equal(ep_len, LENGTHS[:k])
                want_q = np.concatenate([state_of(e, j)[None] for e in range(k)
                                         for j in range(LENGTHS[e])])
                want_a = np.concatenate([action_of(e, j)[None] for e in range(k)
                                         for j in range(LENGTHS[e])])
                np.testing.assert_array_equal(qpos, want_q)
                np.testing.assert_array_equal(action, want_a)
                seen.append(k)
                h5.unlink()
            if finished:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert seen[-1] == len(LENGTHS)  # the pass after the writer ended has every episode
    assert len(set(seen)) >= 2, seen  # some passes ran while episodes were still recorded


def test_watch_stops_cleanly_on_ctrl_c(tmp_path: Path, catalog: Catalog) -> None:
    from tests.remote.test_recording_sync import write_fake

    root = tmp_path / "projects/lab/datasets/quiet"
    write_fake(root, 2)
    code = textwrap.dedent(f"""
        import argparse, sys
        sys.path.insert(0, {REPO!r})
        from numbatraj.cli import dataset as _cli_dataset
        p = argparse.ArgumentParser()
        _cli_dataset.register(p.add_subparsers(dest="command"))
        a = p.parse_args(["dataset", "push", "--project", "lab", "--dataset", "quiet",
                          "--watch", "--every", "0.05"])
        sys.exit(a.func(a))
    """)
    env = {**os.environ, ENV_URL: catalog.url, ENV_KEY: catalog.write_key,
           "NUMBATRAJ_PROJECTS": str(tmp_path / "projects")}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    while len([x for x in lines if x.startswith("pass:")]) < 3:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        lines.append(line)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    lines += out.splitlines()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    passes = [x for x in lines if x.startswith("pass:")]
    assert "committed 6 files" in passes[0] and "unchanged" in passes[1]
    summary = [x for x in lines if x.startswith("stopped by Ctrl-C:")]
    assert summary and "1 commits, 6 files" in summary[0]
