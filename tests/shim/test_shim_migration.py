"""The shim moves a reader to the chunk's home vCPUs as the table says (MFC §4.2, §4.5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from unicache_agent.shm import BUDGET_UNLIMITED, ShmEntry

from tests.shim.shimtools import CHUNK, ShimEnv, cpus

pytestmark = pytest.mark.skipif(len(cpus()) < 2 or not {0, 1} <= set(cpus()),
                                reason="needs CPUs 0 and 1")


def _setup(env: ShimEnv, tmp_path: Path, budget: int, caching: bool = True) -> Path:
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    env.table.publish(1, CHUNK, 16384, [ShmEntry(env.file_id(f), 0, frozenset({1}),
                                                 caching=caching, migration_budget=budget)])
    return f


def _where(env: ShimEnv, f: Path, size: int) -> tuple[int, str]:
    res = env.run("migrate", str(f), str(size), "0")
    assert res.returncode == 0, res.stderr
    fields = dict(kv.split("=") for kv in res.stdout.split())
    assert int(fields["ret"]) == size
    return int(fields["cpu"]), fields["mask"]


def test_reader_moves_to_home_cpu(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = _setup(shim_env, tmp_path, BUDGET_UNLIMITED)
    assert _where(shim_env, f, 32768) == (1, "1")


def test_noncaching_chunk_reader_moves_too(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = _setup(shim_env, tmp_path, BUDGET_UNLIMITED, caching=False)
    assert _where(shim_env, f, 32768) == (1, "1")


def test_read_below_min_read_size_stays(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = _setup(shim_env, tmp_path, BUDGET_UNLIMITED)
    assert _where(shim_env, f, 100) == (0, "0")


def test_zero_budget_never_migrates(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = _setup(shim_env, tmp_path, 0)
    assert _where(shim_env, f, 32768) == (0, "0")


def test_budget_is_spent_across_processes_until_harvest(shim_env: ShimEnv,
                                                         tmp_path: Path) -> None:
    f = _setup(shim_env, tmp_path, 1)
    assert _where(shim_env, f, 32768) == (1, "1")
    assert _where(shim_env, f, 32768) == (0, "0")  # budget of this interval spent
    harvest = shim_env.counters.harvest(0)
    assert [c.migrations for c in harvest.chunks] == [1]
    assert _where(shim_env, f, 32768) == (1, "1")  # a new interval, a new budget


def test_chunk_absent_from_table_stays(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = _setup(shim_env, tmp_path, BUDGET_UNLIMITED)
    shim_env.table.publish(2, CHUNK, 16384, [])
    assert _where(shim_env, f, 32768) == (0, "0")


@pytest.mark.parametrize(("budget", "where"), [(BUDGET_UNLIMITED, (1, "1")), (5, (0, "0"))],
                         ids=["unlimited-migrates", "limited-cannot-count-so-stays"])
def test_without_counters_the_table_is_still_followed(shim_env: ShimEnv, tmp_path: Path,
                                                      budget: int,
                                                      where: tuple[int, str]) -> None:
    f = _setup(shim_env, tmp_path, budget)
    res = shim_env.run("migrate", str(f), "32768", "0",
                       extra={"UNICACHE_COUNTERS": str(tmp_path / "absent")})
    assert res.returncode == 0, res.stderr
    fields = dict(kv.split("=") for kv in res.stdout.split())
    assert (int(fields["cpu"]), fields["mask"]) == where
