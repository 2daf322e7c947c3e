"""Fleet ingest and triage: a 64-file fleet (8 hosts x 8 ranks, >= 1.5 GB of Kineto JSON).

Builds the fleet (tests/generators/fleet_synth.py: serving requests with shaped args, two hosts
slowed in their tail and running an older driver) in --dir, reused when it is already there.
Then, each in a fresh process, side by side:
  - our ingest of the whole fleet into one run: serially, on 2 local worker processes, and on a
    2-worker Dask LocalCluster (127.0.0.1); each followed by the fleet view (flagged hosts and
    the tag they share), on the same engine;
  - HTA's multi-rank load of the same files, TraceAnalysis(trace_dir=...), in its own venv
    (--hta-python, as bench/hta_reference.py), once per round after ours: medians over the
    rounds, and the median of the per-round ratios;
  - our ingest on 2 local workers of the first 16, 32 and 64 files: the peak memory of the parent
    (its ru_maxrss), of the worst worker and of the largest process sampled, and their growth;
  - the same ingest into a moto S3 store (127.0.0.1), and `workbench fleet` whole-process
    times from S3 (a fresh mirror each time) against the same from local disk.
Every interpreter (ours, its workers, HTA) caches its bytecode, with a warm-up run on one file
first, as on a user's second run. Memory: the peak RSS of every process of the tree is sampled
every 0.2 s (psutil); "largest process" is the highest single-process peak, "tree" the highest
sum. CPU seconds (the process
and its reaped children; for the import, the parent's own beside the workers': the parent only
joins the Parquet the workers encode) and the load average at each start are reported beside
wall times:
on a box shared with other sessions, more worker processes do not get more CPU, so the 2-worker
speed-up is also given as what two free cores would give (serial CPU / half the 2-worker CPU)
and per round (the three modes run back to back each round). Ends with one JSON line.

    uv run python bench/fleet.py [--dir /tmp/wb_fleet] [--hosts 8] [--ranks 8]
        [--requests 3700] [--hta-python /work/venvs/hta-fleet/bin/python] [--repeat 3]
        [--skip-hta] [--scale-only]

HTA's venv: `python3 -m venv /work/venvs/hta-fleet && /work/venvs/hta-fleet/bin/pip install
HolisticTraceAnalysis==0.5.0 'pandas<3' psutil` (its multi-rank load fails on pandas 3.1:
"Invalid value ... for dtype 'int16'").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

# The fleet generator lives with the tests (tests/generators), out of the product.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from whole_process import bytecode_env, run_tree

SLOW_HOSTS = (2, 5)

OURS = r"""
import json, resource, sys, time
from pathlib import Path
from workbench.store.fleet.engine import open_engine
from workbench.store.fleet.fleet_ingest import ingest_fleet
from workbench.triage.fleet import fleet_view
mode, store, files = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
ingest_only = mode.endswith("-ingest")
mode = mode.removesuffix("-ingest")
client = cluster = None
t0 = time.perf_counter()
if mode == "dask":
    from distributed import Client, LocalCluster
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address="127.0.0.1:0")
    client = Client(cluster, set_as_default=False)
cluster_s = time.perf_counter() - t0
with open_engine(workers=1 if mode == "serial" else 2, client=client) as eng:
    t1 = time.perf_counter()
    rep = ingest_fleet(store, files, run_id="canary", engine=eng,
                       tags={"compiler_version": "2.5.0"})
    ingest_s = time.perf_counter() - t1
    me = resource.getrusage(resource.RUSAGE_SELF)
    ingest_peak_mb = me.ru_maxrss / 1024
    # The import's CPU: this process so far, plus the workers' own (they report it; forked
    # from a fork server, they are not this process's children). Serial: this process only.
    parent_cpu_s = me.ru_utime + me.ru_stime
    ingest_cpu_s = parent_cpu_s + (rep.worker_cpu_s if mode != "serial" else 0.0)
    t2 = time.perf_counter()
    view = fleet_view(store, ["canary"], engine=eng) if not ingest_only else None
    triage_s = time.perf_counter() - t2
c = view.failing if view is not None else None
if client is not None:
    client.close(); cluster.close()
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({
    "ingest_s": ingest_s, "triage_s": triage_s, "cluster_s": cluster_s,
    "events": rep.events, "requests": rep.requests, "files": rep.files,
    "worker_peak_mb": rep.worker_peak_rss_mb, "self_peak_mb": me.ru_maxrss / 1024,
    "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
    "ingest_peak_mb": ingest_peak_mb, "ingest_cpu_s": ingest_cpu_s, "parent_cpu_s": parent_cpu_s,
    "flagged": c.flagged if c else None, "top_host": c.hosts[0].key if c else None,
    "shared": [f"{s.key}={s.value}" for s in c.shared_tags if s.others == 0] if c else None,
}))
"""

HTA = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
load_s = time.perf_counter() - t1
import resource
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
from importlib.metadata import version
print(json.dumps({"import_s": t1 - t0, "load_s": load_s, "ranks": len(a.t.traces),
                  "rows": sum(len(df) for df in a.t.traces.values()),
                  "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                  "versions": {k: version(k) for k in ("HolisticTraceAnalysis", "pandas")}}))
"""


