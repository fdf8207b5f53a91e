"""Imports point one way: io <- data <- samplers <- replay; importers and remote use io and data.

Checked statically on the source (every `import numbatraj.X` / `from numbatraj.X import`), and
`import numbatraj` must not import the CUDA target.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "numbatraj"

# layer -> layers it may import (besides itself and the top-level private helpers)
ALLOWED = {
    "io": set(),
    "data": {"io"},
    "samplers": {"io", "data"},
    "replay": {"io", "data", "samplers"},
    "lerobot": {"io", "data"},
    "importers": {"io", "data", "lerobot"},
    "remote": {"io", "data", "lerobot"},
}
# top-level modules any layer may use
SHARED = {"errors", "_jit", "_cuda", "_checks", "_version"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
    return [(ln, m) for ln, m in found if m == "numbatraj" or m.startswith("numbatraj.")]


def _violations() -> list[str]:
    bad = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((PKG / layer).rglob("*.py")):
            for lineno, mod in _imports(path):
                parts = mod.split(".")
                target = parts[1] if len(parts) > 1 else "numbatraj"
                if target == layer or target in SHARED or target in allowed:
                    continue
                bad.append(f"{path.relative_to(PKG.parent)}:{lineno} imports {mod} ({layer} may not)")
    return bad


def test_layers_import_one_way():
    assert _violations() == []


def test_checker_catches_a_violation(tmp_path, monkeypatch):
    fake = tmp_path / "numbatraj"
    (fake / "io").mkdir(parents=True)
    (fake / "io" / "bad.py").write_text("from numbatraj.data.store import TrajectoryStore\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    assert any("io/bad.py:1 imports numbatraj.data.store" in v for v in _violations())


@pytest.mark.parametrize("module", ["numbatraj", "numbatraj.io", "numbatraj.data"])
def test_import_does_not_load_cuda(module):
    code = f"import sys, {module}; print('numba.cuda' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importers_exports_resolve():
    import numbatraj.importers as imp

    for name in imp.__all__:
        assert callable(getattr(imp, name)), name


def test_top_level_exports_resolve_without_cuda():
    code = (
        "import sys, numbatraj\n"
        "missing = [n for n in numbatraj.__all__ if getattr(numbatraj, n, None) is None]\n"
        "print(missing, 'numba.cuda' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] False"
