"""The unicache-agent .deb in a guest that boots with systemd, udev and cloud-init
(`make image-systemd`), under real QEMU (TCG here): four boots of one disk, as a user's guest
lives. The shim is scoped by default: the package preloads it nowhere.

0. Fresh, no NIC, no seed: the guest's own files, no /etc/ld.so.preload, and cloud-init
   did not run (no datasource: its generator leaves it out of the boot).
1. First boot with a seed: QEMU user networking and ``ds=nocloud-net;s=http://10.0.2.2:PORT/``
   on the kernel command line; a server in this test serves the NoCloud seed, whose
   user-data is docs/agent.md's cloud-init recipe with only its URL's origin replaced, and
   the package. cloud-init ran the recipe (the guest fetched the seed and the package,
   ``cloud-init status`` says done, dpkg has the package); udev started the unit; the agent
   reached the host channel; nothing is in /etc/ld.so.preload; ``unicache-agent scope add
   exe:/usr/bin/cat`` puts the shim there and a plain ``cat`` (no LD_PRELOAD) is reported to
   the host as its 3,000,000 bytes; removing the scope takes the line out again. Then the
   hardened services of tests/packaging/hardened_units.py, each scoped with ``scope add
   unit:NAME`` and started after it: what they did is asserted by
   ``test_hardened_services_scoped_to_the_shim_read_right_and_exit_0``, below, from this
   boot (no boot of its own).
2. Without the port: the agent is not running (the unit is bound to the port's device);
   ``dpkg -r`` deletes the services' drop-ins; purge leaves /etc/ld.so.preload and the file
   list as in boot 0; then the package with a shim that crashes every program installs
   quietly, and ``scope add`` refuses it in one line.
3. The guest with that package boots, and ``ls`` runs.

Duration under TCG on the 2-core development host, busy with other VMs (2026-11-26): see
docs/agent.md (the test prints each boot's seconds). The chroot tests of the same
packages: tests/packaging/.
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
from tests.packaging.hardened_units import (
    ALL_OK,
    UNITS,
    HardenedSeen,
    remove_hardened_units,
    run_hardened_units,
)
from tests.packaging.recipes import cloud_init_package_path, cloud_init_user_data
from tests.packaging.seed_server import SeedServer, serve_seed
from tests.packaging.test_agent_package import _broken_shim

BOOT_TIMEOUT_S = 420.0
#: from QEMU's start until cloud-init's final stage has run the recipe (TCG, busy host)
CLOUD_INIT_TIMEOUT_S = 900.0
SHIM = "/usr/lib/unicache-agent/libunicache.so"
#: the guest's own files (what a package may leave behind), not logs, run-time state
#: (systemd's, cloud-init's) and the package managers' bookkeeping (dpkg's database, apt's
#: auto-installed marks)
FILE_LIST = ("find /etc /usr /opt /var/lib -xdev -path /var/lib/dpkg -prune -o "
             "-path /var/lib/apt -prune -o -path /var/lib/systemd -prune -o "
             "-path /var/lib/cloud -prune -o -print | sort")


@pytest.fixture(scope="module")
def packages() -> Packages:
    return build_packages()


@pytest.fixture(scope="module")
def hardened() -> HardenedSeen:
    """What boot 1 of the package test saw of the hardened services (filled there)."""
    return HardenedSeen()


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


def _vm(name: str, disk_dir: Path, state: Path, agent_socket: Path | None,
        seed: SeedServer | None = None) -> QemuVm:
    """A boot of the disk copy: with the agent port when ``agent_socket``, with a NIC and
    cloud-init's NoCloud seed when ``seed``."""
    return QemuVm(VmConfig(name, vcpus=2, memory_mib=768, image_dir=disk_dir,
                           agent_socket=agent_socket, agent_channel=agent_socket is not None,
                           keep_disk_writes=True, user_network=seed is not None,
                           append=(seed.kernel_word(),) if seed else ()), state)


def _run(vm: QemuVm, command: str, stdin: str | None = None, timeout: float = 240.0
         ) -> tuple[int, str, str]:
    res = vm.run_in_guest(["sh", "-c", command], timeout=timeout, stdin=stdin)
    return res.exit_code, res.stdout, res.stderr


def _install(vm: QemuVm, deb: Path) -> str:
    """Copy a .deb into the guest (through the runner) and ``dpkg -i`` it; its stderr."""
    data = base64.b64encode(deb.read_bytes()).decode()
    code, _, err = _run(vm, "base64 -d > /tmp/p.deb", stdin=data)
    assert code == 0, err
    res = vm.run_in_guest(["dpkg", "-i", "/tmp/p.deb"], timeout=240.0)
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.stderr


