"""CPU weights through their owner: unicache's cgroups for its own QEMU, libvirt's
cpu_shares for libvirt domains. Journaled first, unchanged values never rewritten,
everything put back (tests/libvirt/test_libvirt_weights.py runs the libvirt path on a
real libvirtd)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from unicache.host.libvirt.weights import LibvirtWeights, domain_shares
from unicache.host.linux.cgroup import CgroupWeights
from unicache.policy.obs.policy import BASE_CPU_WEIGHT


class FakeLibvirt:
    """The two libvirt calls, on a dict (libvirt itself: tests/libvirt)."""

    def __init__(self, shares: dict[str, int]) -> None:
        self.shares = dict(shares)
        self.writes: list[tuple[str, int]] = []

    def cpu_shares(self, name: str) -> int:
        if name not in self.shares:
            raise OSError(f"schedinfo {name}: domain not found")
        return self.shares[name]

    def set_cpu_shares(self, name: str, shares: int) -> None:
        if name not in self.shares:
            raise OSError(f"schedinfo {name}: domain not found")
        self.shares[name] = shares
        self.writes.append((name, shares))


def test_a_domains_shares_follow_the_mean_credit_of_its_vcpus() -> None:
    assert domain_shares(1024, [BASE_CPU_WEIGHT] * 4) == 1024  # no credit: unchanged
    assert domain_shares(100, [1020, 1020]) == 102  # credited 2 %
    assert domain_shares(1024, [980, 1020]) == 1024  # one gives, one takes
    assert domain_shares(1024, [1]) == 2  # libvirt's floor
    assert domain_shares(200_000, [10_000]) == 262_144  # and its ceiling


def test_libvirt_shares_are_journaled_first_written_once_and_restored(tmp_path: Path) -> None:
    libvirt = FakeLibvirt({"web": 1024, "db": 100})
    journal = tmp_path / "libvirt-shares.json"
    weights = LibvirtWeights(libvirt, journal)
    weights.set_weight("web", 0, 0, 0, 1020)
    assert json.loads(journal.read_text())["payload"] == {"shares": {"web": 1024}}
    assert journal.stat().st_mode & 0o777 == 0o600
    weights.set_weight("web", 0, 1, 0, 1020)  # the same mean: nothing written
    weights.set_weight("db", 0, 0, 0, 980)
    assert libvirt.writes == [("web", 1044), ("db", 98)]
    assert weights.restore_all() == [
        "restore: domain db cpu_shares back to 100", "restore: domain web cpu_shares back to 1024"
    ]
    assert libvirt.shares == {"web": 1024, "db": 100}
    assert json.loads(journal.read_text())["payload"] == {"shares": {}}


def test_after_a_crash_the_next_start_restores_the_journaled_shares(tmp_path: Path) -> None:
    libvirt = FakeLibvirt({"web": 1024, "gone": 50})
    journal = tmp_path / "libvirt-shares.json"
    crashed = LibvirtWeights(libvirt, journal)
    crashed.set_weight("web", 0, 0, 0, 1500)
    crashed.set_weight("gone", 0, 0, 0, 1500)
    del libvirt.shares["gone"]  # destroyed while the daemon was down
    lines = LibvirtWeights(libvirt, journal).restore_all()
    assert libvirt.shares == {"web": 1024}
    assert lines[0].startswith("restore: domain gone cpu_shares: ")
    assert lines[1] == "restore: domain web cpu_shares back to 1024"


@pytest.fixture
def cgroupfs(tmp_path: Path) -> Path:
    """The files of a cgroup v2 root the weights touch (the kernel's semantics aside)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    return root


def test_unicache_cgroups_journal_the_move_first_and_never_rewrite_a_weight(
    cgroupfs: Path, tmp_path: Path
) -> None:
    pid = os.getpid()
    original = next(x[3:] for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                    if x.startswith("0::"))
    journal = tmp_path / "cgroups.json"
    weights = CgroupWeights(cgroupfs, journal)
    weights.set_weight("vm1", pid, 0, 4242, 1020)
    assert json.loads(journal.read_text())["payload"] == {"moved": {str(pid): original}}
    leaf = cgroupfs / "unicache" / "vm1" / "vcpu0"
    assert (cgroupfs / "unicache" / "vm1" / "cgroup.procs").read_text() == str(pid)
    assert (leaf / "cgroup.type").read_text() == "threaded"
    assert ((leaf / "cgroup.threads").read_text(), (leaf / "cpu.weight").read_text()) == (
        "4242", "1020")
    (leaf / "cpu.weight").write_text("untouched")
    weights.set_weight("vm1", pid, 0, 4242, 1020)  # unchanged: no write
    assert (leaf / "cpu.weight").read_text() == "untouched"
    weights.set_weight("vm1", pid, 0, 4242, 99_999)  # clamped to cgroup v2's range
    assert (leaf / "cpu.weight").read_text() == "10000"
    lines = weights.restore_all()
    assert lines == [f"restore: process {pid} back in cgroup {original}"]
    assert (cgroupfs / original.lstrip("/") / "cgroup.procs").read_text() == str(pid)
    assert json.loads(journal.read_text())["payload"] == {"moved": {}}


def test_a_dry_run_of_unicache_cgroups_returns_the_writes_and_makes_none(
    cgroupfs: Path, tmp_path: Path
) -> None:
    pid = os.getpid()
    original = next(x[3:] for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                    if x.startswith("0::"))
    journal = tmp_path / "cgroups.json"
    before = sorted(cgroupfs.rglob("*"))
    dry = CgroupWeights(cgroupfs, journal, dry_run=True)
    domain, leaf = cgroupfs / "unicache" / "vm1", cgroupfs / "unicache" / "vm1" / "vcpu0"
    wanted = (
        f"{domain}/",
        f"{cgroupfs}/cgroup.subtree_control = +cpu",
        f"{cgroupfs}/unicache/cgroup.subtree_control = +cpu",
        f"{domain}/cgroup.procs = {pid}",
        f"{domain}/cgroup.subtree_control = +cpu",
        f"{leaf}/",
        f"{leaf}/cgroup.type = threaded",
        f"{leaf}/cgroup.threads = 4242",
        f"{leaf}/cpu.weight = 1020",
    )
    assert dry.set_weight("vm1", pid, 0, 4242, 1020) == wanted
    assert dry.set_weight("vm1", pid, 0, 4242, 1020) == wanted  # nothing applied: again
    assert sorted(cgroupfs.rglob("*")) == before and not journal.exists()
    assert dry.restore_all() == [] and not journal.exists()
    # the same plan is what a real run writes, in that order
    real = CgroupWeights(cgroupfs, journal)
    assert real.set_weight("vm1", pid, 0, 4242, 1020) == wanted
    assert (leaf / "cpu.weight").read_text() == "1020"
    assert real.set_weight("vm1", pid, 0, 4242, 1020) == ()  # unchanged: no write
    assert real.set_weight("vm1", pid, 0, 4242, 990) == (f"{leaf}/cgroup.threads = 4242",
                                                         f"{leaf}/cpu.weight = 990")
    # a dry run after a crash says what the recovery would put back, and puts back nothing
    assert CgroupWeights(cgroupfs, journal, dry_run=True).restore_all() == [
        f"restore: process {pid} would go back in cgroup {original}"]
    assert (cgroupfs / "unicache" / "vm1" / "cgroup.procs").read_text() == str(pid)
    real.restore_all()


def test_a_dry_run_of_libvirt_shares_returns_the_shares_and_sets_none(tmp_path: Path) -> None:
    libvirt = FakeLibvirt({"web": 1024, "db": 100})
    journal = tmp_path / "libvirt-shares.json"
    dry = LibvirtWeights(libvirt, journal, dry_run=True)
    assert dry.set_weight("web", 0, 0, 0, 1020) == ("domain web cpu_shares = 1044",)
    assert dry.set_weight("web", 0, 1, 0, 1020) == ("domain web cpu_shares = 1044",)
    assert dry.set_weight("db", 0, 0, 0, 980) == ("domain db cpu_shares = 98",)
    assert libvirt.writes == [] and libvirt.shares == {"web": 1024, "db": 100}
    assert not journal.exists()  # nothing journaled: nothing to restore
    assert dry.restore_all() == [] and libvirt.writes == []
    with pytest.raises(OSError, match="domain not found"):  # the same failure as a real run
        dry.set_weight("gone", 0, 0, 0, 1020)
    # after a crash, a dry run reads the journal and says what it would put back
    crashed = LibvirtWeights(libvirt, journal)
    assert crashed.set_weight("web", 0, 0, 0, 1500) == ("domain web cpu_shares = 1536",)
    dry = LibvirtWeights(libvirt, journal, dry_run=True)
    assert dry.restore_all() == ["restore: domain web cpu_shares would go back to 1024"]
    assert libvirt.shares["web"] == 1536
    # its weights are worked out from the journaled original, not the changed shares
    assert dry.set_weight("web", 0, 0, 0, 1020) == ("domain web cpu_shares = 1044",)
