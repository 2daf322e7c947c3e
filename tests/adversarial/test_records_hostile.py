"""Hostile input against the incident side of the real CLI: numbers, record files, export
targets, terminal text and closed pipes. Every refusal is one line on stderr naming its
subject, with no traceback, and leaves the store and its incidents byte-for-byte as they were."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import TIMEOUT, assert_one_line_error, cli_env, command, refused, tree_hash, workbench

from incident_runs import incident_runs, triage_doc
from triage_stores import RunSpec, write_run
from workbench.incident.incident import create_incident, incident_path
from workbench.incident.workflow import attach_triage

GOOD = "INC-good"
# Any code point that moves the cursor, recolours or reorders text; newline is the only one
# an output may hold raw.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five runs and one localized incident; each test works on its own copy."""
    store = incident_runs(tmp_path_factory.mktemp("records") / "store")
    create_incident(store, "a good incident", "sev2", "alice", incident_id=GOOD)
    attach_triage(store, GOOD, triage_doc(), "alice")
    return store


@pytest.fixture
def store(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base, tmp_path / "store", symlinks=True))


def _cmd(store: Path, *argv: str) -> list[str]:
    return [*argv, "--store", str(store), "--actor", "mallory"]


# -- numbers ----------------------------------------------------------------------------------

THRESHOLDS = ["nan", "NaN", "inf", "+Infinity", "1e309", "abc"]


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_a_non_finite_rollback_threshold_is_refused(
    store: Path, tmp_path: Path, threshold: str
) -> None:
    # On main a nan threshold was saved as JSON null, after which every command failed.
    argv = _cmd(store, "incident", "rollback", GOOD, "--add", "e2e_p99", ">", threshold, "us")
    refused(argv, tmp_path, "--add threshold", [store])


@pytest.mark.parametrize("threshold", ["-nan", "-inf", "-1e400"])
def test_a_negative_non_finite_threshold_is_refused(
    store: Path, tmp_path: Path, threshold: str
) -> None:
    # argparse reads these as options; still one line naming --add, and nothing saved.
    argv = _cmd(store, "incident", "rollback", GOOD, "--add", "e2e_p99", ">", threshold, "us")
    refused(argv, tmp_path, "--add", [store])


CRITERIA = [
    (["fallback_rate", ">", "1.5", "share"], "--add threshold"),
    (["fallback_rate", "<", "-0.1", "share"], "--add threshold"),
    (["e2e_p99", ">", "-5", "us"], "--add threshold"),
    (["e2e_p99", ">", "1e16", "us"], "--add threshold"),
    (["e2e_p99", ">=", "1200", "us"], "--add op"),
    (["e2e_p99", "=", "1200", "us"], "--add op"),
    (["e2e_p99", ">", "1200", "furlongs"], "--add unit"),
    (["p99", ">", "1200", "us"], "--add metric"),
    (["stage_p99:nowhere", ">", "1200", "us"], "--add metric"),
    (["e2e_p99:execution", ">", "1200", "us"], "--add metric"),
]


@pytest.mark.parametrize(("add", "subject"), CRITERIA, ids=lambda x: str(x))
def test_a_rollback_criterion_out_of_range_is_refused(
    store: Path, tmp_path: Path, add: list[str], subject: str
) -> None:
    refused(_cmd(store, "incident", "rollback", GOOD, "--add", *add), tmp_path, subject, [store])


@pytest.mark.parametrize("window", ["0", "-1", "1000000000000", "1e3", "nan"])
def test_a_rollback_window_out_of_range_is_refused(
    store: Path, tmp_path: Path, window: str
) -> None:
    argv = _cmd(store, "incident", "rollback", GOOD, "--add", "e2e_p99", ">", "1", "us")
    refused([*argv, "--window", window], tmp_path, "--window", [store])


@pytest.mark.parametrize("days", ["99999999", "-1", "1" + "0" * 40, "nan"])
def test_due_days_out_of_range_is_refused(store: Path, tmp_path: Path, days: str) -> None:
    argv = _cmd(store, "assign", "--incident", GOOD, "--role", "compiler lead", "--person", "x")
    refused([*argv, "--due-days", days], tmp_path, "--due-days", [store])


