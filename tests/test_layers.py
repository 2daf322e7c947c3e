"""DESIGN §3: imports only point down; accel/ is numpy only; only workbench/tui imports textual."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
            found.add(node.module)
    return found


def _files(folder: str) -> list[Path]:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}"
    return files


def _stdlib() -> set[str]:
    import sys

    return set(sys.stdlib_module_names)


@pytest.mark.parametrize("path", _files("accel"), ids=lambda p: str(p.relative_to(ROOT)))
def test_accel_imports_numpy_only(path: Path) -> None:
    third_party = {m.split(".")[0] for m in _imports(path)} - _stdlib() - {"accel", "numpy"}
    assert not third_party, f"{path.name} imports {sorted(third_party)}"


@pytest.mark.parametrize(
    "path",
    [p for p in _files("workbench") if "tui" not in p.relative_to(ROOT / "workbench").parts[:1]],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_only_tui_imports_textual(path: Path) -> None:
    """textual and its own packages (textual_serve, textual_plotext...)."""
    tops = {m.split(".")[0] for m in _imports(path)}
    textual = {t for t in tops if t == "textual" or t.startswith("textual_")}
    assert not textual, f"{path} imports {sorted(textual)}"


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("workbench/store", {"workbench.triage", "workbench.cli", "workbench.tui"}),
        ("workbench/triage", {"workbench.cli", "workbench.tui"}),
        ("workbench/cli", {"workbench.tui.app"}),
    ],
)
def test_layers_point_down(folder: str, forbidden: set[str]) -> None:
    for path in _files(folder):
        mods = _imports(path)
        bad = {m for m in mods for f in forbidden if m == f or m.startswith(f + ".")}
        assert not bad, f"{path} imports upward: {sorted(bad)}"


WEB_SERVER = ROOT / "workbench" / "tui" / "web_server.py"


@pytest.mark.parametrize(
    "path",
    [p for p in _files("workbench") if p != WEB_SERVER],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_only_the_web_server_imports_its_libraries(path: Path) -> None:
    """textual-serve and aiohttp stay in tui/web_server.py (the CLI imports it inside run())."""
    top = {m.split(".")[0] for m in _imports(path)}
    assert not top & {"textual_serve", "aiohttp"}, f"{path} imports the web server's libraries"


def test_web_server_runs_the_app_as_a_command() -> None:
    """tui/web_server.py starts `python -m workbench` per session; it never imports the app."""
    mods = _imports(WEB_SERVER)
    assert "textual_serve" in {m.split(".")[0] for m in mods}  # the module the rule is about
    assert not {m for m in mods if m.split(".")[0] == "textual" or m.startswith("workbench")}


def test_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import polars\nfrom textual.app import App\nfrom textual_serve import x\n")
    assert {"polars", "textual", "textual.app", "textual_serve"} <= _imports(bad)
