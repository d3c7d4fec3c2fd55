"""OBS-C's credit for a libvirt domain goes through libvirt's cpu_shares, on a real
libvirtd: QEMU and its threads never leave the cgroups libvirt gave them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unicache.host.libvirt.source import LibvirtVmSource
from unicache.host.libvirt.weights import LibvirtWeights

from tests.libvirt.conftest import URI, Libvirtd


@pytest.fixture
def source(libvirtd: Libvirtd) -> Iterator[LibvirtVmSource]:
    src = LibvirtVmSource(URI, reconnect_interval_s=0.2)
    src.connect()
    yield src
    src.close()


def _schedinfo_shares(name: str) -> int:
    out = subprocess.run(["virsh", "-c", URI, "schedinfo", name, "--live"],
                         capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("cpu_shares"))
    return int(line.split(":")[1])


def _cgroups(pid: int, tids: list[int]) -> dict[int, str]:
    return {t: Path(f"/proc/{pid}/task/{t}/cgroup").read_text() for t in [pid, *tids]}


def test_credit_sets_the_domains_cpu_shares_and_never_moves_qemu(
    source: LibvirtVmSource, make_domain: Any, tmp_path: Path
) -> None:
    dom = make_domain("shares", vcpus=2)
    (vm,) = [v for v in source.running() if v.name == dom.name()]
    tids = sorted(vm.vcpu_threads.values())
    before = _cgroups(vm.pid, tids)
    original = source.cpu_shares(dom.name())
    assert _schedinfo_shares(dom.name()) == original
    weights = LibvirtWeights(source, tmp_path / "libvirt-shares.json")
    for vcpu, tid in sorted(vm.vcpu_threads.items()):
        weights.set_weight(dom.name(), vm.pid, vcpu, tid, 1500)  # both credited 50 %
    assert _schedinfo_shares(dom.name()) == round(original * 1.5)
    assert _cgroups(vm.pid, tids) == before  # libvirt's cgroups, untouched
    assert weights.restore_all() == [
        f"restore: domain {dom.name()} cpu_shares back to {original}"]
    assert _schedinfo_shares(dom.name()) == original
