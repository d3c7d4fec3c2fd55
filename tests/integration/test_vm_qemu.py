"""Real QEMU (TCG here, KVM where the probe finds it): one guest boot for the whole module.

The guest image is built with ``make image`` when missing (a few minutes the first time).
If QEMU cannot boot the guest, every test here fails (an error in the fixture), never skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.qemu import (
    GuestImage,
    QemuVm,
    VmConfig,
    ensure_image,
    list_vms,
    parse_numa,
    read_record,
)

VM_NAME = "uctest-qemu"
BOOT_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> GuestImage:
    tr = request.config.pluginmanager.get_plugin("terminalreporter")

    def progress(line: str) -> None:
        if tr is not None and line:
            tr.write_line(f"[make image] {line}")

    return ensure_image(progress)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vms")


@pytest.fixture(scope="module")
def vm(image: GuestImage, state: Path, request: pytest.FixtureRequest) -> Iterator[QemuVm]:
    # 2 vCPUs, one per node, plus a memory-only node
    numa = parse_numa("0:320/1:320/-:128", vcpus=2, memory_mib=768)
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    machine = QemuVm(VmConfig(VM_NAME, vcpus=2, memory_mib=768, numa=numa,
                              image_dir=image.directory), state,
                     progress=(lambda msg: tr.write_line(f"[vm] {msg}")) if tr else None)
    machine.start()
    try:
        waited = machine.wait_for_boot(BOOT_TIMEOUT_S)
        if tr is not None and machine.accel is not None:
            tr.write_line(f"[vm] {machine.accel.line()}; booted in {waited:.1f} s")
        yield machine
    finally:
        machine.stop(timeout=10.0)


def test_guest_runs_the_image_kernel(vm: QemuVm, image: GuestImage) -> None:
    res = vm.run_in_guest(["uname", "-r"])
    assert res.ok, res
    assert res.stdout.strip() == image.kernel_version


def test_guest_python3_sees_both_vcpus(vm: QemuVm) -> None:
    code = "import os, sys; print(os.cpu_count(), sys.version_info[0])"
    res = vm.run_in_guest(["python3", "-c", code])
    assert res.ok, res
    assert res.stdout.split() == ["2", "3"]


def test_guest_has_three_numa_nodes_one_memory_only(vm: QemuVm) -> None:
    res = vm.run_in_guest(["sh", "-c", "cd /sys/devices/system/node && "
                           "for n in node*; do echo $n $(cat $n/cpulist); done"])
    assert res.ok, res
    lines = sorted(res.stdout.strip().splitlines())
    assert lines == ["node0 0", "node1 1", "node2"]


def test_agent_and_shim_are_installed_and_the_agent_runs(vm: QemuVm) -> None:
    res = vm.run_in_guest(["sh", "-c", "test -f /usr/lib/unicache-agent/libunicache.so && "
                           "unicache-agent --version && ps -eo args"])
    assert res.ok, res
    assert "unicache-agent" in res.stdout
    assert "python3 -m unicache_agent" in res.stdout


def test_shim_loads_into_a_guest_process(vm: QemuVm) -> None:
    res = vm.run_in_guest(["sh", "-c", "grep -c unicache /proc/self/maps"],
                          env={"LD_PRELOAD": "/usr/lib/unicache-agent/libunicache.so"})
    assert res.ok, res
    assert int(res.stdout) >= 1


def test_runner_returns_exit_code_stdout_and_stderr(vm: QemuVm) -> None:
    res = vm.run_in_guest(["sh", "-c", "echo out; echo err >&2; echo $GREETING; exit 3"],
                          env={"GREETING": "hi"})
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\nhi\n", "err\n")
    assert not res.ok


def test_runner_feeds_stdin(vm: QemuVm) -> None:
    res = vm.run_in_guest(["wc", "-l"], stdin="a\nb\nc\n")
    assert res.ok and res.stdout.strip() == "3"


def test_runner_kills_a_command_at_its_timeout(vm: QemuVm) -> None:
    t0 = time.monotonic()
    res = vm.run_in_guest(["sleep", "30"], timeout=1.0)
    assert res.timed_out and not res.ok
    assert time.monotonic() - t0 < 15


def test_runner_bounds_the_output(vm: QemuVm) -> None:
    res = vm.run_in_guest(["python3", "-c", "print('x' * 3000000)"])
    assert res.exit_code == 0 and res.truncated
    assert len(res.stdout) == 1 << 20


def test_runner_reports_a_command_that_cannot_start(vm: QemuVm) -> None:
    res = vm.run_in_guest(["/no/such/program"])
    assert res.exit_code == -1 and res.error is not None and "/no/such/program" in res.error


def test_vcpu_threads_are_distinct_live_threads_named_per_vcpu(vm: QemuVm) -> None:
    threads = vm.vcpu_threads()
    assert sorted(threads) == [0, 1]
    assert len(set(threads.values())) == 2
    accel = vm.record.accel.upper()
    for index, tid in threads.items():
        comm = Path(f"/proc/{vm.pid}/task/{tid}/comm").read_text().strip()
        assert comm == f"CPU {index}/{accel}"


def test_registry_lists_the_running_vm(vm: QemuVm, state: Path) -> None:
    recs = {r.name: r for r in list_vms(state)}
    assert VM_NAME in recs
    rec = recs[VM_NAME]
    assert rec.pid == vm.pid and rec.vcpus == 2 and rec.memory_mib == 768
    assert [n.memory_mib for n in rec.numa] == [320, 320, 128]
    raw = json.loads((state / f"{VM_NAME}.json").read_text())
    assert (raw["kind"], raw["version"]) == ("vm-record", 1)  # a statefile checkpoint
    for key in ("name", "pid", "qmp_socket", "agent_socket", "control_socket", "vcpus",
                "memory_mib", "accel", "numa"):
        assert key in raw["payload"]
    assert Path(rec.qmp_socket).is_socket()


def test_attach_finds_the_vm_from_its_record(vm: QemuVm, state: Path) -> None:
    other = QemuVm.attach(VM_NAME, state)
    assert other.pid == vm.pid
    assert other.vcpu_threads() == vm.vcpu_threads()


def test_agent_connects_to_the_host_channel(vm: QemuVm, state: Path) -> None:
    from unicache.channel.server import ChannelServer

    async def handshake() -> tuple[bool, str | None]:
        server = ChannelServer(state / "channel")
        try:
            await server.add_vm(VM_NAME, vm.agent_socket)
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline and not server.is_ready(VM_NAME):
                await asyncio.sleep(0.2)
            st = server.status()[0]
            return server.is_ready(VM_NAME), st.agent
        finally:
            await server.close()

    # QEMU connects to the channel's socket (reconnect=1) and the agent then says hello
    ready, agent = asyncio.run(handshake())
    assert ready, f"agent did not complete the handshake; console: {vm.console_tail(3)}"
    assert agent is not None and "unicache-agent" in agent


def test_stop_powers_off_and_leaves_no_process(vm: QemuVm, state: Path) -> None:
    pid = vm.pid
    how = vm.stop(timeout=20.0)
    assert how == "powerdown"
    assert not Path(f"/proc/{pid}").exists()
    assert read_record(state / f"{VM_NAME}.json") is None
    assert list_vms(state) == []
    # nothing of this VM left in the process table
    mine = [p for p in os.listdir("/proc") if p.isdigit() and VM_NAME in _cmdline(p)]
    assert mine == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_a_guest_that_cannot_boot_is_reported_with_its_console_line(
        image: GuestImage, state: Path) -> None:
    from unicache.errors import VmError

    bad = QemuVm(VmConfig("uctest-noroot", vcpus=1, memory_mib=256, image_dir=image.directory,
                          append=("unicache.init=/no/init",)), state)
    bad.start()
    try:
        with pytest.raises(VmError, match="UNICACHE-INITRAMFS-FAILED: no /no/init in /dev/vda"):
            bad.wait_for_boot(BOOT_TIMEOUT_S)
    finally:
        bad.stop(timeout=2.0)
    assert list_vms(state) == []