def _build_one(args: tuple[Path, Any, int]) -> int:
    from generators.fleet_synth import write_member

    path, member, requests = args
    size, _ = write_member(path, member, requests=requests, ops=6, seed=11, world=64)
    return size


def build(folder: Path, hosts: int, ranks: int, requests: int) -> tuple[list[Path], int]:
    """The fleet's files (flat, as HTA reads a trace_dir), built once; (paths, JSON bytes)."""
    from generators.fleet_synth import fleet_members

    members = fleet_members(hosts, ranks, slow_hosts=SLOW_HOSTS)
    paths = [folder / f"{m.host}_rank{m.rank:03d}.pt.trace.json" for m in members]
    stamp = folder / "BUILT.txt"  # not *.json: the folder is the sources and HTA's trace_dir
    key = {"hosts": hosts, "ranks": ranks, "requests": requests, "version": 1}
    if stamp.exists() and json.loads(stamp.read_text()) == key and all(p.exists() for p in paths):
        return paths, sum(p.stat().st_size for p in paths)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with ProcessPoolExecutor(2) as pool:
        total = sum(
            pool.map(_build_one, [(p, m, requests) for p, m in zip(paths, members, strict=True)])
        )
    stamp.write_text(json.dumps(key))
    return paths, total


def ours(mode: str, files: list[Path], work: Path) -> dict[str, Any]:
    store = work / f"store-{mode}-{len(files)}"
    shutil.rmtree(store, ignore_errors=True)
    try:
        argv = [sys.executable, "-c", OURS, mode, str(store), *map(str, files)]
        return run_tree(argv, bytecode_env(work))
    finally:
        shutil.rmtree(store, ignore_errors=True)


def hta(files: list[Path], hta_python: str, work: Path) -> dict[str, Any]:
    trace_dir = work / f"hta-{len(files)}"
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir()
    for f in files:
        os.symlink(f.resolve(), trace_dir / f.name)
    return run_tree([hta_python, "-c", HTA, str(trace_dir)], bytecode_env(work))


def cli(args: list[str], home: Path, env: dict[str, str]) -> dict[str, Any]:
    env = {**env, **bytecode_env(home.parent), "WORKBENCH_HOME": str(home)}
    return run_tree([sys.executable, "-m", "workbench", *args], env, last_line_json=False)


