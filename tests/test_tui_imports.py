"""The first screen must not wait for the data stack: heavy imports live inside workers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

TUI = Path(__file__).resolve().parents[1] / "workbench" / "tui"
HEAVY = ("duckdb", "polars", "pyarrow", "numpy")
# Modules that import the data stack themselves (store, triage, incident and sample layers).
HEAVY_OURS = (
    "workbench.store",
    "workbench.triage",
    "workbench.incident",
    "workbench.sample",
    "accel",
)


def _top_level_imports(path: Path) -> list[str]:
    """Imports executed when the module is imported (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append(node.module)
            elif isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return found


@pytest.mark.parametrize("path", sorted(TUI.rglob("*.py")), ids=lambda p: str(p.relative_to(TUI)))
def test_no_data_stack_at_module_level(path: Path) -> None:
    heavy = [
        m for m in _top_level_imports(path) if m.split(".")[0] in HEAVY or m.startswith(HEAVY_OURS)
    ]
    assert not heavy, f"{path.name} imports {heavy} at module level; import it inside a worker"


def test_opening_the_app_loads_no_data_stack() -> None:
    code = (
        "import sys\n"
        "import workbench.cli.main, workbench.tui.launch, workbench.tui.app\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"importing the app loaded {out}"


def test_a_cold_runs_list_loads_duckdb_only(tmp_path: Path) -> None:
    # The app's first start on a store (no runs cache) reads the runs list with duckdb; pyarrow
    # and numpy cost more import time than the query and must wait for a screen that needs them.
    store = Path(__file__).resolve().parents[1] / "sample_traces"
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from workbench.store.runs import list_runs\n"
        f"runs = list_runs(Path({str(store)!r}))\n"
        "print(len(runs), min(r.n_requests for r in runs))\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    n_runs, least = out[0].split()
    assert int(n_runs) == 7 and int(least) > 0, out
    assert out[1] == "duckdb", f"reading the runs list loaded {out[1]}"


def test_resuming_an_incident_and_a_drill_down_load_duckdb_only(tmp_path: Path) -> None:
    # The app reads the incident record while the runs list fills, and a drill-down reads
    # about a hundred rows: neither waits for pyarrow's import (saving a record may load it).
    from workbench.incident.incident import create_incident

    sample = Path(__file__).resolve().parents[1] / "sample_traces"
    store = tmp_path / "store"
    (store / "incidents").mkdir(parents=True)
    for table in ("runs", "events", "requests", "compiles"):
        (store / table).symlink_to(sample / table)
    iid = create_incident(store, "t", "sev2", "tester").id
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from workbench.tui.resume_state import resume_choice\n"
        "from workbench.tui.screens.request_screen import DrillTarget, drill\n"
        f"inc, goto = resume_choice(Path({str(tmp_path / 'state')!r}), Path({str(store)!r}))\n"
        f"f, c = drill(Path({str(store)!r}), DrillTarget('failing', 'comparator'))\n"
        "print(inc.id, goto, len(f.spans), len(c.spans))\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    got_id, goto, n_failing, n_comparator = out[0].split()
    assert (got_id, goto) == (iid, "pair") and int(n_failing) > 0 and int(n_comparator) > 0
    assert out[1] == "duckdb", f"resume and drill-down loaded {out[1]}"
