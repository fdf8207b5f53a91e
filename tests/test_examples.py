"""Every script in examples/ runs, on small generated data, as a user would run it.

Some examples also run inside their feature's tests; this file makes sure none is forgotten:
a new example without an entry here fails ``test_every_example_is_listed``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# script -> extra arguments for a small run ({tmp} is a fresh directory)
SMALL_RUNS = {
    "demo.py": ["--small", "--out", "{tmp}"],
    "replay_sac_like.py": ["--steps", "1000", "--out", "{tmp}"],
    "ray_apex_like.py": ["--rows", "10000"],
    "replay_vec_env.py": ["--steps", "300", "--out", "{tmp}"],
    "replay_dreamer_like.py": ["--steps", "300", "--out", "{tmp}"],
    "assets_preflight.py": [],
    "import_d4rl.py": [],
    "import_diffusion_policy.py": [],
    "import_lafan.py": [],
    "import_lerobot.py": ["--workdir", "{tmp}"],
    "import_libero.py": ["--no-images"],
    "import_minari.py": [],
    "import_robomimic.py": [],
    "record_gymnasium.py": ["--out", "{tmp}", "--episodes", "2"],
    "record_synthetic.py": ["--workdir", "{tmp}", "--codec", "libx264"],
    "remote_roundtrip.py": ["--rows", "2000"],
    "train_act_like.py": ["--steps", "8", "--workdir", "{tmp}"],
    "train_diffusion_like.py": ["--steps", "8", "--workdir", "{tmp}"],
}


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(SMALL_RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMALL_RUNS))
def test_example_runs(script, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in SMALL_RUNS[script]]
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
