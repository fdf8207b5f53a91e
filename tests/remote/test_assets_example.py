"""examples/assets_preflight.py: the demo runs on 127.0.0.1; a failing tree exits 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "assets_preflight.py"


def test_demo_pulls_then_moves_nothing() -> None:
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sum(x.startswith("pulled   ") for x in lines) == 2
    second = lines[lines.index("-- second pull (nothing moves)") + 1:]
    assert sum(x.startswith("present  ") for x in second) == 2
    assert "status   arm@v1: present" in lines and out.stderr == ""


def test_preflight_fails_listing_the_bad_pack(tmp_path: Path) -> None:
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "assets.kv").write_text(
        "pack=meshes@v1\nprovider=https\nurl=http://127.0.0.1:9/none.tar.zst\n"
        f"sha256={'0' * 64}\nbytes=10\n"
    )
    out = subprocess.run([sys.executable, str(EXAMPLE), "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1
    assert "assets.kv:1: dest: missing" in out.stderr and "preflight FAILED: 1" in out.stderr
