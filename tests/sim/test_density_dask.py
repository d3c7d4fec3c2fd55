"""The density experiment on a real Dask cluster: a ``dask scheduler`` and two ``dask worker``
processes on localhost (random ports) give the same results, bit for bit, as a local run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import unicache_sim
from unicache_sim.density.experiment import DensityRequest, run_density
from unicache_sim.density.point import DensityTiming
from unicache_sim.density.points import Runner
from unicache_sim.density.tenants import Mix, load_catalogue

DASK = str(Path(sys.executable).parent / "dask")
#: a tiny experiment: one mix on the 16-CPU model, short intervals, two seeds
TIMING = DensityTiming(window_s=0.0003, warm_rounds=2, measure_rounds=2)


def _request() -> DensityRequest:
    return DensityRequest(
        "opteron-16",
        load_catalogue(),
        (Mix("tiny", (("kv", 1), ("web", 1))),),
        seeds=2,
        overcommit=2.0,
        timing=TIMING,
    )


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[str]:
    """A scheduler and two single-threaded workers, as one would start them by hand."""
    if not Path(DASK).exists():
        pytest.skip("the dask command is not installed (tools/sim/requirements.txt)")
    env = dict(os.environ)
    # the workers import the same unicache_sim as this test
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(unicache_sim.__file__).parents[1]), env.get("PYTHONPATH", "")]
    )
    file = tmp_path / "scheduler.json"
    log = (tmp_path / "dask.log").open("w")
    procs = [
        subprocess.Popen(
            [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(file)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not file.exists() or not file.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        for name in ("w1", "w2"):
            procs.append(
                subprocess.Popen(
                    [DASK, "worker", address, "--nthreads", "1", "--name", name,
                     "--no-dashboard", "--host", "127.0.0.1"],
                    env=env, stdout=log, stderr=subprocess.STDOUT,
                )
            )
        from distributed import Client

        with Client(address, timeout="30s") as client:  # type: ignore[no-untyped-call]
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def test_a_real_cluster_gives_the_local_results_bit_for_bit(cluster: str) -> None:
    with Runner(1) as local:
        here = run_density(_request(), local)
    workers: set[str] = set()
    with Runner(0, scheduler=cluster) as remote:
        there = run_density(_request(), remote)
        workers = set(remote.client.scheduler_info()["workers"])
    assert len(workers) == 2
    assert len(here.points) == len(there.points) > 4
    # repr spells every float exactly (nan included): equal reprs are equal bits
    assert repr(here.references) == repr(there.references)
    assert repr(here.searches) == repr(there.searches)
    assert sorted(map(repr, here.points)) == sorted(map(repr, there.points))
