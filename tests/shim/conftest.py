"""Fixtures for the preload shim tests: the built shim, a table and counters."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache_agent.counters import CounterHarvester
from unicache_agent.shm import CounterLayout
from unicache_agent.table_writer import TableWriter

from tests.shim.shimtools import SHIM_DIR, ReplicaAgent, ShimEnv


@pytest.fixture(scope="session")
def shim_build() -> Path:
    """Builds the shim (idempotent) and returns its directory."""
    subprocess.run(["make", "-s", "-C", str(SHIM_DIR), "all"], check=True)
    return Path(SHIM_DIR)


@pytest.fixture
def shim_env(shim_build: Path, tmp_path: Path) -> Iterator[ShimEnv]:
    layout = CounterLayout.of(nslots=4096)
    table = TableWriter(str(tmp_path / "table"), nbuckets=4096, counters=layout)
    counters = CounterHarvester(str(tmp_path / "counters"), layout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNICACHE_")}
    replicas = ReplicaAgent(tmp_path / "replicas", table)
    env.update(LD_PRELOAD=str(shim_build / "libunicache.so"),
               UNICACHE_TABLE=str(tmp_path / "table"),
               UNICACHE_COUNTERS=str(tmp_path / "counters"),
               UNICACHE_REPLICAS=str(tmp_path / "replicas"),
               # the agent here is a thread of a busy process: wait for its answers, so a
               # test's first read of a replicated chunk is served (the default is 5 ms)
               UNICACHE_REPLICA_WAIT_MS="5000")
    shim = ShimEnv(table, counters, env, shim_build / "uc_selftest", replicas)
    yield shim
    shim.replicas.close()
    shim.table.close()
    shim.counters.close()


