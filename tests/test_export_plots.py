"""The closure summary's images (issue 36, item 4): the Markdown export of the sample incident
writes them beside itself, valid PNGs with the triage's numbers, linked by relative path and
named in the JSON; the same incident gives the same bytes; a fleet gets per-host tails, a single
run does not; a refused or failed export leaves no image folder. Real CLI, subprocesses."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from generators.fleet_synth import Member, fleet_members, write_fleet
from ingest_helpers import run_workbench, store_hash
from tests.test_export_summary import check_schema
from workbench.cli.main import bundled_sample
from workbench.errors import WorkbenchError
from workbench.incident import export
from workbench.incident.incident import load_incident
from workbench.incident.output_folder import check_folder
from workbench.incident.plot_render import FAILING, render_png
from workbench.incident.plots import IMAGE_NAMES, HostPlot, LatencyPlot, StagePlot, image_folder
from workbench.store.fleet.engine import open_engine
from workbench.store.fleet.fleet_ingest import ingest_fleet
from workbench.triage.evidence import Interval
from workbench.triage.fleet import GroupTail
from workbench.triage.numbers_text import fmt_us

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"latency": (900, 640), "stages": (900, 440)}  # 9 in wide at 100 dpi, fixed heights
HOSTILE_HOST = "rack$\\frac{7}_[x](y)"  # unbalanced mathtext, Markdown link syntax


def workbench(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_workbench(list(argv), home=home)


def ok(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    done = workbench(home, *argv)
    assert done.returncode == 0, done.stderr
    return done


def refused(home: Path, *argv: str) -> str:
    done = workbench(home, *argv)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, (done.returncode, done.stderr)
    return done.stderr


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the bundled sample store holding its incident, paired and triaged."""
    base = tmp_path_factory.mktemp("plots-sample")
    store = base / "store"
    shutil.copytree(bundled_sample(), store, ignore=shutil.ignore_patterns("incidents"))
    home = base / "home"
    ok(home, "incident", "new", "--title", "p99 after compiler 2.5.0", "--id", "INC-plots",
       "--failing", "failing", "--comparator", "comparator", "--fixed-metadata",
       "fixed-metadata", "--store", str(store))  # fmt: skip
    ok(home, "triage", "--failing", "failing", "--comparator", "comparator", "--incident",
       "INC-plots", "--store", str(store))  # fmt: skip
    ok(home, "incident", "new", "--title", "not triaged", "--id", "INC-bare", "--failing",
       "failing", "--comparator", "comparator", "--store", str(store))  # fmt: skip
    return store


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_png(path: Path, size: tuple[int, int] | None = None) -> None:
    """A valid PNG of the expected size that shows the failing run's colour."""
    with Image.open(path) as img:
        assert img.format == "PNG"
        img.verify()
    with Image.open(path) as img:
        img.load()
        if size is not None:
            assert img.size == size, (path.name, img.size)
        rgb = img.convert("RGB")
        colours = {c for _, c in rgb.getcolors(maxcolors=1 << 20) or []}
    assert len(colours) > 20, path.name  # drawn on, not blank
    failing = tuple(int(FAILING[i : i + 2], 16) for i in (1, 3, 5))
    assert failing in colours, path.name


def linked(md: str, path: str) -> bool:
    return re.search(r"!\[[^\]\n]+\]\(" + re.escape(path) + r"\)", md) is not None


def test_sample_export_writes_links_and_names_its_images(sample: Path, tmp_path: Path) -> None:
    before = store_hash(sample)
    home = tmp_path / "home"
    ok(home, "export", "--incident", "INC-plots", "--store", str(sample))
    exports = home / "exports"
    md = (exports / "INC-plots.md").read_text(encoding="utf-8")
    folder = exports / "INC-plots.files"
    assert sorted(p.name for p in folder.iterdir()) == ["latency.png", "stages.png"]
    for kind, size in SIZES.items():
        check_png(folder / f"{kind}.png", size)
        assert linked(md, f"INC-plots.files/{kind}.png"), kind
    assert "hosts.png" not in md  # one host: no per-host image, and no link to one
    assert md.index("## Impact") < md.index("## Plots") < md.index("## Reproduction")

    ok(home, "export", "--incident", "INC-plots", "--format", "json", "--store", str(sample))
    doc = json.loads((exports / "INC-plots.json").read_text(encoding="utf-8"))
    check_schema(doc)
    assert [(p["kind"], p["path"]) for p in doc["plots"]] == [
        ("latency", "INC-plots.files/latency.png"),
        ("stages", "INC-plots.files/stages.png"),
    ]
    for p in doc["plots"]:
        assert (exports / p["path"]).is_file()  # relative to the export, as the Markdown links
        assert p["title"].split(";")[0] in md
    # The numbers in the titles are the triage's, with their n.
    triage = load_incident(sample, "INC-plots").triage
    row = next(r for r in triage["stages"] if r["id"] == "latency")
    latency = doc["plots"][0]["title"]
    assert latency.startswith(
        f"End-to-end p99 {fmt_us(row['failing']['p99']['value'])} vs "
        f"{fmt_us(row['comparator']['p99']['value'])}: "
    )
    assert f"n={row['n_failing']} / {row['n_comparator']}" in latency
    share = triage["explained_share_by_stage"]["lowering"]["p99"]
    assert f"most lowering, {100 * share:.1f}%" in doc["plots"][1]["title"]
    assert store_hash(sample) == before

    # Re-export: the same bytes, and the folder holds this export's images only.
    first = {p.name: sha(p) for p in folder.iterdir()}
    (folder / "hosts.png").write_bytes(b"stale image of an earlier export")
    ok(home, "export", "--incident", "INC-plots", "--store", str(sample))
    assert {p.name: sha(p) for p in folder.iterdir()} == first
    assert sorted(p.name for p in exports.iterdir()) == [
        "INC-plots.files",
        "INC-plots.json",
        "INC-plots.md",
    ]  # no temporary folder left beside them
    assert store_hash(sample) == before


