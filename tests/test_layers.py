"""DESIGN §3: imports only point down; accel/ is numpy only; only workbench/tui imports textual;
the importer packages never import each other; the product never imports the test generators;
rooms stay small and each package says what it holds."""

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


# Each floor and what it may never import. Below the store: accel. Above: triage, then
# incident (which reads triage's results), then the Python API, then cli and tui.
UPWARD = {
    "workbench/store": {
        "workbench.triage",
        "workbench.incident",
        "workbench.sample",
        "workbench.api",
        "workbench.cli",
        "workbench.tui",
    },
    "workbench/sample": {
        "workbench.triage",
        "workbench.incident",
        "workbench.api",
        "workbench.cli",
        "workbench.tui",
    },
    "workbench/triage": {"workbench.incident", "workbench.api", "workbench.cli", "workbench.tui"},
    "workbench/incident": {"workbench.api", "workbench.cli", "workbench.tui"},
    # The Python API (workbench.open) wraps store, triage and incident; cli and tui may use it.
    "workbench/api": {"workbench.cli", "workbench.tui"},
    "workbench/cli": {"workbench.tui.app"},
    # Shared by every format: never a format's own code, nor the fleet built on the importers.
    "workbench/store/columns": {"workbench.store.importers", "workbench.store.fleet"},
    "workbench/store/attribution": {"workbench.store.importers", "workbench.store.fleet"},
    "workbench/store/importers": {"workbench.store.fleet"},
    "workbench/tui/widgets": {"workbench.tui.screens", "workbench.tui.app"},
}
IMPORTERS = ROOT / "workbench" / "store" / "importers"
FORMATS = sorted(p.name for p in IMPORTERS.iterdir() if (p / "__init__.py").is_file())


def _upward(path: Path, forbidden: set[str]) -> set[str]:
    mods = _imports(path)
    return {m for m in mods for f in forbidden if m == f or m.startswith(f + ".")}


@pytest.mark.parametrize(("folder", "forbidden"), sorted(UPWARD.items()))
def test_layers_point_down(folder: str, forbidden: set[str]) -> None:
    for path in _files(folder):
        bad = _upward(path, forbidden)
        assert not bad, f"{path} imports upward: {sorted(bad)}"


def test_every_format_has_its_package() -> None:
    assert {"kineto", "nsys", "compile_log", "parquet"} <= set(FORMATS)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_importer_never_imports_another(fmt: str) -> None:
    """A format's package takes the store's schema, columns/, attribution/ and the importer seam
    (protocol, source, devices); another format's code never."""
    others = {f"workbench.store.importers.{o}" for o in FORMATS if o != fmt}
    for path in _files(f"workbench/store/importers/{fmt}"):
        bad = _upward(path, others)
        assert not bad, f"{path} imports another importer: {sorted(bad)}"


def _product_files() -> list[Path]:
    return _files("workbench") + _files("accel")


@pytest.mark.parametrize("path", _product_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_product_never_imports_the_generators(path: Path) -> None:
    """tests/generators and bench/ are support code: the installed package does not ship them."""
    tops = {m.split(".")[0] for m in _imports(path)}
    assert not tops & {"generators", "tests", "bench"}, f"{path} imports test support code"


def _packages() -> list[Path]:
    return sorted(
        p
        for top in ("workbench", "accel")
        for p in [ROOT / top, *(ROOT / top).rglob("*")]
        if p.is_dir() and (p / "__init__.py").is_file()
    )


@pytest.mark.parametrize("folder", _packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_rooms_stay_small(folder: Path) -> None:
    """A folder of more than ~25 modules flat is a package waiting to happen."""
    modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 25, f"{folder} holds {len(modules)} modules flat"


@pytest.mark.parametrize("folder", _packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_says_what_it_holds(folder: Path) -> None:
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    assert doc, f"{folder}/__init__.py has no docstring"
    assert "import" in doc.lower(), f"{folder}/__init__.py does not say what it may import"


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
    bad.write_text(
        "import polars\nfrom textual.app import App\nfrom textual_serve import x\n"
        "from workbench.store.importers.nsys.nsys_schema import y\n"
        "def f():\n    from workbench.incident import brief\n"
    )
    assert {"polars", "textual", "textual.app", "textual_serve"} <= _imports(bad)
    assert _upward(bad, {"workbench.store.importers.nsys"}) == {
        "workbench.store.importers.nsys.nsys_schema"
    }
    assert _upward(bad, UPWARD["workbench/triage"]) == {"workbench.incident"}
