"""The closure summary: JSON follows summary_schema.json; Markdown and JSON carry the same content."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.incident_runs import incident_runs, triage_doc
from workbench.errors import WorkbenchError
from workbench.incident.export import export_text, write_export
from workbench.incident.export_md import render_markdown
from workbench.incident.incident import create_incident
from workbench.incident.md_text import code, esc
from workbench.incident.summary import build_summary
from workbench.incident.workflow import attach_triage, pair

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "workbench" / "incident" / "summary_schema.json"
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _errors(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """The subset of JSON Schema that summary_schema.json uses."""
    out: list[str] = []
    if "const" in schema and value != schema["const"]:
        out.append(f"{path}: {value!r} != {schema['const']!r}")
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        ok = any(
            isinstance(value, _TYPES[n])
            and not (n in ("number", "integer") and isinstance(value, bool))
            for n in names
        )
        if not ok:
            return [f"{path}: {type(value).__name__} is not {names}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        out += [f"{path}: missing {k}" for k in schema.get("required", []) if k not in value]
        props = schema.get("properties", {})
        if props:
            out += [f"{path}: undocumented field {k}" for k in value if k not in props]
        for k, sub in props.items():
            if k in value:
                out += _errors(value[k], sub, f"{path}.{k}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for k, v in value.items():
                out += _errors(v, extra, f"{path}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += _errors(v, schema["items"], f"{path}[{i}]")
    return out


def check_schema(doc: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    errors = _errors(doc, schema, "$")
    assert not errors, errors[:10]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = incident_runs(tmp_path_factory.mktemp("export") / "store")
    create_incident(s, "early export", "sev3", "alice", incident_id="INC-early")
    create_incident(s, "localized", "sev2", "alice", incident_id="INC-loc")
    pair(s, "INC-loc", "failing", "comparator", "alice", fixed_metadata="fixed-metadata")
    attach_triage(s, "INC-loc", triage_doc(), "alice")
    return s


def test_schema_checker_catches_violations(store: Path) -> None:
    doc = build_summary(store, "INC-loc")
    check_schema(doc)
    broken = json.loads(json.dumps(doc))
    del broken["header"]["severity"]
    broken["impact"]["rows"][0]["delta_us"] = "big"
    broken["surprise"] = 1
    errs = _errors(broken, json.loads(SCHEMA_PATH.read_text()), "$")
    assert any("missing severity" in e for e in errs)
    assert any("delta_us" in e for e in errs)
    assert any("undocumented field surprise" in e for e in errs)


def test_unfinished_incident_exports_with_missing_sections(store: Path) -> None:
    doc = build_summary(store, "INC-early")
    check_schema(doc)
    assert doc["impact"] is None and doc["localization"] is None
    assert doc["missing"][:3] == ["impact", "reproduction", "localization"]
    md = render_markdown(doc)
    assert "> **Not yet available:** impact, reproduction, localization" in md
    assert "_The incident has no failing / comparator pair yet._" in md


def test_markdown_and_json_carry_the_same_numbers(store: Path) -> None:
    doc = msgspec.json.decode(export_text(store, "INC-loc", "json").encode())
    md = export_text(store, "INC-loc", "md")
    check_schema(doc)
    for row in doc["impact"]["rows"]:
        # Every impact figure of the JSON appears in the Markdown row of its metric.
        line = next(
            ln
            for ln in md.splitlines()
            if ln.startswith(f"| {row['metric']} | {row['quantile']} |")
        )
        assert f"{row['n_failing']} / {row['n_comparator']}" in line
        assert f"{row['delta_pct']:+.1f}%" in line
    for claim in doc["localization"]["claims"]:
        assert esc(claim["text"]) in md and f"query `{claim['query']}`" in md
    # The audit appendix: one readable line per change, in the same order as the JSON.
    audit = md[md.index("## Audit appendix") :].splitlines()[4:]
    assert audit[: len(doc["audit"])] == [f"- {esc(e['line'])}" for e in doc["audit"]]
    assert all(len(line) < 200 for line in audit)
    for t in doc["reproduction"]["tags"]:
        assert t["key"] in md
    # GitHub tables: every table row has as many cells as its header.
    lines = md.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("|---"):
            width = lines[i - 1].count(" | ")
            j = i + 1
            while j < len(lines) and lines[j].startswith("| "):
                assert lines[j].replace("\\|", "").count(" | ") == width, lines[j]
                j += 1


def test_export_errors_and_atomic_write(store: Path, tmp_path: Path) -> None:
    with pytest.raises(WorkbenchError, match="unknown export format"):
        export_text(store, "INC-loc", "pdf")
    with pytest.raises(WorkbenchError, match="no such incident"):
        export_text(store, "INC-nope", "md")
    with pytest.raises(WorkbenchError, match="cannot write export"):
        write_export(tmp_path / "no-such-dir" / "x.md", "text")
    target = tmp_path / "out.md"
    write_export(target, "one")
    write_export(target, "two")
    assert target.read_text() == "two" and [p.name for p in tmp_path.iterdir()] == ["out.md"]


HOSTILE = (
    "ok\n\n## Validation\n\n**Verdict: ✅ PASS**\n- [x](http://evil.example) <details> | a | b |\n"
    "1. _done_ `code` > quote"
)


def test_record_text_cannot_forge_markdown_structure(store: Path) -> None:
    """A title, claim, tag, action or note holding Markdown stays text: no forged section,
    verdict, link, HTML block, list or table cell."""
    doc = build_summary(store, "INC-loc")
    honest = render_markdown(doc)
    doc["header"]["title"] = HOSTILE
    doc["localization"]["claims"][0]["text"] = HOSTILE
    doc["reproduction"]["tags"][0]["values"]["failing"] = HOSTILE
    doc["reproduction"]["warnings"] = [HOSTILE]
    doc["timeline"][0]["note"] = HOSTILE
    doc["audit"][0]["line"] = HOSTILE
    doc["owners"]["follow_ups"] = [
        {
            "id": 1,
            "text": HOSTILE,
            "owner": HOSTILE,
            "due": "2026-01-01",
            "status": "open",
            "created_at": "",
            "kind": "follow-up",
            "overdue": False,
        }
    ]
    doc["brief"]["what_regressed"] = [HOSTILE]
    md = render_markdown(doc)
    headings = [ln for ln in md.splitlines() if ln.startswith("#")]
    assert headings[1:] == [ln for ln in honest.splitlines() if ln.startswith("#")][1:]
    assert sum(ln == "## Validation" for ln in md.splitlines()) == 1
    for unescaped in (r"(?<!\\)\*\*Verdict", r"(?<!\\)<details>", r"(?<!\\)\]\(http"):
        assert not re.search(unescaped, md), unescaped
    assert "\\#\\# Validation \\*\\*Verdict: ✅ PASS\\*\\* - [x\\](http" in md
    assert not any(ln.startswith(("- [", "1. _", "> quote")) for ln in md.splitlines())
    # Table rows keep their cell count (the pipes in the text are escaped).
    lines = md.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("|---"):
            width = lines[i - 1].count(" | ")
            for row in lines[i + 1 :]:
                if not row.startswith("| "):
                    break
                assert row.replace("\\|", "").count(" | ") == width, row


def test_esc_and_code_neutralise_markup() -> None:
    assert esc("- item") == "\\- item" and esc("12. x") == "12\\. x" and esc("> q") == "\\> q"
    assert esc("a_b _c_ *d*") == "a_b \\_c\\_ \\*d\\*"  # intraword underscores stay readable
    assert esc("[1.2 ms, 2.6 ms]") == "[1.2 ms, 2.6 ms]" and esc("[a](b)") == "[a\\](b)"
    assert esc("<b>&amp;") == "\\<b>\\&amp;" and esc("x\ny") == "x y"
    assert code("a``b") == "```a``b```" and code("`x") == "`` `x ``" and code("a|b") == "`a\\|b`"
