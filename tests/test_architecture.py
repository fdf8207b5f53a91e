"""Imports point one way: io <- data <- samplers <- replay; lerobot and importers use io and data;
catalog uses io and lerobot's schema; remote uses catalog's protocol only.

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
    "importers": {"io", "data"},
    "catalog": {"io", "lerobot"},
    "remote": {"io", "data", "lerobot", "catalog"},
    "training": {"io", "data", "samplers", "replay"},
    "ray": {"io", "data", "samplers", "replay"},
    "gym": {"io", "data", "replay", "samplers"},
    # the command sits on top and may import anything; nothing below imports it
    "cli": {"io", "data", "samplers", "replay", "training", "ray", "lerobot", "importers",
            "catalog", "remote"},
}
# (layer, target) -> the only modules of target that layer may import: the service uses
# LeRobot's layout and nothing else of it; the client uses the catalog's wire protocol only
ONLY = {
    ("catalog", "lerobot"): {"numbatraj.lerobot.schema"},
    ("remote", "catalog"): {"numbatraj.catalog.protocol"},
}
# The lazy alias numbatraj.importers.import_lerobot_v3, resolved from the public package on
# first use (importers otherwise uses io and data only).
ALIASES = {("importers/__init__.py", "numbatraj.lerobot.import_lerobot_v3")}
# top-level modules any layer may use
SHARED = {"errors", "_jit", "_memops", "_pages", "_cuda", "_checks", "_version"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every numbatraj import; ``from pkg import name`` of a package
    (``from numbatraj.catalog import protocol``) counts as ``pkg.name`` too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if (PKG.parent / node.module.replace(".", "/") / "__init__.py").exists():
                found.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
    return [(ln, m) for ln, m in found if m == "numbatraj" or m.startswith("numbatraj.")]


def _within(mod: str, allowed: set[str]) -> bool:
    return any(mod == a or mod.startswith(a + ".") for a in allowed)


def _violations() -> list[str]:
    bad = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((PKG / layer).rglob("*.py")):
            for lineno, mod in _imports(path):
                parts = mod.split(".")
                target = parts[1] if len(parts) > 1 else "numbatraj"
                only = ONLY.get((layer, target))
                rel = path.relative_to(PKG).as_posix()
                if (rel, mod) in ALIASES:
                    continue
                if only is not None and target in allowed and not _within(mod, only):
                    bad.append(f"{path.relative_to(PKG.parent)}:{lineno} imports {mod} "
                               f"({layer} may use only {', '.join(sorted(only))} of {target})")
                    continue
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


@pytest.mark.parametrize(("layer", "line", "named"), [
    ("remote", "from numbatraj.catalog.db import open_db", "numbatraj.catalog.db"),
    ("remote", "from numbatraj.catalog import service", "numbatraj.catalog.service"),
    ("remote", "import numbatraj.catalog", "numbatraj.catalog "),
    ("catalog", "from numbatraj.lerobot.read import import_lerobot_v3", "numbatraj.lerobot.read"),
])
def test_checker_catches_a_restricted_import(tmp_path, monkeypatch, layer, line, named):
    fake = tmp_path / "numbatraj"
    for pkg in ("catalog", "lerobot", "remote"):
        (fake / pkg).mkdir(parents=True)
        (fake / pkg / "__init__.py").write_text("")
    ok = ("from numbatraj.catalog.protocol import check_name\n"
          "from numbatraj.catalog import protocol\n" if layer == "remote" else
          "from numbatraj.lerobot.schema import INFO_PATH\n")
    (fake / layer / "ok.py").write_text(ok)
    (fake / layer / "bad.py").write_text(line + "\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    found = _violations()
    assert len(found) == 1 and f"{layer}/bad.py:1 imports {named}" in found[0] + " ", found
    assert "may use only" in found[0]


def test_lerobot_package_imports_lightly():
    """``import numbatraj.lerobot`` (and its schema) loads neither pyarrow nor PyAV; the
    public names resolve on first use."""
    code = (
        "import sys, numbatraj.lerobot as L, numbatraj.lerobot.schema\n"
        "print(sorted(m for m in ('pyarrow', 'av') if m in sys.modules))\n"
        "print(all(callable(getattr(L, n)) for n in L.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_importers_alias_is_the_lerobot_import():
    import numbatraj.importers as imp
    import numbatraj.lerobot as lr

    assert imp.import_lerobot_v3 is lr.import_lerobot_v3


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


# ------------------------------------------------------------------ the module graph
# Every import counts, wherever it sits: inside functions and under `if TYPE_CHECKING:` too.
# A circle is broken with a Protocol, a method or a moved function, never by hiding it.


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(mod: str, known: set[str]) -> str | None:
    """The longest known module that ``mod`` names (``numbatraj.a.b.Name`` -> ``numbatraj.a.b``)."""
    parts = mod.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in known:
            return cand
        parts.pop()
    return None


def _edges(root: Path) -> dict[str, list[tuple[int, str, str]]]:
    """module -> [(line, imported module, imported name or '')] for imports of the package."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    known = set(files)
    out: dict[str, list[tuple[int, str, str]]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        found: list[tuple[int, str, str]] = []
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")
                    base = base if is_pkg else base[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                if mod != "numbatraj" and not mod.startswith("numbatraj."):
                    continue
                for a in node.names:
                    sub = f"{mod}.{a.name}"
                    if sub in known:  # `from numbatraj.x import submodule`
                        found.append((node.lineno, sub, ""))
                    else:
                        target = _resolve(mod, known)
                        if target is not None:
                            found.append((node.lineno, target, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "numbatraj" or a.name.startswith("numbatraj."):
                        target = _resolve(a.name, known)
                        if target is not None:
                            found.append((node.lineno, target, ""))
        out[name] = found
    return out


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


#: top-level private modules every package shares (they are the package's own plumbing)
SHARED_PRIVATE = {"_jit", "_memops", "_pages", "_cuda", "_checks", "_version"}


def _private_violations(root: Path) -> list[str]:
    bad = []
    for mod, found in _edges(root).items():
        home = _package_of(mod)
        for lineno, target, name in found:
            there = _package_of(target)
            private_name = name.startswith("_") and not name.startswith("__")
            if there == home or (there in SHARED_PRIVATE and not private_name):
                continue
            private_mod = any(p.startswith("_") and not p.startswith("__")
                              for p in target.split(".")[1:])
            if private_mod or private_name:
                what = f"{target}.{name}" if name else target
                bad.append(f"{mod}:{lineno} imports {what} (private to {there or 'numbatraj'})")
    return bad


def _cycles(root: Path) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: sorted({t for _, t, _ in found if t != m}) for m, found in _edges(root).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


def test_no_import_of_another_packages_private_names():
    assert _private_violations(PKG) == []


def test_no_import_cycles():
    assert _cycles(PKG) == []


def test_graph_checks_catch_violations(tmp_path):
    fake = tmp_path / "numbatraj"
    for d in ("a", "b"):
        (fake / d).mkdir(parents=True)
        (fake / d / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "a" / "x.py").write_text(
        "def f():\n    from numbatraj.b.y import g\n"  # inside a function: still counts
    )
    (fake / "b" / "y.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from numbatraj.a import x\n"
        "from numbatraj.a._impl import helper\nfrom numbatraj.a.x import _hidden\n"
    )
    (fake / "a" / "_impl.py").write_text("")
    assert _cycles(fake) == [["numbatraj.a.x", "numbatraj.b.y"]]
    bad = _private_violations(fake)
    assert any("numbatraj.a._impl" in v for v in bad), bad
    assert any("numbatraj.a.x._hidden" in v for v in bad), bad
    assert len(bad) == 2, bad