def test_no_images_without_a_file_or_without_triage(sample: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = ok(home, "export", "--incident", "INC-plots", "-o", "-", "--store", str(sample)).stdout
    assert "## Plots" not in out and ".files/" not in out
    assert not home.exists()
    # A paired incident the triage has not looked at has no figures to draw.
    target = tmp_path / "bare.md"
    ok(home, "export", "--incident", "INC-bare", "-o", str(target), "--store", str(sample))
    assert "## Plots" not in target.read_text(encoding="utf-8")
    assert not (tmp_path / "bare.files").exists()


def test_refused_targets_leave_no_image_folder(sample: Path, tmp_path: Path) -> None:
    before = store_hash(sample)
    home = tmp_path / "home"
    argv = ("export", "--incident", "INC-plots", "--store", str(sample), "-o")
    (tmp_path / "taken.md").write_text("mine", encoding="utf-8")
    assert "exists; add --force" in refused(home, *argv, str(tmp_path / "taken.md"))
    assert "inside the store" in refused(home, *argv, str(sample / "s.md"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link.files").symlink_to(tmp_path / "elsewhere")
    assert "link.files: is a symbolic link" in refused(home, *argv, str(tmp_path / "link.md"))
    os.mkfifo(tmp_path / "fifo.files")
    assert "fifo.files: is not a folder" in refused(home, *argv, str(tmp_path / "fifo.md"))
    (tmp_path / "own.files").mkdir()
    (tmp_path / "own.files" / "notes.txt").write_text("keep me", encoding="utf-8")
    err = refused(home, *argv, str(tmp_path / "own.md"), "--force")
    assert "holds 'notes.txt', not only an export's images" in err
    (tmp_path / "kept.files").mkdir()
    assert "kept.files: exists; add --force" in refused(home, *argv, str(tmp_path / "kept.md"))

    assert (tmp_path / "taken.md").read_text(encoding="utf-8") == "mine"
    assert not (tmp_path / "taken.files").exists() and not (sample / "s.files").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert os.listdir(tmp_path / "own.files") == ["notes.txt"]
    assert list((tmp_path / "kept.files").iterdir()) == []
    for name in ("link.md", "fifo.md", "own.md", "kept.md"):
        assert not (tmp_path / name).exists(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder
    assert store_hash(sample) == before


def test_a_failed_write_keeps_the_old_images(
    sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Markdown write failing after the images are in place puts the earlier ones back."""
    target = tmp_path / "s.md"
    export.export_file(target, sample, "INC-plots", "md", replace=False)
    folder = tmp_path / "s.files"
    (folder / "latency.png").write_bytes(b"earlier")
    md = target.read_bytes()

    def full_disk(*_args: object, **_kw: object) -> None:
        raise WorkbenchError(str(target), "cannot write export: no space left on device")

    monkeypatch.setattr(export, "write_export", full_disk)
    for path in (target, tmp_path / "new.md"):
        with pytest.raises(WorkbenchError, match="no space left"):
            export.export_file(path, sample, "INC-plots", "md", replace=True)
    assert (folder / "latency.png").read_bytes() == b"earlier" and target.read_bytes() == md
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.files", "s.md"]


def test_the_image_folder_is_named_after_the_export_and_never_holds_the_store(
    tmp_path: Path,
) -> None:
    assert image_folder(tmp_path / "INC-1.md") == tmp_path / "INC-1.files"
    assert image_folder(tmp_path / "notes") == tmp_path / "notes.files"
    assert image_folder(tmp_path / "y.files") == tmp_path / "y.files.files"  # never itself
    store = tmp_path / "a.files" / "store"
    store.mkdir(parents=True)
    for folder in (tmp_path / "a.files", store, store / "runs.files"):
        with pytest.raises(WorkbenchError, match="inside the store"):
            check_folder(folder, store, True, IMAGE_NAMES)
    assert store.is_dir() and not (store / "runs.files").exists()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two fleets of 4 hosts x 2 ranks: `canary`, whose slowed host has a hostile name, and
    `base`; an incident on the pair, triaged by the real CLI."""
    src = tmp_path_factory.mktemp("plots-fleet-src")
    members = fleet_members(4, 2, slow_hosts=(2,), slow=6.0)
    members = [Member(HOSTILE_HOST, m.rank, m.driver, m.slow) if m.slow > 1 else m for m in members]
    write_fleet(src / "canary", members, requests=120, ops=3, seed=1)
    write_fleet(src / "base", fleet_members(4, 2), requests=120, ops=3, seed=2)
    store = tmp_path_factory.mktemp("plots-fleet") / "store"
    with open_engine(workers=1) as eng:
        for run_id in ("canary", "base"):
            ingest_fleet(store, [str(src / run_id)], run_id=run_id, engine=eng)
    home = store.parent / "home"
    ok(home, "incident", "new", "--title", "fleet p99", "--id", "INC-fleet", "--failing",
       "canary", "--comparator", "base", "--store", str(store))  # fmt: skip
    ok(home, "triage", "--failing", "canary", "--comparator", "base", "--incident",
       "INC-fleet", "--store", str(store))  # fmt: skip
    return store


def test_fleet_export_adds_per_host_tails(fleet: Path, tmp_path: Path) -> None:
    before = store_hash(fleet)
    target = tmp_path / "fleet summary.md"  # a space: the link is percent-encoded
    home = tmp_path / "home"
    ok(home, "export", "--incident", "INC-fleet", "-o", str(target), "--store", str(fleet))
    folder = tmp_path / "fleet summary.files"
    assert sorted(p.name for p in folder.iterdir()) == ["hosts.png", "latency.png", "stages.png"]
    md = target.read_text(encoding="utf-8")
    for name in ("latency", "stages", "hosts"):
        check_png(folder / f"{name}.png", SIZES.get(name))
        assert linked(md, f"fleet%20summary.files/{name}.png"), name
    with Image.open(folder / "hosts.png") as img:
        assert img.size == (900, 360)  # 4 hosts: the smallest height
    json_out = tmp_path / "fleet summary.json"
    ok(home, "export", "--incident", "INC-fleet", "--format", "json", "-o", str(json_out),
       "--store", str(fleet))  # fmt: skip
    doc = json.loads(json_out.read_text(encoding="utf-8"))
    check_schema(doc)
    hosts = doc["plots"][-1]
    assert hosts["kind"] == "hosts" and hosts["path"] == "fleet summary.files/hosts.png"
    assert hosts["title"].startswith(f"p99 by host, 4 hosts: highest {HOSTILE_HOST} ")
    # In the Markdown the host name stays text: its backslash escaped, no link formed.
    assert not re.search(r"(?<!\\)\\frac", md) and not re.search(r"(?<!\\)\]\(y\)", md)
    assert store_hash(fleet) == before


def test_hostile_text_and_missing_intervals_render_the_same_bytes() -> None:
    """`$`, braces and backslashes in ids are text, not mathtext; a NaN bound draws no bar."""
    rng = np.random.default_rng(0)
    nan = math.nan
    q = {"p95": Interval(900.0, nan, nan), "p99": Interval(2000.0, 1500.0, 2600.0)}
    latency = LatencyPlot(
        "$a^{", "b$\\", rng.lognormal(6, 1, 300), rng.lognormal(6, 0.5, 300), 300, 300, q, q, q
    )
    shares: list[tuple[str, float | None, float | None]] = [
        ("ingress", None, 0.1),
        ("lowering", 0.9, -0.05),
    ]
    stages = StagePlot(shares, "lowering", "execution", Interval(100.0, 20.0, nan), 300, 300)
    tail = GroupTail(HOSTILE_HOST * 5, 40, q["p99"], q["p99"])
    hosts = HostPlot("$x", None, [tail], 1, {}, (40, q["p99"]), None)
    plots: list[LatencyPlot | StagePlot | HostPlot] = [latency, stages, hosts]
    for p in plots:
        first = render_png(p)
        assert first[:8] == b"\x89PNG\r\n\x1a\n" and render_png(p) == first
        assert b"Software" not in first  # no matplotlib version stamped into the file
