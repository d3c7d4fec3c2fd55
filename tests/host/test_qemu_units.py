"""The QEMU backend's pure parts (no VM): NUMA specs, QMP reply checks, argv, registry, accel."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from unicache.errors import ConfigError, ProtocolError
from unicache.host.qemu import (
    GuestImage,
    GuestNodeSpec,
    QemuVm,
    VmConfig,
    VmRecord,
    ensure_image,
    list_vms,
    load_image,
    parse_cpus_fast,
    parse_numa,
    read_record,
)
from unicache.host.qemu import accel as accel_mod
from unicache.host.qemu.accel import AccelChoice, choose_accel, kvm_usable, probe_kvm
from unicache.host.qemu.registry import write_record

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("spec", "vcpus", "mem", "want"),
    [
        ("0-1:1024", 2, 1024, [(0, {0, 1}, 1024)]),
        ("0:512/1:512", 2, 1024, [(0, {0}, 512), (1, {1}, 512)]),
        ("0-1:768/-:256", 2, 1024, [(0, {0, 1}, 768), (1, set(), 256)]),
        ("0,2:300/1,3:300/:100", 4, 700, [(0, {0, 2}, 300), (1, {1, 3}, 300), (2, set(), 100)]),
    ],
    ids=["one-node", "two-nodes", "memory-only-dash", "memory-only-empty"],
)
def test_parse_numa_accepts_layouts(spec: str, vcpus: int, mem: int,
                                    want: list[tuple[int, set[int], int]]) -> None:
    nodes = parse_numa(spec, vcpus, mem)
    assert [(n.node, set(n.cpus), n.memory_mib) for n in nodes] == want


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0-1", "expected CPULIST:MIB"),
        ("0-1:abc", "expected CPULIST:MIB"),
        ("0:512", "leaves vCPU 1 on no node"),
        ("0-2:1024", "vCPU 2 does not exist"),
        ("0-1:512/1:512", "vCPU 1 is on two nodes"),
        ("0-1:512", "has 512 MiB, the VM has 1024 MiB"),
        ("0-1:1024/-:0", "memory must be positive"),
    ],
    ids=["no-memory", "bad-memory", "unplaced-vcpu", "unknown-vcpu", "vcpu-twice",
         "memory-sum", "zero-memory"],
)
def test_parse_numa_refuses_bad_layouts(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_numa(spec, 2, 1024)


def test_cpus_fast_reply_maps_index_to_thread() -> None:
    reply = [{"cpu-index": 1, "thread-id": 202, "qom-path": "/x"},
             {"cpu-index": 0, "thread-id": 201}]
    assert parse_cpus_fast(reply) == {0: 201, 1: 202}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"cpu-index": 0}, "must be a list"),
        ([1], "items must be objects"),
        ([{"cpu-index": 0}], "'query-cpus-fast' reply requires 'thread-id' member"),
        ([{"thread-id": 5}], "'query-cpus-fast' reply requires 'cpu-index' member"),
        ([{"cpu-index": 0, "thread-id": "5"}], "requires 'thread-id' member"),
        ([{"cpu-index": 0, "thread-id": True}], "requires 'thread-id' member"),
    ],
    ids=["not-list", "not-object", "no-thread-id", "no-cpu-index", "str-tid", "bool-tid"],
)
def test_cpus_fast_reply_is_checked_at_the_boundary(reply: object, message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as info:
        parse_cpus_fast(reply)
    assert info.value.kind == "qmp-reply"


def _image(tmp_path: Path) -> GuestImage:
    return GuestImage(tmp_path, tmp_path / "vmlinuz", tmp_path / "initrd.img",
                      tmp_path / "rootfs.ext4", "6.1.0-test")


def test_command_line_has_ports_qmp_snapshot_and_numa(tmp_path: Path) -> None:
    numa = parse_numa("0:256/1:256/-:128", 2, 640)
    vm = QemuVm(VmConfig("a1", vcpus=2, memory_mib=640, numa=numa), tmp_path)
    argv = " ".join(vm.command_line(_image(tmp_path), "tcg")) + " "
    assert "-name guest=a1,debug-threads=on" in argv
    assert "-accel tcg -smp 2 -m 640M" in argv
    assert f"file={tmp_path / 'rootfs.ext4'},format=raw,if=virtio,snapshot=on" in argv
    assert f"socket,id=uc0,path={tmp_path / 'a1' / 'agent.sock'},reconnect=1" in argv
    assert "name=org.unicache.agent.0" in argv and "name=org.unicache.control.0" in argv
    assert f"-qmp unix:{tmp_path / 'a1' / 'qmp.sock'},server=on,wait=off" in argv
    assert "-numa node,nodeid=0,memdev=mem0,cpus=0 " in argv
    assert "-numa node,nodeid=2,memdev=mem2 " in argv
    assert "memory-backend-ram,id=mem2,size=128M" in argv


def test_command_line_agent_listen_makes_qemu_the_server(tmp_path: Path) -> None:
    sock = tmp_path / "x.sock"
    vm = QemuVm(VmConfig("a2", agent_socket=sock, agent_listen=True), tmp_path)
    argv = vm.command_line(_image(tmp_path), "kvm")
    assert f"socket,id=uc0,path={sock},server=on,wait=off" in argv
    assert vm.agent_socket == sock


def test_command_line_of_a_systemd_image_without_the_agent_port_keeping_its_writes(
        tmp_path: Path) -> None:
    image = replace(_image(tmp_path), init="/lib/systemd/systemd")
    vm = QemuVm(VmConfig("a3", agent_channel=False, keep_disk_writes=True), tmp_path)
    argv = " ".join(vm.command_line(image, "tcg")) + " "
    assert "name=org.unicache.agent.0" not in argv and "id=uc0" not in argv
    assert "name=org.unicache.control.0" in argv
    assert f"file={tmp_path / 'rootfs.ext4'},format=raw,if=virtio " in argv
    assert "unicache.init=/lib/systemd/systemd" in argv
    # the image's own init needs no switch
    assert "unicache.init" not in " ".join(QemuVm(VmConfig("a4"), tmp_path).command_line(
        _image(tmp_path), "tcg"))


def test_user_network_and_kernel_words_only_when_asked(tmp_path: Path) -> None:
    seed = "ds=nocloud-net;s=http://10.0.2.2:8000/"
    vm = QemuVm(VmConfig("n1", user_network=True, append=(seed,)), tmp_path)
    argv = vm.command_line(_image(tmp_path), "tcg")
    assert argv[argv.index("-nic") + 1] == "user,model=virtio-net-pci"
    assert argv.count("-nic") == 1
    # one -append, the extra word last and whole (QEMU passes it to the kernel unquoted)
    assert argv.count("-append") == 1
    assert argv[argv.index("-append") + 1].split(" ")[-1] == seed
    # by default: no NIC of any kind (-nodefaults drops QEMU's own) and no extra words
    plain = QemuVm(VmConfig("n2"), tmp_path).command_line(_image(tmp_path), "tcg")
    assert "-nic" not in plain and "-netdev" not in plain and "-nodefaults" in plain
    assert "ds=" not in plain[plain.index("-append") + 1]


def test_a_guest_clock_that_counts_instructions_only_under_tcg(tmp_path: Path) -> None:
    vm = QemuVm(VmConfig("ic1", vcpus=1, icount_shift=0), tmp_path)
    argv = vm.command_line(_image(tmp_path), "tcg")
    assert argv[argv.index("-icount") + 1] == "shift=0,sleep=off"
    with pytest.raises(ConfigError, match="needs TCG"):
        vm.command_line(_image(tmp_path), "kvm")
    assert "-icount" not in QemuVm(VmConfig("ic2"), tmp_path).command_line(
        _image(tmp_path), "tcg")
    with pytest.raises(ConfigError, match="icount_shift must be 0..10"):
        VmConfig("ic3", icount_shift=11)


@pytest.mark.parametrize("name", ["", "a/b", ".hidden", "x" * 64, "sp ace"],
                         ids=["empty", "slash", "dot", "too-long", "space"])
def test_vm_config_refuses_bad_names(name: str) -> None:
    with pytest.raises(ConfigError, match="bad VM name"):
        VmConfig(name)


def _record(name: str, pid: int, ticks: int) -> VmRecord:
    return VmRecord(name, pid, ticks, "/q", "/a", False, "/c", "/log", 2, 512, "tcg",
                    (GuestNodeSpec(0, frozenset({0, 1}), 512),), "/run", 1.0)


def _ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[19])


def test_record_round_trips_through_json() -> None:
    rec = _record("r1", 1, 2)
    assert VmRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_record_with_a_missing_member_is_refused() -> None:
    raw = _record("r1", 1, 2).to_json()
    del raw["qmp_socket"]
    with pytest.raises(ConfigError, match="'qmp_socket'"):
        VmRecord.from_json(raw)


def test_list_vms_keeps_live_records_and_drops_dead_ones(tmp_path: Path) -> None:
    live = _record("live", os.getpid(), _ticks(os.getpid()))
    dead_proc = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_ticks = _ticks(dead_proc.pid)
    dead_proc.wait()
    dead = _record("dead", dead_proc.pid, dead_ticks)
    reused = _record("reused", os.getpid(), _ticks(os.getpid()) + 1)  # same pid, other start
    for rec in (live, dead, reused):
        (tmp_path / f"{rec.name}.json").write_text(json.dumps(rec.to_json()))
    (tmp_path / "garbage.json").write_text("{not json")
    assert [r.name for r in list_vms(tmp_path)] == ["live"]
    assert not (tmp_path / "dead.json").exists()
    assert not (tmp_path / "reused.json").exists()


def test_a_record_is_a_private_checkpoint_and_a_bare_one_of_older_versions_still_reads(
        tmp_path: Path) -> None:
    rec = _record("r1", 1, 2)
    write_record(tmp_path / "r1.json", rec)
    saved = json.loads((tmp_path / "r1.json").read_text())
    assert (saved["kind"], saved["version"], saved["payload"]) == ("vm-record", 1, rec.to_json())
    assert stat.S_IMODE((tmp_path / "r1.json").stat().st_mode) == 0o600
    assert read_record(tmp_path / "r1.json") == rec
    (tmp_path / "old.json").write_text(json.dumps(rec.to_json()))  # before checkpoints
    assert read_record(tmp_path / "old.json") == rec


def test_an_edited_record_is_ignored_with_a_warning_and_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "live.json"
    write_record(path, _record("live", os.getpid(), _ticks(os.getpid())))
    saved = json.loads(path.read_text())
    saved["payload"]["memory_mib"] = 4096
    path.write_text(json.dumps(saved))
    with caplog.at_level(logging.WARNING, logger="unicache.host.qemu"):
        assert list_vms(tmp_path) == []
    assert "does not match its checksum" in caplog.text
    assert path.exists()


def test_load_image_without_a_build_says_make_image(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run `make image`"):
        load_image(tmp_path)


def test_accel_override_skips_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel_mod, "probe_kvm", lambda *a, **k: pytest.fail("probed"))
    got = choose_accel(tmp_path / "k", tmp_path / "i", tmp_path, requested="tcg")
    assert got == AccelChoice("tcg", "requested")
    monkeypatch.setenv("UNICACHE_ACCEL", "tcg")
    assert choose_accel(tmp_path / "k", tmp_path / "i", tmp_path).accel == "tcg"
    with pytest.raises(ConfigError, match="unknown accelerator 'xen'"):
        choose_accel(tmp_path / "k", tmp_path / "i", tmp_path, requested="xen")


def test_accel_probe_result_is_cached_per_boot(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_probe(kernel: Path, initrd: Path, timeout_s: float) -> AccelChoice:
        calls.append(kernel)
        return AccelChoice("tcg", "KVM probe did not reach guest userspace in 20 s")

    monkeypatch.delenv("UNICACHE_ACCEL", raising=False)
    monkeypatch.setattr(accel_mod, "probe_kvm", fake_probe)
    first = choose_accel(tmp_path / "k", tmp_path / "i", tmp_path)
    second = choose_accel(tmp_path / "k", tmp_path / "i", tmp_path)
    assert len(calls) == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.accel == first.accel and second.reason == first.reason
    assert "cached" in second.line() and second.line().startswith("accelerator: tcg (")
    # another guest kernel is another key: probed again
    choose_accel(tmp_path / "k2", tmp_path / "i", tmp_path)
    assert len(calls) == 2


def test_real_probe_decides_within_its_timeout() -> None:
    image = ensure_image()
    t0 = time.monotonic()
    got = probe_kvm(image.kernel, image.initrd, timeout_s=6.0)
    assert time.monotonic() - t0 < 12.0
    assert got.accel in ("kvm", "tcg") and got.reason
    if kvm_usable() is not None:
        assert got.accel == "tcg"
