"""The sample store opens from a working copy; the bundled one is never written."""

from pathlib import Path

import pytest

from workbench.cli.main import bundled_sample, default_store
from workbench.store.workspace import MARKER, bundle_sha256, sample_workspace


def _bundle(tmp_path: Path) -> Path:
    b = tmp_path / "bundle"
    (b / "runs").mkdir(parents=True)
    (b / "runs" / "r1.parquet").write_bytes(b"one")
    (b / "roster.toml").write_text("[roles]\n")
    return b


def test_copy_is_made_once_and_kept(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    first = sample_workspace(bundle, tmp_path / "state")
    assert (first / "runs" / "r1.parquet").read_bytes() == b"one"
    (first / "incidents").mkdir()
    (first / "incidents" / "INC-1.json").write_text("{}")
    again = sample_workspace(bundle, tmp_path / "state")
    assert again == first and (again / "incidents" / "INC-1.json").read_text() == "{}"
    assert sorted(p.name for p in bundle.rglob("*")) == ["r1.parquet", "roster.toml", "runs"]


def test_new_bundle_refreshes_data_and_keeps_incidents(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    ws = sample_workspace(bundle, tmp_path / "state")
    (ws / "incidents").mkdir()
    (ws / "incidents" / "INC-1.json").write_text('{"v": 1}')
    (bundle / "runs" / "r1.parquet").write_bytes(b"two")
    ws2 = sample_workspace(bundle, tmp_path / "state")
    assert (ws2 / "runs" / "r1.parquet").read_bytes() == b"two"
    assert (ws2 / "incidents" / "INC-1.json").read_text() == '{"v": 1}'
    assert (ws2 / MARKER).read_text() == bundle_sha256(bundle)
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["sample"]


def test_unwritable_state_is_a_one_line_error(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(Exception, match="cannot prepare the sample store"):
        sample_workspace(bundle, blocker / "state")


def test_default_store_is_a_copy_of_the_bundled_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    store = default_store()
    assert store == tmp_path / "home" / "sample"
    assert store.resolve() != bundled_sample().resolve()
    assert sorted(p.name for p in (store / "runs").iterdir()) == sorted(
        p.name for p in (bundled_sample() / "runs").iterdir()
    )
