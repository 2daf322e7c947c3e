"""examples/triage_the_sample.ipynb run by a real Jupyter kernel (ipykernel on this interpreter,
through nbclient) on a copy of the bundled sample store: every cell runs, the outputs tell the
sample's known incident, and the store is byte for byte as before."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from ingest_helpers import store_hash
from workbench.cli.main import bundled_sample

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "triage_the_sample.ipynb"
KERNEL = "workbench-test"
CELL_TIMEOUT_S = 300  # a bound for a hung kernel, not a speed check


def _kernel_dir(tmp: Path, env: dict[str, str]) -> Path:
    """A kernelspec that starts ipykernel on this very interpreter (the project's venv), with
    the environment the notebook reads."""
    spec = tmp / "kernels" / KERNEL
    spec.mkdir(parents=True)
    doc = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "workbench test kernel",
        "language": "python",
        "env": env,
    }
    (spec / "kernel.json").write_text(json.dumps(doc), encoding="utf-8")
    return spec.parent


def _text(cell: Any) -> str:
    """Everything a code cell showed: its stdout and its results' plain text and HTML (a
    frame's plain text wraps its cells; its HTML keeps each value whole)."""
    parts: list[str] = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.extend(out.data.get(kind, "") for kind in ("text/plain", "text/html"))
    return "\n".join(parts)


def _cell(nb: Any, starts: str) -> Any:
    found = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts)]
    assert len(found) == 1, f"no single cell starts with {starts!r}"
    return found[0]


def test_the_committed_notebook_holds_no_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    assert all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.fixture()
def executed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, dict[str, str], dict[str, str]]:
    """The notebook after a real kernel ran it on a copy of the sample; hashes before, after."""
    store = tmp_path / "store"
    shutil.copytree(bundled_sample(), store)
    env = {"WORKBENCH_STORE": str(store), "WORKBENCH_HOME": str(tmp_path / "home")}
    # The kernel's connection file and IPython's profile stay in the test's folder.
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    specs = KernelSpecManager(kernel_dirs=[str(_kernel_dir(tmp_path, env))])
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    before = store_hash(store)
    work = tmp_path / "cwd"
    work.mkdir()
    client = NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(work)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    return nb, before, store_hash(store)


def test_notebook_runs_on_a_real_kernel_and_tells_the_known_incident(
    executed: tuple[Any, dict[str, str], dict[str, str]],
) -> None:
    nb, before, after = executed
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]

    runs = _text(_cell(nb, "import os"))
    assert "shape: (7, 7)" in runs  # the sample's seven runs, the seven columns selected
    for rid in ("failing", "comparator", "fixed-metadata", "candidate-rollback"):
        assert f"<td>&quot;{rid}&quot;</td>" in runs

    verdict = _text(_cell(nb, "cmp = ws.compare"))
    assert verdict.startswith("Verdict(")
    for field in (
        "outcome='regression'",
        "triggered=True",
        "origin_stage='lowering'",
        "manifest_stage='execution'",
        "mechanism='fusion_memory_burst'",
        "n_failing=240",
        "n_comparator=6000",
    ):
        assert field in verdict

    # Tail first: the p99 rows of the latency and the five stages and other.
    assert "shape: (7, 8)" in _text(_cell(nb, "p99 = cmp.stages"))
    drivers = _text(_cell(nb, "cmp.tail_drivers"))
    assert "<td>&quot;queueing&quot;</td>" in drivers and "n_failing_tail" in drivers
    assert "stage_quantiles" in _text(_cell(nb, "cmp.proof"))

    pair = _text(_cell(nb, "pair = cmp.request()"))
    assert re.match(r"r\d+ vs r\d+ ", pair)
    assert "shape: (7, 4)" in pair  # latency, five stages, other

    last = _text(_cell(nb, "doc = cmp.to_json()"))
    assert last == "lowering -> execution fusion_memory_burst\n"

    assert after == before  # the notebook computed; it wrote nothing