RAIL = 'metric = "e2e_p99"\ndirection = "increase"\n'
GUARDRAILS = {
    "tolerance-nan": (f"[[guardrail]]\n{RAIL}tolerance = nan\n", "tolerance"),
    "tolerance-inf": (f"[[guardrail]]\n{RAIL}tolerance = inf\n", "tolerance"),
    "tolerance-negative": (f"[[guardrail]]\n{RAIL}tolerance = -0.1\n", "tolerance"),
    "tolerance-huge": (f"[[guardrail]]\n{RAIL}tolerance = 1e300\n", "tolerance"),
    "tolerance-bool": (f"[[guardrail]]\n{RAIL}tolerance = true\n", "tolerance"),
    "tolerance-string": (f'[[guardrail]]\n{RAIL}tolerance = "0.05"\n', "tolerance"),
    "tolerance-missing": (f"[[guardrail]]\n{RAIL}", "tolerance"),
    "min-effect-nan": (f"[[guardrail]]\n{RAIL}tolerance = 0.1\nmin_effect = nan\n", "min_effect"),
    "min-effect-negative": (
        f"[[guardrail]]\n{RAIL}tolerance = 0.1\nmin_effect = -1\n",
        "min_effect",
    ),
    "not-a-table-int": ("guardrail = 3\n", "[[guardrail]]"),
    "array-of-ints": ("guardrail = [1, 2]\n", "must be a table"),
    "single-table": (f"[guardrail]\n{RAIL}tolerance = 0.1\n", "[[guardrail]]"),
    "typo-key": (f"[[guardrail]]\n{RAIL}tolerence = 0.1\n", "tolerence"),
    "critical-string": (f'[[guardrail]]\n{RAIL}tolerance = 0.1\ncritical = "yes"\n', "critical"),
    "unknown-metric": (
        '[[guardrail]]\nmetric = "vibes"\ndirection = "increase"\ntolerance = 0.1\n',
        "metric",
    ),
    "bad-direction": (
        '[[guardrail]]\nmetric = "e2e_p99"\ndirection = "up"\ntolerance = 0.1\n',
        "direction",
    ),
    "malformed": ("[[guardrail]\n", "malformed"),
    "empty": ("", "[[guardrail]]"),
}


@pytest.mark.parametrize("name", sorted(GUARDRAILS))
def test_a_bad_guardrail_file_is_refused(store: Path, tmp_path: Path, name: str) -> None:
    text, field = GUARDRAILS[name]
    rails = tmp_path / f"{name}.toml"
    rails.write_text(text, encoding="utf-8")
    argv = _cmd(store, "validate", "--incident", GOOD, "--candidate", "candidate-rollback")
    line = refused([*argv, "--guardrails", str(rails)], tmp_path, str(rails), [store]).err_lines[0]
    assert field in line, line


# -- records ----------------------------------------------------------------------------------


def _record(store: Path, iid: str, change: Callable[[dict[str, object]], None]) -> Path:
    """A copy of the good record under id `iid`, changed by hand as a user might."""
    doc = json.loads(incident_path(store, GOOD).read_text(encoding="utf-8"))
    doc["id"] = iid
    change(doc)
    path = incident_path(store, iid)
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path


def _null_threshold(doc: dict[str, object]) -> None:
    # What main saved for `incident rollback --add e2e_p99 '>' nan us`.
    doc["rollback_criteria"] = [
        {
            "metric": "e2e_p99",
            "label": "e2e_p99",
            "op": ">",
            "threshold": None,
            "unit": "us",
            "window_requests": 1000,
            "source": "manual",
        }
    ]


def _set(key: str, value: object) -> Callable[[dict[str, object]], None]:
    return lambda doc: doc.__setitem__(key, value)


def _bad_file(kind: str) -> Callable[[Path, str], None]:
    def make(store: Path, iid: str) -> None:
        path = incident_path(store, iid)
        if kind == "folder":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink-loop":
            path.symlink_to(path.name)
        elif kind == "symlink-out":
            outside = store.parent / "outside.json"
            outside.write_bytes(incident_path(store, GOOD).read_bytes())
            path.symlink_to(outside)
        elif kind == "dangling":
            path.symlink_to(store.parent / "gone.json")
        elif kind == "truncated":
            path.write_bytes(incident_path(store, GOOD).read_bytes()[:200])
        elif kind == "array":
            path.write_text("[]", encoding="utf-8")
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "utf16":
            path.write_bytes(incident_path(store, GOOD).read_text().encode("utf-16"))

    return make


