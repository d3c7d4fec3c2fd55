"""A driver without QMP (Xen/libxl, here libvirt's in-process test driver): listed without
host threads, one line saying so, and pinned through the same libvirt calls."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from unicache.host.libvirt.actuator import LibvirtActuator
from unicache.host.libvirt.source import LibvirtVmSource

TEST_URI = "test:///default"  # libvirt's test driver: one running domain "test", 8 CPUs


@pytest.fixture
def source() -> LibvirtVmSource:
    src = LibvirtVmSource(TEST_URI)
    src.connect()
    return src


def test_a_driver_without_qmp_lists_domains_without_threads_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="unicache.host.libvirt.source"):
        src = LibvirtVmSource(TEST_URI)
        src.connect()
        vms = src.running()
        src.running()
    assert [(vm.name, dict(vm.vcpu_threads)) for vm in vms] == [("test", {})]
    lines = [r.getMessage() for r in caplog.records if "no QMP" in r.getMessage()]
    assert lines == [
        "libvirt driver TEST: no QMP, so no host vCPU threads or per-thread counters; "
        "vCPUs are pinned through libvirt vcpupin only"
    ]


def test_pinning_without_threads_goes_through_libvirt_and_is_restored(
    source: LibvirtVmSource, tmp_path: Path
) -> None:
    source.running()
    everything = frozenset(range(source.host_cpus()))
    original = source.vcpu_pins("test")
    actuator = LibvirtActuator(tmp_path / "journal.json", source)
    actuator.set_affinity("affinity/test/vcpu0", 0, {1})
    assert source.vcpu_pins("test")[0] == {1}
    assert source.emulator_pins("test") == everything - {1}
    lines = actuator.restore_all()
    assert source.vcpu_pins("test") == original, lines
    assert source.emulator_pins("test") == everything
    assert actuator.pending == ()


def test_an_unknown_vm_key_goes_to_the_thread_actuator(
    source: LibvirtVmSource, tmp_path: Path
) -> None:
    source.running()
    actuator = LibvirtActuator(tmp_path / "journal.json", source)
    with pytest.raises(ProcessLookupError):  # tid 0 is no thread: plain sched_setaffinity path
        actuator.set_affinity("affinity/not-a-domain/vcpu0", 0x7FFFFFF0, {0})


def test_a_domain_that_cannot_be_reread_for_a_round_is_kept(
    source: LibvirtVmSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    import libvirt

    first = source.running()

    def broken(dom: object) -> None:
        raise libvirt.libvirtError("monitor busy")

    monkeypatch.setattr(source, "_refresh", broken)
    def shape(vms: list) -> list:  # the vCPU CPU times move every round; the domain stays
        return [(vm.name, vm.pid, dict(vm.vcpu_threads), sorted(vm.vcpu_times)) for vm in vms]

    assert shape(source.running()) == shape(first)  # dropping it would forget its pins
    monkeypatch.undo()
    assert shape(source.running()) == shape(first)


def test_the_daemon_observes_and_pins_vcpus_that_have_no_host_thread(
    source: LibvirtVmSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import json

    from unicache.config import DaemonConfig
    from unicache.daemon import run_daemon
    from unicache.topology import Unify

    source.running()
    original = source.vcpu_pins("test")
    monkeypatch.setattr(source, "close", lambda: None)  # keep it open to check the pins after
    # the test driver's vCPUs weigh nothing: OBS would leave them unpinned (its step-aside)
    config = DaemonConfig(interval_s=0.05, unify=Unify.L2, state_dir=tmp_path, rounds=3,
                          always_place=True)
    assert asyncio.run(run_daemon(config, source)) == 0
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    pins = [r for r in records if r["kind"] == "pin-vcpu" and r["vm"] == "test"]
    assert {r["vcpu"] for r in pins} == {0, 1}  # both vCPUs placed, through libvirt
    assert not [r for r in records if r["kind"] == "failed" and r.get("vm") == "test"]
    assert any(r.get("message", "").endswith("(libvirt)") for r in records)  # restored by libvirt
    assert source.vcpu_pins("test") == original