def _cloud_init_done(vm: QemuVm, started: float) -> float:
    """Wait for cloud-init's final stage (its ``boot-finished`` file); the guest's uptime
    when cloud-init wrote it."""
    while time.monotonic() - started < CLOUD_INIT_TIMEOUT_S:
        code, out, _ = _run(vm, "cat /var/lib/cloud/instance/boot-finished")
        if code == 0:
            return float(out.split()[0])
        time.sleep(2.0)
    raise AssertionError("cloud-init did not finish: " + _run(
        vm, "cloud-init status --long; tail -n 20 /var/log/cloud-init-output.log")[1])


def _boot(vm: QemuVm) -> float:
    vm.start()
    waited = vm.wait_for_boot(timeout=BOOT_TIMEOUT_S)
    print(f"{vm.name}: the runner answered {waited:.0f} s after QEMU started")
    return waited


def _stop(vm: QemuVm) -> None:
    _run(vm, "sync")
    vm.stop(timeout=120.0)


def test_the_package_in_a_systemd_guest_installed_by_cloud_init_with_and_without_the_port(
        packages: Packages, disk_dir: Path, tmp_path: Path, hardened: HardenedSeen) -> None:
    state = tmp_path / "state"
    broken = build_agent_packages(tmp_path / "broken", _broken_shim("crash", tmp_path))
    reports: list[GuestReport] = []
    timings: dict[str, float] = {}

    # 0. before: no seed, no port; cloud-init stays out of a boot without a datasource
    vm = _vm("uc-pkg-0", disk_dir, state, None)
    try:
        timings["boot 0 (no seed)"] = _boot(vm)
        code, out, _ = _run(vm, "test -e /etc/ld.so.preload; echo $?; "
                                "test -e /var/lib/cloud/instance; echo $?")
        assert out.split() == ["1", "1"], out
        files_before = _run(vm, FILE_LIST)[1]
        _stop(vm)
    finally:
        vm.stop(5.0, True)

    # 1. first boot with a seed: cloud-init runs docs/agent.md's recipe
    deb_path = cloud_init_package_path()
    assert deb_path.endswith("/" + packages.agent_deb.name), deb_path

    async def with_port(seed: SeedServer) -> None:
        server = ChannelServer(tmp_path / "ch", params=ChannelParams(report_interval_s=0.5),
                               on_report=reports.append)
        sock = await server.add_vm("pkg")
        vm = _vm("uc-pkg-a", disk_dir, state, sock, seed)
        try:
            t0 = time.monotonic()
            timings["boot 1 (cloud-init), runner"] = await asyncio.to_thread(_boot, vm)
            uptime = await asyncio.to_thread(_cloud_init_done, vm, t0)
            timings["boot 1, cloud-init done (guest uptime)"] = uptime
            timings["boot 1, cloud-init done (since QEMU start)"] = time.monotonic() - t0
            assert seed.served("/meta-data") and seed.served("/user-data"), seed.asked
            assert seed.served(deb_path), seed.asked  # the recipe's curl line
            code, out, _ = await asyncio.to_thread(
                _run, vm, "cloud-init status --long; dpkg-query -W -f '${Status}\\n' "
                          "unicache-agent; grep -c '^unicache-agent:' "
                          "/var/log/cloud-init-output.log")
            assert "status: done" in out and "DataSourceNoCloudNet" in out, out
            assert "install ok installed" in out, out
            assert out.splitlines()[-1] == "0", out  # the postinst said nothing was wrong
            # udev started the unit (at boot: the port was there when the package came)
            while not server.is_ready("pkg") and time.monotonic() - t0 < (
                    CLOUD_INIT_TIMEOUT_S + 180):
                await asyncio.sleep(0.5)
            assert server.is_ready("pkg"), vm.console_tail(20)
            code, out, _ = await asyncio.to_thread(
                _run, vm, "systemctl is-active unicache-agent; "
                          "systemctl show -p WantedBy -p BindsTo unicache-agent; "
                          "test -e /etc/ld.so.preload; echo preload=$?")
            active, binds_to, wanted_by, preload = out.splitlines()
            assert active == "active", out
            # bound to the port's device, and wanted by it (udev's SYSTEMD_WANTS)
            assert binds_to.startswith("BindsTo=") and (
                "org.unicache.agent.0.device" in binds_to), out
            assert wanted_by.startswith("WantedBy=") and "virtio" in wanted_by, out
            assert preload == "preload=1", out  # scoped by default: preloaded nowhere
            code, out, err = await asyncio.to_thread(
                _run, vm, "unicache-agent scope add exe:/usr/bin/cat && cat /etc/ld.so.preload")
            assert code == 0 and out.splitlines()[-1] == SHIM, out + err
            # a read by a program started with no LD_PRELOAD goes through the shim
            code, _, err = await asyncio.to_thread(
                _run, vm, "head -c 3000000 /dev/urandom > /tmp/d && cat /tmp/d > /dev/null")
            assert code == 0, err
            t1 = time.monotonic()
            seen = False
            while not seen and time.monotonic() - t1 < 300:
                await asyncio.sleep(0.5)
                per_file: dict[int, int] = {}
                for rep in reports:
                    for c in rep.chunks:
                        per_file[c.chunk.file_id] = per_file.get(c.chunk.file_id, 0) + (
                            c.bytes_read)
                seen = 3_000_000 in per_file.values()
            assert seen, "the guest's 3,000,000-byte cat was not reported through the shim"
            code, out, err = await asyncio.to_thread(
                _run, vm, "unicache-agent scope remove exe:/usr/bin/cat; "
                          "test -e /etc/ld.so.preload; echo preload=$?")
            assert out.splitlines()[-1] == "preload=1", out + err

            # hardened services under the shim: recorded here, asserted by the next test
            def run(command: str, stdin: str | None) -> tuple[int, str, str]:
                return _run(vm, command, stdin=stdin)

            await asyncio.to_thread(run_hardened_units, run, hardened)
            await asyncio.to_thread(remove_hardened_units, run)
            await asyncio.to_thread(_stop, vm)
        finally:
            await asyncio.to_thread(vm.stop, 5.0, True)
            await server.close()

    with serve_seed("instance-id: uc-pkg-a\nlocal-hostname: unicache-guest\n",
                    cloud_init_user_data, {deb_path: packages.agent_deb.read_bytes()}) as seed:
        asyncio.run(with_port(seed))

    # 2. no port: no agent; purge restores the system; the broken shim is refused
    vm = _vm("uc-pkg-b", disk_dir, state, None)
    try:
        timings["boot 2"] = _boot(vm)
        code, out, _ = _run(vm, "systemctl is-active unicache-agent; "
                                "pgrep -f 'python3 -m unicache_agen[t]'; "
                                "test -e /etc/ld.so.preload; echo preload=$?")
        assert out.splitlines() == ["inactive", "preload=1"], out
        dropins = "ls /etc/systemd/system/*.d/50-unicache-shim.conf 2>/dev/null | wc -l"
        assert _run(vm, dropins)[1].strip() == str(len(UNITS))  # the hardened services'
        code, out, err = _run(vm, "dpkg -r unicache-agent")
        assert code == 0, out + err
        assert _run(vm, dropins)[1].strip() == "0"  # removal deleted the drop-ins
        code, out, err = _run(vm, "dpkg -P unicache-agent")
        assert code == 0, out + err
        code, _, _ = _run(vm, "test -e /etc/ld.so.preload")
        assert code == 1
        files_after = _run(vm, FILE_LIST)[1]
        assert files_after == files_before, _diff(files_before, files_after)
        err = _install(vm, broken.agent_deb)
        assert not [line for line in err.splitlines() if "unicache-agent:" in line], err
        code, out, err = _run(vm, "unicache-agent scope add exe:/usr/bin/ls; echo exit=$?; "
                                  "test -e /etc/ld.so.preload; echo preload=$?")
        said = [line for line in err.splitlines() if line.startswith("unicache-agent:")]
        assert len(said) == 1 and "does not load in a test process" in said[0], err
        assert out.splitlines()[-2:] == ["exit=1", "preload=1"], out
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


