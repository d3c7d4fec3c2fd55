"""The shim moves a reader to the chunk's home vCPUs as the table says (MFC §4.2, §4.5).

The last tests check the real libunicache.so against the rule's Python mirror: a reader ends
up with a single-CPU affinity equal to the rule's target, and the counters file's claims are
left as the rule says.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from unicache_agent.counters import CounterHarvester
from unicache_agent.shm import BUDGET_UNLIMITED, CLAIMS_OFFSET, ShmEntry
from unicache_sim.guest.shimrule import (
    CLAIM_LEASE_NS,
    CLAIM_TID_BITS,
    CLAIM_TID_MAX,
    Action,
    ClaimTable,
    Decision,
    decide,
)

from tests.shim.shimtools import CHUNK, Reader, ShimEnv, cpus

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
    # not at offset 0, which starts a sequential stream (its span: the rest of the chunk)
    with Reader(shim_env, f) as r:
        r.ask("tid")  # the shim has loaded (with both CPUs allowed)
        os.sched_setaffinity(r.proc.pid, {0})
        assert len(r.pread(4096, 100)) == 100
        assert r.ask("affinity") == "0"


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


# --- the rule of uc_decide.h in the real shim: one CPU, the rule's target, claimed ---

#: vCPUs of the claim table in these tests (more than this machine has: room for claims on
#: vCPUs no thread here can run on)
CLAIM_VCPUS = 16


def _claims_env(env: ShimEnv) -> tuple[CounterHarvester, dict[str, str]]:
    env.relayout(max_vcpus=CLAIM_VCPUS, nslots=64)
    return env.counters, {}


def _plant(counters: CounterHarvester, words: dict[int, int]) -> None:
    """Write claim words into this user's counters file, as other readers' shims would have."""
    with open(counters.user_path(), "r+b") as fh:
        for v, w in words.items():
            fh.seek(CLAIMS_OFFSET + 8 * v)
            fh.write(struct.pack("<Q", w))


def _claims_clock_ns() -> int:
    """The clock the shim's claims are made on (uc_migrate.c: the coarse monotonic clock;
    Python's time module has no name for it: 6 is its Linux id)."""
    return time.clock_gettime_ns(getattr(time, "CLOCK_MONOTONIC_COARSE", 6))


