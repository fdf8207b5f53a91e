"""examples/remote_roundtrip.py runs end to end on 127.0.0.1 (as CI would run it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "remote_roundtrip.py"


def test_remote_roundtrip_example() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--rows", "2000"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "reopened and verified 3 columns, 2000 rows" in out.stdout
    assert "0 bytes moved" in out.stdout


def test_remote_mode_says_it_needs_a_service(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(EXAMPLE.parents[1])}
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--remote"], capture_output=True, text=True,
        timeout=120, check=False, cwd=tmp_path, env=env,
    )
    assert out.returncode == 2
    assert "needs a running catalog service" in out.stderr
    assert "NUMBATRAJ_CATALOG_URL is not set" in out.stderr
