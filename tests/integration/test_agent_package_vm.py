"""The unicache-agent .deb in a guest that boots with systemd and udev (`make image-systemd`),
under real QEMU (TCG here): three boots of one disk, as a user's guest lives.

1. With the agent port attached: the package installs (docs/agent.md's cloud-init
   ``runcmd`` line); udev starts its unit; the agent
   reaches the host channel; the shim is in /etc/ld.so.preload and a plain ``cat`` (no
   LD_PRELOAD) is reported to the host as its 3,000,000 bytes.
2. Without the port: the agent is not running (the unit is bound to the port's device);
   purge leaves /etc/ld.so.preload and the file list as before the install; then the
   package with a shim that crashes every program is installed: one line says why it is
   not preloaded.
3. The guest with that package boots, and ``ls`` runs.

Duration under TCG on the 2-core development host, busy with other VMs (2026-11-26): the
runner answered 88, 86 and 64 s after QEMU started; the test took 6-7 minutes beside the
package build it may trigger (`make packages`, ~3 minutes when an input changed).
The chroot tests of the same packages: tests/packaging/.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from unicache.channel import ChannelParams, ChannelServer
from unicache.host.qemu import QemuVm, VmConfig, ensure_image
from unicache.model import GuestReport

from tests.packaging.chroot import Packages, build_agent_packages, build_packages
from tests.packaging.recipes import cloud_init_runcmd
from tests.packaging.test_agent_package import _broken_shim

BOOT_TIMEOUT_S = 420.0
SHIM = "/usr/lib/unicache-agent/libunicache.so"
#: the guest's own files (what a package may leave behind), not logs, run-time state and
#: the package managers' bookkeeping (dpkg's database, apt's auto-installed marks)
FILE_LIST = ("find /etc /usr /opt /var/lib -xdev -path /var/lib/dpkg -prune -o "
             "-path /var/lib/apt -prune -o -path /var/lib/systemd -prune -o -print | sort")


@pytest.fixture(scope="module")
def packages() -> Packages:
    return build_packages()


@pytest.fixture(scope="module")
def disk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the systemd image whose disk keeps what each boot writes."""
    image = ensure_image(variant="systemd")
    copy = tmp_path_factory.mktemp("systemd-image")
    for name in ("image.json", "vmlinuz", "initrd.img"):
        shutil.copy(image.directory / name, copy / name)
    subprocess.run(["cp", "--sparse=always", str(image.disk), str(copy / image.disk.name)],
                   check=True)
    return copy


def _vm(name: str, disk_dir: Path, state: Path, agent_socket: Path | None) -> QemuVm:
    return QemuVm(VmConfig(name, vcpus=2, memory_mib=768, image_dir=disk_dir,
                           agent_socket=agent_socket, agent_channel=agent_socket is not None,
                           keep_disk_writes=True), state)


def _run(vm: QemuVm, command: str, stdin: str | None = None, timeout: float = 240.0
         ) -> tuple[int, str, str]:
    res = vm.run_in_guest(["sh", "-c", command], timeout=timeout, stdin=stdin)
    return res.exit_code, res.stdout, res.stderr


def _install(vm: QemuVm, deb: Path, recipe: bool = False) -> str:
    """Copy a .deb into the guest (through the runner) and install it: with docs/agent.md's
    cloud-init ``runcmd`` (where its download puts the file), or ``dpkg -i``; its stderr."""
    fetch, install = cloud_init_runcmd()
    where = fetch[fetch.index("-o") + 1] if recipe else "/tmp/p.deb"
    data = base64.b64encode(deb.read_bytes()).decode()
    code, _, err = _run(vm, f"base64 -d > {where}", stdin=data)
    assert code == 0, err
    res = vm.run_in_guest(install if recipe else ["dpkg", "-i", where], timeout=240.0)
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.stderr


def _boot(vm: QemuVm) -> float:
    vm.start()
    waited = vm.wait_for_boot(timeout=BOOT_TIMEOUT_S)
    print(f"{vm.name}: the runner answered {waited:.0f} s after QEMU started")
    return waited


def _stop(vm: QemuVm) -> None:
    _run(vm, "sync")
    vm.stop(timeout=120.0)