def s3_part(folder: Path, work: Path, repeat: int) -> dict[str, Any]:
    """Ingest into moto S3, then `workbench fleet` from S3 (fresh mirror) vs from local disk."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "WORKBENCH_S3_ENDPOINT": f"http://{host}:{port}"}  # fmt: skip
    try:
        os.environ.update(env)
        from workbench.store import objstore

        objstore.filesystem().mkdir("bench")
        url = "s3://bench/fleet"
        local = work / "store-local-s3cmp"
        shutil.rmtree(local, ignore_errors=True)
        ingest = ["ingest", "--fleet", str(folder), "--run-id", "canary", "--workers", "2"]
        up = cli([*ingest, "--store", url], work / "home-ingest", env)
        cli([*ingest, "--store", str(local)], work / "home-local", env)
        fleet = ["fleet", "--failing", "canary", "--json"]
        remote_runs, local_runs = [], []
        for i in range(repeat):
            shutil.rmtree(work / f"home-s3-{i}", ignore_errors=True)
            remote_runs.append(cli([*fleet, "--store", url], work / f"home-s3-{i}", env))
            local_runs.append(cli([*fleet, "--store", str(local)], work / "home-local", env))
        same = all(
            json.loads(r["stdout"]) == json.loads(local_runs[0]["stdout"]) for r in remote_runs
        )
        doc = json.loads(remote_runs[0]["stdout"])["failing"]
        shutil.rmtree(local, ignore_errors=True)
        return {
            "s3_ingest_wall_s": up["wall_s"],
            "s3_triage_wall_s": statistics.median(r["wall_s"] for r in remote_runs),
            "local_triage_wall_s": statistics.median(r["wall_s"] for r in local_runs),
            "s3_triage_same_json_as_local": same,
            "s3_flagged": doc["flagged_hosts"],
            "s3_shared": [
                f"{s['key']}={s['value']}" for s in doc["shared_tags"] if s["others"] == 0
            ],
        }
    finally:
        server.stop()


def scale_part(files: list[Path], work: Path) -> dict[str, Any]:
    """Peak memory per process of our ingest (2 local workers) at 16, 32 and 64 files: the
    parent (its own ru_maxrss), the worst worker (theirs) and the largest process sampled."""
    parent: dict[int, float] = {}
    worker: dict[int, float] = {}
    sampled: dict[int, float] = {}
    for n in (16, 32, 64):
        if n <= len(files):
            # Ingest only: the fleet view after it holds every request, which is triage's
            # memory, not the import's.
            r = ours("local-ingest", files[:n], work)
            parent[n], worker[n] = r["ingest_peak_mb"], r["worker_peak_mb"]
            sampled[n] = r["largest_process_mb"]
            print(
                f"ours local, {n} files: parent {parent[n]:.0f} MB, worst worker "
                f"{worker[n]:.0f} MB, largest process sampled {sampled[n]:.0f} MB "
                f"(load {r['load1_start']:.1f})"
            )
    out: dict[str, Any] = {
        "parent_peak_mb_by_files": {str(k): round(v) for k, v in parent.items()},
        "worker_peak_mb_by_files": {str(k): round(v) for k, v in worker.items()},
        "largest_process_mb_by_files": {str(k): round(v) for k, v in sampled.items()},
    }
    lo, hi = min(parent, default=0), max(parent, default=0)
    if hi > lo:
        out["parent_peak_growth"] = round(parent[hi] / parent[lo], 3)
        out["worker_peak_growth"] = round(worker[hi] / worker[lo], 3)
        peak = {n: max(parent[n], worker[n], sampled[n]) for n in parent}
        out["per_process_peak_growth"] = round(peak[hi] / peak[lo], 3)
        out["per_process_peak_files"] = f"{lo}->{hi}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "wb_fleet")
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--requests", type=int, default=3700, help="requests per file")
    parser.add_argument("--hta-python", default="/work/venvs/hta-fleet/bin/python")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the three ingests")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--scale-only", action="store_true", help="only the 16/32/64-file memory")
    args = parser.parse_args()
    t0 = time.perf_counter()
    files, size = build(args.dir, args.hosts, args.ranks, args.requests)
    slowed = sorted(f"host{h:02d}" for h in SLOW_HOSTS if h < args.hosts)
    print(f"fleet: {len(files)} files, {size / 1e9:.2f} GB JSON ({time.perf_counter() - t0:.0f} s)")
    work = Path(tempfile.mkdtemp(prefix="bench_fleet_"))
    fig: dict[str, Any] = {"files": len(files), "json_gb": round(size / 1e9, 3),
                           "slowed_hosts": slowed}  # fmt: skip
    try:
        if args.scale_only:
            fig.update(scale_part(files, work))
            print(json.dumps(fig))
            return
        runs: dict[str, list[dict[str, Any]]] = {"serial": [], "local": [], "dask": []}
        hta_runs: list[dict[str, Any]] = []
        # Warm-up, not counted: every interpreter's bytecode cached, as on a user's second run.
        ours("serial-ingest", files[:1], work)
        if not args.skip_hta:
            hta(files[:1], args.hta_python, work)
        for _ in range(args.repeat):
            # serial, local and dask back to back in each round: a round's ratios see the same
            # load from the other sessions on this box, so they are reported per round too.
            for mode in runs:
                r = ours(mode, files, work)
                runs[mode].append(r)
                print(
                    f"ours {mode:<6}: ingest {r['ingest_s']:.1f} s (process {r['wall_s']:.1f} s, "
                    f"CPU {r['tree_cpu_s']:.1f} s, import CPU {r['ingest_cpu_s']:.1f} s "
                    f"(parent {r['parent_cpu_s']:.1f} s), "
                    f"load {r['load1_start']:.1f}), "
                    f"largest process {r['largest_process_mb']:.0f} MB, tree "
                    f"{r['tree_peak_mb']:.0f} MB, {r['events']:,} events; flagged {r['flagged']} "
                    f"sharing {r['shared']}"
                )
            if not args.skip_hta:
                # In the same round as ours: each round's ratio sees the same load on the box.
                h = hta(files, args.hta_python, work)
                hta_runs.append(h)
                print(
                    f"HTA: load {h['load_s']:.1f} s (process {h['wall_s']:.1f} s, CPU "
                    f"{h['cpu_s']:.1f} s, load {h['load1_start']:.1f}), tree peak "
                    f"{h['tree_peak_mb']:.0f} MB over {h['processes']} processes, {h['ranks']} ranks"
                )
        med = {m: statistics.median(r["ingest_s"] for r in rs) for m, rs in runs.items()}
        # Our largest process: the highest of the sampled peaks and the processes' own maxrss.
        largest = max(
            max(r["largest_process_mb"], r["self_peak_mb"], r["worker_peak_mb"])
            for rs in runs.values()
            for r in rs
        )
        fig["ours_largest_process_mb"] = round(largest)
        for m, rs in runs.items():
            fig[f"ours_{m}_ingest_s"] = round(med[m], 2)
            fig[f"ours_{m}_ingest_s_runs"] = [round(r["ingest_s"], 1) for r in rs]
            fig[f"ours_{m}_process_s"] = round(statistics.median(r["wall_s"] for r in rs), 2)
            fig[f"ours_{m}_cpu_s"] = round(statistics.median(r["tree_cpu_s"] for r in rs), 1)
            fig[f"ours_{m}_ingest_cpu_s"] = round(
                statistics.median(r["ingest_cpu_s"] for r in rs), 1
            )
            fig[f"ours_{m}_parent_cpu_s"] = round(
                statistics.median(r["parent_cpu_s"] for r in rs), 1
            )
            fig[f"ours_{m}_largest_process_mb"] = round(max(r["largest_process_mb"] for r in rs))
            fig[f"ours_{m}_flagged"] = rs[0]["flagged"]
            fig[f"ours_{m}_shared_tags"] = rs[0]["shared"]
        fig["events"] = runs["serial"][0]["events"]
        for m in ("local", "dask"):
            rounds = [
                a["ingest_s"] / b["ingest_s"] for a, b in zip(runs["serial"], runs[m], strict=True)
            ]
            fig[f"{m}2_speedup_vs_serial"] = round(med["serial"] / med[m], 2)
            fig[f"{m}2_speedup_vs_serial_by_round"] = [round(v, 2) for v in rounds]
            # What two free cores would give: the import's serial CPU over half its 2-worker
            # CPU. Wall time on this shared box is that, capped by the CPU others leave.
            fig[f"{m}2_speedup_if_2_free_cores"] = round(
                2 * fig["ours_serial_ingest_cpu_s"] / fig[f"ours_{m}_ingest_cpu_s"], 2
            )
        fig["load1_at_runs"] = [round(r["load1_start"], 1) for rs in runs.values() for r in rs]
        fig["slowed_hosts_flagged_first_everywhere"] = all(
            rs[0]["flagged"] == slowed and rs[0]["top_host"] in slowed for rs in runs.values()
        )
        fig.update(scale_part(files, work))
        if hta_runs:
            hmed = {
                k: statistics.median(h[k] for h in hta_runs)
                for k in ("load_s", "wall_s", "cpu_s", "tree_peak_mb", "largest_process_mb")
            }
            fig.update(
                hta_load_s=round(hmed["load_s"], 2),
                hta_load_s_runs=[round(h["load_s"], 1) for h in hta_runs],
                hta_process_s=round(hmed["wall_s"], 2),
                hta_cpu_s=round(hmed["cpu_s"], 1),
                hta_tree_peak_mb=round(hmed["tree_peak_mb"]),
                hta_largest_process_mb=round(hmed["largest_process_mb"]),
                hta_ranks=hta_runs[0]["ranks"],
                hta_repeat=len(hta_runs),
                hta_versions=hta_runs[0]["versions"],
            )
            best = min(med, key=lambda m: med[m])
            # Medians of HTA's runs over medians of ours, and the median of the per-round ratios.
            fig["speedup_vs_hta_best"] = round(hmed["load_s"] / med[best], 2)
            fig["speedup_vs_hta_best_mode"] = best
            fig["speedup_vs_hta_local2"] = round(hmed["load_s"] / med["local"], 2)
            for m in ("serial", "local"):
                by_round = [
                    h["load_s"] / r["ingest_s"] for h, r in zip(hta_runs, runs[m], strict=True)
                ]
                fig[f"speedup_vs_hta_{m}_by_round"] = [round(v, 2) for v in by_round]
                fig[f"speedup_vs_hta_{m}_median_of_rounds"] = round(statistics.median(by_round), 2)
            fig["largest_process_vs_hta_tree"] = round(largest / hmed["tree_peak_mb"], 3)
            # On a box shared with other work, CPU seconds are the steadier comparison.
            fig["cpu_ratio_hta_vs_ours_serial"] = round(hmed["cpu_s"] / fig["ours_serial_cpu_s"], 2)
        s3 = s3_part(args.dir, work, 3)
        print(
            f"S3: ingest {s3['s3_ingest_wall_s']:.1f} s; fleet triage from S3 "
            f"{s3['s3_triage_wall_s']:.2f} s vs local {s3['local_triage_wall_s']:.2f} s; "
            f"flagged {s3['s3_flagged']} sharing {s3['s3_shared']}"
        )
        fig.update({k: (round(v, 2) if isinstance(v, float) else v) for k, v in s3.items()})
        fig["s3_vs_local_triage"] = round(s3["s3_triage_wall_s"] / s3["local_triage_wall_s"], 2)
        fig["load1_end"] = round(os.getloadavg()[0], 1)
        fig["cpus"] = os.cpu_count()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
