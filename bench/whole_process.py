"""Run a command as a whole process and measure it: wall time, CPU seconds of the process and
its reaped children, the peak RSS of every process of its tree (sampled every 0.2 s with psutil),
and the load average when it started. Shared by bench/fleet.py and bench/ingest.py."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]


def bytecode_env(work: Path) -> dict[str, str]:
    """Environment under which a child writes and reuses bytecode (in work/pycache), as a user's
    install does after its first run, even when this environment sets PYTHONDONTWRITEBYTECODE
    (an empty value turns it off); without it every run compiles every module it imports."""
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(work / "pycache")}


def run_tree(
    argv: list[str], env: dict[str, str] | None = None, last_line_json: bool = True
) -> dict[str, Any]:
    """Run argv; its last stdout line as JSON, plus wall_s, tree_cpu_s, load1_start,
    tree_peak_mb (highest sum over the tree) and largest_process_mb (highest single process)."""
    peaks = {"tree": 0.0, "largest": 0.0}
    per_pid: dict[int, float] = {}
    cpu_pid: dict[int, float] = {}  # CPU seconds last seen, also of processes never reaped here
    load1 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                total = 0.0
                for p in procs:
                    try:
                        rss = p.memory_info().rss / 2**20
                        t = p.cpu_times()
                        cpu_pid[p.pid] = t.user + t.system
                    except psutil.Error:
                        continue
                    total += rss
                    per_pid[p.pid] = max(per_pid.get(p.pid, 0.0), rss)
                peaks["tree"] = max(peaks["tree"], total)
            except psutil.Error:
                pass
            done.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    # Reaped children are counted exactly; a fork server's children never reach us, so the
    # sampled sum (up to 0.2 s late per process) is the floor when it is larger.
    cpu = max(reaped, sum(cpu_pid.values()))
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}): {err.strip()[-800:]}")
    lines = out.strip().splitlines()
    figures: dict[str, Any] = json.loads(lines[-1]) if last_line_json and lines else {}
    peaks["largest"] = max(per_pid.values(), default=0.0)
    figures.update(wall_s=wall, tree_cpu_s=cpu, load1_start=load1, tree_peak_mb=peaks["tree"],
                   largest_process_mb=peaks["largest"], processes=len(per_pid), stdout=out, stderr=err)  # fmt: skip
    return figures
