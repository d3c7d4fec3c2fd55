"""Affinity changes are journaled before they happen and undone on restore (real threads)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.errors import StateError
from unicache.host.linux.affinity import Actuator, thread_start_time

ALL = frozenset(os.sched_getaffinity(0))
needs_two_cpus = len(ALL) >= 2


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def affinity_from_proc(tid: int) -> str:
    for line in Path(f"/proc/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def test_pin_is_journaled_before_and_restored_after(tmp_path: Path, sleeper: int) -> None:
    assert needs_two_cpus, "this test needs 2 CPUs (the project's machines have 2)"
    act = Actuator(tmp_path / "journal.json")
    act.set_affinity("affinity/vm/vcpu0", sleeper, {1})
    assert affinity_from_proc(sleeper) == "1"
    journal = json.loads((tmp_path / "journal.json").read_text())
    assert journal["kind"] == "affinity-journal"
    assert journal["payload"]["affinity"][0]["cpus"] == sorted(ALL)
    lines = act.restore_all()
    assert "back on cpus" in lines[0]
    assert os.sched_getaffinity(sleeper) == ALL
    assert json.loads((tmp_path / "journal.json").read_text())["payload"]["affinity"] == []


def test_a_released_pin_goes_back_alone_and_leaves_the_journal(
    tmp_path: Path, sleeper: int
) -> None:
    act = Actuator(tmp_path / "journal.json")
    act.set_affinity("affinity/vm/vcpu0", sleeper, {1})
    assert act.restore("affinity/vm/vcpu0").endswith(f"back on cpus {tuple(sorted(ALL))}")
    assert os.sched_getaffinity(sleeper) == ALL
    assert act.pending == ()
    assert json.loads((tmp_path / "journal.json").read_text())["payload"]["affinity"] == []
    # pinning again journals afresh, and a release of a vCPU never pinned does nothing
    act.set_affinity("affinity/vm/vcpu0", sleeper, {1})
    assert affinity_from_proc(sleeper) == "1"
    assert "never pinned" in act.restore("affinity/vm/vcpu9")
    dry = Actuator(tmp_path / "journal.json", dry_run=True)
    assert "would go back" in dry.restore("affinity/vm/vcpu0")
    assert affinity_from_proc(sleeper) == "1"


def test_a_new_actuator_restores_what_a_crashed_one_changed(tmp_path: Path, sleeper: int) -> None:
    crashed = Actuator(tmp_path / "journal.json")
    crashed.set_affinity("affinity/vm/vcpu0", sleeper, {0})
    del crashed  # no restore: as after kill -9
    assert os.sched_getaffinity(sleeper) == {0}
    recovered = Actuator(tmp_path / "journal.json")
    assert [e.tid for e in recovered.pending] == [sleeper]
    recovered.restore_all()
    assert os.sched_getaffinity(sleeper) == ALL


def test_first_original_is_kept_across_repeated_pins(tmp_path: Path, sleeper: int) -> None:
    act = Actuator(tmp_path / "journal.json")
    act.set_affinity("affinity/vm/vcpu0", sleeper, {0})
    act.set_affinity("affinity/vm/vcpu0", sleeper, {1})
    assert act.pending[0].cpus == tuple(sorted(ALL))
    act.restore_all()
    assert os.sched_getaffinity(sleeper) == ALL


def test_recycled_tid_is_never_restored(tmp_path: Path, sleeper: int) -> None:
    start = thread_start_time(sleeper)
    assert start is not None
    # a journal as the daemon wrote it before checkpoints: still read, so that an upgrade
    # after a crash restores what the older daemon changed
    (tmp_path / "journal.json").write_text(json.dumps({
        "version": 1,
        "affinity": [{"key": "affinity/x/vcpu0", "tid": sleeper, "start_time": start + 1,
                      "cpus": [0]}],
    }))
    lines = Actuator(tmp_path / "journal.json").restore_all()
    assert "is gone" in lines[0]
    assert os.sched_getaffinity(sleeper) == ALL


def test_dry_run_changes_nothing(tmp_path: Path, sleeper: int) -> None:
    act = Actuator(tmp_path / "journal.json", dry_run=True)
    assert act.set_affinity("affinity/vm/vcpu0", sleeper, {1}) == {1}
    assert os.sched_getaffinity(sleeper) == ALL
    assert not (tmp_path / "journal.json").exists()


def test_corrupt_journal_is_a_state_error_that_names_the_remedy(tmp_path: Path) -> None:
    (tmp_path / "journal.json").write_text("{nope")
    with pytest.raises(StateError, match="remove it to start afresh"):
        Actuator(tmp_path / "journal.json")


def test_a_vcpu_without_host_thread_is_never_pinned_as_the_calling_thread(
    tmp_path: Path,
) -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(ProcessLookupError, match="no host thread"):
        Actuator(tmp_path / "journal.json").set_affinity("affinity/xen/vcpu0", 0, {0})
    assert os.sched_getaffinity(0) == before


def test_a_dry_run_leaves_what_a_crashed_run_changed_and_its_journal(
    tmp_path: Path, sleeper: int
) -> None:
    assert needs_two_cpus, "this test needs 2 CPUs (the project's machines have 2)"
    crashed = Actuator(tmp_path / "journal.json")
    crashed.set_affinity("affinity/vm/vcpu0", sleeper, {1})
    journal = (tmp_path / "journal.json").read_bytes()
    dry = Actuator(tmp_path / "journal.json", dry_run=True)
    assert dry.pending
    lines = dry.restore_all()
    assert lines == [f"restore: affinity/vm/vcpu0: thread {sleeper} would go back on cpus "
                     f"{tuple(sorted(ALL))}"]
    assert affinity_from_proc(sleeper) == "1"  # left as the crashed run left it
    assert (tmp_path / "journal.json").read_bytes() == journal  # for the next real run
    assert Actuator(tmp_path / "journal.json").restore_all()
    assert os.sched_getaffinity(sleeper) == ALL
