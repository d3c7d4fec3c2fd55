"""Engines on several threads of one process, and the speed benchmark's report (no timing
assertions: the figures are in docs/PERFORMANCE.md)."""

from __future__ import annotations

import inspect
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import unicache_sim as us
from typer.testing import CliRunner
from unicache_sim.cli.main import app
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.sim_speed import run_bench

from tests.topologies import TOPO_OPTERON_16

FILE_LINES = 4096

# click < 8.2 mixes stderr into stdout unless told not to; 8.2 always separates them
if "mix_stderr" in inspect.signature(CliRunner).parameters:
    runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
else:
    runner = CliRunner()


def _served(trace: us.Trace) -> list[int]:
    engine = from_topology(TOPO_OPTERON_16).engine()
    engine.run_trace(trace)
    return engine.counters().served


def test_engines_on_threads_count_what_they_count_one_after_another() -> None:
    traces = [us.Trace.file_reads(32, FILE_LINES, 40, False, seed, 16) for seed in (1, 2, 3, 4)]
    alone = [_served(t) for t in traces]
    with ThreadPoolExecutor(max_workers=2) as pool:
        together = list(pool.map(_served, traces))
    assert together == alone
    assert len({tuple(s) for s in alone}) > 1  # the seeds differ, so the check has teeth


def test_run_trace_lets_other_python_threads_run() -> None:
    # a GIL held through the native call would stop this thread's loop for all of it
    trace = us.Trace.file_reads(32, FILE_LINES, 1500, False, 1, 1)
    engine = from_topology(TOPO_OPTERON_16).engine()
    call: list[float] = []

    def simulate() -> None:
        call.append(time.perf_counter())
        engine.run_trace(trace)
        call.append(time.perf_counter())

    worker = threading.Thread(target=simulate)
    ticks: list[float] = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
    worker.join()
    start, end = call
    margin = (end - start) / 10
    assert any(start + margin < t < end - margin for t in ticks)


def test_an_engine_made_on_one_thread_runs_and_drops_on_another() -> None:
    made: list[us.Engine] = []
    worker = threading.Thread(target=lambda: made.append(from_topology(TOPO_OPTERON_16).engine()))
    worker.start()
    worker.join()
    engine = made.pop()
    obj = engine.add_object(1 << 16)
    tid = engine.add_thread(3)
    engine.push_access(tid, obj, 0, 1 << 16)
    assert engine.run() == ("need", tid)
    assert engine.thread_stats(tid).lines == (1 << 16) // 64
    del engine  # dropped on this thread, not the one that made it


def test_bench_counts_equal_pycachesim_and_every_thread_pool() -> None:
    result = run_bench("opteron-16", accesses=300_000, ws_mb=4, repeats=1, threads=(1, 2))
    assert result.counts_equal is True
    assert result.parallel_counts_equal is True
    assert [p.threads for p in result.parallel] == [1, 2]
    assert all(p.jobs == 4 and p.rate > 0 and p.cores_busy > 0 for p in result.parallel)
    assert result.scaling is not None and result.scaling > 0


def test_bench_json_names_its_figures() -> None:
    args = ["bench", "--accesses", "200000", "--ws-mb", "4", "--repeats", "1",
            "--threads", "1,2", "--json"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {"multicore_rate", "single_core_rate", "pycachesim_rate", "ratio", "counts_equal",
            "parallel", "parallel_counts_equal", "scaling"} <= doc.keys()
    assert [p["threads"] for p in doc["parallel"]] == [1, 2]


def test_bench_refuses_a_bad_thread_list_in_one_line() -> None:
    out = runner.invoke(app, ["bench", "--threads", "two"])
    assert out.exit_code == 2
    assert "--threads" in out.stderr and len(out.stderr.strip().splitlines()) == 1