HOSTILE_RECORDS: dict[str, Callable[[Path, str], object]] = {
    "null-threshold": lambda s, i: _record(s, i, _null_threshold),
    "unknown-status": lambda s, i: _record(s, i, _set("status", "triaged")),
    "unknown-severity": lambda s, i: _record(s, i, _set("severity", "p0")),
    "status-number": lambda s, i: _record(s, i, _set("status", 3)),
    "huge-number": lambda s, i: _record(s, i, _set("version", 10**400)),
    "version-null": lambda s, i: _record(s, i, _set("version", None)),
    "title-missing": lambda s, i: _record(s, i, lambda d: d.pop("title")),
    "schema-9": lambda s, i: _record(s, i, _set("schema_version", 9)),
    "id-mismatch": lambda s, i: _record(s, i, _set("id", GOOD)),
    "nested-unknown-field": lambda s, i: _record(
        s, i, lambda d: d["timeline"][0].__setitem__("pager", "x")
    ),
    **{
        kind: _bad_file(kind)
        for kind in (
            "folder",
            "fifo",
            "symlink-loop",
            "symlink-out",
            "dangling",
            "truncated",
            "array",
            "empty",
            "utf16",
        )
    },
}
BAD = "INC-bad"


@pytest.mark.parametrize("kind", sorted(HOSTILE_RECORDS))
def test_an_unreadable_record_is_one_line_naming_it(store: Path, tmp_path: Path, kind: str) -> None:
    HOSTILE_RECORDS[kind](store, BAD)
    out = refused(_cmd(store, "incident", "show", BAD), tmp_path, f"{BAD}.json", [store])
    assert "Traceback" not in out.stderr and "KeyError" not in out.stderr


@pytest.mark.parametrize("kind", ["null-threshold", "folder", "fifo"])
def test_incident_list_lists_the_readable_and_names_the_unreadable(
    store: Path, tmp_path: Path, kind: str
) -> None:
    HOSTILE_RECORDS[kind](store, BAD)
    before = tree_hash(store)
    out = workbench(_cmd(store, "incident", "list"), tmp_path)
    assert_one_line_error(out, f"{BAD}.json", code=1)
    assert GOOD in out.stdout, str(out)
    assert tree_hash(store) == before


