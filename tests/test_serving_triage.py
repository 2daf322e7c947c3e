"""LLM serving end to end through the real CLI: records joined to a recorded continuous-batching
trace, the triage read in the SLO that regressed, and bad records refused with the store as it
was. The pair is the sample store's recorded one (workbench/sample/recorded: a smaller KV budget)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.ingest_helpers import one_line_error, run_workbench, store_hash
from workbench.sample.llm import RECORDED_PAIR

PAIR = RECORDED_PAIR


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = tmp_path_factory.mktemp("serving") / "store"
    for role in ("failing", "comparator"):
        got = run_workbench([
            "ingest", str(PAIR / role / "trace.json.gz"), "--records", str(PAIR / role / "vllm_bench.json"),
            "--store", str(s), "--run-id", f"kv-{role}",
        ])  # fmt: skip
        assert got.returncode == 0, got.stderr
        assert "llm serving: 150 of 150 records joined to engine steps by request id" in got.stdout
    return s


def _triage(store: Path, *extra: str) -> dict[str, object]:
    got = run_workbench(["triage", "--store", str(store), "--failing", "kv-failing",
                         "--comparator", "kv-comparator", "--json", *extra])  # fmt: skip
    assert got.returncode == 0, got.stderr
    doc: dict[str, object] = json.loads(got.stdout)
    return doc


def test_kv_pressure_reads_as_ttft_queue_wait_from_preemption(store: Path) -> None:
    truth = json.loads((PAIR / "truth.json").read_text())
    doc = _triage(store)
    assert doc["primary_slo"] == "ttft" and doc["triggered"] is True
    assert (doc["origin_stage"], doc["mechanism"]) == (truth["origin_stage"], truth["mechanism"])
    # The time shows up as waiting to be admitted (ingress), the decision was the scheduler's.
    assert doc["manifest_stage"] == "ingress"
    gaps = doc["slo_gaps"]
    assert isinstance(gaps, dict) and set(gaps) == {"ttft", "itl", "tpot", "e2e"}
    assert gaps["itl"]["unit"] == "tokens" and gaps["ttft"]["unit"] == "requests"
    assert gaps["ttft"]["n_failing"] == 150 and gaps["itl"]["n_failing"] > 150
    p99 = gaps["ttft"]["gap_us"]["p99"]
    assert 0 < p99["lo"] <= p99["value"] <= p99["hi"]
    # The verdict's interval is the one printed for the SLO.
    assert doc["p99_gap_us"] == p99
    assert doc["serving_join"]["failing"] == {
        "serving_join": "request_id", "serving_records": 150, "serving_matched": 150,
    }  # fmt: skip
    fired = [w["mechanism"] for w in doc["verdict"]["serving_witnesses"] if w["fired"]]
    assert fired == ["kv_preemption"]


def test_slo_flag_reads_the_verdict_in_tokens(store: Path) -> None:
    doc = _triage(store, "--slo", "itl")
    assert doc["primary_slo"] == "itl"
    stages = doc["stages"]
    assert (
        isinstance(stages, list) and stages[0]["n_failing"] == doc["slo_gaps"]["itl"]["n_failing"]
    )
    assert "inter-token latency (tokens)" in doc["verdict"]["reason"]


def test_itl_intervals_resample_whole_requests(store: Path) -> None:
    """The printed ITL gap is the cluster bootstrap over requests of the query's token gaps,
    not the token-by-token one (which treats a request's gaps as independent draws)."""
    from accel import stats
    from accel.cluster_bootstrap import cluster_quantile_diffs
    from workbench.store import db

    doc = _triage(store, "--slo", "itl")
    con = db.connect(store)
    try:
        t = db.query(
            con,
            "slo_samples",
            {"failing": "kv-failing", "comparator": "kv-comparator", "slo": "itl"},
        )
    finally:
        con.close()  # fmt: skip
    roles = t.column("role").to_pylist()
    req = [r.partition("#")[0] for r in t.column("request_id").to_pylist()]
    lat = t.column("latency_us").to_pylist()
    side = {k: ([x for x, r in zip(lat, roles, strict=True) if r == k],
                [g for g, r in zip(req, roles, strict=True) if r == k])
            for k in ("failing", "comparator")}  # fmt: skip
    (f, gf), (c, gc) = side["failing"], side["comparator"]
    d, lo, hi = cluster_quantile_diffs(f, gf, c, gc, (0.99,), n_boot=2000, seed=0)[0]
    printed = doc["slo_gaps"]["itl"]["gap_us"]["p99"]
    assert printed == pytest.approx({"value": d, "lo": lo, "hi": hi})
    _, tlo, thi = stats.bootstrap_quantile_diff(f, c, 0.99, n_boot=2000, seed=0)
    assert (lo, hi) != pytest.approx((tlo, thi), rel=0.01)


def test_the_text_says_what_the_verdict_rests_on(store: Path) -> None:
    """A verdict read in TTFT rests on no replay: the header says so and no guessed hardware
    profile is warned of; the warm-up and tail-driver lines, which read the end-to-end latency,
    say e2e, so that no number beside the TTFT verdict passes for a TTFT one."""
    got = run_workbench(["triage", "--store", str(store), "--failing", "kv-failing",
                         "--comparator", "kv-comparator"])  # fmt: skip
    assert got.returncode == 0, got.stderr
    text = got.stdout
    assert text.splitlines()[0].endswith("(comparator), read in its SLOs")
    assert "replayed on" not in text and "no hardware profile" not in text
    assert "e2e p99" in text.replace("\n  ", " ").split("WARM-UP", 1)[1].split("\n")[0]
    assert "TAIL DRIVERS  share of the e2e p99 gap: " in text
    # Read in e2e (asked for), the same pair was replayed and says where.
    e2e = run_workbench(["triage", "--store", str(store), "--failing", "kv-failing",
                         "--comparator", "kv-comparator", "--slo", "e2e"])  # fmt: skip
    assert e2e.returncode == 0, e2e.stderr
    assert "TAIL DRIVERS  share of p99 gap: " in e2e.stdout


def test_records_alone_are_a_run_without_a_stage_split(tmp_path: Path) -> None:
    s = tmp_path / "s"
    got = run_workbench(["ingest", str(PAIR / "failing" / "vllm_bench.json"), "--store", str(s),
                         "--run-id", "bench"])  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert "150 records, no trace to join" in got.stdout


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["ttfts"].__setitem__(3, -0.5), "request"),
        (lambda d: d["itls"][2].extend([0.0] * 500), "inter-token latencies"),
        (lambda d: d["latencies"].__setitem__(1, float("nan")), "request"),
    ],
)
def test_a_bad_record_names_itself_and_leaves_the_store(
    store: Path, tmp_path: Path, mutate: object, needle: str
) -> None:
    doc = json.loads((PAIR / "failing" / "vllm_bench.json").read_text())
    assert callable(mutate)
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    before = store_hash(copy)
    for argv in (
        ["ingest", str(bad), "--store", str(copy), "--run-id", "bad"],
        ["ingest", str(PAIR / "failing" / "trace.json.gz"), "--records", str(bad),
         "--store", str(copy), "--run-id", "bad2"],
    ):  # fmt: skip
        line = one_line_error(run_workbench(argv))
        assert str(bad) in line and needle in line
    assert store_hash(copy) == before