def test_the_package_in_a_systemd_guest_with_and_without_the_port(
        packages: Packages, disk_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    broken = build_agent_packages(tmp_path / "broken", _broken_shim("crash", tmp_path))
    reports: list[GuestReport] = []
    timings: dict[str, float] = {}

    async def with_port() -> tuple[str, str]:
        server = ChannelServer(tmp_path / "ch", params=ChannelParams(report_interval_s=0.5),
                               on_report=reports.append)
        sock = await server.add_vm("pkg")
        vm = _vm("uc-pkg-a", disk_dir, state, sock)
        try:
            timings["boot 1"] = await asyncio.to_thread(_boot, vm)
            # before: no preload list, the guest's own files
            code, _, _ = await asyncio.to_thread(_run, vm, "test -e /etc/ld.so.preload")
            assert code == 1
            files_before = (await asyncio.to_thread(_run, vm, FILE_LIST))[1]
            preload_before = "absent"
            # docs/agent.md's cloud-init recipe (its install line)
            err = await asyncio.to_thread(_install, vm, packages.agent_deb, True)
            assert "unicache-agent:" not in err, err
            # udev started the unit (the postinst re-played the port's "add" event)
            t0 = time.monotonic()
            while not server.is_ready("pkg") and time.monotonic() - t0 < 180:
                await asyncio.sleep(0.5)
            assert server.is_ready("pkg"), vm.console_tail(20)
            code, out, _ = await asyncio.to_thread(
                _run, vm, "systemctl is-active unicache-agent; "
                          "systemctl show -p WantedBy -p BindsTo unicache-agent; "
                          "cat /etc/ld.so.preload")
            active, binds_to, wanted_by, preload = out.splitlines()
            assert active == "active", out
            # bound to the port's device, and wanted by it (udev's SYSTEMD_WANTS)
            assert binds_to.startswith("BindsTo=") and (
                "org.unicache.agent.0.device" in binds_to), out
            assert wanted_by.startswith("WantedBy=") and "virtio" in wanted_by, out
            assert preload == SHIM
            # a read by a program started with no LD_PRELOAD goes through the shim
            code, _, err = await asyncio.to_thread(
                _run, vm, "head -c 3000000 /dev/urandom > /tmp/d && cat /tmp/d > /dev/null")
            assert code == 0, err
            seen = False
            while not seen and time.monotonic() - t0 < 300:
                await asyncio.sleep(0.5)
                per_file: dict[int, int] = {}
                for rep in reports:
                    for c in rep.chunks:
                        per_file[c.chunk.file_id] = per_file.get(c.chunk.file_id, 0) + (
                            c.bytes_read)
                seen = 3_000_000 in per_file.values()
            assert seen, "the guest's 3,000,000-byte cat was not reported through the shim"
            await asyncio.to_thread(_stop, vm)
            return files_before, preload_before
        finally:
            await asyncio.to_thread(vm.stop, 5.0, True)
            await server.close()

    files_before, _ = asyncio.run(with_port())

    # 2. no port: no agent; purge restores the system; the broken shim is refused
    vm = _vm("uc-pkg-b", disk_dir, state, None)
    try:
        timings["boot 2"] = _boot(vm)
        code, out, _ = _run(vm, "systemctl is-active unicache-agent; "
                                "pgrep -f 'python3 -m unicache_agen[t]'; cat /etc/ld.so.preload")
        assert out.splitlines() == ["inactive", SHIM], out
        code, out, err = _run(vm, "dpkg -r unicache-agent && dpkg -P unicache-agent")
        assert code == 0, out + err
        code, _, _ = _run(vm, "test -e /etc/ld.so.preload")
        assert code == 1
        files_after = _run(vm, FILE_LIST)[1]
        assert files_after == files_before, _diff(files_before, files_after)
        err = _install(vm, broken.agent_deb)
        said = [line for line in err.splitlines() if line.startswith("unicache-agent:")]
        assert len(said) == 1 and "not added to /etc/ld.so.preload" in said[0], err
        _stop(vm)
    finally:
        vm.stop(5.0, True)

    # 3. the guest with the broken shim installed boots and runs programs
    vm = _vm("uc-pkg-c", disk_dir, state, None)
    try:
        timings["boot 3"] = _boot(vm)
        code, out, err = _run(vm, "ls /usr/lib/unicache-agent")
        assert code == 0 and "libunicache.so" in out and err == "", err
    finally:
        vm.stop(5.0, True)
    print("systemd guest boots (s, TCG, busy host):", json.dumps(timings))


def _diff(before: str, after: str) -> str:
    b, a = set(before.splitlines()), set(after.splitlines())
    return f"new: {sorted(a - b)[:20]} gone: {sorted(b - a)[:20]}"