def test_incident_list_names_every_unreadable_record_once(store: Path, tmp_path: Path) -> None:
    ids = {kind: f"INC-bad-{i}" for i, kind in enumerate(sorted(HOSTILE_RECORDS))}
    for kind, iid in ids.items():
        HOSTILE_RECORDS[kind](store, iid)
    before = tree_hash(store)
    out = workbench(_cmd(store, "incident", "list"), tmp_path)
    assert out.code == 1 and "Traceback" not in out.stderr, str(out)
    assert [line.split()[0] for line in out.stdout.splitlines()] == [GOOD], str(out)
    for iid in ids.values():
        assert sum(f"/{iid}.json" in line for line in out.err_lines) == 1, (iid, str(out))
    assert len(out.err_lines) == len(ids)
    assert tree_hash(store) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["incident", "close", BAD],
        ["incident", "rollback", BAD, "--clear"],
        ["assign", "--incident", BAD, "--propose"],
        ["export", "--incident", BAD, "-o", "-"],
        ["validate", "--incident", BAD, "--candidate", "candidate-rollback"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_bricked_record_names_the_repair_in_every_command(
    store: Path, tmp_path: Path, argv: list[str]
) -> None:
    _record(store, BAD, _null_threshold)
    line = refused(_cmd(store, *argv), tmp_path, f"{BAD}.json", [store]).err_lines[0]
    assert f"workbench incident repair {BAD}" in line and "rollback_criteria[0]" in line, line


@pytest.mark.parametrize(
    "kind", ["null-threshold", "unknown-status", "nested-unknown-field", "version-null"]
)
def test_repair_makes_a_bricked_record_usable_and_keeps_what_it_took_out(
    store: Path, tmp_path: Path, kind: str
) -> None:
    HOSTILE_RECORDS[kind](store, BAD)
    broken = incident_path(store, BAD).read_text(encoding="utf-8")
    out = workbench(_cmd(store, "incident", "repair", BAD), tmp_path)
    assert out.code == 0 and not out.stderr, str(out)
    shown = workbench(_cmd(store, "incident", "show", BAD, "--json"), tmp_path)
    assert shown.code == 0, str(shown)
    doc = json.loads(shown.stdout)
    assert doc["timeline"][-1]["event"] == "repaired"
    if kind == "null-threshold":
        assert doc["rollback_criteria"] == []
        assert any('"threshold":null' in a["old"] for a in doc["audit"]), doc["audit"]
    if kind == "unknown-status":
        assert doc["status"] == "localized"  # the timeline's last, which its gates allow
        assert any(a["old"] == '"triaged"' for a in doc["audit"])
    if kind == "nested-unknown-field":
        assert any(a["old"] == '"x"' and "pager" in a["field"] for a in doc["audit"])
    assert broken != incident_path(store, BAD).read_text(encoding="utf-8")
    again = workbench(_cmd(store, "incident", "repair", BAD), tmp_path)
    assert again.code == 0 and "nothing to repair" in again.stdout, str(again)


@pytest.mark.parametrize("kind", ["folder", "fifo", "truncated", "schema-9", "title-missing"])
def test_repair_refuses_what_it_cannot_fix_and_changes_nothing(
    store: Path, tmp_path: Path, kind: str
) -> None:
    HOSTILE_RECORDS[kind](store, BAD)
    refused(_cmd(store, "incident", "repair", BAD), tmp_path, BAD, [store])


def test_hand_added_fields_survive_a_change(store: Path, tmp_path: Path) -> None:
    _record(store, BAD, lambda d: d.update(jira="PERF-123", pager={"rota": ["a", "b"]}))
    out = workbench(
        _cmd(store, "incident", "action", BAD, "--add", "x", "--owner", "o", "--due", "2030-01-01"),
        tmp_path,
    )
    assert out.code == 0, str(out)
    doc = json.loads(incident_path(store, BAD).read_text(encoding="utf-8"))
    assert doc["jira"] == "PERF-123" and doc["pager"] == {"rota": ["a", "b"]}
    assert "unknown_fields" not in doc and doc["version"] == 3


NEW_BAD = [
    (["--failing", "nope", "--comparator", "comparator"], "'nope'"),
    (["--failing", "failing", "--comparator", "nope"], "'nope'"),
    (["--failing", "failing", "--comparator", "failing"], "'failing'"),
    (["--failing", "failing"], "--comparator"),
    (["--failing", "failing", "--comparator", "comparator", "--fixed-metadata", "nope"], "nope"),
    (["--severity", "p0"], "'p0'"),
    (["--id", "../escape"], "'../escape'"),
    (["--id", GOOD], GOOD),
]


@pytest.mark.parametrize(("extra", "subject"), NEW_BAD, ids=lambda x: str(x))
def test_incident_new_that_fails_creates_nothing(
    store: Path, tmp_path: Path, extra: list[str], subject: str
) -> None:
    argv = _cmd(store, "incident", "new", "--title", "t", *extra)
    if "--id" not in extra:
        argv += ["--id", "INC-new"]
    refused(argv, tmp_path, subject, [store])


UNKNOWN_RUNS = [
    ["incident", "pair", GOOD, "--failing", "ghost", "--comparator", "comparator"],
    ["incident", "pair", GOOD, "--failing", "failing", "--comparator", "ghost"],
    ["incident", "show", "INC-ghost"],
    ["triage", "--failing", "ghost", "--comparator", "comparator", "--incident", GOOD],
]


@pytest.mark.parametrize("argv", UNKNOWN_RUNS, ids=lambda a: " ".join(a[:2]))
def test_unknown_ids_are_refused(store: Path, tmp_path: Path, argv: list[str]) -> None:
    refused(
        _cmd(store, *argv) if argv[0] != "triage" else [*argv, "--store", str(store)],
        tmp_path,
        "ghost",
        [store],
    )


# -- export -o ---------------------------------------------------------------------------------


def _target(kind: str, store: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "out"
    outside.mkdir(exist_ok=True)
    victim = outside / "victim.txt"
    victim.write_text("keep me\n", encoding="utf-8")
    if kind == "the-record":
        return incident_path(store, GOOD)
    if kind == "a-runs-file":
        return next((store / "runs").iterdir())
    if kind == "store-root-file":
        return store / "summary.md"
    if kind == "the-store":
        return store
    if kind == "existing-file":
        return victim
    if kind == "fifo":
        os.mkfifo(outside / "fifo")
        return outside / "fifo"
    if kind == "dev-null":
        return Path("/dev/null")
    if kind == "folder":
        return outside
    if kind == "symlink-out":
        (outside / "link.md").symlink_to(victim)
        return outside / "link.md"
    if kind == "symlink-to-record":
        (outside / "rec.md").symlink_to(incident_path(store, GOOD))
        return outside / "rec.md"
    if kind == "dangling-symlink":
        (outside / "dangle.md").symlink_to(tmp_path / "elsewhere" / "x.md")
        return outside / "dangle.md"
    if kind == "via-symlinked-folder":
        (outside / "into-store").symlink_to(store / "incidents")
        return outside / "into-store" / "new.md"
    raise AssertionError(kind)


TARGETS = [
    "the-record",
    "a-runs-file",
    "store-root-file",
    "the-store",
    "existing-file",
    "fifo",
    "dev-null",
    "folder",
    "symlink-out",
    "symlink-to-record",
    "dangling-symlink",
    "via-symlinked-folder",
]


# --force replaces a regular file: it changes nothing for a dangling link or a file in the store.
EXPORT_CASES = [(k, False) for k in TARGETS] + [
    (k, True) for k in TARGETS if k not in ("dangling-symlink", "store-root-file", "existing-file")
]


@pytest.mark.parametrize(
    ("kind", "force"),
    EXPORT_CASES,
    ids=[f"{k}-{'force' if f else 'plain'}" for k, f in EXPORT_CASES],
)
def test_export_writes_only_a_regular_file_outside_the_store(
    store: Path, tmp_path: Path, kind: str, force: bool
) -> None:
    target = _target(kind, store, tmp_path)
    argv = _cmd(store, "export", "--incident", GOOD, "-o", str(target))
    # On main `-o STORE/incidents/INC-1.json` renamed the summary over the record.
    refused(
        [*argv, *(["--force"] if force else [])], tmp_path, str(target), [store, tmp_path / "out"]
    )


def test_export_to_a_new_file_and_force_over_a_regular_one(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    argv = _cmd(store, "export", "--incident", GOOD, "-o", str(target))
    first = workbench(argv, tmp_path)
    assert first.code == 0 and target.read_text(encoding="utf-8").startswith("# Incident")
    target.write_text("old\n", encoding="utf-8")
    forced = workbench([*argv, "--force"], tmp_path)
    assert forced.code == 0 and target.read_text(encoding="utf-8").startswith("# Incident")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# -- text is text -----------------------------------------------------------------------------

PAYLOADS = {
    "csi-colour": "x\x1b[31mRED\x1b[0m",
    "osc-title": "x\x1b]0;owned\x07y",
    "clear-screen": "\x1b[2J\x1b[Hfake prompt $ ",
    "carriage-return": "safe\rEVIL",
    "bidi-override": "abc\u202edcba",
    "c1-csi": "x\x9b31my",
    "nul-and-bell": "a\x00b\x07c",
    "newline-forgery": "t\n  status closed  (forged)",
}


@pytest.fixture(scope="module")
def titled(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = Path(shutil.copytree(base, tmp_path_factory.mktemp("titled") / "store"))
    for name, payload in PAYLOADS.items():
        create_incident(store, payload, "sev2", "alice", incident_id=f"INC-{name}")
    return store


VIEWS = {
    "show": lambda i: ["incident", "show", i],
    "show-json": lambda i: ["incident", "show", i, "--json"],
    "export-md": lambda i: ["export", "--incident", i, "-o", "-"],
}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_control_characters_in_a_title_never_reach_the_terminal(
    titled: Path, tmp_path: Path, name: str, view: str
) -> None:
    iid = f"INC-{name}"
    out = workbench(_cmd(titled, *VIEWS[view](iid)), tmp_path)
    assert out.code == 0 and not out.stderr, str(out)
    assert not RAW_CONTROL.search(out.stdout), repr(out.stdout[:400])
    if view == "show-json":
        assert json.loads(out.stdout)["title"] == PAYLOADS[name].strip()  # same value, escaped
    if view == "show":
        forged = [line for line in out.stdout.splitlines() if line.startswith("  status closed")]
        assert not forged, out.stdout  # a title cannot forge a line of its own


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_control_characters_in_every_title_listed_or_exported(
    titled: Path, tmp_path: Path, fmt: str
) -> None:
    listed = workbench(_cmd(titled, "incident", "list"), tmp_path)
    assert listed.code == 0 and not RAW_CONTROL.search(listed.stdout), repr(listed.stdout)
    assert len(listed.stdout.splitlines()) == len(PAYLOADS) + 1  # one line per incident
    iid = "INC-osc-title"
    out = workbench(_cmd(titled, "export", "--incident", iid, "--format", fmt, "-o", "-"), tmp_path)
    assert out.code == 0 and not RAW_CONTROL.search(out.stdout), repr(out.stdout[:400])
    if fmt == "json":  # escaped for the terminal, the same value for a JSON reader
        assert _strings(json.loads(out.stdout)) & {PAYLOADS["osc-title"]}, out.stdout[:400]


def _strings(doc: object) -> set[str]:
    if isinstance(doc, str):
        return {doc}
    items = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else []
    return set().union(*(_strings(x) for x in items)) if items else set()


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("labelled") / "store"
    for i, (name, payload) in enumerate(sorted(PAYLOADS.items())):
        spec = RunSpec(
            f"run-{name}",
            seed=i,
            n_requests=12,
            label=payload,
            tags={"note": payload, payload: "v"},
            meta={"hardware": payload},
        )
        write_run(store, spec)
    return store


@pytest.mark.parametrize(
    "argv",
    [["runs"], ["runs", "--json"], ["triage", "--failing", "run-csi-colour", "--candidates"]],
    ids=lambda a: " ".join(a),
)
def test_control_characters_in_labels_tags_and_names_never_reach_the_terminal(
    labelled: Path, tmp_path: Path, argv: list[str]
) -> None:
    out = workbench([*argv, "--store", str(labelled)], tmp_path)
    assert out.code == 0 and not out.stderr, str(out)
    assert not RAW_CONTROL.search(out.stdout), repr(out.stdout[:400])
    if "--json" in argv:
        labels = sorted(r["label"] for r in json.loads(out.stdout))
        assert labels == sorted(PAYLOADS.values())


def test_an_id_with_control_characters_is_refused_on_one_line(store: Path, tmp_path: Path) -> None:
    out = refused(_cmd(store, "incident", "show", "INC-\x1b[2Jx"), tmp_path, "invalid", [store])
    assert not RAW_CONTROL.search(out.stderr.rstrip("\n"))


# -- closed pipes and usage errors ------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["runs"],
        ["runs", "--json"],
        ["incident", "list"],
        ["incident", "show", GOOD],
        ["export", "--incident", GOOD, "-o", "-"],
    ],
    ids=lambda a: " ".join(a),
)
def test_a_closed_stdout_exits_quietly(store: Path, tmp_path: Path, argv: list[str]) -> None:
    """`workbench runs | head -c 1`: the reader is gone before the first write."""
    proc = subprocess.Popen(
        command([*argv, "--store", str(store)]),
        cwd=tmp_path,
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    try:
        code = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{argv} hung with a closed stdout")
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert code == 141 and err == "", (code, err)


@pytest.mark.parametrize(
    ("argv", "subject"),
    [
        (["incident", "rollback", GOOD, "--add", "e2e_p99", ">"], "--add"),
        (["incident", "frobnicate"], "frobnicate"),
        (["export", "--incident", GOOD, "--format", "pdf"], "--format"),
        (["assign", "--incident", GOOD, "--bogus"], "--bogus"),
    ],
    ids=lambda x: str(x),
)
def test_usage_errors_are_one_line(
    store: Path, tmp_path: Path, argv: list[str], subject: str
) -> None:
    refused(_cmd(store, *argv), tmp_path, subject, [store])