def test_hardened_services_scoped_to_the_shim_read_right_and_exit_0(
        hardened: HardenedSeen) -> None:
    """Services with SystemCallFilter=@system-service, MemoryDenyWriteExecute=yes,
    ProtectSystem=strict and more (tests/packaging/hardened_units.py), each scoped with
    ``unicache-agent scope add unit:NAME`` and started after it, in boot 1 of the test
    above: none failed, each exited 0, each had libunicache.so mapped and read the file's
    bytes through read, pread, readv, preadv and sendfile. A shim that makes a system call
    the filter forbids (process_vm_readv for the iovec of readv, by an earlier shim) is
    killed by SIGSYS: `systemctl start` fails and the unit's Result is "signal"."""
    assert hardened.reached, ("boot 1 of the package test did not get to the hardened "
                              "services: see that test's failure")
    code, out, err = hardened.scope_add
    assert code == 0 and out.count("restart the unit") == len(UNITS), out + err
    problems = []
    for unit in UNITS:
        seen = hardened.units[unit.name]
        assert seen.dropin.splitlines()[1:] == ["[Service]", f"Environment=LD_PRELOAD={SHIM}"]
        # (ExecMain* are reset once a oneshot is inactive again: Result keeps the verdict,
        # "signal" for a SIGSYS)
        if (seen.start_exit, seen.props.get("Result")) != (0, "success"):
            problems.append(f"{unit.name} ({unit.why}): systemctl start exit "
                            f"{seen.start_exit}, {seen.props}, said {seen.output!r}")
        elif "shim=mapped" not in seen.output or ALL_OK not in seen.output:
            problems.append(f"{unit.name}: exited 0 but said {seen.output!r}")
    assert not problems, "\n".join(problems)
    assert hardened.failed == "", hardened.failed


def _diff(before: str, after: str) -> str:
    b, a = set(before.splitlines()), set(after.splitlines())
    return f"new: {sorted(a - b)[:20]} gone: {sorted(b - a)[:20]}"