def _read_under_rule(env: ShimEnv, tmp_path: Path, vcpus: frozenset[int], start_cpu: int,
                     plant: Callable[[int, int], dict[int, int]],
                     ) -> tuple[set[int], Decision, dict[int, int], dict[int, int], int]:
    """One pread of 32 KiB of a placed chunk 0 by a reader on ``start_cpu``.

    :param plant: (tid, now_ms) -> claim words to plant before the read.
    :returns: (affinity after, the Python rule's decision, claims before, claims after, tid).
    """
    counters, extra = _claims_env(env)
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    fid = env.file_id(f)
    env.table.publish(1, CHUNK, 16384, [ShmEntry(fid, 0, vcpus)])
    allowed = os.sched_getaffinity(0)  # the reader's when its shim loads
    with Reader(env, f, extra) as r:
        tid = int(r.ask("tid"))
        _plant(counters, plant(tid, _claims_clock_ns() // 1_000_000))
        before = {v: w for v, w in enumerate(counters.claims()) if w}
        os.sched_setaffinity(r.proc.pid, {start_cpu})
        t0 = _claims_clock_ns()
        assert len(r.pread(0, 32768)) == 32768
        t1 = _claims_clock_ns()
        affinity = {int(c) for c in r.ask("affinity").split(",")}
    after = {v: w for v, w in enumerate(counters.claims()) if w}
    decision = decide(n=32768, min_read_size=16384, cur=start_cpu, mask=vcpus, allowed=allowed,
                      file_id=fid, chunk=0, budget=BUDGET_UNLIMITED, spent=0,
                      claims=ClaimTable(CLAIM_VCPUS, before), tid=tid, now_ns=t0)
    # the shim read the clock between t0 and t1: settle at the instant its claim names
    mine = [w >> CLAIM_TID_BITS for w in after.values() if w & CLAIM_TID_MAX == tid]
    now_ns = (mine[0] - CLAIM_LEASE_NS // 1_000_000) * 1_000_000 if mine else t0
    assert t0 // 1_000_000 <= now_ns // 1_000_000 <= t1 // 1_000_000
    expected = ClaimTable(CLAIM_VCPUS, before)
    expected.settle(decision, tid, now_ns)
    assert after == expected.snapshot()
    return affinity, decision, before, after, tid


def test_reader_gets_the_rules_single_cpu_claims_it_and_drops_its_old_claim(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    def plant(tid: int, now_ms: int) -> dict[int, int]:
        return {7: (now_ms + 60_000) << CLAIM_TID_BITS | tid,        # its own, elsewhere
                9: (now_ms + 60_000) << CLAIM_TID_BITS | (tid + 1)}  # another live reader's

    affinity, decision, _, after, tid = _read_under_rule(
        shim_env, tmp_path, frozenset({1, 5, 9, 130}), 0, plant)
    assert decision == Decision(Action.MIGRATE, 1)
    assert affinity == {decision.vcpu}  # one CPU, not the unit
    assert after[1] & CLAIM_TID_MAX == tid and 7 not in after and 9 in after


def test_reader_on_a_home_vcpu_stays_and_claims_it(shim_env: ShimEnv, tmp_path: Path) -> None:
    affinity, decision, _, after, tid = _read_under_rule(
        shim_env, tmp_path, frozenset({0, 1}), 0, lambda tid, now_ms: {})
    assert decision == Decision(Action.STAY, 0)
    assert affinity == {0}
    assert set(after) == {0} and after[0] & CLAIM_TID_MAX == tid


def test_vcpu_held_by_another_live_reader_is_still_home_when_it_is_the_only_one(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    def plant(tid: int, now_ms: int) -> dict[int, int]:
        return {1: (now_ms + 60_000) << CLAIM_TID_BITS | (tid + 1)}

    affinity, decision, before, after, _ = _read_under_rule(
        shim_env, tmp_path, frozenset({1}), 0, plant)
    assert decision == Decision(Action.MIGRATE, 1)
    assert affinity == {1}
    assert after == before  # the other reader's claim is never overwritten


def test_pinned_reader_of_an_unplaced_chunk_leaves_a_vcpu_another_reader_holds(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    counters, extra = _claims_env(shim_env)
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    shim_env.table.publish(1, CHUNK, 16384, [ShmEntry(shim_env.file_id(f), 0, frozenset({1}))])
    with Reader(shim_env, f, extra) as r:
        tid = int(r.ask("tid"))
        os.sched_setaffinity(r.proc.pid, {0})
        assert len(r.pread(0, 32768)) == 32768
        assert r.ask("affinity") == "1"  # moved, and so pinned to vCPU 1
        # the table no longer places the chunk (it still places another one), and another
        # live reader now holds vCPU 1
        shim_env.table.publish(2, CHUNK, 16384,
                               [ShmEntry(shim_env.file_id(f), 1, frozenset({1}))])
        now_ms = _claims_clock_ns() // 1_000_000
        _plant(counters, {1: (now_ms + 60_000) << CLAIM_TID_BITS | (tid + 1)})
        # a read below the table's min_read_size moves it too: the move is for CPU, not
        # for data (uc_decide.h)
        assert len(r.pread(0, 4096)) == 4096
        assert r.ask("affinity") == "0"  # the rule over its allowed CPUs: the free vCPU 0
        claims = counters.claims()
        assert claims[0] & CLAIM_TID_MAX == tid and claims[1] & CLAIM_TID_MAX == tid + 1


def test_pinned_reader_gets_its_own_cpus_back_once_the_table_sends_no_chunk_to_a_vcpu(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    # SCU left the VM alone or withdrew its placement: the guest's scheduler, not the
    # shim, places the threads again (a thread left pinned could stay piled on one vCPU);
    # a table of colors only (SRM's, for a VM SCU leaves alone) moves no thread either
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    shim_env.table.publish(1, CHUNK, 16384, [ShmEntry(shim_env.file_id(f), 0, frozenset({1}))])
    with Reader(shim_env, f) as r:
        loaded_with = r.ask("affinity")  # the shim has loaded, with these CPUs
        os.sched_setaffinity(r.proc.pid, {0})
        assert len(r.pread(0, 32768)) == 32768
        assert r.ask("affinity") == "1"  # moved, and so pinned to vCPU 1
        colors_only = ShmEntry(shim_env.file_id(f), 0, frozenset(), color_node=0)
        shim_env.table.publish(2, CHUNK, 16384, [colors_only])
        assert len(r.pread(0, 4096)) == 4096
        assert r.ask("affinity") == loaded_with
        # not pinned any more: a thread the user pins stays where the user put it
        os.sched_setaffinity(r.proc.pid, {0})
        assert len(r.pread(0, 32768)) == 32768
        assert r.ask("affinity") == "0"


def test_a_sequential_reader_in_small_buffers_migrates_a_random_one_does_not(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    # uc_read_span: an extent is longer than programs' read buffers; a reader at offset 0,
    # or continuing its previous read, counts the rest of the chunk against min_read_size
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    least = CHUNK // 2
    shim_env.table.publish(1, CHUNK, least, [ShmEntry(shim_env.file_id(f), c, frozenset({1}))
                                             for c in range(4)])
    with Reader(shim_env, f) as r:
        r.ask("tid")  # the shim has loaded (with both CPUs allowed)
        os.sched_setaffinity(r.proc.pid, {0})
        assert len(r.pread(CHUNK + 4096, 4096)) == 4096  # a jump into chunk 1: 4 KiB
        assert r.ask("affinity") == "0"
        assert len(r.pread(0, 4096)) == 4096  # offset 0: the rest of chunk 0 counts
        assert r.ask("affinity") == "1"
    with Reader(shim_env, f) as r:
        r.ask("tid")  # the shim has loaded (with both CPUs allowed)
        os.sched_setaffinity(r.proc.pid, {0})
        assert len(r.pread(2 * CHUNK - 4096, 4096)) == 4096  # the end of chunk 1: stays
        assert r.ask("affinity") == "0"
        # continuing it: chunk 2 from its start, the whole chunk counts
        assert len(r.pread(2 * CHUNK, 4096)) == 4096
        assert r.ask("affinity") == "1"
        os.sched_setaffinity(r.proc.pid, {0})
        # a jump near the end of chunk 2, then continuing it with less than
        # min_read_size left in the chunk: stays
        assert len(r.pread(3 * CHUNK - 8192, 4096)) == 4096
        assert len(r.pread(3 * CHUNK - 4096, 4096)) == 4096
        assert r.ask("affinity") == "0"