def test_an_older_store_reads_the_v3_columns_as_null() -> None:
    from workbench.store import db, schema

    con = db.connect(Path(__file__).parent / "fixtures" / "store_v1")
    runs = con.sql("SELECT * FROM runs").columns
    requests = con.sql("SELECT * FROM requests").columns
    # The SQL-typed columns db.py appends are schema.py's v3 columns, in its order.
    assert runs[-3:] == schema.RUNS.names[-3:] == ["serving_join", "serving_records",
                                                   "serving_matched"]  # fmt: skip
    assert requests[-7:] == schema.REQUESTS_FILE.names[-7:]
    assert con.sql("SELECT count(ttft_us), count(*) FROM requests").fetchall()[0][0] == 0
    # An empty tokens table (no run has one) has the schema's columns too.
    assert con.sql("SELECT * FROM tokens").columns == schema.with_run_id(schema.TOKENS_FILE).names


def test_the_closure_summary_speaks_in_the_paging_slo(store: Path, tmp_path: Path) -> None:
    """The brief's first sentence, its title and the impact table lead with TTFT, with the
    triage's own interval and n in requests; the stages are TTFT's split, not e2e's."""
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    common = ["--store", str(copy)]
    got = run_workbench(["incident", "new", "--title", "TTFT page", "--id", "INC-LLM",
                         "--failing", "kv-failing", "--comparator", "kv-comparator", *common])  # fmt: skip
    assert got.returncode == 0, got.stderr
    doc = _triage(copy, "--incident", "INC-LLM")
    p99 = doc["slo_gaps"]["ttft"]["gap_us"]["p99"]  # type: ignore[index]
    out = tmp_path / "summary.json"
    got = run_workbench(["export", "--incident", "INC-LLM", "--format", "json", "-o", str(out),
                         *common])  # fmt: skip
    assert got.returncode == 0, got.stderr
    summary = json.loads(out.read_text())
    brief = summary["brief"]
    assert brief["what_regressed"][0].startswith("time to first token p99 +")
    assert "n = 150 / 150 requests" in brief["what_regressed"][0]
    assert brief["suggested_title"].startswith("TTFT p99 +")
    imp = summary["impact"]
    assert imp["primary_slo"] == {
        "slo": "ttft",
        "metric": "time to first token",
        "unit": "requests",
    }
    first = imp["rows"][1]
    assert (first["metric"], first["quantile"]) == ("time to first token", "p99")
    assert (first["delta_us"], first["ci_low_us"], first["ci_high_us"]) == (
        p99["value"], p99["lo"], p99["hi"],
    )  # fmt: skip
    ingress = next(r for r in imp["rows"] if r["metric"] == "ingress" and r["quantile"] == "p99")
    assert ingress["unit"] == "requests" and ingress["interval"] == first["interval"]
    assert "scheduling" in brief["why"][0] and "KV-cache" in summary["localization"]["origin_name"]
