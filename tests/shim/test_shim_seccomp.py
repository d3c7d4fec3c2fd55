"""The shim's read path makes no system call but the call's own (issue 33's acceptance).

``uc_selftest seccomp`` runs each kind of call in a child under a seccomp filter that
allows only that call's system call and kills on anything else; the filter goes in through
libc's own prctl and syscall, so the shim does not notice a sandbox and runs its normal
path. Checked with a realistic table (8,192 entries: the placed file's chunks on every CPU,
so the shim looks up, counts and stays, and the unplaced file named by none), with an
empty table, and with no table at all; and, as the control that the harness can fail,
with a build whose read path asks the kernel for the file's size on every read.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from unicache_agent.shm import BUDGET_UNLIMITED, ShmEntry
from unicache_agent.table_writer import TableWriter

from tests.shim.shimtools import ShimEnv, build_mutant

FILE_BYTES = 4 << 20
TABLE_ENTRIES = 8192


def _files(tmp_path: Path) -> tuple[Path, Path]:
    placed, unplaced = tmp_path / "placed", tmp_path / "unplaced"
    for f in (placed, unplaced):
        f.write_bytes(os.urandom(FILE_BYTES))
    return placed, unplaced


def _table(env: ShimEnv, placed: Path, entries: int = TABLE_ENTRIES) -> None:
    """The placed file's chunks on every CPU, then other files' chunks up to ``entries``
    (8,192 by default, in a table of 32,768 buckets: what the agent makes)."""
    every = frozenset(os.sched_getaffinity(0))
    if entries > env.table.capacity // 2:
        env.table.close()
        env.table = TableWriter(env.table.path, 32768, counters=env.table.counters)
    fid = env.file_id(placed)
    chunks = FILE_BYTES // 65536
    table = [ShmEntry(fid, i, every, caching=True, migration_budget=BUDGET_UNLIMITED)
             for i in range(chunks)]
    table += [ShmEntry(1000 + i // 64, i % 64, every, migration_budget=BUDGET_UNLIMITED)
              for i in range(entries - chunks)]
    env.table.publish(1, 65536, 4096, table)


def _run(env: ShimEnv, selftest: Path, placed: Path, unplaced: Path,
         extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(selftest), "seccomp", str(placed), str(unplaced)],
                          env={**env.env, **(extra or {})}, capture_output=True, text=True,
                          timeout=120, check=False)


def _cases(out: str) -> dict[str, str]:
    return {line.split()[0][5:]: line.split(maxsplit=1)[1] for line in out.splitlines()
            if line.startswith("case=")}


def test_no_read_path_makes_a_system_call_of_the_shims(shim_env: ShimEnv, tmp_path: Path,
                                                      ) -> None:
    placed, unplaced = _files(tmp_path)
    _table(shim_env, placed)
    res = _run(shim_env, shim_env.selftest, placed, unplaced)
    cases = _cases(res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(cases) >= 18 and set(cases.values()) == {"ok"}, res.stdout
    # and the shim really worked on them: the placed file's reads were counted
    fid = shim_env.file_id(placed)
    assert sum(c.bytes_read for c in shim_env.counters.harvest(0).chunks
               if c.file_id == fid) > FILE_BYTES // 8


@pytest.mark.parametrize("table", ["empty", "none"])
def test_without_placements_no_read_path_makes_one_either(shim_env: ShimEnv, tmp_path: Path,
                                                          table: str) -> None:
    placed, unplaced = _files(tmp_path)
    shim_env.table.publish(1, 65536, 4096, [])
    extra = {"UNICACHE_TABLE": str(tmp_path / "no-such-table")} if table == "none" else {}
    res = _run(shim_env, shim_env.selftest, placed, unplaced, extra)
    assert res.returncode == 0, res.stdout + res.stderr
    assert set(_cases(res.stdout).values()) == {"ok"}, res.stdout


def test_a_read_path_with_a_system_call_is_caught(shim_env: ShimEnv, tmp_path: Path) -> None:
    # the control: the same harness against a shim that fstats the file on every read
    # (what a classification on the read path would do) must see its children killed
    mutant = build_mutant(tmp_path, "-DUC_MUTANT_FSTAT_ON_READ")
    placed, unplaced = _files(tmp_path)
    _table(shim_env, placed, FILE_BYTES // 65536)
    env = {**shim_env.env, "LD_PRELOAD": str(mutant)}
    res = subprocess.run([str(shim_env.selftest), "seccomp", str(placed), str(unplaced)],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert "killed by signal 31" in res.stdout  # SIGSYS
